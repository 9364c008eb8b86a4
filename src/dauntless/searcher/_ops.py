"""Searcher operations (the decisions a searcher returns) and early-exit reasons.

The operation set is Determined's ≤0.37 searcher protocol (reference §2.5): ``Create``,
``ValidateAfter``, ``Close`` and ``Shutdown``. Operations are frozen dataclasses; their
JSON form (:func:`operation_to_json`) is what the master stores and shows.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any, Union

MAX_TRIAL_SEED = 2**31 - 1
"""Trial seeds lie in ``0..MAX_TRIAL_SEED`` (Determined's range)."""


class ExitedReason(str, Enum):
    """Why a trial ended before the searcher closed it.

    ``INVALID_HP``: the trial code raised :class:`dauntless.InvalidHP`; the searcher does
    not count the trial and, where it samples, creates a replacement.
    """

    ERRORED = "ERRORED"
    USER_CANCELED = "USER_CANCELED"
    INVALID_HP = "INVALID_HP"


def _check_request_id(request_id: Any) -> None:
    if not isinstance(request_id, str) or not request_id:
        raise TypeError(f"request_id must be a non-empty str, got {request_id!r}")


@dataclass(frozen=True)
class Create:
    """Create a trial.

    Attributes:
        request_id: the searcher's id of the trial (a UUID string).
        hparams: the trial's hyperparameter values (JSON data, nested dicts for nested
            hyperparameters).
        seed: the trial seed, ``0..2**31-1``.
        parent_request_id: the trial whose latest checkpoint the new trial starts from
            (a PBT clone, a custom searcher's ``Create`` with a parent), or None.
    """

    request_id: str
    hparams: dict[str, Any]
    seed: int
    parent_request_id: str | None = None

    def __post_init__(self) -> None:
        _check_request_id(self.request_id)
        if self.parent_request_id is not None:
            _check_request_id(self.parent_request_id)
        if not isinstance(self.hparams, dict):
            raise TypeError(f"hparams must be a dict, got {type(self.hparams).__name__}")
        if (
            not isinstance(self.seed, int)
            or isinstance(self.seed, bool)
            or not 0 <= self.seed <= MAX_TRIAL_SEED
        ):
            raise ValueError(f"seed must be an int in 0..{MAX_TRIAL_SEED}, got {self.seed!r}")


@dataclass(frozen=True)
class ValidateAfter:
    """Train the trial until it has trained ``length`` batches in all, then validate.

    Attributes:
        request_id: the trial.
        length: absolute (cumulative) training length of the trial, in batches, ≥ 1.
    """

    request_id: str
    length: int

    def __post_init__(self) -> None:
        _check_request_id(self.request_id)
        if not isinstance(self.length, int) or isinstance(self.length, bool) or self.length < 1:
            raise ValueError(f"length must be an int >= 1 (batches), got {self.length!r}")


@dataclass(frozen=True)
class Close:
    """Stop the trial: it gets no more work and ends (checkpointing first if needed)."""

    request_id: str

    def __post_init__(self) -> None:
        _check_request_id(self.request_id)


@dataclass(frozen=True)
class Shutdown:
    """The search is over: every created trial has ended and no more will be created.

    Attributes:
        cancel: every trial was canceled by the user.
        failure: every trial ended early (errored or invalid hyperparameters) and not all
            of them were canceled.
    """

    cancel: bool = False
    failure: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.cancel, bool) or not isinstance(self.failure, bool):
            raise TypeError(
                f"cancel and failure must be bools, got {self.cancel!r}, {self.failure!r}"
            )


Operation = Union[Create, ValidateAfter, Close, Shutdown]
"""Any searcher operation."""


def operation_to_json(op: Operation) -> dict[str, Any]:
    """The JSON form of an operation.

    Args:
        op: a :class:`Create`, :class:`ValidateAfter`, :class:`Close` or :class:`Shutdown`.

    Returns:
        ``{"type": "create", "request_id", "hparams", "seed"}`` (and
        ``parent_request_id`` when set),
        ``{"type": "validate_after", "request_id", "length"}``,
        ``{"type": "close", "request_id"}`` or ``{"type": "shutdown", "cancel", "failure"}``.

    Raises:
        TypeError: if ``op`` is not an operation.
    """
    if isinstance(op, Create):
        out: dict[str, Any] = {
            "type": "create",
            "request_id": op.request_id,
            "hparams": op.hparams,
            "seed": op.seed,
        }
        if op.parent_request_id is not None:
            out["parent_request_id"] = op.parent_request_id
        return out
    if isinstance(op, ValidateAfter):
        return {"type": "validate_after", "request_id": op.request_id, "length": op.length}
    if isinstance(op, Close):
        return {"type": "close", "request_id": op.request_id}
    if isinstance(op, Shutdown):
        return {"type": "shutdown", "cancel": op.cancel, "failure": op.failure}
    raise TypeError(f"expected a searcher operation, got {type(op).__name__}")


_FIELDS = {
    "create": (Create, ("request_id", "hparams", "seed", "parent_request_id")),
    "validate_after": (ValidateAfter, ("request_id", "length")),
    "close": (Close, ("request_id",)),
    "shutdown": (Shutdown, ("cancel", "failure")),
}


def operation_from_json(data: Any) -> Operation:
    """Parse the JSON form written by :func:`operation_to_json`.

    Args:
        data: a mapping with a ``type`` key and that type's fields.

    Returns:
        The operation.

    Raises:
        TypeError: if ``data`` is not a mapping or a field has the wrong type.
        ValueError: for an unknown ``type``, a missing or unknown field, or a value out of
            range.
    """
    if not isinstance(data, dict):
        raise TypeError(f"an operation must be a JSON object, got {type(data).__name__}")
    kind = data.get("type")
    if kind not in _FIELDS:
        raise ValueError(f"unknown operation type {kind!r}; expected one of {sorted(_FIELDS)}")
    cls, fields = _FIELDS[kind]
    extra = set(data) - set(fields) - {"type"}
    missing = [
        f for f in fields if f not in data and cls is not Shutdown and f != "parent_request_id"
    ]
    if extra or missing:
        raise ValueError(
            f"operation {kind!r} takes fields {list(fields)}; "
            f"missing {missing}, unknown {sorted(extra)}"
        )
    return cls(**{f: data[f] for f in fields if f in data})
