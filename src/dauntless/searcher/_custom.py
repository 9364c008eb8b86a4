"""``custom``: a user's :class:`~dauntless.searcher.custom.SearchMethod` behind the
searcher interface.

Events become Determined's searcher events (``initialOperations``, ``trialCreated``,
``validationCompleted``, ``trialExitedEarly``, ``trialClosed``), each with an increasing
id. The method's operations (custom ``Create`` / ``ValidateAfter`` / ``Close`` /
``Progress`` / ``Shutdown``) are translated into the platform's: a ``Create`` gets a
trial seed drawn from the experiment RNG, a ``ValidateAfter`` length in
``searcher.unit`` becomes batches for that trial, ``Shutdown`` closes the live trials
and ends the search once they have ended.

Two modes:

- in the master (:class:`MethodDriver` runs the method on each event at once): an
  exception of the method's code, or an operation that does not fit the search (an
  unknown request id, a request id used twice), is caught; :attr:`method_error` then
  holds the traceback, events are ignored, and the master fails the experiment with it;
- remote (no method given): events queue up in the snapshot until a runner reads them
  (:meth:`CustomSearch.pending_events`) and posts the operations an event triggered
  (:meth:`CustomSearch.apply_remote_operations`); operations for an event already
  acknowledged are ignored, so a runner that repeats its last post after a crash does no
  harm.
"""

from __future__ import annotations

import json
import math
import traceback
from collections.abc import Callable
from typing import Any

from dauntless.config import CustomSearcher, Length

from . import custom as api
from ._base import Searcher, TrialRecord
from ._ops import ExitedReason, Operation, Shutdown, ValidateAfter
from ._rng import draw_trial_seed

MAX_PENDING_EVENTS = 100_000
"""Events kept for a remote runner that does not read them; more fail the search."""


class MethodDriver:
    """Runs a search method on events (their wire form) and keeps its
    :class:`~dauntless.searcher.custom.SearcherState`; used in the master and by the
    remote runner alike.

    Args:
        method: the search method.
        state: the state to continue from (None: a new search).
    """

    def __init__(self, method: api.SearchMethod, state: api.SearcherState | None = None):
        if not isinstance(method, api.SearchMethod):
            raise TypeError(
                f"a custom searcher must subclass dauntless.searcher.custom.SearchMethod, "
                f"got {type(method).__name__}"
            )
        self.method = method
        self.state = state or api.SearcherState()

    def handle(self, event: dict[str, Any]) -> list[api.Operation]:
        """The method's operations for one event; ``[]`` for an event already handled.

        ``validationCompleted``, ``trialClosed`` and ``trialExitedEarly`` are followed by a
        ``Progress`` of the method's ``progress()``, as Determined's runner did.

        Raises:
            ValueError: an unknown event; whatever the method raises, unchanged.
            TypeError: the method returned something that is not a list of operations.
        """
        event_id = int(event["id"])
        if event_id <= self.state.last_event_id:
            return []
        kinds = [k for k in event if k != "id"]
        if len(kinds) != 1:
            raise ValueError(f"a searcher event has one kind besides its id, got {kinds}")
        kind = kinds[0]
        body = event[kind] or {}
        m, st = self.method, self.state
        progress = False
        if kind == "initialOperations":
            ops = m.initial_operations(st)
        elif kind == "trialCreated":
            rid = body["requestId"]
            st.trials_created.add(rid)
            st.trial_progress[rid] = 0.0
            ops = m.on_trial_created(st, rid)
        elif kind == "validationCompleted":
            rid = body["requestId"]
            length = int(body["validateAfterLength"])
            st.trial_progress[rid] = float(length)
            ops = m.on_validation_completed(st, rid, body["metric"], length)
            progress = True
        elif kind == "trialClosed":
            rid = body["requestId"]
            st.trials_closed.add(rid)
            ops = m.on_trial_closed(st, rid)
            progress = True
        elif kind == "trialExitedEarly":
            rid = body["requestId"]
            reason = ExitedReason(body["exitedReason"])
            if reason is ExitedReason.ERRORED:
                st.failures.add(rid)
            elif reason is ExitedReason.INVALID_HP:
                st.trial_progress.pop(rid, None)
            ops = m.on_trial_exited_early(st, rid, reason)
            progress = True
        else:
            raise ValueError(f"unknown searcher event {kind!r}")
        if not isinstance(ops, list):
            raise TypeError(f"{type(m).__name__} returned {type(ops).__name__}, not a list")
        ops = list(ops)
        for op in ops:
            api.operation_to_wire(op)  # TypeError for anything else
            if isinstance(op, api.Shutdown):
                st.experiment_completed = True
                st.experiment_failed = st.experiment_failed or op.failure
        if progress:
            ops.append(api.Progress(min(max(float(m.progress(st)), 0.0), 1.0)))
        st.last_event_id = event_id
        return ops


class CustomSearch(Searcher):
    """``custom`` (see the module documentation).

    Args:
        config: the experiment config (``searcher.name: custom``).
        rng: the experiment RNG.
        method: the search method to run in the master; None: remote mode.
    """

    kind = "custom"
    # Its events run the user's method: the master stores its snapshot after each.
    replayable = False
    archivable = False  # the user's code reads every trial's record

    def __init__(self, config: Any, rng: Any, method: api.SearchMethod | None = None) -> None:
        self._method = method
        super().__init__(config, rng)

    def _setup(self) -> None:
        cfg = self._config.searcher
        if not isinstance(cfg, CustomSearcher):
            raise TypeError(f"{type(self).__name__} needs a custom searcher config")
        self._unit = cfg.unit
        self._driver = None if self._method is None else MethodDriver(self._method)
        self._next_event = 1
        self._events: list[dict[str, Any]] = []
        self._acked = 0
        self._unit_lengths: dict[str, int] = {}
        self._progress = 0.0
        self._stop: Shutdown | None = None
        self._error: str | None = None
        self._method_seed: int | None = None

    @property
    def remote(self) -> bool:
        """True when a remote runner answers the events."""
        return self._driver is None

    @property
    def method_error(self) -> str | None:
        return self._error

    # ------------------------------------------------------------------ events

    def _emit(self, kind: str, body: dict[str, Any]) -> list[Operation]:
        if self._error is not None:
            return []
        event = {"id": self._next_event, kind: body}
        self._next_event += 1
        if self._driver is None:
            self._events.append(event)
            if len(self._events) > MAX_PENDING_EVENTS:
                self._error = (
                    f"no remote search runner read the search's events ({MAX_PENDING_EVENTS} "
                    "are waiting); start one with dauntless.search_runner.RemoteSearchRunner"
                )
            return []
        try:
            return self._translate(self._driver.handle(event))
        except Exception:  # the user's code: its failure fails the search, not the master
            self._error = traceback.format_exc(limit=20)
            return []

    def _initial(self) -> list[Operation]:
        self._method_seed = draw_trial_seed(self._rng)
        if self._method is not None:
            self._method.experiment_seed = self._method_seed
        return self._emit("initialOperations", {})

    def _first_target(self, trial: TrialRecord) -> int | None:
        return None

    def on_trial_created(self, request_id: str) -> list[Operation]:
        trial = self._get(request_id)
        if trial.created or trial.ended:
            return []
        ops = super().on_trial_created(request_id)
        return ops + self._emit("trialCreated", {"requestId": request_id})

    def _on_validation(self, trial: TrialRecord, value: float, length: int) -> list[Operation]:
        body = {
            "requestId": trial.request_id,
            "metric": self._event_raw if math.isfinite(self._event_raw) else None,
            "validateAfterLength": self._unit_lengths.get(trial.request_id, length),
        }
        return self._emit("validationCompleted", body)

    def _on_trial_ended(self, trial: TrialRecord, reason: ExitedReason | None) -> list[Operation]:
        ops: list[Operation] = []
        if reason is not None:
            body = {"requestId": trial.request_id, "exitedReason": reason.value}
            ops += self._emit("trialExitedEarly", body)
        return ops + self._emit("trialClosed", {"requestId": trial.request_id})

    def _translate(self, ops: list[api.Operation]) -> list[Operation]:
        out: list[Operation] = []
        for op in ops:
            if isinstance(op, api.Create):
                if op.request_id in self._trials:
                    raise ValueError(f"Create: request id {op.request_id!r} was used before")
                if op.parent_request_id is not None:
                    self._get(op.parent_request_id)
                hparams = json.loads(json.dumps(op.hparams))  # JSON data only
                out.append(
                    self._create(
                        hparams=hparams, parent=op.parent_request_id, request_id=op.request_id
                    )
                )
            elif isinstance(op, api.ValidateAfter):
                trial = self._get(op.request_id)
                if trial.ended or trial.closing:
                    continue
                batches = self._batches(Length(**{self._unit: op.length}), trial.hparams)
                if batches <= trial.completed:
                    raise ValueError(
                        f"ValidateAfter({op.request_id!r}, {op.length}): the trial has "
                        f"already trained that far ({trial.completed} batches)"
                    )
                trial.target = batches
                self._unit_lengths[op.request_id] = op.length
                if trial.created:
                    out.append(ValidateAfter(op.request_id, batches))
            elif isinstance(op, api.Close):
                trial = self._get(op.request_id)
                if not trial.ended and not trial.closing:
                    out.append(self._close(trial))
            elif isinstance(op, api.Progress):
                self._progress = float(op.progress)
            elif isinstance(op, api.Shutdown):
                self._stop = Shutdown(cancel=bool(op.cancel), failure=bool(op.failure))
                for trial in self._trials.values():
                    if not trial.ended and not trial.closing:
                        out.append(self._close(trial))
        return out

    def _maybe_shutdown(self) -> list[Operation]:
        ops = super()._maybe_shutdown()
        if ops and self._stop is not None and self._shutdown is not None:
            self._shutdown = Shutdown(
                cancel=self._stop.cancel or self._shutdown.cancel,
                failure=self._stop.failure or self._shutdown.failure,
            )
            return [self._shutdown]
        return ops

    # ------------------------------------------------------------------ remote

    def pending_events(self) -> list[dict[str, Any]]:
        """The events a remote runner has not acknowledged yet, oldest first."""
        return [dict(e) for e in self._events]

    def apply_remote_operations(
        self, operations: list[dict[str, Any]], triggered_by_event: int
    ) -> list[Operation]:
        """Apply the operations a remote runner answered to an event.

        Args:
            operations: their wire form (:func:`dauntless.searcher.custom.operation_to_wire`).
            triggered_by_event: the id of the event they answer; it and every earlier
                event are acknowledged.

        Returns:
            The platform's operations to apply; ``[]`` for an event already acknowledged.

        Raises:
            ValueError: not a remote search, an event id not yet given out, a bad
                operation, or one that does not fit the search (the message says which).
        """
        if self._driver is not None:
            raise ValueError("this custom search runs its method in the master")
        if triggered_by_event <= self._acked:
            return []
        if triggered_by_event >= self._next_event:
            raise ValueError(
                f"triggeredByEvent {triggered_by_event}: no such event yet (last "
                f"{self._next_event - 1})"
            )
        parsed = [api.operation_from_wire(op) for op in operations]
        out = self._translate(parsed)
        self._acked = triggered_by_event
        self._events = [e for e in self._events if int(e["id"]) > triggered_by_event]
        return out + self._maybe_shutdown()

    # ------------------------------------------------------------------ the rest

    def _can_reopen(self) -> bool:
        return False

    def _creating_done(self) -> bool:
        return self._stop is not None or self._error is not None

    def progress(self) -> float:
        if self.is_shut_down:
            return 1.0
        return self._progress

    def _method_state(self) -> dict[str, Any]:
        method_state: Any = None
        if self._driver is not None and self._error is None:
            try:
                method_state = self._driver.method.save_method_state()
                method_state = json.loads(json.dumps(method_state))
            except Exception:
                self._error = traceback.format_exc(limit=20)
                method_state = None
        return {
            "mode": "remote" if self._driver is None else "master",
            "searcher_state": None if self._driver is None else self._driver.state.to_dict(),
            "method_state": method_state,
            "method_seed": self._method_seed,
            "next_event": self._next_event,
            "events": [dict(e) for e in self._events],
            "acked": self._acked,
            "unit_lengths": dict(self._unit_lengths),
            "progress": self._progress,
            "stop": None if self._stop is None else [self._stop.cancel, self._stop.failure],
            "error": self._error,
        }

    def _load_method_state(self, state: dict[str, Any]) -> None:
        mode = "remote" if self._driver is None else "master"
        if state["mode"] != mode:
            raise ValueError(
                f"the snapshot is of a custom search run {state['mode']!r}, not {mode!r}"
            )
        self._method_seed = state["method_seed"]
        self._next_event = int(state["next_event"])
        self._events = list(state["events"])
        self._acked = int(state["acked"])
        self._unit_lengths = {str(k): int(v) for k, v in state["unit_lengths"].items()}
        self._progress = float(state["progress"])
        self._stop = None if state["stop"] is None else Shutdown(*state["stop"])
        self._error = state["error"]
        if self._driver is not None:
            self._driver.state = api.SearcherState.from_dict(state["searcher_state"])
            if self._method_seed is not None:
                self._driver.method.experiment_seed = int(self._method_seed)
            if self._error is None and state["method_state"] is not None:
                try:
                    self._driver.method.load_method_state(state["method_state"])
                except Exception:
                    self._error = traceback.format_exc(limit=20)


MethodFactory = Callable[[], api.SearchMethod]
"""Builds a fresh instance of a custom search method (the master imports its class)."""

__all__ = ["CustomSearch", "MethodDriver", "MethodFactory"]
