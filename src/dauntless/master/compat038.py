"""What the master does for Determined 0.38 configs and habits (issue 17, part A).

- create: a ``checkpoint_storage`` without ``type`` takes the cluster default's fields
  (as Determined merges it with the master's default); fields this master cannot honour
  are refused naming the field (:func:`dauntless.config.config_refusals`); a
  ``module:Class`` entrypoint without any training length is refused naming both places
  a length can come from; warm-start sources (``searcher.source_trial_id`` /
  ``source_checkpoint_uuid``) must exist and are resolved to one checkpoint uuid that
  every trial starts from.
- validation metrics reach the searcher (0.38 ASHA decides from them); a trial the
  searcher stops is stopped through the preemption path and ends COMPLETED.
- ``continue`` of a finished experiment (reference §7.3) lives here; ``fork`` is
  ``parent_id`` on create (the parent's model definition is reused).

Methods of :class:`~dauntless.master.manager.ExperimentManager` (mixed in).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import yaml
from sqlalchemy import select
from sqlalchemy.orm import Session

from dauntless.config import (
    ConfigError,
    ExperimentConfig,
    config_refusals,
    parse_experiment_config,
    searcher_length,
)

from .db import (
    AllocationRow,
    CheckpointRow,
    ExperimentRow,
    ModelDefinitionRow,
    TaskLogRow,
    TrialRow,
)
from .models import allocations
from .states import State, is_terminal

if TYPE_CHECKING:
    from .manager import ExperimentManager

log = logging.getLogger("dauntless.master")


def prepare_raw_config(config: str | dict[str, Any], default_storage: dict[str, Any]) -> Any:
    """The user's config as a mapping, with a type-less ``checkpoint_storage`` completed
    from the cluster default (the user's keys win).

    Args:
        config: YAML text or a mapping.
        default_storage: the master's default checkpoint storage (JSON form).

    Returns:
        A new mapping (the input is not changed), or what the YAML holds when it is not a
        mapping (the parser then reports it).

    Raises:
        ConfigError: the text is not valid YAML.
    """
    if isinstance(config, (str, bytes)):
        try:
            raw = yaml.safe_load(config)
        except yaml.YAMLError as exc:
            raise ConfigError([("", f"the config is not valid YAML: {exc}")]) from None
    else:
        raw = config
    if not isinstance(raw, dict):
        return raw
    raw = dict(raw)
    storage = raw.get("checkpoint_storage")
    if isinstance(storage, dict) and "type" not in storage:
        merged = dict(default_storage)
        if storage.keys() - {"save_experiment_best", "save_trial_best", "save_trial_latest"}:
            # Location fields of another storage make no sense merged into the default.
            merged = {"type": default_storage["type"]}
        merged.update(storage)
        raw["checkpoint_storage"] = merged
    return raw


def _merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def merge_config_overrides(base: dict[str, Any], override: Any) -> dict[str, Any]:
    """Deep-merge config overrides (YAML text or mapping) into a stored config.

    Raises:
        ConfigError: the overrides are not a YAML mapping.
    """
    if isinstance(override, str):
        try:
            override = yaml.safe_load(override) if override.strip() else {}
        except yaml.YAMLError as exc:
            raise ConfigError([("", f"the config overrides are not valid YAML: {exc}")]) from None
    if override is None:
        override = {}
    if not isinstance(override, dict):
        raise ConfigError([("", "the config overrides must be a mapping")])
    return _merge(base, override)


class Compat038Mixin:
    """See the module docstring."""

    # ------------------------------------------------------------------ create

    def _refuse_unsupported(
        self: ExperimentManager, raw: dict[str, Any], cfg: ExperimentConfig
    ) -> None:
        from .errors import BadRequest

        errors = config_refusals(raw)
        time_metric = getattr(cfg.searcher, "time_metric", None)
        if cfg.is_trial_class() and searcher_length(cfg) is None:
            if getattr(cfg.searcher, "max_length", None) is None and time_metric not in (
                "batches",
                "epochs",
            ):
                errors.append(
                    (
                        "searcher.max_length",
                        f"the entrypoint {cfg.entrypoint!r} names a trial class, whose "
                        "legacy harness takes its training length from searcher.max_length "
                        "(or an ASHA max_time in batches or epochs); set "
                        "searcher.max_length, or write a script that calls "
                        "Trainer.fit(max_length=Batch(n) or Epoch(n))",
                    )
                )
        if errors:
            raise BadRequest("invalid experiment config", errors)

    def _resolve_warm_start(self: ExperimentManager, raw: dict[str, Any]) -> None:
        """Check the warm-start source and record its checkpoint uuid in ``raw``.

        Raises:
            BadRequest: an unknown trial, a trial without a checkpoint, or an unknown or
                unfinished checkpoint.
        """
        from .errors import BadRequest

        searcher = raw["searcher"]
        trial_id = searcher.get("source_trial_id")
        uuid_ = searcher.get("source_checkpoint_uuid")
        if trial_id is None and uuid_ is None:
            return
        with self.db.read() as s:
            if uuid_ is not None:
                ckpt = s.get(CheckpointRow, uuid_)
                if ckpt is None or ckpt.state != "COMPLETED":
                    raise BadRequest(
                        "invalid experiment config",
                        [
                            (
                                "searcher.source_checkpoint_uuid",
                                f"no completed checkpoint {uuid_!r} on this master",
                            )
                        ],
                    )
                return
            trial = s.get(TrialRow, trial_id)
            if trial is None:
                raise BadRequest(
                    "invalid experiment config",
                    [("searcher.source_trial_id", f"no trial {trial_id} on this master")],
                )
            if not trial.latest_checkpoint:
                raise BadRequest(
                    "invalid experiment config",
                    [
                        (
                            "searcher.source_trial_id",
                            f"trial {trial_id} has no checkpoint to start from",
                        )
                    ],
                )
            searcher["source_checkpoint_uuid"] = trial.latest_checkpoint

    def _warm_start_sources(self: ExperimentManager, s: Session) -> set[str]:
        """Checkpoint uuids other experiments start their trials from (never collected)."""
        out = set()
        for config in s.scalars(select(ExperimentRow.config)):
            uuid_ = (config or {}).get("searcher", {}).get("source_checkpoint_uuid")
            if uuid_:
                out.add(uuid_)
        return out

    def _model_definition(self: ExperimentManager, exp_id: int) -> bytes | None:
        from .errors import NotFound

        with self.db.read() as s:
            if s.get(ExperimentRow, exp_id) is None:
                raise NotFound(f"experiment {exp_id} not found")
            row = s.get(ModelDefinitionRow, exp_id)
            return None if row is None else bytes(row.content)

    # ------------------------------------------------------------------ searcher events

    def _signal_stop(self: ExperimentManager, s: Session, alloc: AllocationRow) -> None:
        """Ask a running allocation to checkpoint and exit (the searcher stopped it)."""
        for part in allocations.parts(s, alloc.group_id):
            if part.state != "TERMINATED":
                part.preempt_requested = True

    def _searcher_sees_validation(
        self: ExperimentManager,
        s: Session,
        trial: TrialRow,
        exp: ExperimentRow,
        metrics: dict[str, Any],
    ) -> None:
        """Hand a trial's validation metrics to the searcher (0.38: ASHA decides)."""
        if trial.searcher_closed or is_terminal(trial.state) or is_terminal(exp.state):
            return
        cfg = self.experiment_config(exp)
        if searcher_length(cfg) is not None:
            return  # ≤0.37 mode: the searcher hears of completed operations instead
        searcher = self._searcher(exp)
        try:
            ops = searcher.on_validation_metrics(trial.request_id, metrics)
        except ValueError as exc:
            self._searcher_failed(s, exp, str(exc), trial)
            return
        self._apply(s, exp, searcher, ops)

    def _searcher_failed(
        self: ExperimentManager, s: Session, exp: ExperimentRow, why: str, trial: TrialRow
    ) -> None:
        """A searcher error (e.g. the ASHA metric is missing): the experiment errors, and
        the reason is written into the trial's log (``det trial logs``)."""
        log.error("experiment %s: searcher error: %s", exp.id, why)
        alloc = self._live_allocation(s, trial.id)
        s.add(
            TaskLogRow(
                trial_id=trial.id,
                allocation_id=alloc.group_id if alloc is not None else "master",
                seq=None,
                timestamp=self.clock(),
                stdtype="stderr",
                rank_id=None,
                log=f"searcher error (the experiment stops): {why}\n",
            )
        )
        if State(exp.state) not in (State.ACTIVE, State.PAUSED):
            return
        self._set_experiment_state(exp, State.STOPPING_ERROR)
        for t in self._live_trials(s, exp.id):
            if self._stop_allocation(s, t, kill=True):
                self._set_trial_state(t, State.STOPPING_ERROR)
            elif not is_terminal(t.state):
                self._set_trial_state(t, State.STOPPING_ERROR)
                self._set_trial_state(t, State.ERROR)
        self._maybe_finish_experiment(s, exp)

    # ------------------------------------------------------------------ continue

    def continue_experiment(self: ExperimentManager, exp_id: int, overrides: Any = None) -> None:
        """Continue a finished experiment (``det experiment continue``, reference §7.3).

        Its unfinished trials (CANCELED or ERROR), and the trial of a one-trial
        experiment even when COMPLETED, become ACTIVE again with their restarts reset and
        resume from their latest checkpoint; the experiment becomes ACTIVE. Overrides are
        deep-merged into the stored config first (e.g. a longer
        ``searcher.max_length``).

        Raises:
            NotFound: no such experiment.
            Conflict: the experiment is not in a terminal state, or nothing is left to
                continue.
            BadRequest: the merged config is invalid or changes the searcher name.
        """
        from .errors import BadRequest, Conflict

        with self.db.write() as s:
            exp = self._exp(s, exp_id)
            if not is_terminal(exp.state):
                raise Conflict(f"experiment {exp_id} is {exp.state}; only a finished one continues")
            try:
                merged = merge_config_overrides(dict(exp.config), overrides)
                cfg = parse_experiment_config(merged)
            except ConfigError as exc:
                raise BadRequest("invalid config overrides", exc.errors) from None
            old = self.experiment_config(exp)
            if cfg.searcher.name != old.searcher.name:
                raise BadRequest(
                    "invalid config overrides",
                    [("searcher.name", "continue cannot change the searcher")],
                )
            trials = list(s.scalars(select(TrialRow).where(TrialRow.experiment_id == exp_id)))
            single = len(trials) == 1
            chosen = [
                t
                for t in trials
                if t.state in (State.CANCELED.value, State.ERROR.value)
                or (single and t.state == State.COMPLETED.value)
            ]
            if not chosen:
                raise Conflict(
                    f"experiment {exp_id}: every trial completed its search; nothing to continue"
                )
            self._configs[exp_id] = cfg
            exp.config = cfg.to_json()
            searcher = self._searcher(exp)
            ops = []
            for t in chosen:
                t.state = State.ACTIVE.value
                t.end_time = None
                t.restarts = 0
                t.searcher_closed = False
                t.early_exit_reason = None
                ops += searcher.reopen_trial(t.request_id)
            exp.state = State.ACTIVE.value
            exp.end_time = None
            exp.searcher_shutdown = False
            self._apply(s, exp, searcher, ops)
        self.wake.set()
