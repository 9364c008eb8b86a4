"""The objects of Determined's SDK (``determined.experimental.client``; reference
``determined-surface-platform.md`` §5) over :class:`dauntless.client.Session`.

Objects are lazy as Determined's: made with an id and a session, filled by ``reload()``
or when a list or get call returns them. States are Determined's enums (values
``STATE_*``); Dauntless's answers name them without the prefix.
"""

from __future__ import annotations

import enum
import os
import sys
import time
import warnings
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from dauntless.client import Session


class ExperimentState(enum.Enum):
    """Determined's experiment states (``experimentv1State``)."""

    UNSPECIFIED = "STATE_UNSPECIFIED"
    ACTIVE = "STATE_ACTIVE"
    PAUSED = "STATE_PAUSED"
    STOPPING_COMPLETED = "STATE_STOPPING_COMPLETED"
    STOPPING_CANCELED = "STATE_STOPPING_CANCELED"
    STOPPING_ERROR = "STATE_STOPPING_ERROR"
    STOPPING_KILLED = "STATE_STOPPING_KILLED"
    COMPLETED = "STATE_COMPLETED"
    CANCELED = "STATE_CANCELED"
    ERROR = "STATE_ERROR"
    DELETED = "STATE_DELETED"
    DELETING = "STATE_DELETING"
    DELETE_FAILED = "STATE_DELETE_FAILED"
    QUEUED = "STATE_QUEUED"
    PULLING = "STATE_PULLING"
    STARTING = "STATE_STARTING"
    RUNNING = "STATE_RUNNING"


TrialState = enum.Enum(  # type: ignore[misc]
    "TrialState", {m.name: m.value for m in ExperimentState if "DELET" not in m.name}
)
"""Determined's trial states (``trialv1State``)."""


class CheckpointState(enum.Enum):
    """Determined's checkpoint states (``checkpointv1State``)."""

    UNSPECIFIED = "STATE_UNSPECIFIED"
    ACTIVE = "STATE_ACTIVE"
    COMPLETED = "STATE_COMPLETED"
    ERROR = "STATE_ERROR"
    DELETED = "STATE_DELETED"
    PARTIALLY_DELETED = "STATE_PARTIALLY_DELETED"


class OrderBy(enum.Enum):
    """Sort order (``ASC``/``DESC`` are aliases, as Determined's)."""

    ASCENDING = "ORDER_BY_ASC"
    ASC = "ORDER_BY_ASC"
    DESCENDING = "ORDER_BY_DESC"
    DESC = "ORDER_BY_DESC"


class CheckpointSortBy(enum.Enum):
    """What checkpoints are sorted by."""

    UUID = "SORT_BY_UUID"
    TRIAL_ID = "SORT_BY_TRIAL_ID"
    BATCH_NUMBER = "SORT_BY_BATCH_NUMBER"
    END_TIME = "SORT_BY_END_TIME"
    STATE = "SORT_BY_STATE"
    SEARCHER_METRIC = "SORT_BY_SEARCHER_METRIC"


class DownloadMode(enum.Enum):
    """How a checkpoint is downloaded; here always through the master."""

    DIRECT = "direct"
    MASTER = "master"
    AUTO = "auto"


_TERMINAL = {
    ExperimentState.COMPLETED,
    ExperimentState.CANCELED,
    ExperimentState.DELETED,
    ExperimentState.ERROR,
}


def _state(enum_type: Any, value: str | None) -> Any:
    try:
        return enum_type(f"STATE_{value}")
    except ValueError:
        return enum_type("STATE_UNSPECIFIED")


def _time(seconds: float | None) -> datetime | None:
    return None if seconds is None else datetime.fromtimestamp(seconds, tz=timezone.utc)


@dataclass
class TrialMetrics:
    """One metrics report of a trial (Determined's ``TrialMetrics``)."""

    trial_id: int
    trial_run_id: int
    steps_completed: int
    end_time: datetime | None
    metrics: dict[str, Any]
    group: str
    batch_metrics: list[dict[str, Any]] | None = None

    @property
    def total_batches(self) -> int:
        """Deprecated alias of ``steps_completed``."""
        return self.steps_completed


@dataclass
class CheckpointTrainingMetadata:
    """Where a checkpoint of a trial comes from."""

    experiment_config: dict[str, Any]
    experiment_id: int
    trial_id: int
    hparams: dict[str, Any]
    validation_metrics: dict[str, Any]


class Checkpoint:
    """A checkpoint (Determined's ``Checkpoint``): ``uuid``, ``state``, ``metadata``,
    ``resources`` (file -> bytes), ``report_time``, ``training``."""

    def __init__(self, session: Session, uuid: str) -> None:
        self._session, self.uuid = session, uuid
        self.state: CheckpointState | None = None
        self.metadata: dict[str, Any] = {}
        self.resources: dict[str, int] = {}
        self.report_time: datetime | None = None
        self.training: CheckpointTrainingMetadata | None = None

    @classmethod
    def _from(
        cls, session: Session, raw: dict[str, Any], exp: dict[str, Any] | None = None
    ) -> Checkpoint:
        c = cls(session, raw["uuid"])
        c._fill(raw, exp)
        return c

    def _fill(self, raw: dict[str, Any], exp: dict[str, Any] | None) -> None:
        self.state = _state(CheckpointState, raw.get("state"))
        self.metadata = dict(raw.get("metadata") or {})
        self.resources = dict(raw.get("resources") or {})
        self.report_time = _time(raw.get("report_time"))
        config = (exp or {}).get("config") or {}
        metric = (config.get("searcher") or {}).get("metric")
        value = raw.get("searcher_metric")
        self.training = CheckpointTrainingMetadata(
            experiment_config=config,
            experiment_id=raw.get("experiment_id") or 0,
            trial_id=raw.get("trial_id") or 0,
            hparams={},
            validation_metrics={"avgMetrics": {metric: value}}
            if metric and value is not None
            else {},
        )

    def reload(self) -> None:
        """Read the checkpoint again from the master."""
        raw: dict[str, Any] = dict(self._session.get_checkpoint(self.uuid))
        exp = self._session.get_experiment(int(raw["experiment_id"]))["experiment"]
        self._fill(raw, dict(exp))

    def download(self, path: str | None = None, mode: DownloadMode = DownloadMode.AUTO) -> str:
        """Download the checkpoint's files into ``path`` (default ``checkpoints/<uuid>``)
        through the master; a directory that already holds ``metadata.json`` is kept.

        Returns:
            The directory.

        Raises:
            ValueError: the checkpoint is not COMPLETED (its files are not all stored).
        """
        if self.state is None:
            self.reload()
        if self.state not in (CheckpointState.COMPLETED, CheckpointState.PARTIALLY_DELETED):
            raise ValueError(
                f"checkpoint {self.uuid} is {self.state}; only COMPLETED ones download"
            )
        target = path or os.path.join("checkpoints", self.uuid)
        if not os.path.exists(os.path.join(target, "metadata.json")):
            os.makedirs(target, exist_ok=True)
            self._session.download_checkpoint_to(self.uuid, target)
        return target


class Trial:
    """A trial (Determined's ``Trial``): ``id``, ``experiment_id``, ``hparams``,
    ``state``, ``summary_metrics``."""

    def __init__(self, trial_id: int, session: Session) -> None:
        self._session, self.id = session, trial_id
        self.experiment_id: int | None = None
        self.hparams: dict[str, Any] = {}
        self.state: Any = None
        self.summary_metrics: dict[str, Any] = {}

    @classmethod
    def _from(cls, session: Session, raw: dict[str, Any]) -> Trial:
        t = cls(raw["id"], session)
        t._fill(raw)
        return t

    def _fill(self, raw: dict[str, Any]) -> None:
        self.experiment_id = raw.get("experiment_id")
        self.hparams = dict(raw.get("hparams") or {})
        self.state = _state(TrialState, raw.get("state"))
        latest = raw.get("latest_validation")
        self.summary_metrics = {"validation_metrics": latest} if latest else {}

    def reload(self) -> None:
        """Read the trial again from the master."""
        self._fill(dict(self._session.get_trial(self.id)))

    def get_experiment(self) -> Experiment:
        """The trial's experiment."""
        if self.experiment_id is None:
            self.reload()
        return Experiment(int(self.experiment_id or 0), self._session)

    def iter_metrics(self, group: str) -> Iterator[TrialMetrics]:
        """The trial's reports of ``group`` (``training``, ``validation``), by batch count."""
        for m in self._session.get_trial_metrics(self.id, group):
            yield TrialMetrics(
                trial_id=self.id,
                trial_run_id=m.get("trial_run_id") or 0,
                steps_completed=m["total_batches"],
                end_time=_time(m.get("reported_at")),
                metrics=dict(m["values"]),
                group=m["group"],
            )

    def iter_logs(
        self, follow: bool = False, *, head: int | None = None, tail: int | None = None
    ) -> Iterator[str]:
        """The trial's log lines: all, the first ``head``, the last ``tail``, or all
        and then new ones until the trial ends (``follow``).

        Raises:
            ValueError: more than one of follow/head/tail, or a negative head or tail.
        """
        if sum((head is not None, tail is not None, follow)) > 1:
            raise ValueError("at most one of head, tail, or follow may be set")
        if (head is not None and head < 0) or (tail is not None and tail < 0):
            raise ValueError("head and tail must be >= 0")
        kept: list[str] = []
        after, sent = 0, 0
        while True:
            page = self._session.get_trial_logs(self.id, after_id=after)
            for line in page["logs"]:
                after = line["id"]
                if tail is not None:
                    kept = (kept + [line["log"]])[-tail:] if tail else []
                    continue
                if head is not None and sent >= head:
                    return
                sent += 1
                yield line["log"]
            if page["logs"]:
                continue
            if not follow or page["trial_state"] in ("COMPLETED", "CANCELED", "ERROR"):
                break
            time.sleep(1.0)
        yield from kept

    def list_checkpoints(
        self, sort_by: Any = None, order_by: OrderBy | None = None, max_results: int | None = None
    ) -> list[Checkpoint]:
        """The trial's COMPLETED checkpoints (see :meth:`Experiment.list_checkpoints`)."""
        exp = self.get_experiment()
        rows = [dict(c) for c in self._session.get_trial_checkpoints(self.id)]
        return exp._sorted(rows, sort_by, order_by, max_results)

    def top_checkpoint(
        self, sort_by: str | None = None, smaller_is_better: bool | None = None
    ) -> Checkpoint:
        """Deprecated: the trial's best checkpoint."""
        warnings.warn(
            "Trial.top_checkpoint is deprecated; use list_checkpoints", FutureWarning, stacklevel=2
        )
        found = self.list_checkpoints(max_results=1)
        if not found:
            raise AssertionError(f"No checkpoints found for trial {self.id}")
        return found[0]

    def kill(self) -> None:
        """Kill the trial."""
        self._session.kill_trial(self.id)


class Experiment:
    """An experiment (Determined's ``Experiment``): ``id``, ``name``, ``state``,
    ``config``, ``labels``, ``archived``, ``progress``, ``description``,
    ``project_id``."""

    def __init__(self, experiment_id: int, session: Session) -> None:
        self._session, self.id = session, experiment_id
        self.name: str | None = None
        self.state: ExperimentState | None = None
        self.config: dict[str, Any] = {}
        self.labels: set[str] = set()
        self.archived = False
        self.progress: float | None = None
        self.description: str | None = None
        self.project_id: int | None = None
        self.workspace_id: int | None = None
        self.notes = ""

    @classmethod
    def _from(cls, session: Session, raw: dict[str, Any]) -> Experiment:
        e = cls(raw["id"], session)
        e._fill(raw)
        return e

    def _fill(self, raw: dict[str, Any]) -> None:
        self.name = raw.get("name")
        self.state = _state(ExperimentState, raw.get("state"))
        self.config = dict(raw.get("config") or {})
        self.labels = set(raw.get("labels") or self.config.get("labels") or [])
        self.archived = bool(raw.get("archived"))
        self.progress = raw.get("progress")
        self.description = raw.get("description")
        self.project_id = raw.get("project_id")
        self.workspace_id = raw.get("workspace_id")

    def reload(self) -> None:
        """Read the experiment again from the master."""
        self._fill(dict(self._session.get_experiment(self.id)["experiment"]))

    def _action(self, action: str) -> None:
        self._session.experiment_action(self.id, action)

    def activate(self) -> None:
        self._action("activate")

    def pause(self) -> None:
        self._action("pause")

    def cancel(self) -> None:
        self._action("cancel")

    def kill(self) -> None:
        self._action("kill")

    def archive(self) -> None:
        self._action("archive")

    def unarchive(self) -> None:
        self._action("unarchive")

    def wait(self, interval: float = 5.0) -> ExperimentState:
        """Wait until the experiment ends; its final state.

        Raises:
            ValueError: it is paused (it would never end by itself).
        """
        started = time.time()
        while True:
            self.reload()
            if self.state in _TERMINAL:
                return self.state  # type: ignore[return-value]
            if self.state == ExperimentState.PAUSED:
                raise ValueError(
                    f"Experiment {self.id} is in paused state. Make sure the experiment is active."
                )
            elapsed = int(time.time() - started)
            if elapsed and elapsed % 60 == 0:
                print(
                    f"Waiting for Experiment {self.id} to complete. Elapsed {elapsed // 60} minutes",
                    file=sys.stderr,
                )
            time.sleep(interval)

    def list_trials(
        self, sort_by: Any = None, order_by: OrderBy = OrderBy.ASCENDING
    ) -> list[Trial]:
        """The experiment's trials, by id."""
        trials = [
            Trial._from(self._session, dict(t))
            for t in self._session.get_experiment_trials(self.id)
        ]
        return sorted(trials, key=lambda t: t.id, reverse=order_by.value == "ORDER_BY_DESC")

    def iter_trials(
        self, sort_by: Any = None, order_by: OrderBy = OrderBy.ASCENDING, limit: int | None = None
    ) -> Iterator[Trial]:
        yield from self.list_trials(sort_by, order_by)[:limit]

    def await_first_trial(self, interval: float = 0.1) -> Trial:
        """The first trial, once it exists.

        Raises:
            RuntimeError: the experiment ended first.
        """
        while True:
            trials = self.list_trials()
            if trials:
                return trials[0]
            self.reload()
            if self.state in _TERMINAL:
                raise RuntimeError(f"Experiment {self.id} ended with no trial")
            time.sleep(interval)

    def _sorted(
        self,
        rows: list[dict[str, Any]],
        sort_by: Any,
        order_by: OrderBy | None,
        max_results: int | None,
    ) -> list[Checkpoint]:
        if (sort_by is None) != (order_by is None):
            raise AssertionError("sort_by and order_by must be either both set, or both unset")
        self.reload()
        searcher = self.config.get("searcher") or {}
        rows = [r for r in rows if r.get("state") == "COMPLETED"]
        desc: bool
        if sort_by is None or sort_by == CheckpointSortBy.SEARCHER_METRIC:

            def key(r: dict[str, Any]) -> Any:
                v = r.get("searcher_metric")
                return (v is None, v if v is not None else 0.0)

            desc = (
                not searcher.get("smaller_is_better", True)
                if order_by is None
                else order_by.value == "ORDER_BY_DESC"
            )
            rows.sort(key=key)
            if desc:
                known = [r for r in rows if r.get("searcher_metric") is not None][::-1]
                rows = known + [r for r in rows if r.get("searcher_metric") is None]
        else:
            field = {
                CheckpointSortBy.UUID: "uuid",
                CheckpointSortBy.TRIAL_ID: "trial_id",
                CheckpointSortBy.BATCH_NUMBER: "total_batches",
                CheckpointSortBy.END_TIME: "report_time",
                CheckpointSortBy.STATE: "state",
            }.get(sort_by)
            if field is None:
                raise ValueError(f"cannot sort checkpoints by {sort_by!r} here")
            rows.sort(
                key=lambda r: r.get(field) or 0,
                reverse=order_by is not None and order_by.value == "ORDER_BY_DESC",
            )
        exp = {"config": self.config}
        chosen = rows if max_results is None else rows[:max_results]
        return [Checkpoint._from(self._session, r, exp) for r in chosen]

    def list_checkpoints(
        self, sort_by: Any = None, order_by: OrderBy | None = None, max_results: int | None = None
    ) -> list[Checkpoint]:
        """COMPLETED checkpoints, best first by the searcher metric unless ``sort_by`` and
        ``order_by`` (both or neither) say otherwise."""
        rows = [dict(c) for c in self._session.get_experiment_checkpoints(self.id)]
        return self._sorted(rows, sort_by, order_by, max_results)

    def top_checkpoint(
        self, sort_by: str | None = None, smaller_is_better: bool | None = None
    ) -> Checkpoint:
        """Deprecated: the experiment's best checkpoint by its searcher metric.

        Raises:
            AssertionError: it has none.
        """
        warnings.warn(
            "Experiment.top_checkpoint is deprecated; use list_checkpoints",
            FutureWarning,
            stacklevel=2,
        )
        found = self.list_checkpoints(max_results=1)
        if not found:
            raise AssertionError(f"No checkpoints found for experiment {self.id}")
        return found[0]

    def download_code(self, output_dir: str | None = None) -> str:
        """Write the experiment's context as ``exp-<id>_model_def.tar.gz``; its path."""
        path = os.path.join(output_dir or ".", f"exp-{self.id}_model_def.tar.gz")
        with open(path, "wb") as f:
            f.write(self._session.get_model_def(self.id))
        return path


def iter_trials_metrics(
    session: Session, trial_ids: Iterable[int], group: str
) -> Iterator[TrialMetrics]:
    """Every report of ``group`` of each trial in turn."""
    for trial_id in trial_ids:
        yield from Trial(trial_id, session).iter_metrics(group)
