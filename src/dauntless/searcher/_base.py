"""The event-driven searcher base: trial bookkeeping, creation, Shutdown, snapshots.

A searcher takes events from the master and returns operations (ARCHITECTURE.md,
"Searchers (event-driven)"); it does no I/O and reads no clock. Subclasses supply the
decisions through a few hooks (``_initial``, ``_on_validation``, ``_on_trial_ended``,
``_creating_done``, ``progress``); everything else (the trial table, the RNG, request ids,
trial seeds, Shutdown, JSON snapshots) lives here.
"""

from __future__ import annotations

import abc
import functools
import math
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

import numpy as np

from dauntless.config import ExperimentConfig, Length

from ._ops import Close, Create, ExitedReason, Operation, Shutdown, ValidateAfter
from ._rng import draw_request_id, draw_trial_seed, rng_from_json, rng_to_json
from ._space import sample_hparams

SNAPSHOT_VERSION = 1

#: Ended trials' records an archiving searcher (:meth:`Searcher.archive_ended`) keeps in
#: memory after they were handed out, for the events that follow a trial's end in the
#: same breath (an early exit and its close).
RECENTLY_ENDED_KEPT = 64

#: Supplies the record (``TrialRecord.to_json()``) of an ended trial an archiving searcher
#: no longer holds, or None when no trial of that request id ended in this search.
EndedLookup = Callable[[str], "dict[str, Any] | None"]

_F = TypeVar("_F", bound=Callable[..., Any])


def _event_arg(value: Any) -> Any:
    """An event argument as JSON data (enums by value, numpy scalars as Python's)."""
    if isinstance(value, ExitedReason):
        return value.value
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    if isinstance(value, dict):
        return {str(k): _event_arg(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_event_arg(v) for v in value]
    return value


def _journaled(method: _F) -> _F:
    """Record a call of a public event method in the searcher's journal (when one was
    started with :meth:`Searcher.start_journal`); calls made inside another event are
    not recorded, since replaying the outer one repeats them."""
    name = method.__name__

    @functools.wraps(method)
    def wrapper(self: Searcher, *args: Any, **kwargs: Any) -> Any:
        journal = self._journal
        if journal is None or self._journal_depth:
            return method(self, *args, **kwargs)
        journal.append([name, _event_arg(list(args)), _event_arg(kwargs)])
        self._journal_depth += 1
        try:
            return method(self, *args, **kwargs)
        finally:
            self._journal_depth -= 1

    return wrapper  # type: ignore[return-value]


@dataclass(slots=True)
class TrialRecord:
    """What a searcher remembers about one trial it created.

    Attributes:
        request_id: the trial's UUID string.
        hparams: its hyperparameter values.
        seed: its trial seed.
        group: the ASHA bracket it belongs to (0 for other searchers).
        rung: the ASHA rung it is training towards (0 for other searchers).
        target: its outstanding ``ValidateAfter`` length in batches (None before one).
        completed: the length in batches of its latest completed validation (0 if none).
        created: the master reported it created (``on_trial_created``).
        closing: the searcher sent ``Close``.
        ended: it has ended (closed or exited early); no more events change it.
        exit: why it exited early, or None.
        parent: the request id of the trial it was warm-started from (PBT), or None.
    """

    request_id: str
    hparams: dict[str, Any]
    seed: int
    group: int = 0
    rung: int = 0
    target: int | None = None
    completed: int = 0
    created: bool = False
    closing: bool = False
    ended: bool = False
    exit: ExitedReason | None = None
    parent: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The record as JSON data."""
        return {
            "request_id": self.request_id,
            "hparams": self.hparams,
            "seed": self.seed,
            "group": self.group,
            "rung": self.rung,
            "target": self.target,
            "completed": self.completed,
            "created": self.created,
            "closing": self.closing,
            "ended": self.ended,
            "exit": None if self.exit is None else self.exit.value,
            "parent": self.parent,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TrialRecord:
        """Parse :meth:`to_json` output; raises KeyError/TypeError/ValueError if bad."""
        fields = dict(data)
        fields["exit"] = None if data["exit"] is None else ExitedReason(data["exit"])
        return cls(**fields)


def _metric_value(metric: Any, smaller_is_better: bool) -> float:
    """The raw searcher metric as a value where smaller is better; NaN is the worst."""
    if isinstance(metric, bool) or not isinstance(metric, (int, float, np.integer, np.floating)):
        raise TypeError(f"metric must be a real number, got {metric!r}")
    value = float(metric)
    if math.isnan(value):
        return math.inf
    return value if smaller_is_better else -value


class Searcher(abc.ABC):
    """An event-driven hyperparameter searcher (build one with ``make_searcher``).

    The master calls :meth:`initial_operations` once, then reports events; every call
    returns the operations to apply, in order. ``Create`` comes with a request id, the
    hyperparameters and a trial seed, all drawn from the experiment RNG, so the same
    experiment seed and the same events give the same operations.

    Event contract:

    - ``on_trial_created`` after the master created the trial for a ``Create``; it
      answers the trial's first ``ValidateAfter``;
    - ``on_validation_completed`` when a trial finished a ``ValidateAfter`` (a length
      below the outstanding one is an intermediate validation and is ignored);
    - ``on_trial_exited_early`` and/or ``on_trial_closed`` when the trial ended; the first
      of them for a trial acts, later ones for the same trial return ``[]``;
    - events about a trial that already ended return ``[]``; an unknown request id is a
      ``ValueError``.

    ``Shutdown`` is returned once, by the event that ends the last trial when no more
    trials will be created.

    Args:
        config: the validated experiment config.
        rng: the experiment RNG (``numpy.random.RandomState`` seeded with the experiment
            seed); the searcher owns it from then on.

    Raises:
        SearcherConfigError: if the config cannot be searched by this searcher.
    """

    kind: ClassVar[str] = ""
    #: The master passes the whole validation metrics dict to ``on_validation_completed``
    #: (multi-objective searchers read every objective from it).
    wants_validation_metrics: ClassVar[bool] = False
    #: The searcher's state is a function of its snapshot and the events after it
    #: (:meth:`replay_events`), so the master may store events instead of snapshots.
    #: False for searchers whose events run code of the user's (custom methods).
    replayable: ClassVar[bool] = True
    #: Ended trials' records may leave the searcher's memory (:meth:`archive_ended`):
    #: False for searchers whose decisions read ended trials' records (PBT's population)
    #: or that run the user's code on them (custom methods).
    archivable: ClassVar[bool] = True

    def __init__(self, config: ExperimentConfig, rng: np.random.RandomState) -> None:
        self._config = config
        self._rng = rng
        self._trials: dict[str, TrialRecord] = {}
        self._n_created = 0
        # Archiving (issue 37 scope 2; archive_ended): ended records leave _trials for
        # _pending (not yet handed out by take_ended), then a bounded _recent; the
        # counters of the archived ones (all ended) stay, of fixed size.
        self._lookup: EndedLookup | None = None
        self._pending: dict[str, TrialRecord] = {}
        self._recent: OrderedDict[str, TrialRecord] = OrderedDict()
        self._archived = 0
        self._archived_exits: dict[str, int] = {}
        self._archived_groups: dict[int, list[int]] = {}
        self._snapshot_due = False
        self._started = False
        self._shutdown: Shutdown | None = None
        self._n_ended = 0
        self._n_exits = {reason: 0 for reason in ExitedReason}
        self._event_metrics: dict[str, Any] | None = None
        self._event_raw = math.nan
        self._journal: list[list[Any]] | None = None
        self._journal_depth = 0
        self._setup()

    # ------------------------------------------------------------------ hooks

    @abc.abstractmethod
    def _setup(self) -> None:
        """Derive the method's settings from the config; raise SearcherConfigError."""
        raise NotImplementedError  # abstract

    @abc.abstractmethod
    def _initial(self) -> list[Operation]:
        """The first ``Create``s."""
        raise NotImplementedError  # abstract

    @abc.abstractmethod
    def _first_target(self, trial: TrialRecord) -> int | None:
        """The trial's first ``ValidateAfter`` length, in batches; None when the trial's
        own code decides its length (Determined 0.38: no ``max_length``)."""
        raise NotImplementedError  # abstract

    def _on_metrics(self, trial: TrialRecord, metrics: dict[str, Any]) -> list[Operation]:
        """A running trial reported validation metrics (0.38 model); ``[]`` by default:
        only ASHA with ``max_time`` decides from them."""
        return []

    def validation_times(self, request_id: str) -> list[float]:
        """Where a trial's validations matter to this searcher, in ``time_metric`` units,
        ascending (ASHA's rung thresholds); ``[]`` for searchers that ignore metrics.
        Used by the search simulator to validate simulated trials where it matters.

        Raises:
            ValueError: for an unknown request id.
        """
        self._get(request_id)
        return []

    @abc.abstractmethod
    def _on_validation(self, trial: TrialRecord, value: float, length: int) -> list[Operation]:
        """The trial completed its ``ValidateAfter``; ``value``: smaller is better."""
        raise NotImplementedError  # abstract

    @abc.abstractmethod
    def _on_trial_ended(self, trial: TrialRecord, reason: ExitedReason | None) -> list[Operation]:
        """The trial ended; ``reason`` is set for an early exit of an unclosed trial."""
        raise NotImplementedError  # abstract

    @abc.abstractmethod
    def _creating_done(self) -> bool:
        """Whether the searcher will create no more trials."""
        raise NotImplementedError  # abstract

    def _method_state(self) -> dict[str, Any]:
        """JSON data the method needs beyond the trial table."""
        return {}

    def _load_method_state(self, state: dict[str, Any]) -> None:
        """Restore what ``_method_state`` saved; trials are already loaded."""
        if state:
            raise ValueError(f"unexpected {self.kind} searcher state in snapshot: {state!r}")

    @abc.abstractmethod
    def progress(self) -> float:
        """How far the search is, from 0.0 to 1.0 (1.0 once Shutdown was returned)."""
        raise NotImplementedError  # abstract

    # ------------------------------------------------------------------ helpers

    def _batches(self, length: Length, hparams: dict[str, Any]) -> int:
        """A config length in batches for a trial, through its ``global_batch_size``."""
        return length.to_batches(hparams.get("global_batch_size"), self._config.records_per_epoch)

    def _create(
        self,
        group: int = 0,
        hparams: dict[str, Any] | None = None,
        *,
        parent: str | None = None,
        request_id: str | None = None,
    ) -> Create:
        """Register a new trial; draws hparams (unless given), request id (unless given:
        a custom search method names its trials), trial seed."""
        if hparams is None:
            hparams = sample_hparams(self._config.hyperparameters, self._rng)
        if request_id is None:
            request_id = draw_request_id(self._rng)
        seed = draw_trial_seed(self._rng)
        trial = TrialRecord(
            request_id=request_id, hparams=hparams, seed=seed, group=group, parent=parent
        )
        trial.target = self._first_target(trial)
        self._trials[request_id] = trial
        self._n_created += 1
        return Create(
            request_id=request_id,
            hparams=_copy_json(hparams),
            seed=seed,
            parent_request_id=parent,
        )

    def _close(self, trial: TrialRecord) -> Close:
        trial.closing = True
        return Close(trial.request_id)

    def _get(self, request_id: str) -> TrialRecord:
        trial = self._trials.get(request_id)
        if trial is None and self._lookup is not None:
            trial = self._pending.get(request_id) or self._recent.get(request_id)
            if trial is None:
                data = self._lookup(request_id)
                if data is not None:
                    trial = TrialRecord.from_json(data)
                    if not trial.ended or trial.request_id != request_id:
                        raise ValueError(
                            f"the archived record of trial {request_id!r} is not of an "
                            f"ended trial of that request id: {data!r}"
                        )
                    self._remember(trial)
        if trial is None:
            raise ValueError(f"request_id {request_id!r} is not a trial this searcher created")
        return trial

    def _remember(self, trial: TrialRecord) -> None:
        """Keep an archived record among the recently ended ones (a bounded cache)."""
        self._recent[trial.request_id] = trial
        self._recent.move_to_end(trial.request_id)
        while len(self._recent) > RECENTLY_ENDED_KEPT:
            self._recent.popitem(last=False)

    def _archive(self, trial: TrialRecord) -> None:
        """Move an ended trial's record out of the trial table (archiving searchers)."""
        del self._trials[trial.request_id]
        self._pending[trial.request_id] = trial
        self._recent.pop(trial.request_id, None)
        self._archived += 1
        if trial.exit is not None:
            key = trial.exit.value
            self._archived_exits[key] = self._archived_exits.get(key, 0) + 1
        group = self._archived_groups.setdefault(trial.group, [0, 0])
        group[0] += 1
        group[1] += trial.exit is ExitedReason.INVALID_HP

    def _unarchive(self, trial: TrialRecord) -> None:
        """Put an archived (ended) record back into the trial table (a reopen)."""
        self._pending.pop(trial.request_id, None)
        self._recent.pop(trial.request_id, None)
        self._archived -= 1
        if trial.exit is not None:
            self._archived_exits[trial.exit.value] -= 1
        group = self._archived_groups[trial.group]
        group[0] -= 1
        group[1] -= trial.exit is ExitedReason.INVALID_HP
        self._trials[trial.request_id] = trial
        self._snapshot_due = True

    def _count_valid(self) -> int:
        """Trials created, not counting those that exited with invalid hyperparameters."""
        return self._n_created - self._n_exits[ExitedReason.INVALID_HP]

    def _finish(self, trial: TrialRecord, reason: ExitedReason | None) -> list[Operation]:
        trial.ended = True
        self._n_ended += 1
        if reason is not None:
            trial.exit = reason
            self._n_exits[reason] += 1
        ops = self._on_trial_ended(trial, reason)
        if self._lookup is not None:
            self._archive(trial)
        return ops + self._maybe_shutdown()

    def _maybe_shutdown(self) -> list[Operation]:
        if (
            self._shutdown is not None
            or not self._started
            or self._n_ended < self._n_created
            or not self._creating_done()
        ):
            return []
        n = self._n_created
        canceled = self._n_exits[ExitedReason.USER_CANCELED]
        early = sum(self._n_exits.values())
        cancel = n > 0 and canceled == n
        self._shutdown = Shutdown(cancel=cancel, failure=n > 0 and not cancel and early == n)
        return [self._shutdown]

    # ------------------------------------------------------------------ events

    @_journaled
    def initial_operations(self) -> list[Operation]:
        """The first operations of the search: the initial ``Create``s.

        Raises:
            RuntimeError: if called a second time (a restored searcher has already
                started).
        """
        if self._started:
            raise RuntimeError("initial_operations() was already called for this search")
        self._started = True
        return self._initial() + self._maybe_shutdown()

    @_journaled
    def on_trial_created(self, request_id: str) -> list[Operation]:
        """The master created the trial of a ``Create``.

        Args:
            request_id: the ``Create``'s request id.

        Returns:
            ``[ValidateAfter(request_id, first_length_in_batches)]``, or ``[]`` if the
            trial was already reported created or has ended.

        Raises:
            ValueError: for an unknown request id.
        """
        trial = self._get(request_id)
        if trial.created or trial.ended:
            return []
        trial.created = True
        if trial.closing or trial.target is None:
            return []
        return [ValidateAfter(request_id, trial.target)]

    @_journaled
    def on_validation_completed(
        self,
        request_id: str,
        metric: float,
        length: int,
        metrics: dict[str, Any] | None = None,
    ) -> list[Operation]:
        """A trial validated after training ``length`` batches in all.

        Args:
            request_id: the trial.
            metric: the raw searcher metric (``searcher.metric``); the searcher applies
                ``smaller_is_better`` itself; NaN counts as the worst value.
            length: the trial's total batches trained at this validation.
            metrics: the whole validation metrics dict at ``length``, for searchers that
                read more than one metric (multi-objective: ``searcher.metrics``); the
                master passes it to those (:attr:`wants_validation_metrics`).

        Returns:
            The next operations (a further ``ValidateAfter``, or ``Close``, possibly a
            ``Create``); ``[]`` for an intermediate validation (``length`` below the
            outstanding ``ValidateAfter``) or a trial that is closing or ended.

        Raises:
            ValueError: for an unknown request id or a negative length.
            TypeError: if ``metric`` is not a real number or ``length`` not an int.
        """
        if isinstance(length, bool) or not isinstance(length, (int, np.integer)):
            raise TypeError(f"length must be an int (batches), got {length!r}")
        if length < 0:
            raise ValueError(f"length must be >= 0 batches, got {length}")
        value = _metric_value(metric, self._config.searcher.smaller_is_better)
        trial = self._get(request_id)
        if trial.ended or trial.closing or trial.target is None or length < trial.target:
            return []
        trial.completed = int(length)
        self._event_metrics = metrics
        self._event_raw = float(metric)
        try:
            return self._on_validation(trial, value, int(length)) + self._maybe_shutdown()
        finally:
            self._event_metrics = None

    @_journaled
    def on_validation_metrics(self, request_id: str, metrics: dict[str, Any]) -> list[Operation]:
        """A trial reported validation metrics (Determined 0.38's searcher event).

        Searchers that ignore metrics return ``[]``; ASHA with ``max_time`` reads
        ``metrics[searcher.metric]`` and ``metrics[searcher.time_metric]`` and may stop
        the trial (``Close``) and create a replacement.

        Args:
            request_id: the trial.
            metrics: the whole validation metrics dict the trial reported.

        Returns:
            The operations; ``[]`` for a trial that is closing or ended.

        Raises:
            ValueError: for an unknown request id, or (ASHA) a metric or time metric that
                is missing or not a real number (the message names it).
            TypeError: if ``metrics`` is not a dict.
        """
        if not isinstance(metrics, dict):
            raise TypeError(f"metrics must be a dict, got {type(metrics).__name__}")
        trial = self._get(request_id)
        if trial.ended or trial.closing:
            return []
        return self._on_metrics(trial, metrics) + self._maybe_shutdown()

    @_journaled
    def on_trial_exited_early(self, request_id: str, reason: ExitedReason | str) -> list[Operation]:
        """A trial ended without being closed by the searcher.

        An exit of a trial the searcher already sent ``Close`` counts as a normal close.

        Args:
            request_id: the trial.
            reason: an :class:`ExitedReason` or its name (``"INVALID_HP"``).

        Returns:
            A replacement ``Create`` where the searcher makes one, and ``Shutdown`` if this
            was the last trial; ``[]`` if the trial had already ended.

        Raises:
            ValueError: for an unknown request id or reason.
        """
        try:
            reason = ExitedReason(reason)
        except ValueError:
            raise ValueError(
                f"reason must be one of {[r.value for r in ExitedReason]}, got {reason!r}"
            ) from None
        trial = self._get(request_id)
        if trial.ended:
            return []
        return self._finish(trial, None if trial.closing else reason)

    @_journaled
    def on_trial_closed(self, request_id: str) -> list[Operation]:
        """A trial ended (it was closed, or it exited on its own).

        Returns:
            A ``Create`` where the freed place goes to a new trial, and ``Shutdown`` if
            this was the last trial; ``[]`` if the trial had already ended.

        Raises:
            ValueError: for an unknown request id.
        """
        trial = self._get(request_id)
        if trial.ended:
            return []
        return self._finish(trial, None)

    @_journaled
    def reopen_trial(self, request_id: str) -> list[Operation]:
        """Make an ended trial live again (``det experiment continue``).

        The trial counts as created and not ended, its early-exit reason is forgotten and
        the search is no longer shut down. ASHA forgets the worst-value placeholder an
        errored or canceled trial left in its rung and continues it at that rung.

        Returns:
            ``[ValidateAfter(request_id, length)]`` when the config hands out a length
            the trial has not reached yet, ``[Close]`` when it has, ``[]`` when the
            trial's own code decides its length or the trial had not ended.

        Raises:
            ValueError: for an unknown request id, or a searcher that cannot reopen.
        """
        trial = self._get(request_id)
        if not trial.ended:
            return []
        if not self._can_reopen():
            raise ValueError(f"a {self.kind} search cannot reopen a trial")
        if request_id not in self._trials:
            self._unarchive(trial)
        reason = trial.exit
        trial.ended = False
        self._n_ended -= 1
        if trial.exit is not None:
            self._n_exits[trial.exit] -= 1
            trial.exit = None
        trial.closing = False
        trial.created = True
        self._shutdown = None
        trial.target = self._reopened(trial, reason)
        if trial.target is None:
            return []
        if trial.target <= trial.completed:
            return [self._close(trial)]
        return [ValidateAfter(request_id, trial.target)]

    def _can_reopen(self) -> bool:
        """Whether :meth:`reopen_trial` is allowed."""
        return True

    @property
    def can_reopen(self) -> bool:
        """Whether ended trials can be made live again (``det experiment continue``):
        not for searchers whose decisions already used their results (model-based
        samplers, PBT, custom methods)."""
        return self._can_reopen()

    def _reopened(self, trial: TrialRecord, reason: ExitedReason | None) -> int | None:
        """Undo the method's bookkeeping of the trial's end; return its next
        ``ValidateAfter`` length (None: its code decides)."""
        return self._first_target(trial)

    # ------------------------------------------------------------------ queries

    def current_operation(self, request_id: str) -> ValidateAfter | None:
        """The trial's outstanding ``ValidateAfter``, or None if it has none (closing,
        ended, or waiting for ``on_trial_created``).

        Raises:
            ValueError: for an unknown request id.
        """
        trial = self._get(request_id)
        if trial.ended or trial.closing or not trial.created or trial.target is None:
            return None
        if trial.target <= trial.completed:
            return None
        return ValidateAfter(request_id, trial.target)

    @property
    def is_shut_down(self) -> bool:
        """Whether ``Shutdown`` has been returned."""
        return self._shutdown is not None

    def trials(self) -> list[TrialRecord]:
        """Copies of the trial records, in creation order; for a searcher that archives
        ended trials (:meth:`archive_ended`), those of its live trials only."""
        return [TrialRecord.from_json(t.to_json()) for t in self._trials.values()]

    # ------------------------------------------------------------------ archiving

    def archive_ended(self, lookup: EndedLookup) -> None:
        """Keep no record of an ended trial in memory from now on (issue 37 scope 2: the
        master, which holds each ended trial's record in its trial row).

        A trial's record leaves the searcher when the trial ends; :meth:`take_ended` hands
        it out (the caller stores it) and it stays among the last
        :data:`RECENTLY_ENDED_KEPT` ended ones; an event that names an ended trial beyond
        those gets its record from ``lookup`` (``reopen_trial`` makes it live again).
        Records of ended trials the searcher holds now (a snapshot made without
        archiving) leave it at once, to :meth:`take_ended`. Decisions are unchanged: the
        methods read only the record of the trial an event names, and counts. The
        snapshot then holds the live trials and the archived ones' counts; restoring it
        gives an archiving searcher, whose caller calls this again to give it ``lookup``.
        Calling it again only replaces ``lookup``.

        Args:
            lookup: ``lookup(request_id)`` returns the record of an ended trial of this
                search as :meth:`TrialRecord.to_json` gave it, or None for a request id
                of no ended trial of this search.

        Raises:
            ValueError: the searcher is not :attr:`archivable`.
        """
        if not self.archivable:
            raise ValueError(f"a {self.kind} searcher cannot archive ended trials")
        first = self._lookup is None
        self._lookup = lookup
        if first:
            for trial in [t for t in self._trials.values() if t.ended]:
                self._archive(trial)

    def take_ended(self) -> list[dict[str, Any]]:
        """The records (:meth:`TrialRecord.to_json`) of trials archived since the last
        call, for the caller to store where ``lookup`` finds them; ``[]`` when not
        archiving. A record ended again after a reopen comes again."""
        pending, self._pending = self._pending, {}
        out = []
        for trial in pending.values():
            out.append(trial.to_json())
            self._remember(trial)
        return out

    def snapshot_due(self) -> bool:
        """Whether an archived trial was made live again (``reopen_trial``) since the
        last call, which then returns False until the next one. The caller stores a
        snapshot now rather than the reopen as an event: replayed later, the reopen
        would look up the record the trial's next end wrote, not the one it reopened."""
        due, self._snapshot_due = self._snapshot_due, False
        return due

    @property
    def ended_not_taken(self) -> int:
        """Archived records :meth:`take_ended` has not handed out yet."""
        return len(self._pending)

    @property
    def trials_in_memory(self) -> int:
        """The trial records the searcher holds now: live trials', and (archiving) ended
        ones not yet taken (:meth:`take_ended`) and the recently ended ones."""
        return len(self._trials) + len(self._pending) + len(self._recent)

    # ------------------------------------------------------------------ journal

    def start_journal(self) -> None:
        """Record every event from now on (:meth:`take_events` hands them out).

        The master stores the events of a replayable searcher (:attr:`replayable`) as
        rows and its snapshot only now and then (issue 37): ``restore_searcher`` of the
        snapshot followed by :meth:`replay_events` of the events after it gives the
        searcher an uninterrupted run would have.
        """
        if self._journal is None:
            self._journal = []

    @property
    def journaling(self) -> bool:
        """Whether :meth:`start_journal` was called (events are being recorded)."""
        return self._journal is not None

    def take_events(self) -> list[list[Any]]:
        """The events recorded since the last call, oldest first, as JSON data
        ``[method name, [args], {kwargs}]``; ``[]`` when no journal was started."""
        if self._journal is None:
            return []
        events, self._journal = self._journal, []
        return events

    def replay_events(self, events: list[list[Any]]) -> None:
        """Apply recorded events again, in order, dropping the operations they return
        (the master applied those when the events first happened).

        An event that raised ``ValueError`` or ``TypeError`` when it happened raises it
        again here, with the same effect on the state; it is skipped.

        Raises:
            ValueError: an event names no event method of this searcher.
        """
        journal, self._journal = self._journal, None
        try:
            for name, args, kwargs in events:
                if name not in _EVENT_METHODS:
                    raise ValueError(f"{name!r} is not a searcher event")
                try:
                    getattr(self, name)(*args, **kwargs)
                except (ValueError, TypeError):
                    pass
        finally:
            self._journal = journal

    @property
    def trial_count(self) -> int:
        """The number of trials the searcher created."""
        return self._n_created

    @property
    def snapshot_trials(self) -> int:
        """The trial records a snapshot holds (what its size grows with): every
        trial's, or when archiving (:meth:`archive_ended`) the live ones'."""
        return len(self._trials)

    # ------------------------------------------------------------------ snapshots

    def snapshot(self) -> dict[str, Any]:
        """The searcher's whole state as JSON data (``{"version": 1, ...}``).

        Feed it to ``restore_searcher`` with the same config to continue the search with
        identical decisions. An archiving searcher's (:meth:`archive_ended`) holds the
        live trials' records and, under ``"archived"``, the counts of the ended ones.
        """
        data = {
            "version": SNAPSHOT_VERSION,
            "searcher": self.kind,
            "rng": rng_to_json(self._rng),
            "started": self._started,
            "shutdown": None
            if self._shutdown is None
            else {"cancel": self._shutdown.cancel, "failure": self._shutdown.failure},
            "trials": [t.to_json() for t in self._trials.values()],
            "method": self._method_state(),
        }
        if self._lookup is not None:
            data["archived"] = {
                "count": self._archived,
                "exits": {k: n for k, n in self._archived_exits.items() if n},
                "groups": [[g, *c] for g, c in sorted(self._archived_groups.items()) if c[0]],
            }
        return data

    @property
    def method_error(self) -> str | None:
        """The error (a traceback) of the search method's own code, for searchers that
        run code of the user's (custom searchers); the master fails the experiment with
        it. None: no error."""
        return None

    @classmethod
    def _from_snapshot(
        cls, config: ExperimentConfig, data: dict[str, Any], **kwargs: Any
    ) -> Searcher:
        searcher = cls(config, rng_from_json(data["rng"]), **kwargs)
        searcher._started = bool(data["started"])
        if data["shutdown"] is not None:
            searcher._shutdown = Shutdown(**data["shutdown"])
        for raw in data["trials"]:
            trial = TrialRecord.from_json(raw)
            searcher._trials[trial.request_id] = trial
            if trial.ended:
                searcher._n_ended += 1
            if trial.exit is not None:
                searcher._n_exits[trial.exit] += 1
        searcher._n_created = len(searcher._trials)
        archived = data.get("archived")
        if archived is not None:
            # Archived trials (all ended): the caller gives the lookup (archive_ended).
            searcher._lookup = _no_lookup
            searcher._archived = int(archived["count"])
            searcher._n_created += searcher._archived
            searcher._n_ended += searcher._archived
            for key, n in archived["exits"].items():
                searcher._archived_exits[key] = int(n)
                searcher._n_exits[ExitedReason(key)] += int(n)
            for group, n, invalid in archived["groups"]:
                searcher._archived_groups[int(group)] = [int(n), int(invalid)]
        searcher._load_method_state(data["method"])
        return searcher

    def _archived_in_group(self, group: int) -> tuple[int, int]:
        """Archived trials of a group (ASHA bracket): ``(ended, invalid)``."""
        n, invalid = self._archived_groups.get(group, (0, 0))
        return n, invalid


def _no_lookup(request_id: str) -> dict[str, Any] | None:
    """The lookup of a restored archiving searcher before its caller gives one."""
    raise RuntimeError(
        f"trial {request_id!r} was archived: call archive_ended(lookup) after restoring"
    )


_EVENT_METHODS = frozenset(
    {
        "initial_operations",
        "on_trial_created",
        "on_validation_completed",
        "on_validation_metrics",
        "on_trial_exited_early",
        "on_trial_closed",
        "reopen_trial",
    }
)


def _copy_json(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _copy_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy_json(v) for v in value]
    return value
