"""Hyperparameter definitions of an experiment config.

Forms (Determined's, reference §1.1):

- a bare value that is not a mapping (numbers, strings, lists, null), or
  ``{type: const, val: X}``: a constant;
- ``{type: int, minval, maxval, count?}``: an integer in ``[minval, maxval]``;
- ``{type: double, minval, maxval, count?}``: a float in ``[minval, maxval)``;
- ``{type: log, minval, maxval, base?, count?}``: ``base ** e`` for an exponent ``e`` in
  ``[minval, maxval)``; ``base`` defaults to 10;
- ``{type: categorical, vals: [...]}``: one of ``vals``;
- a mapping without ``type``: nested hyperparameters, parsed recursively.

Sampling lives in :mod:`dauntless.searcher`; this module only parses and validates.
"""

from __future__ import annotations

from typing import Any, Literal, Union, cast

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator


class _HP(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ConstHP(_HP):
    """A constant hyperparameter."""

    type: Literal["const"] = "const"
    val: Any = None


class IntHP(_HP):
    """An integer hyperparameter in ``[minval, maxval]``; ``count`` is used by grid search."""

    type: Literal["int"] = "int"
    minval: int
    maxval: int
    count: int | None = Field(default=None, ge=1)

    @model_validator(mode="after")
    def _range(self) -> IntHP:
        if self.minval >= self.maxval:
            raise ValueError(f"minval ({self.minval}) must be less than maxval ({self.maxval})")
        return self


class DoubleHP(_HP):
    """A float hyperparameter in ``[minval, maxval)``; ``count`` is used by grid search."""

    type: Literal["double"] = "double"
    minval: float
    maxval: float
    count: int | None = Field(default=None, ge=1)

    @model_validator(mode="after")
    def _range(self) -> DoubleHP:
        if self.minval >= self.maxval:
            raise ValueError(f"minval ({self.minval}) must be less than maxval ({self.maxval})")
        return self


class LogHP(_HP):
    """``base ** e`` with the exponent ``e`` in ``[minval, maxval)``."""

    type: Literal["log"] = "log"
    minval: float
    maxval: float
    base: float = Field(default=10.0, gt=0)
    count: int | None = Field(default=None, ge=1)

    @model_validator(mode="after")
    def _range(self) -> LogHP:
        if self.minval >= self.maxval:
            raise ValueError(
                f"minval ({self.minval}) must be less than maxval ({self.maxval}); "
                "both are exponents of base"
            )
        return self


class CategoricalHP(_HP):
    """One of a non-empty list of values (any JSON)."""

    type: Literal["categorical"] = "categorical"
    vals: list[Any] = Field(min_length=1)


Hyperparameter = Union[ConstHP, IntHP, DoubleHP, LogHP, CategoricalHP, dict[str, Any]]
"""A parsed hyperparameter: a typed model, or a ``dict`` of nested hyperparameters."""

_BY_TYPE: dict[str, type[_HP]] = {
    "const": ConstHP,
    "int": IntHP,
    "double": DoubleHP,
    "log": LogHP,
    "categorical": CategoricalHP,
}


class HyperparameterError(ValueError):
    """A hyperparameter definition is invalid; ``path`` names it (``hyperparameters.a.b``)."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = path
        self.detail = message


def parse_hyperparameter(raw: Any, path: str) -> Hyperparameter:
    """Parse one hyperparameter definition.

    Args:
        raw: the YAML/JSON value.
        path: its dotted path, used in error messages (``hyperparameters.lr``).

    Returns:
        A typed hyperparameter model, or a dict of nested parsed hyperparameters.

    Raises:
        HyperparameterError: for an unknown ``type``, a missing or invalid key, or an
            empty range; the message names the path and what was expected.
    """
    if isinstance(raw, (ConstHP, IntHP, DoubleHP, LogHP, CategoricalHP)):
        return raw
    if not isinstance(raw, dict):
        return ConstHP(val=raw)
    if "type" not in raw:
        return {str(k): parse_hyperparameter(v, f"{path}.{k}") for k, v in sorted(raw.items())}
    kind = raw["type"]
    cls = _BY_TYPE.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise HyperparameterError(
            path,
            f"unknown hyperparameter type {kind!r}; expected one of "
            f"{', '.join(sorted(_BY_TYPE))}, or a mapping without 'type' for nested "
            "hyperparameters",
        )
    try:
        return cast(Hyperparameter, cls.model_validate(raw))
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(p) for p in first["loc"])
        where = f"{path}.{loc}" if loc else path
        msg = first["msg"].removeprefix("Value error, ")
        raise HyperparameterError(where, msg) from None


def parse_hyperparameters(raw: dict[str, Any] | None) -> dict[str, Hyperparameter]:
    """Parse the ``hyperparameters`` mapping of an experiment config (see module doc)."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise HyperparameterError(
            "hyperparameters", f"expected a mapping of names to definitions, got {raw!r}"
        )
    return {str(k): parse_hyperparameter(v, f"hyperparameters.{k}") for k, v in raw.items()}


def dump_hyperparameters(hps: dict[str, Hyperparameter]) -> dict[str, Any]:
    """The JSON form of parsed hyperparameters (every leaf with an explicit ``type``)."""
    out: dict[str, Any] = {}
    for k, v in hps.items():
        out[k] = dump_hyperparameters(v) if isinstance(v, dict) else v.model_dump(exclude_none=True)
    return out


def const_values(hps: dict[str, Hyperparameter]) -> dict[str, Any] | None:
    """Return the hparams as plain values if every leaf is a constant, else None."""
    out: dict[str, Any] = {}
    for k, v in hps.items():
        if isinstance(v, dict):
            sub = const_values(v)
            if sub is None:
                return None
            out[k] = sub
        elif isinstance(v, ConstHP):
            out[k] = v.val
        else:
            return None
    return out
