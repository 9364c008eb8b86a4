"""The master's Prometheus metrics (issue 34 scope 1; ``observability.enable_prometheus``).

Two documents in Prometheus's text format, both built with the official
``prometheus_client`` (no hand-written exposition):

* ``/debug/prom/metrics`` (Determined's path): the master process (CPU, memory, file
  descriptors, garbage collection: ``prometheus_client``'s process, platform and GC
  collectors), ``determined_healthy``, request counts and latencies by route
  (``det_http_request_duration_seconds{method, handler, code}``), metric ingest
  (``det_metric_reports_total{group}``, ``det_metric_report_ack_seconds``), scheduling
  passes (``det_scheduler_pass_seconds``), database statements
  (``det_db_query_duration_seconds{operation}``), and, current at each scrape
  (:class:`ScrapeCache`), the queue depth per pool (``det_scheduler_queue_depth``) and
  the fold backlog (``det_metric_fold_backlog``).
* ``/prom/det-state-metrics`` (Determined's path and label-mapping gauges, value 1:
  ``det_container_id_allocation_id``, ``det_allocation_id_task_id_task_actor``,
  ``det_job_id_experiment_id``, ``det_experiment_id_label``, ``det_gpu_uuid_container_id``)
  plus counts: ``det_agents``, ``det_slots``, ``det_slots_used``, ``det_allocations``,
  ``det_experiments``, ``det_trials``, ``det_tasks``.

Each application has a registry of its own (tests build many applications in one
process), so nothing here touches ``prometheus_client``'s global registry. Label values
are bounded sets: route templates (never raw paths; a request no route matched counts
as ``/**``, as Determined collapses them), status codes, SQL verbs, pool names.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector
from sqlalchemy import Engine, event, inspect

from .db import MetricFoldPendingRow
from .models import observe
from .models.observe import StateSnapshot

if TYPE_CHECKING:
    from .db import Database

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
"""The media type of Prometheus's text format 0.0.4 (what ``generate_latest`` writes)."""

_LATENCY_BUCKETS = (0.0025, 0.01, 0.025, 0.1, 0.25, 1.0, 5.0)
"""Seconds; from 2.5 ms (an acknowledged metric report) to 5 s (a large upload). Few
buckets: each is a line per route and status on every scrape, and rendering them is
most of a scrape's cost (benchmarks/master_idle_cpu.py)."""

_DB_BUCKETS = (0.0005, 0.001, 0.005, 0.025, 0.1, 1.0)
"""Seconds; a SQLite point read is ~0.1 ms, a PostgreSQL one ~0.5 ms."""

_SQL_VERBS = frozenset({"select", "insert", "update", "delete", "with", "begin", "commit"})


class _Families:
    """A collector of ready metric families, for ``generate_latest``."""

    def __init__(self, families: Iterable[Metric]) -> None:
        self._families = list(families)

    def collect(self) -> Iterator[Metric]:
        return iter(self._families)


STATE_MAX_AGE = 30.0
"""Seconds :class:`ScrapeCache` serves a state page at most without reading the
database again: the bound on how late a change shows that no session of this master
made (another process writing the database, plain-text SQL, a foreign key cascade).
Every other change shows at the next scrape."""


class ScrapeCache:
    """What the two Prometheus pages read from the database, kept between scrapes.

    A scrape every few seconds of an idle cluster read the same rows each time: 7 SQL
    statements and a worker thread for ``/prom/det-state-metrics``, 4 for
    ``/debug/prom/metrics`` (issue 34; ``benchmarks/master_idle_cpu.py``). Here:

    * the rendered state page and the queue depth per pool are kept with the
      :meth:`~dauntless.master.db.changes.ChangeFlag.version` of a change flag over the
      attributes they read (:data:`dauntless.master.models.observe.STATE_COLUMNS`; ORM
      changes and bulk statements of this master's sessions), read *before* the rows,
      and served while that version is unchanged and they are younger than
      :data:`STATE_MAX_AGE` seconds (the flag publishes after a commit, so a change
      committed during a read advances the version past the one kept);
    * the fold backlog (a count of ``metric_folds_pending`` rows) is kept only when it
      was 0: rows are added only by this master's sessions, whose inserts a second flag
      sees, and removed by the fold (a worker process too), so a 0 read before the flag
      last moved is still 0. A non-zero backlog is counted at every scrape.

    Thread-safe: routes read it on the event loop and refresh it in worker threads.

    Args:
        db: the master database.
        clock: monotonic seconds (tests may pass their own).
        max_age: see :data:`STATE_MAX_AGE` (seconds, > 0).

    Raises:
        ValueError: ``max_age`` <= 0.
    """

    def __init__(
        self,
        db: Database,
        clock: Callable[[], float] = time.monotonic,
        max_age: float = STATE_MAX_AGE,
    ) -> None:
        if not max_age > 0:
            raise ValueError(f"max_age must be > 0 seconds, got {max_age!r}")
        self.db = db
        self.clock = clock
        self.max_age = max_age
        ignore: dict[type, frozenset[str]] = {
            model: frozenset(inspect(model).attrs.keys()) - read
            for model, read in observe.STATE_COLUMNS.items()
        }
        self.state_changes = db.change_flag(tuple(ignore), ignore, bulk=True)
        self.fold_changes = db.change_flag((MetricFoldPendingRow,), bulk=True)
        self._lock = threading.Lock()
        # (flag version before the read, clock at the read, page, queue depth)
        self._state: tuple[int, float, bytes, dict[str, int]] | None = None
        # flag version before a count that found no pending report
        self._no_folds_since: int | None = None

    def state(self) -> tuple[bytes, dict[str, int]] | None:
        """The kept state page and queue depth while still current, else None
        (then :meth:`read_state`). No database access."""
        with self._lock:
            kept = self._state
        if kept is None:
            return None
        version, read_at, page, queued = kept
        if version != self.state_changes.version() or self.clock() - read_at >= self.max_age:
            return None
        return page, queued

    def read_state(self) -> tuple[bytes, dict[str, int]]:
        """Read and render the state page and the queue depth, and keep them (one read
        session; blocking: call it from a worker thread)."""
        version, read_at = self.state_changes.version(), self.clock()
        with self.db.read() as s:
            snap = observe.state_snapshot(s)
            queued = observe.queue_depth(s)
        page = render_state(snap)
        with self._lock:
            self._state = (version, read_at, page, queued)
        return page, queued

    def fold_backlog(self) -> int | None:
        """0 when the last count found no pending report and none was added since,
        else None (then :meth:`read_fold_backlog`). No database access."""
        since = self._no_folds_since
        return 0 if since is not None and since == self.fold_changes.version() else None

    def read_fold_backlog(self) -> int:
        """Count the pending reports (blocking: call it from a worker thread)."""
        version = self.fold_changes.version()
        with self.db.read() as s:
            folds = observe.fold_backlog(s)
        self._no_folds_since = version if folds == 0 else None
        return folds


class MasterMetrics:
    """The master process's measurements and its registry.

    Args:
        engine: the master's SQLAlchemy engine, whose statements are timed (None: none).
        db: the master database, whose state the pages read through a
            :class:`ScrapeCache` (``self.cache``; None: no pages, only measurements).

    The instruments are plain attributes for the code that measures:
    ``requests`` (a histogram labelled ``method``, ``handler``, ``code``; seconds from
    the request's start to its last body byte), ``metric_reports`` (a counter labelled
    ``group``), ``metric_ack`` (seconds from a report's arrival to its acknowledgement),
    ``scheduler_pass`` (seconds of one :func:`dauntless.master.loop.schedule_pass`).
    """

    def __init__(self, engine: Engine | None = None, db: Database | None = None) -> None:
        self.cache = ScrapeCache(db) if db is not None else None
        reg = self.registry = CollectorRegistry(auto_describe=False)
        ProcessCollector(registry=reg)
        PlatformCollector(registry=reg)
        GCCollector(registry=reg)
        self.healthy = Gauge(
            "determined_healthy", "1 when the master answers and its database does", registry=reg
        )
        self.healthy.set(1)
        self.requests = Histogram(
            "det_http_request_duration_seconds",
            "Seconds from a request's start to its answer's last byte, by route template",
            ["method", "handler", "code"],
            buckets=_LATENCY_BUCKETS,
            registry=reg,
        )
        self.metric_reports = Counter(
            "det_metric_reports",
            "Trial metrics reports acknowledged (training, validation, profiling ...)",
            ["group"],
            registry=reg,
        )
        self.metric_ack = Histogram(
            "det_metric_report_ack_seconds",
            "Seconds from a metrics report's arrival to its acknowledgement",
            buckets=_LATENCY_BUCKETS,
            registry=reg,
        )
        self.scheduler_pass = Histogram(
            "det_scheduler_pass_seconds",
            "Seconds of one scheduling pass (lost agents, timeouts, placement)",
            buckets=_LATENCY_BUCKETS,
            registry=reg,
        )
        self.db_query = Histogram(
            "det_db_query_duration_seconds",
            "Seconds of one SQL statement of the master, by its verb",
            ["operation"],
            buckets=_DB_BUCKETS,
            registry=reg,
        )
        if engine is not None:
            self._time_statements(engine)

    def _time_statements(self, engine: Engine) -> None:
        # SQLAlchemy's cursor events (its "Profiling" FAQ shows the pattern): the start
        # time rides on the connection's info for the one statement in flight.
        observe = self.db_query

        @event.listens_for(engine, "before_cursor_execute")
        def _before(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
            conn.info["det_query_start"] = time.perf_counter()

        @event.listens_for(engine, "after_cursor_execute")
        def _after(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
            start = conn.info.pop("det_query_start", None)
            if start is not None:
                verb = statement.lstrip()[:6].lower()
                verb = verb if verb in _SQL_VERBS else "other"
                observe.labels(verb).observe(time.perf_counter() - start)

    def render(self, queued: dict[str, int], fold_backlog: int) -> bytes:
        """``/debug/prom/metrics``: the registry plus the gauges read at scrape time.

        Args:
            queued: trials and tasks waiting for slots, per resource pool.
            fold_backlog: metric reports not yet folded into summaries.
        """
        depth = GaugeMetricFamily(
            "det_scheduler_queue_depth",
            "Trials and tasks waiting for slots, per resource pool",
            labels=["resource_pool"],
        )
        for pool, n in sorted(queued.items()):
            depth.add_metric([pool], n)
        backlog = GaugeMetricFamily(
            "det_metric_fold_backlog",
            "Metric reports acknowledged but not yet folded into the trial summaries",
            value=fold_backlog,
        )
        return generate_latest(self.registry) + generate_latest(_Families([depth, backlog]))  # type: ignore[arg-type]


class RequestMetrics:
    """ASGI middleware that times every HTTP request into ``MasterMetrics.requests``.

    The handler label is the matched route's template (FastAPI puts the route in the
    request scope); a request no route matched (a mounted app, a 404) is ``/**``.
    WebSocket connections are not timed.

    Args:
        app: the wrapped ASGI application.
        metrics: where to record.
    """

    def __init__(self, app: Any, metrics: MasterMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = [500]

        async def send_status(message: Any) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            route = scope.get("route")
            handler = getattr(route, "path", None) or "/**"
            self.metrics.requests.labels(scope["method"], handler, str(status[0])).observe(
                time.perf_counter() - start
            )


def _gauge(name: str, doc: str, labels: list[str]) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, labels=labels)


def render_state(snap: StateSnapshot) -> bytes:
    """``/prom/det-state-metrics`` of one :class:`StateSnapshot`.

    Determined's label-mapping gauges (value 1) join a container (our allocation part)
    to its allocation, an allocation to its task and job, a job to its experiment, an
    experiment to its labels and a GPU to the container holding it; the counts give
    slot usage per agent and pool.
    """
    c2a = _gauge(
        "det_container_id_allocation_id",
        "A container (allocation part) of an allocation",
        ["container_id", "allocation_id"],
    )
    a2t = _gauge(
        "det_allocation_id_task_id_task_actor",
        "An allocation of a task and its job",
        ["allocation_id", "task_id", "task_actor", "job_id"],
    )
    j2e = _gauge(
        "det_job_id_experiment_id", "The job of an experiment", ["job_id", "experiment_id"]
    )
    e2l = _gauge("det_experiment_id_label", "A label of an experiment", ["experiment_id", "label"])
    gpu = _gauge(
        "det_gpu_uuid_container_id", "A GPU held by a container", ["gpu_uuid", "container_id"]
    )
    agents = _gauge("det_agents", "Agents by resource pool and state", ["resource_pool", "state"])
    slots = _gauge(
        "det_slots", "Slots of ACTIVE agents", ["agent_id", "resource_pool", "slot_type"]
    )
    used = _gauge(
        "det_slots_used",
        "Slots of ACTIVE agents held by an allocation",
        ["agent_id", "resource_pool", "slot_type"],
    )
    allocs = _gauge(
        "det_allocations",
        "Live allocation parts by pool and task type",
        ["resource_pool", "task_type"],
    )
    exps = _gauge("det_experiments", "Experiments by state", ["state"])
    trials = _gauge("det_trials", "Trials by state", ["state"])
    tasks = _gauge(
        "det_tasks", "Commands, notebooks, shells and TensorBoards by state", ["task_type", "state"]
    )

    holder: dict[tuple[str, str], str] = {}
    alloc_counts: dict[tuple[str, str], int] = {}
    seen_groups: set[str] = set()
    for a in snap.allocations:
        c2a.add_metric([a["container_id"], a["allocation_id"]], 1)
        if a["allocation_id"] not in seen_groups:
            seen_groups.add(a["allocation_id"])
            a2t.add_metric([a["allocation_id"], a["task_id"], a["task_type"], a["job_id"]], 1)
        for sid in a["slot_ids"]:
            holder[(a["agent_id"], sid)] = a["container_id"]
        key = (a["resource_pool"], a["task_type"])
        alloc_counts[key] = alloc_counts.get(key, 0) + 1
    for (pool, typ), n in sorted(alloc_counts.items()):
        allocs.add_metric([pool, typ], n)
    agent_counts: dict[tuple[str, str], int] = {}
    for agent_id, pool, state, agent_slots in snap.agents:
        agent_counts[(pool, state)] = agent_counts.get((pool, state), 0) + 1
        if state != "ACTIVE":
            continue
        total: dict[str, int] = {}
        busy: dict[str, int] = {}
        for sl in agent_slots:
            typ = str(sl.get("type", "cpu"))
            total[typ] = total.get(typ, 0) + 1
            container = holder.get((agent_id, str(sl.get("id"))))
            if container is not None:
                busy[typ] = busy.get(typ, 0) + 1
                if typ == "cuda" and sl.get("device"):
                    gpu.add_metric([str(sl["device"]), container], 1)
        for typ in sorted(total):
            slots.add_metric([agent_id, pool, typ], total[typ])
            used.add_metric([agent_id, pool, typ], busy.get(typ, 0))
    for (pool, state), n in sorted(agent_counts.items()):
        agents.add_metric([pool, state], n)
    for exp_id, _state, labels, _pool in snap.experiments:
        j2e.add_metric([f"experiment-{exp_id}", str(exp_id)], 1)
        for label in labels:
            e2l.add_metric([str(exp_id), label], 1)
    for state, n in sorted(snap.experiment_states.items()):
        exps.add_metric([state], n)
    for state, n in sorted(snap.trial_states.items()):
        trials.add_metric([state], n)
    for (typ, state), n in sorted(snap.task_states.items()):
        tasks.add_metric([typ.upper(), state], n)
    families = [c2a, a2t, j2e, e2l, gpu, agents, slots, used, allocs, exps, trials, tasks]
    return generate_latest(_Families(families))  # type: ignore[arg-type]
