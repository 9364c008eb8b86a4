"""Custom searchers: write a search method of your own (Determined ≤0.37's
``determined.searcher.SearchMethod``, reference platform §11.1).

Subclass :class:`SearchMethod` and answer the search's events with operations::

    from dauntless.searcher.custom import Close, Create, SearchMethod, Shutdown, ValidateAfter

    class MySearch(SearchMethod):
        def initial_operations(self, searcher_state):
            rid = "trial-1"
            return [Create(rid, {"lr": 0.01}), ValidateAfter(rid, 100)]
        ...

Run it either way:

- **in the master**: ``searcher: {name: custom, metric: ..., method: my_module:MySearch}``
  with ``my_module.py`` in the experiment's context directory. The master builds the
  class with no arguments, sets :attr:`SearchMethod.experiment_seed`, and stores
  ``save_method_state()`` in the searcher snapshot after every event (and restores it
  with ``load_method_state`` after a restart). The master runs it with its own
  privileges, so only a master configured for it accepts such experiments
  (``custom_searchers.in_master`` in the master config, see docs/protocol.md);
- **remotely**: ``searcher: {name: custom, metric: ...}`` without ``method``, and
  :class:`dauntless.search_runner.RemoteSearchRunner` runs the method in a process of
  your own (your laptop, a command task), talking to the master over its REST API.

An exception raised by the method (in the master) fails the experiment with its
traceback; the master goes on.

The operations take lengths in the config's ``searcher.unit`` (batches by default) and
request ids chosen by the method (any non-empty string; a ``uuid.UUID`` is accepted).
Unlike Determined, whose ``save_method_state(path)`` wrote files, the method's state is
a JSON-serializable dict, so it fits in the searcher's snapshot.
"""

from __future__ import annotations

import abc
import uuid
from dataclasses import dataclass, field
from typing import Any, Union

from ._ops import ExitedReason

__all__ = [
    "Close",
    "Create",
    "ExitedReason",
    "Operation",
    "Progress",
    "SearchMethod",
    "SearcherState",
    "Shutdown",
    "ValidateAfter",
]


def _rid(value: Any) -> str:
    if isinstance(value, uuid.UUID):
        return str(value)
    if not isinstance(value, str) or not value or len(value) > 256:
        raise TypeError(f"request_id must be a non-empty str (<= 256 chars) or UUID, got {value!r}")
    return value


@dataclass(frozen=True)
class Create:
    """Create a trial.

    Attributes:
        request_id: the method's name for the trial (a str or ``uuid.UUID``).
        hparams: its hyperparameter values (JSON data).
        parent_request_id: start it from that trial's latest checkpoint (warm start),
            or None (Determined's ``checkpoint`` argument).
    """

    request_id: Any
    hparams: dict[str, Any]
    parent_request_id: Any = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "request_id", _rid(self.request_id))
        if self.parent_request_id is not None:
            object.__setattr__(self, "parent_request_id", _rid(self.parent_request_id))
        if not isinstance(self.hparams, dict):
            raise TypeError(f"hparams must be a dict, got {type(self.hparams).__name__}")


@dataclass(frozen=True)
class ValidateAfter:
    """Train the trial until ``length`` units in all (``searcher.unit``), then validate."""

    request_id: Any
    length: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "request_id", _rid(self.request_id))
        if isinstance(self.length, bool) or not isinstance(self.length, int) or self.length < 1:
            raise ValueError(f"length must be an int >= 1, got {self.length!r}")


@dataclass(frozen=True)
class Close:
    """Stop the trial (it checkpoints and ends)."""

    request_id: Any

    def __post_init__(self) -> None:
        object.__setattr__(self, "request_id", _rid(self.request_id))


@dataclass(frozen=True)
class Progress:
    """The search's progress, 0.0 to 1.0 (shown as the experiment's progress)."""

    progress: float

    def __post_init__(self) -> None:
        p = self.progress
        if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= p <= 1.0:
            raise ValueError(f"progress must be a number in [0, 1], got {p!r}")


@dataclass(frozen=True)
class Shutdown:
    """End the search: live trials are closed, and the experiment ends when they have
    (COMPLETED; CANCELED with ``cancel``; ERROR with ``failure``)."""

    cancel: bool = False
    failure: bool = False


Operation = Union[Create, ValidateAfter, Close, Progress, Shutdown]


@dataclass
class SearcherState:
    """What the runner knows of the search, handed to every call of the method.

    Attributes:
        failures: request ids of trials that ended with an error.
        trial_progress: request id -> batches validated (its latest ``ValidateAfter``).
        trials_closed: request ids of trials that ended.
        trials_created: request ids of trials the master created.
        last_event_id: the id of the last event handled.
        experiment_completed: the method sent ``Shutdown``.
        experiment_failed: the method sent ``Shutdown(failure=True)`` or raised.
    """

    failures: set[str] = field(default_factory=set)
    trial_progress: dict[str, float] = field(default_factory=dict)
    trials_closed: set[str] = field(default_factory=set)
    trials_created: set[str] = field(default_factory=set)
    last_event_id: int = 0
    experiment_completed: bool = False
    experiment_failed: bool = False

    def to_dict(self) -> dict[str, Any]:
        """JSON data, with Determined's camelCase keys."""
        return {
            "failures": sorted(self.failures),
            "trialProgress": dict(self.trial_progress),
            "trialsClosed": sorted(self.trials_closed),
            "trialsCreated": sorted(self.trials_created),
            "lastEventId": self.last_event_id,
            "experimentCompleted": self.experiment_completed,
            "experimentFailed": self.experiment_failed,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SearcherState:
        """Parse :meth:`to_dict` output; raises KeyError/TypeError/ValueError if bad."""
        return cls(
            failures=set(data["failures"]),
            trial_progress={str(k): float(v) for k, v in data["trialProgress"].items()},
            trials_closed=set(data["trialsClosed"]),
            trials_created=set(data["trialsCreated"]),
            last_event_id=int(data["lastEventId"]),
            experiment_completed=bool(data["experimentCompleted"]),
            experiment_failed=bool(data["experimentFailed"]),
        )


class SearchMethod(abc.ABC):
    """A search method of your own: each event returns the operations to apply, in order.

    ``experiment_seed`` is the experiment's seed (set before the first event): draw every
    random choice from it (keeping your RNG's state in :meth:`save_method_state`) and a
    restarted search makes the same choices.
    """

    experiment_seed: int = 0

    @abc.abstractmethod
    def initial_operations(self, searcher_state: SearcherState) -> list[Operation]:
        """The first operations (typically ``Create`` + ``ValidateAfter`` per trial)."""

    @abc.abstractmethod
    def on_trial_created(self, searcher_state: SearcherState, request_id: str) -> list[Operation]:
        """The master created the trial of a ``Create``."""

    @abc.abstractmethod
    def on_validation_completed(
        self, searcher_state: SearcherState, request_id: str, metric: Any, train_length: int
    ) -> list[Operation]:
        """A trial validated at its ``ValidateAfter`` length (``train_length``, in
        ``searcher.unit``); ``metric``: the value of ``searcher.metric``."""

    @abc.abstractmethod
    def on_trial_closed(self, searcher_state: SearcherState, request_id: str) -> list[Operation]:
        """A trial ended (closed, or it exited on its own)."""

    @abc.abstractmethod
    def on_trial_exited_early(
        self, searcher_state: SearcherState, request_id: str, exited_reason: ExitedReason
    ) -> list[Operation]:
        """A trial ended before it was closed (``ERRORED``, ``USER_CANCELED``,
        ``INVALID_HP``); ``on_trial_closed`` follows."""

    @abc.abstractmethod
    def progress(self, searcher_state: SearcherState) -> float:
        """The search's progress, 0.0 to 1.0."""

    def save_method_state(self) -> dict[str, Any]:
        """The method's own state as JSON data (stored with the searcher's snapshot)."""
        return {}

    def load_method_state(self, state: dict[str, Any]) -> None:  # noqa: B027 (optional hook)
        """Restore what :meth:`save_method_state` returned (nothing by default)."""


def operation_to_wire(op: Operation) -> dict[str, Any]:
    """The wire form of an operation (Determined's ``v1SearcherOperation`` shape).

    Raises:
        TypeError: not an operation of this module.
    """
    if isinstance(op, Create):
        create: dict[str, Any] = {"requestId": op.request_id, "hyperparams": op.hparams}
        if op.parent_request_id is not None:
            create["parentRequestId"] = op.parent_request_id
        return {"createTrial": create}
    if isinstance(op, ValidateAfter):
        return {
            "trialOperation": {
                "validateAfter": {"requestId": op.request_id, "length": str(op.length)}
            }
        }
    if isinstance(op, Close):
        return {"closeTrial": {"requestId": op.request_id}}
    if isinstance(op, Progress):
        return {"setSearcherProgress": {"progress": float(op.progress)}}
    if isinstance(op, Shutdown):
        return {"shutDown": {"cancel": bool(op.cancel), "failure": bool(op.failure)}}
    raise TypeError(
        "a search method must return operations of dauntless.searcher.custom (Create, "
        f"ValidateAfter, Close, Progress, Shutdown); got {type(op).__name__}"
    )


def operation_from_wire(data: Any) -> Operation:
    """Parse :func:`operation_to_wire` output (JSON from a remote runner).

    Raises:
        ValueError: not one of the five operation shapes, or a bad field.
    """
    try:
        if not isinstance(data, dict) or len(data) != 1:
            raise ValueError("expected an object with one operation key")
        ((key, body),) = data.items()
        if key == "createTrial":
            hparams = body["hyperparams"]
            if isinstance(hparams, str):
                import json

                hparams = json.loads(hparams)
            return Create(body["requestId"], hparams, body.get("parentRequestId"))
        if key == "trialOperation":
            va = body["validateAfter"]
            return ValidateAfter(va["requestId"], int(va["length"]))
        if key == "closeTrial":
            return Close(body["requestId"])
        if key == "setSearcherProgress":
            return Progress(float(body["progress"]))
        if key == "shutDown":
            return Shutdown(bool(body.get("cancel", False)), bool(body.get("failure", False)))
        raise ValueError(f"unknown operation {key!r}")
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(
            f"bad searcher operation {data!r}: {exc}; expected one of createTrial, "
            "trialOperation.validateAfter, closeTrial, setSearcherProgress, shutDown"
        ) from None
