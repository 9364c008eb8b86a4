"""Where a task's reports go: the master (REST) or an in-memory record (local runs, tests).

:class:`Backend` is the narrow interface the Core API contexts use. :class:`MasterBackend`
speaks the harness routes of docs/protocol.md; :class:`LocalBackend` keeps everything in
memory and plays a searcher that hands out a fixed list of operations, which is what a run
without a master needs.
"""

from __future__ import annotations

import abc
import dataclasses
import itertools
import logging
import math
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from ._lite import LiteClient
from ._sender import BackgroundSender
from ._session import Session

API = "/api/v1"
METRIC_GROUPS = ("training", "validation")
#: Seconds a long-poll request may take beyond the wait it asks the master for.
LONG_POLL_SLACK = 15.0
#: Default seconds between two training-metrics requests of one backend.
TRAINING_REPORT_INTERVAL = 1.0
#: Most reports in one ``POST /trials/{id}/metrics/batch`` (the master takes 1,000).
MAX_REPORTS_PER_REQUEST = 500

logger = logging.getLogger("dauntless.core")


@dataclasses.dataclass(frozen=True)
class SearcherAnswer:
    """The answer to "what should this trial do next?".

    Attributes:
        length: train until ``total_batches == length`` (absolute, in batches), then
            validate and report; None when the searcher has nothing for the trial yet.
        completed: True when the searcher closed the trial (checkpoint if needed, exit 0).
    """

    length: int | None
    completed: bool


def _searcher_answer(body: Any) -> SearcherAnswer:
    """A :class:`SearcherAnswer` from the master's ``{"op": {"length": N} | null,
    "completed": bool}``.

    Raises:
        ValueError: if the body does not have that shape.
    """
    if not isinstance(body, dict) or "completed" not in body:
        raise ValueError(f"unexpected searcher operation answer from the master: {body!r}")
    op = body.get("op")
    length = None
    if op is not None:
        length = op.get("length") if isinstance(op, dict) else None
        if not isinstance(length, int) or isinstance(length, bool) or length < 0:
            raise ValueError(f"searcher operation without a valid length: {body!r}")
    return SearcherAnswer(length=length, completed=bool(body["completed"]))


@dataclasses.dataclass(frozen=True)
class MetricReport:
    """One metrics report as a backend received it (``POST /trials/{id}/metrics``)."""

    trial_id: int
    group: str
    steps_completed: int
    trial_run_id: int
    metrics: dict[str, Any]
    batch_metrics: list[dict[str, Any]] | None = None


@dataclasses.dataclass(frozen=True)
class CheckpointReport:
    """One checkpoint as a backend received it (``POST /checkpoints``)."""

    uuid: str
    trial_id: int
    allocation_id: str
    steps_completed: int
    resources: dict[str, int]
    metadata: dict[str, Any]
    #: ``COMPLETED``; or ``UPLOADING``: its files are going up to an object store now
    #: (a later report with the same uuid says ``COMPLETED``).
    state: str = "COMPLETED"


class Backend(abc.ABC):
    """The reporting calls a trial makes (docs/protocol.md, "Trial harness").

    Attributes:
        long_poll: True when :meth:`get_preemption_signal` is a network call that can wait
            (the master): the preemption signal is then watched by a background thread
            instead of being asked for on every check.
    """

    long_poll: bool = False

    @abc.abstractmethod
    def get_searcher_operation(self, trial_id: int) -> SearcherAnswer:
        """Ask for the trial's current searcher operation."""
        raise NotImplementedError  # abstract

    @abc.abstractmethod
    def complete_operation(
        self, trial_id: int, length: int, searcher_metric: float
    ) -> SearcherAnswer | None:
        """Report that the operation of ``length`` batches finished with a metric value.

        Returns:
            The trial's next answer (as :meth:`get_searcher_operation` would give it
            now) when the backend learnt it with the completion, else None.
        """
        raise NotImplementedError  # abstract

    @abc.abstractmethod
    def report_metrics(self, report: MetricReport) -> None:
        """Store one training or validation metrics report."""
        raise NotImplementedError  # abstract

    @abc.abstractmethod
    def report_progress(self, trial_id: int, progress: float) -> None:
        """Report the trial's progress, a fraction in [0, 1]."""
        raise NotImplementedError  # abstract

    @abc.abstractmethod
    def report_early_exit(self, trial_id: int, reason: str) -> None:
        """Report that the trial ends early (``reason``: ``INVALID_HP``)."""
        raise NotImplementedError  # abstract

    @abc.abstractmethod
    def report_checkpoint(self, report: CheckpointReport) -> None:
        """Record a completed checkpoint."""
        raise NotImplementedError  # abstract

    @abc.abstractmethod
    def get_preemption_signal(self, allocation_id: str, timeout_seconds: float = 0) -> bool:
        """True when the allocation should checkpoint and exit.

        Args:
            allocation_id: the asking allocation.
            timeout_seconds: wait up to this long for the signal before answering False
                (a long poll); 0 answers at once.
        """
        raise NotImplementedError  # abstract

    @abc.abstractmethod
    def get_experiment_best_validation(self, experiment_id: int) -> float | None:
        """The best value of the searcher metric over the experiment's validations so far.

        Returns:
            The value, or None when no validation reported the metric yet (or the
            backend does not know the metric).
        """
        raise NotImplementedError  # abstract

    @abc.abstractmethod
    def set_status(self, trial_id: int, status: str) -> None:
        """Record the status the trial's code reports (``core.train.set_status``)."""
        raise NotImplementedError  # abstract

    @abc.abstractmethod
    def merge_metadata(self, trial_id: int, metadata: dict[str, Any]) -> dict[str, Any]:
        """Merge ``metadata`` into the trial's (objects key by key, recursively; other
        values replaced); the trial's metadata after."""
        raise NotImplementedError  # abstract

    @abc.abstractmethod
    def get_metadata(self, trial_id: int) -> dict[str, Any]:
        """The trial's metadata (``{}`` when none was set)."""
        raise NotImplementedError  # abstract

    def start_background(self) -> None:
        """Get background reporting ready before training starts (the default has none).

        Called once a trial is about to train, so that starting threads and opening
        connections happens before the first batch instead of during it. Never raises.
        """
        return None

    def close(self) -> None:
        """Release connections; the default holds none."""
        return None


class MasterBackend(Backend):
    """The master's REST routes, through a retrying :class:`~dauntless.core.Session`.

    Training metrics and progress are sent by a background thread (in order, with the
    session's retries), so the training loop does not wait for them; every other call
    first waits until they are delivered, and raises the error of one that failed.

    When the session talks to a real server (no custom transport), every request goes
    over one keep-alive connection of a :class:`~dauntless.core._lite.LiteClient`,
    shared by the training loop and the background thread, with the session's
    retries, credential and TLS settings; the session's own httpx client is never made.
    A trivial trial (ask for its operation, report, complete) then opens one
    connection instead of two and spends about a third of the client CPU per request
    (measured: 0.4 against 1.1 ms per report). A session over a custom transport
    (tests) keeps its transport for every request.

    Training metrics leave at most once per ``training_report_interval`` seconds: the
    first report goes at once, and the reports made within the interval after a request
    go together in the next one (``POST /trials/{id}/metrics/batch``). A trial that
    reports every 100 batches of a model that trains 1,000 batches a second thus costs
    the master one request and one transaction a second instead of ten (measured on the
    master: about 10 ms of CPU per request, most of it per request rather than per
    report). Reports wait at most the interval; anything that must come after them
    (validation metrics, checkpoints, the searcher, :meth:`close`) sends them at once.

    Args:
        session: an open session to the master; closed by :meth:`close`.
        background_reports: send training metrics and progress from a background thread.
        training_report_interval: seconds (>= 0) between two training-metrics requests;
            0 sends each report on its own.

    Raises:
        TypeError: if ``session`` is not a Session.
        ValueError: if ``training_report_interval`` is negative or not finite.
    """

    long_poll = True

    def __init__(
        self,
        session: Session,
        *,
        background_reports: bool = True,
        training_report_interval: float = TRAINING_REPORT_INTERVAL,
    ) -> None:
        if not isinstance(session, Session):
            raise TypeError(f"session must be a Session, got {type(session).__name__}")
        if (
            isinstance(training_report_interval, bool)
            or not isinstance(training_report_interval, (int, float))
            or not math.isfinite(training_report_interval)
            or training_report_interval < 0
        ):
            raise ValueError(
                "training_report_interval must be a finite number of seconds >= 0, got "
                f"{training_report_interval!r}"
            )
        self.session = session
        self._poll_session: Session | None = None
        self._sender = BackgroundSender("reports") if background_reports else None
        # A session over a custom transport (tests) keeps it; a real one gets the lite path.
        self._lite = LiteClient(session) if session._transport is None else None
        self._poll_lite: LiteClient | None = None
        self._interval = float(training_report_interval)
        # Training reports not handed to a request yet: (trial id, body), in order.
        self._pending: list[tuple[int, dict[str, Any]]] = []
        self._pending_lock = threading.Lock()
        self._last_training_post = -math.inf  # time.monotonic() of the last request
        self._profiler_sessions: list[list[Session]] = []

    def _post_now(self, path: str, body: Any) -> Any:
        if self._lite is not None:
            return self._lite.post(path, body)
        return self.session.post(path, json=body)

    def _get_now(self, path: str, params: dict[str, Any] | None = None) -> Any:
        if self._lite is not None:
            return self._lite.get(path, params)
        return self.session.get(path, params=params)

    def _post_later(self, path: str, body: Any) -> None:
        if self._sender is None:
            self._post_now(path, body)
        else:
            self._sender.submit(lambda: self._post_now(path, body))

    def _queue_training(self, trial_id: int, body: dict[str, Any]) -> None:
        """Add a training report to the pending ones; the first of a group schedules
        the call that sends them."""
        assert self._sender is not None
        with self._pending_lock:
            self._pending.append((trial_id, body))
            first = len(self._pending) == 1
        if first:
            self._sender.submit(self._send_training)

    def _send_training(self) -> None:
        """On the sender thread: wait out the interval since the last request (cut
        short by a flush), then send every pending training report, in order, one
        request per run of reports of one trial."""
        assert self._sender is not None
        self._sender.hold(self._last_training_post + self._interval - time.monotonic())
        with self._pending_lock:
            pending, self._pending = self._pending, []
        if not pending:
            return
        self._last_training_post = time.monotonic()
        for trial_id, group in itertools.groupby(pending, key=lambda item: item[0]):
            bodies = [body for _, body in group]
            for i in range(0, len(bodies), MAX_REPORTS_PER_REQUEST):
                chunk = bodies[i : i + MAX_REPORTS_PER_REQUEST]
                if len(chunk) == 1:
                    self._post_now(f"{API}/trials/{trial_id}/metrics", chunk[0])
                else:
                    self._post_now(f"{API}/trials/{trial_id}/metrics/batch", {"reports": chunk})

    def start_background(self) -> None:
        """Start the report sender thread and let it open its connection to the master.

        Without this both happen at the first training report, on the training loop's
        time (the thread's start and the TCP handshake compete with the first batches
        for the GIL). A connection that cannot be opened now is opened, with the
        session's retries, by the first report instead.
        """
        if self._sender is not None and self._lite is not None:
            self._sender.submit(self._lite.connect)

    def flush(self) -> None:
        """Send the pending training reports now and wait until every background
        report is delivered.

        Raises:
            APIError, MasterUnreachableError: the error of a report that failed.
        """
        if self._sender is not None:
            self._sender.flush()

    def close(self) -> None:
        """Deliver pending reports, then close the session (and the long-poll one)."""
        if self._poll_lite is not None:
            self._poll_lite.abort()  # ends a long poll in flight at once
        if self._sender is not None:
            self._sender.close()
        if self._lite is not None:
            self._lite.close()
        self.session.close()
        for clone in self._profiler_sessions:
            for session in clone:
                session.close()
        if self._poll_session is not None:
            self._poll_session.close()

    def profiler_sink(self, trial_id: int) -> Callable[[list[dict[str, Any]]], None]:
        """A function that posts one profiler report (``POST
        /trials/{id}/profiler/metrics``) over a session of its own, so the profiler's
        thread never shares a connection with the training loop; at most 2 attempts
        each, since a lost report is only a gap in a chart."""
        clone: list[Session] = []
        lock = threading.Lock()

        def send(rows: list[dict[str, Any]]) -> None:
            with lock:
                if not clone:
                    clone.append(self.session.clone(max_attempts=2))
                clone[0].post(f"{API}/trials/{trial_id}/profiler/metrics", json={"reports": rows})

        self._profiler_sessions.append(clone)
        return send

    def get_searcher_operation(self, trial_id: int) -> SearcherAnswer:
        """``GET /trials/{id}/searcher/operation``.

        Raises:
            ValueError: if the answer does not have the documented shape.
            APIError, MasterUnreachableError: see :meth:`Session.request`.
        """
        self.flush()
        body = self._get_now(f"{API}/trials/{trial_id}/searcher/operation")
        return _searcher_answer(body)

    def complete_operation(
        self, trial_id: int, length: int, searcher_metric: float
    ) -> SearcherAnswer | None:
        """``POST /trials/{id}/searcher/completed_operation``; the master answers the
        trial's next operation with it (None from a master that answers ``{}``).

        Raises:
            ValueError: if the answer has an operation without a valid length.
            APIError, MasterUnreachableError: see :meth:`Session.request`.
        """
        self.flush()
        body = self._post_now(
            f"{API}/trials/{trial_id}/searcher/completed_operation",
            {"op": {"length": length}, "searcher_metric": searcher_metric},
        )
        if not isinstance(body, dict) or "completed" not in body:
            return None
        return _searcher_answer(body)

    def report_metrics(self, report: MetricReport) -> None:
        """``POST /trials/{id}/metrics`` (training metrics in the background, several
        together through ``/metrics/batch``; see the class)."""
        path = f"{API}/trials/{report.trial_id}/metrics"
        body = {
            "group": report.group,
            "steps_completed": report.steps_completed,
            "trial_run_id": report.trial_run_id,
            "metrics": report.metrics,
            "batch_metrics": report.batch_metrics,
        }
        if report.group == "training":
            if self._sender is None:
                self._post_now(path, body)
            else:
                self._queue_training(report.trial_id, body)
        else:
            self.flush()
            self._post_now(path, body)

    def report_progress(self, trial_id: int, progress: float) -> None:
        """``POST /trials/{id}/progress`` (in the background)."""
        self._post_later(f"{API}/trials/{trial_id}/progress", {"progress": progress})

    def send_alert(self, experiment_id: int, trial_id: int, data: dict[str, Any]) -> None:
        """``POST /webhooks/custom``: a custom alert (``core.alert``) to the experiment's
        webhooks with a custom trigger."""
        self._post_now(
            f"{API}/webhooks/custom",
            {"data": data, "experiment_id": experiment_id, "trial_id": trial_id},
        )

    def report_early_exit(self, trial_id: int, reason: str) -> None:
        """``POST /trials/{id}/early_exit``."""
        self.flush()
        self._post_now(f"{API}/trials/{trial_id}/early_exit", {"reason": reason})

    def report_checkpoint(self, report: CheckpointReport) -> None:
        """``POST /checkpoints``."""
        self.flush()
        self._post_now(f"{API}/checkpoints", dataclasses.asdict(report))

    def set_status(self, trial_id: int, status: str) -> None:
        """``POST /trials/{id}/runner/metadata`` (in the background)."""
        body = {"metadata": {"state": status}}
        self._post_later(f"{API}/trials/{trial_id}/runner/metadata", body)

    def merge_metadata(self, trial_id: int, metadata: dict[str, Any]) -> dict[str, Any]:
        """``POST /runs/{id}/metadata``."""
        answer = self._post_now(f"{API}/runs/{trial_id}/metadata", {"metadata": metadata})
        return dict(answer["metadata"])

    def get_metadata(self, trial_id: int) -> dict[str, Any]:
        """``GET /runs/{id}/metadata``."""
        return dict(self._get_now(f"{API}/runs/{trial_id}/metadata")["metadata"])

    def get_preemption_signal(self, allocation_id: str, timeout_seconds: float = 0) -> bool:
        """``GET /allocations/{id}/signals/preemption?timeout_seconds=N``.

        A call that waits (``timeout_seconds > 0``) goes through a connection of its own,
        whose timeout covers the wait, so that the long poll never holds a connection
        the training loop's reports need; :meth:`close` ends it at once. Call it from
        one thread at a time.

        Raises:
            ValueError: if ``timeout_seconds`` is negative or above the master's 60.
            APIError, MasterUnreachableError: see :meth:`Session.request`.
        """
        if not 0 <= timeout_seconds <= 60:
            raise ValueError(f"timeout_seconds must be in [0, 60], got {timeout_seconds}")
        path = f"{API}/allocations/{allocation_id}/signals/preemption"
        params = {"timeout_seconds": timeout_seconds}
        if timeout_seconds == 0:
            body = self._get_now(path, params)
        elif self._lite is not None:
            wait = timeout_seconds + LONG_POLL_SLACK
            if self._poll_lite is None or self._poll_lite.timeout < wait:
                self._poll_lite = LiteClient(self.session, timeout=wait)
            body = self._poll_lite.get(path, params)
        else:
            if self._poll_session is None:
                self._poll_session = self.session.clone()
            body = self._poll_session.get(
                path, params=params, timeout=timeout_seconds + LONG_POLL_SLACK
            )
        return bool(isinstance(body, dict) and body.get("preempt"))

    def get_experiment_best_validation(self, experiment_id: int) -> float | None:
        """``GET /experiments/{id}``: its ``best_searcher_metric``.

        Raises:
            APIError, MasterUnreachableError: see :meth:`Session.request`.
        """
        self.flush()
        body = self._get_now(f"{API}/experiments/{experiment_id}")
        exp = body.get("experiment") if isinstance(body, dict) else None
        value = exp.get("best_searcher_metric") if isinstance(exp, dict) else None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return None
        return float(value)


class LocalBackend(Backend):
    """An in-memory backend: a fixed searcher and a record of every report.

    It behaves like the master for one trial: it hands out the operations of
    ``operation_lengths`` one at a time (each until it is completed), then answers
    ``completed: true``; metrics reports are idempotent on ``(trial, group,
    steps_completed)``; the preemption signal is raised with :meth:`request_preemption`.

    Args:
        operation_lengths: absolute lengths in batches, strictly increasing, each > 0
            (the searcher's ``ValidateAfter`` operations for this trial).
        searcher_metric: the validation metric whose best value
            :meth:`get_experiment_best_validation` answers; None answers None.
        smaller_is_better: whether a smaller ``searcher_metric`` is better.
        log_reports: log every metrics report and checkpoint at INFO (local training,
            where nothing else shows them).

    Raises:
        ValueError: if the lengths are empty, not positive or not increasing.

    Attributes:
        completed_operations: ``(length, searcher_metric)`` per completed operation.
        checkpoints: every checkpoint report, in order.
        progress: every progress value, in order.
        early_exits: every early-exit reason, in order.
    """

    def __init__(
        self,
        operation_lengths: Sequence[int],
        *,
        searcher_metric: str | None = None,
        smaller_is_better: bool = True,
        log_reports: bool = False,
    ) -> None:
        lengths = list(operation_lengths)
        if not lengths:
            raise ValueError("operation_lengths must hold at least one length (batches)")
        prev = 0
        for cur in lengths:
            if not isinstance(cur, int) or isinstance(cur, bool) or cur <= prev:
                raise ValueError(
                    f"operation_lengths must be positive ints in increasing order, got {lengths}"
                )
            prev = cur
        self.operation_lengths = lengths
        self.completed_operations: list[tuple[int, float]] = []
        self.checkpoints: list[CheckpointReport] = []
        self.progress: list[float] = []
        self.early_exits: list[str] = []
        self._metrics: dict[tuple[int, str, int], MetricReport] = {}
        self._preempt = False
        self.statuses: list[str] = []
        self.metadata: dict[str, Any] = {}
        self.searcher_metric = searcher_metric
        self.smaller_is_better = smaller_is_better
        self.log_reports = log_reports

    def set_status(self, trial_id: int, status: str) -> None:
        """Append to :attr:`statuses` (logged with ``log_reports``)."""
        self.statuses.append(status)
        if self.log_reports:
            logger.info("status: %s", status)

    def merge_metadata(self, trial_id: int, metadata: dict[str, Any]) -> dict[str, Any]:
        """Merge into :attr:`metadata` as the master does."""
        self.metadata = merge_metadata(self.metadata, metadata)
        return dict(self.metadata)

    def get_metadata(self, trial_id: int) -> dict[str, Any]:
        """A copy of :attr:`metadata`."""
        return dict(self.metadata)

    def request_preemption(self) -> None:
        """Raise the preemption signal: the trial should checkpoint and exit."""
        self._preempt = True

    def metrics(self, group: str) -> list[MetricReport]:
        """The reports of one group (``training`` or ``validation``), by steps_completed.

        Raises:
            ValueError: for another group name.
        """
        if group not in METRIC_GROUPS:
            raise ValueError(f"group must be one of {METRIC_GROUPS}, got {group!r}")
        reports = [r for r in self._metrics.values() if r.group == group]
        return sorted(reports, key=lambda r: r.steps_completed)

    def get_searcher_operation(self, trial_id: int) -> SearcherAnswer:
        """The first operation not completed yet, or ``completed`` after the last one."""
        done = len(self.completed_operations)
        if self.early_exits or done >= len(self.operation_lengths):
            return SearcherAnswer(length=None, completed=True)
        return SearcherAnswer(length=self.operation_lengths[done], completed=False)

    def complete_operation(self, trial_id: int, length: int, searcher_metric: float) -> None:
        """Record the completion (the next answer is asked for separately: None).

        Raises:
            ValueError: if ``length`` is not the current operation's length.
        """
        current = self.get_searcher_operation(trial_id)
        if current.length != length:
            raise ValueError(
                f"completed operation length {length} does not match the current "
                f"operation {current.length}"
            )
        self.completed_operations.append((length, float(searcher_metric)))

    def report_metrics(self, report: MetricReport) -> None:
        """Store the report, replacing one with the same steps_completed and group.

        Raises:
            ValueError: for an unknown group.
        """
        if report.group not in METRIC_GROUPS:
            raise ValueError(f"group must be one of {METRIC_GROUPS}, got {report.group!r}")
        self._metrics[(report.trial_id, report.group, report.steps_completed)] = report
        if self.log_reports:
            shown = ", ".join(f"{k}={_short(v)}" for k, v in sorted(report.metrics.items()))
            logger.info("%s metrics at batch %d: %s", report.group, report.steps_completed, shown)

    def report_progress(self, trial_id: int, progress: float) -> None:
        """Record the progress value."""
        self.progress.append(float(progress))

    def report_early_exit(self, trial_id: int, reason: str) -> None:
        """Record the reason; afterwards the searcher answers ``completed``."""
        self.early_exits.append(reason)

    def report_checkpoint(self, report: CheckpointReport) -> None:
        """Record the checkpoint (``checkpoints`` lists completed ones only)."""
        if report.state != "COMPLETED":
            return
        self.checkpoints.append(report)
        if self.log_reports:
            logger.info(
                "checkpoint %s at batch %d: %d files",
                report.uuid,
                report.steps_completed,
                len(report.resources),
            )

    def get_preemption_signal(self, allocation_id: str, timeout_seconds: float = 0) -> bool:
        """True once :meth:`request_preemption` was called (never waits)."""
        return self._preempt

    def get_experiment_best_validation(self, experiment_id: int) -> float | None:
        """The best ``searcher_metric`` value among the validation reports, or None."""
        if self.searcher_metric is None:
            return None
        values = [
            float(v)
            for r in self.metrics("validation")
            if isinstance(v := r.metrics.get(self.searcher_metric), (int, float))
            and not isinstance(v, bool)
            and not math.isnan(v)
        ]
        if not values:
            return None
        return min(values) if self.smaller_is_better else max(values)


def _short(value: Any) -> str:
    return f"{value:.6g}" if isinstance(value, float) else repr(value)


def merge_metadata(base: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """``base`` with ``new`` merged in as the master merges a trial's metadata: objects
    present in both merged key by key (recursively), other values of ``new`` replace."""
    out = dict(base)
    for key, value in new.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge_metadata(out[key], value)
        else:
            out[key] = value
    return out
