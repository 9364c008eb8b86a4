"""A pure, deterministic cluster simulator that drives any searcher to ``Shutdown``.

The simulated cluster runs up to ``max_concurrent`` trials at once (all the searcher
creates, if None); a running trial trains one batch per time unit, so time is measured in
batches. Trials waiting for a place start in creation order; events at the same time are
handled in the order they were scheduled. The master's contract is followed: operations
are applied in order, ``on_trial_created`` right after a ``Create``, ``on_trial_closed``
once a closed trial has stopped. An objective that raises :class:`dauntless.InvalidHP`
makes the trial exit early with ``INVALID_HP``.

Trials of a 0.38-style config (no ``ValidateAfter``: the trial's code decides its length)
train ``trial_length`` batches and then exit on their own; they report validation metrics
(``{metric: objective(...), time_metric: batches}``) wherever the searcher's decisions
depend on them (ASHA's rung thresholds, :meth:`Searcher.validation_times`) and at their
end. A stopped trial (``Close``) ends at once.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from dauntless import InvalidHP
from dauntless.config import (
    MODEL_SEARCHERS,
    DoubleHP,
    ExperimentConfig,
    IntHP,
    LogHP,
    SearchMetric,
)

from ._factory import make_searcher
from ._ops import Close, Create, ExitedReason, Operation, Shutdown, ValidateAfter

Objective = Callable[[dict[str, Any], int, int], Any]
"""``objective(hparams, length_batches, trial_seed) -> searcher metric``, or a dict of
metric name -> value holding at least ``searcher.metric`` (multi-objective searches read
every objective of ``searcher.metrics`` from it)."""


@dataclass
class SimulatedTrial:
    """One trial of a simulated search.

    Attributes:
        request_id: its request id.
        hparams: its hyperparameters.
        seed: its trial seed.
        lengths: the ``ValidateAfter`` lengths it was given, in batches.
        metrics: ``(batches, metric)`` of each validation it reported.
        batches_trained: batches it trained before it ended.
        exited_reason: ``INVALID_HP`` if the objective raised InvalidHP, else None.
    """

    request_id: str
    hparams: dict[str, Any]
    seed: int
    lengths: list[int] = field(default_factory=list)
    metrics: list[tuple[int, float]] = field(default_factory=list)
    batches_trained: int = 0
    exited_reason: ExitedReason | None = None


@dataclass
class SimulationResult:
    """The outcome of :func:`simulate`.

    Attributes:
        trials: every trial, in creation order.
        total_batches: batches trained by all trials.
        best: the trial with the best single validation metric (earliest on ties).
        best_metric: that metric (raw, as the objective returned it).
        shutdown: the searcher's ``Shutdown``.
        makespan: simulated time until the searcher shut down, in batches.
        progress: the searcher's final ``progress()``.
    """

    trials: list[SimulatedTrial]
    total_batches: int
    best: SimulatedTrial | None
    best_metric: float | None
    shutdown: Shutdown
    makespan: int
    progress: float


@dataclass
class _Running:
    record: SimulatedTrial
    state: str = "waiting"  # waiting -> running -> done
    target: int | None = None
    closing: bool = False


class _Cluster:
    def __init__(
        self,
        searcher: Any,
        objective: Objective,
        capacity: int | None,
        trial_limit: int,
        trial_length: int = 0,
        metric_names: tuple[str, str | None] = ("metric", None),
    ) -> None:
        self.trial_length = trial_length
        self.metric_names = metric_names
        self.searcher = searcher
        self.objective = objective
        self.capacity = capacity
        self.trial_limit = trial_limit
        self.trials: dict[str, _Running] = {}
        self.waiting: deque[str] = deque()
        self.heap: list[tuple[int, int, int, str, int]] = []
        self.seq = 0
        self.now = 0
        self.running = 0
        self.total_batches = 0
        self.shutdown: Shutdown | None = None

    def _schedule(self, at: int, kind: int, request_id: str, length: int = 0) -> None:
        # kind 0: reached its ValidateAfter length; kind 1: stopped after a Close;
        # kind 2: a 0.38 trial validates at ``length``; kind 3: a 0.38 trial exits.
        self.seq += 1
        heapq.heappush(self.heap, (at, self.seq, kind, request_id, length))

    def apply(self, ops: list[Operation]) -> None:
        queue = deque(ops)
        while queue:
            op = queue.popleft()
            if isinstance(op, Create):
                if len(self.trials) >= self.trial_limit:
                    raise RuntimeError(
                        f"the searcher created more than trial_limit={self.trial_limit} "
                        "trials (does the objective always raise InvalidHP?)"
                    )
                record = SimulatedTrial(op.request_id, op.hparams, op.seed)
                self.trials[op.request_id] = _Running(record)
                self.waiting.append(op.request_id)
                queue.extend(self.searcher.on_trial_created(op.request_id))
            elif isinstance(op, ValidateAfter):
                trial = self.trials[op.request_id]
                trial.target = op.length
                trial.record.lengths.append(op.length)
                if trial.state == "running":
                    self._schedule_validation(op.request_id, trial)
            elif isinstance(op, Close):
                trial = self.trials[op.request_id]
                if trial.state != "done" and not trial.closing:
                    trial.closing = True
                    self._schedule(self.now, 1, op.request_id)
            elif isinstance(op, Shutdown):
                self.shutdown = op

    def _schedule_validation(self, request_id: str, trial: _Running) -> None:
        if trial.target is not None and not trial.closing:
            wait = max(trial.target - trial.record.batches_trained, 0)
            self._schedule(self.now + wait, 0, request_id, trial.target)

    def start_waiting(self) -> None:
        while self.waiting and (self.capacity is None or self.running < self.capacity):
            request_id = self.waiting.popleft()
            trial = self.trials[request_id]
            if trial.state != "waiting":
                continue
            trial.state = "running"
            self.running += 1
            if trial.target is None:
                self._schedule_own_length(request_id)
            else:
                self._schedule_validation(request_id, trial)

    def _schedule_own_length(self, request_id: str) -> None:
        """A 0.38 trial: validations where the searcher looks, then its own end."""
        end = self.trial_length
        for t in self.searcher.validation_times(request_id):
            if 0 < t < end:
                self._schedule(self.now + int(math.ceil(t)), 2, request_id, int(math.ceil(t)))
        if end > 0:
            self._schedule(self.now + end, 2, request_id, end)
        self._schedule(self.now + end, 3, request_id, end)

    def _own_validation(self, request_id: str, length: int) -> None:
        trial = self.trials[request_id]
        if trial.state != "running" or trial.closing:
            return
        self.total_batches += length - trial.record.batches_trained
        trial.record.batches_trained = length
        trial.record.lengths.append(length)
        try:
            metric, extra = self._evaluate(trial, length)
        except InvalidHP:
            trial.record.exited_reason = ExitedReason.INVALID_HP
            self._end(trial)
            self.apply(
                self.searcher.on_trial_exited_early(request_id, ExitedReason.INVALID_HP)
                + self.searcher.on_trial_closed(request_id)
            )
            return
        trial.record.metrics.append((length, metric))
        name, time_metric = self.metric_names
        metrics = {**(extra or {}), name: metric, "batches": length}
        if time_metric is not None:
            metrics[time_metric] = length
        self.apply(self.searcher.on_validation_metrics(request_id, metrics))

    def _end(self, trial: _Running) -> None:
        if trial.state == "running":
            self.running -= 1
        trial.state = "done"

    def _validate(self, request_id: str, length: int) -> None:
        trial = self.trials[request_id]
        if trial.state != "running" or trial.closing or trial.target != length:
            return
        self.total_batches += length - trial.record.batches_trained
        trial.record.batches_trained = length
        try:
            metric, extra = self._evaluate(trial, length)
        except InvalidHP:
            trial.record.exited_reason = ExitedReason.INVALID_HP
            self._end(trial)
            self.apply(
                self.searcher.on_trial_exited_early(request_id, ExitedReason.INVALID_HP)
                + self.searcher.on_trial_closed(request_id)
            )
            return
        trial.record.metrics.append((length, metric))
        self.apply(self.searcher.on_validation_completed(request_id, metric, length, extra))

    def _evaluate(self, trial: _Running, length: int) -> tuple[float, dict[str, Any] | None]:
        """The searcher metric and, when the objective returns a dict, every metric."""
        value = self.objective(trial.record.hparams, length, trial.record.seed)
        if isinstance(value, dict):
            return float(value[self.metric_names[0]]), dict(value)
        return float(value), None

    def run(self) -> Shutdown:
        self.apply(self.searcher.initial_operations())
        self.start_waiting()
        while self.heap and self.shutdown is None:
            at, _, kind, request_id, length = heapq.heappop(self.heap)
            self.now = at
            if kind == 0:
                self._validate(request_id, length)
            elif kind == 2:
                self._own_validation(request_id, length)
            elif kind == 3:
                trial = self.trials[request_id]
                if trial.state == "running" and not trial.closing:
                    self.total_batches += length - trial.record.batches_trained
                    trial.record.batches_trained = length
                    self._end(trial)
                    self.apply(self.searcher.on_trial_closed(request_id))
            else:
                trial = self.trials[request_id]
                if trial.state != "done":
                    self._end(trial)
                    self.apply(self.searcher.on_trial_closed(request_id))
            self.start_waiting()
        if self.shutdown is None:
            raise RuntimeError(
                "the searcher stopped without Shutdown: no trial has work left but "
                f"{sum(t.state != 'done' for t in self.trials.values())} have not ended"
            )
        return self.shutdown


def simulate(
    config: ExperimentConfig,
    objective: Objective,
    seed: int,
    max_concurrent: int | None = None,
    *,
    trial_limit: int = 1_000_000,
    trial_length: int | None = None,
    method: Any = None,
) -> SimulationResult:
    """Run a whole search against a synthetic objective, in memory.

    Args:
        config: the experiment config; its searcher is built with ``make_searcher``.
        objective: ``objective(hparams, length_batches, trial_seed) -> float``, the
            searcher metric a trial reports when it validates after ``length_batches``
            batches in all; raise :class:`dauntless.InvalidHP` to end the trial early.
        seed: the experiment seed.
        max_concurrent: trials the simulated cluster runs at once; None: all that the
            searcher creates.
        trial_limit: stop with RuntimeError if the searcher creates more trials than this.
        trial_length: batches a trial trains when its own code decides (a config without
            ``searcher.max_length``); None: ASHA's ``max_time``, else 0 (the trial exits
            at once, after no validation).
        method: a custom searcher's search method (or a callable building one); a PBT
            clone (or a custom ``Create`` with a parent) starts its own batch count at 0
            here as on the cluster, and the objective sees only its hyperparameters.

    Returns:
        The trials, their lengths and metrics, total batches, the best trial.

    Raises:
        ValueError: if ``max_concurrent`` or ``trial_limit`` is below 1.
        SearcherConfigError: if the config cannot be searched.
        RuntimeError: if the searcher stalls without ``Shutdown`` or exceeds
            ``trial_limit``.
    """
    if max_concurrent is not None and (not isinstance(max_concurrent, int) or max_concurrent < 1):
        raise ValueError(f"max_concurrent must be None or an int >= 1, got {max_concurrent!r}")
    if not isinstance(trial_limit, int) or trial_limit < 1:
        raise ValueError(f"trial_limit must be an int >= 1, got {trial_limit!r}")
    searcher = make_searcher(config, seed, method=method)
    time_metric = getattr(config.searcher, "time_metric", None)
    if trial_length is None:
        trial_length = getattr(config.searcher, "max_time", None) or 0
    if not isinstance(trial_length, int) or trial_length < 0:
        raise ValueError(f"trial_length must be an int >= 0 (batches), got {trial_length!r}")
    names = (config.searcher.metric, time_metric)
    cluster = _Cluster(searcher, objective, max_concurrent, trial_limit, trial_length, names)
    shutdown = cluster.run()
    records = [t.record for t in cluster.trials.values()]
    sign = 1.0 if config.searcher.smaller_is_better else -1.0
    best: SimulatedTrial | None = None
    best_metric: float | None = None
    for record in records:
        for _, metric in record.metrics:
            if math.isnan(metric):
                continue
            if best_metric is None or sign * metric < sign * best_metric:
                best, best_metric = record, metric
    return SimulationResult(
        trials=records,
        total_batches=cluster.total_batches,
        best=best,
        best_metric=best_metric,
        shutdown=shutdown,
        makespan=cluster.now,
        progress=searcher.progress(),
    )


def synthetic_objective(config: ExperimentConfig) -> Objective:
    """The stated synthetic objective a preview feeds a model-based search.

    Each searched int, double or log hyperparameter is scaled to ``u`` in [0, 1] over its
    range (log ones on their exponent); objective ``i`` of ``n`` (``searcher.metrics``,
    else the one ``searcher.metric``) is the mean of ``(u - (i + 1) / (n + 1))**2`` over
    them, negated where larger is better, so the best trials lie near the points
    ``u = 1/2`` (one objective) or between ``1/3`` and ``2/3`` (two). Categorical and
    constant hyperparameters do not change it; neither does the training length.
    """
    objectives = getattr(config.searcher, "objectives", None)
    goals = (
        objectives()
        if objectives is not None
        else [
            SearchMetric(
                name=config.searcher.metric, smaller_is_better=config.searcher.smaller_is_better
            )
        ]
    )
    leaves = _numeric_leaves(config.hyperparameters, ())

    def objective(hparams: dict[str, Any], _length: int, _seed: int) -> dict[str, float]:
        units = []
        for path, hp in leaves:
            value: Any = hparams
            for key in path:
                value = value[key]
            if isinstance(hp, LogHP):
                value = math.log(value, hp.base)
            span = float(hp.maxval - hp.minval) or 1.0
            units.append((float(value) - hp.minval) / span)
        out = {}
        for i, goal in enumerate(goals):
            centre = (i + 1) / (len(goals) + 1)
            v = sum((u - centre) ** 2 for u in units) / max(len(units), 1)
            out[goal.name] = v if goal.smaller_is_better else -v
        return out

    return objective


SYNTHETIC_OBJECTIVE_TEXT = (
    "mean squared distance of the scaled numeric hyperparameters from 1/2 (objective i "
    "of n: from (i+1)/(n+1)), negated where larger is better"
)


def _numeric_leaves(hps: Any, prefix: tuple[str, ...]) -> list[tuple[tuple[str, ...], Any]]:
    out: list[tuple[tuple[str, ...], Any]] = []
    for name in sorted(hps):
        hp = hps[name]
        if isinstance(hp, dict):
            out += _numeric_leaves(hp, (*prefix, name))
        elif isinstance(hp, (IntHP, DoubleHP, LogHP)):
            out.append(((*prefix, name), hp))
    return out


def is_model_based(config: ExperimentConfig) -> bool:
    """Whether the search's proposals depend on results (an Optuna sampler)."""
    return config.searcher.name in MODEL_SEARCHERS or (
        getattr(config.searcher, "sampler", "random") != "random"
    )


def preview_search(
    config: ExperimentConfig, seed: int = 0, *, method: Any = None
) -> list[tuple[dict[str, Any], list[int]]]:
    """What a search would do if every trial reported the same metric (``det
    preview-search``).

    Args:
        config: the experiment config.
        seed: the experiment seed (the preview's hyperparameters depend on it).

    Returns:
        One ``(hparams, lengths)`` per trial in creation order, ``lengths`` being the
        ``ValidateAfter`` lengths (batches) it would be given; for ASHA with ``max_time``
        (0.38) the rung thresholds (in ``time_metric`` units) it would reach; ``[]`` when
        the trial's own code decides its length.

    Model-based searches (an Optuna sampler) are fed :func:`synthetic_objective`
    instead of a constant, so that the preview shows the sampler at work. ``method``:
    a custom searcher's search method.

    Raises:
        SearcherConfigError: if the config cannot be searched.
    """
    objective: Objective = lambda _hparams, _length, _seed: 0.0  # noqa: E731
    if is_model_based(config):
        objective = synthetic_objective(config)
    result = simulate(config, objective, seed, method=method)
    return [(t.hparams, list(t.lengths)) for t in result.trials]
