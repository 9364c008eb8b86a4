"""Training lengths: a count of batches, records or epochs.

Dauntless counts training progress in batches (``total_batches``). Records and epochs
convert to batches through ``global_batch_size`` and ``records_per_epoch``, following
Determined's rule (``records -> max(records // global_batch_size, 1)``).
"""

from __future__ import annotations

from enum import Enum

from pydantic import BaseModel, ConfigDict, Field, model_validator


class Unit(str, Enum):
    """The unit a :class:`Length` is expressed in."""

    BATCHES = "batches"
    RECORDS = "records"
    EPOCHS = "epochs"


class Length(BaseModel):
    """Exactly one of ``batches``, ``records`` or ``epochs`` (a non-negative int).

    YAML form: ``{batches: 100}``, ``{records: 6400}`` or ``{epochs: 2}``.

    Raises:
        pydantic.ValidationError: if none or more than one unit is given, or a value is
            negative or not an integer.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    batches: int | None = Field(default=None, ge=0)
    records: int | None = Field(default=None, ge=0)
    epochs: int | None = Field(default=None, ge=0)

    @model_validator(mode="after")
    def _exactly_one(self) -> Length:
        given = [u for u in ("batches", "records", "epochs") if getattr(self, u) is not None]
        if len(given) != 1:
            raise ValueError(
                "a length needs exactly one of 'batches', 'records' or 'epochs' "
                f"(got {given or 'none'}), for example {{batches: 100}}"
            )
        return self

    @property
    def unit(self) -> Unit:
        """The unit this length is expressed in."""
        for u in Unit:
            if getattr(self, u.value) is not None:
                return u
        raise AssertionError("unreachable: validated to hold exactly one unit")

    @property
    def value(self) -> int:
        """The count, in :attr:`unit`."""
        return int(getattr(self, self.unit.value))

    def to_batches(self, global_batch_size: int | None, records_per_epoch: int) -> int:
        """Convert to a number of batches.

        Args:
            global_batch_size: records per batch summed over all slots; needed for
                records and epochs.
            records_per_epoch: records in one epoch of training data; needed for epochs.

        Returns:
            The length in batches. A non-zero length in records or epochs is at least 1.

        Raises:
            ValueError: if the unit needs a batch size or epoch size that is missing.
        """
        if self.unit is Unit.BATCHES:
            return self.value
        if not global_batch_size or global_batch_size <= 0:
            raise ValueError(
                f"a length in {self.unit.value} needs hyperparameters.global_batch_size "
                "(a positive int) to convert to batches"
            )
        if self.unit is Unit.RECORDS:
            return records_to_batches(self.value, global_batch_size)
        if records_per_epoch <= 0:
            raise ValueError(
                "a length in epochs needs records_per_epoch > 0 in the experiment config"
            )
        return records_to_batches(self.value * records_per_epoch, global_batch_size)


def records_to_batches(records: int, global_batch_size: int) -> int:
    """Records to batches: ``max(records // global_batch_size, 1)`` for records > 0.

    Source: Determined's expconf length conversion (reference §1, "Length").
    """
    if records <= 0:
        return 0
    return max(records // global_batch_size, 1)
