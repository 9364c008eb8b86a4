"""A small Core API trial for the namespaced-host tests (issue 36), and the checks of
its metric rows.

The trial (:data:`TRAIN`, written into a context directory by :func:`write_context`)
trains ``batch_sleep`` seconds per batch without any framework, reports training
metrics every :data:`REPORT_EVERY` batches, checkpoints every ``checkpoint_every``
batches (0: at the end only) and resumes from its latest checkpoint. It prints
``run <allocation> at batch <n>`` when it starts, so a test can tell its runs apart,
and writes its pid to ``$NETNS_PIDS/run-<trial run id>`` where that is set.
"""

from __future__ import annotations

from pathlib import Path

REPORT_EVERY = 10
"""Batches between two training reports of :data:`TRAIN`."""

TRAIN = """
import json, os, time
from pathlib import Path

import dauntless
from dauntless import core

info = dauntless.get_cluster_info()
hp = info.trial.hparams
sleep, every = float(hp["batch_sleep"]), int(hp["checkpoint_every"])


def save(ctx, batches):
    with ctx.checkpoint.store_path({"steps_completed": batches}) as (path, _uuid):
        (path / "state.json").write_text(json.dumps({"batches": batches}))


with core.init() as ctx:
    batches = 0
    if info.latest_checkpoint:
        with ctx.checkpoint.restore_path(info.latest_checkpoint) as path:
            batches = json.loads((Path(path) / "state.json").read_text())["batches"]
    print(f"run {os.environ.get('DET_ALLOCATION_ID')} at batch {batches}", flush=True)
    pids = os.environ.get("NETNS_PIDS")
    if pids:  # where the test finds this run's process
        Path(pids, "run-" + os.environ["DET_TRIAL_RUN_ID"]).write_text(str(os.getpid()))
    for op in ctx.searcher.operations():
        while batches < op.length:
            time.sleep(sleep)
            batches += 1
            if batches % REPORT_EVERY == 0:
                ctx.train.report_training_metrics(batches, {"loss": 1.0 / batches})
                op.report_progress(batches)
            if every and batches % every == 0:
                save(ctx, batches)
            if ctx.preempt.should_preempt():
                save(ctx, batches)
                raise SystemExit(0)
        ctx.train.report_validation_metrics(batches, {"loss": 1.0 / batches})
        save(ctx, batches)
        op.report_completed(1.0 / batches)
""".replace("REPORT_EVERY", str(REPORT_EVERY))


def write_context(
    directory: Path,
    batches: int,
    batch_sleep: float,
    checkpoint_every: int = 0,
    slots: int = 1,
    max_restarts: int = 2,
    pids: Path | None = None,
) -> Path:
    """Write the trial and its experiment config into ``directory``.

    Args:
        directory: an empty directory.
        batches: the trial's length (``searcher.max_length``).
        batch_sleep: seconds per batch.
        checkpoint_every: batches between checkpoints (0: only at the end).
        slots: ``resources.slots_per_trial``.
        max_restarts: the experiment's ``max_restarts``.
        pids: where each run writes its pid (``run-<trial run id>``), or None.

    Returns:
        The config's path.
    """
    (directory / "train.py").write_text(TRAIN)
    config = directory / "config.yaml"
    config.write_text(
        f"""
name: netns
entrypoint: python3 train.py
hyperparameters:
  batch_sleep: {batch_sleep}
  checkpoint_every: {checkpoint_every}
searcher:
  name: single
  metric: loss
  smaller_is_better: true
  max_length: {{batches: {batches}}}
resources: {{slots_per_trial: {slots}}}
max_restarts: {max_restarts}
"""
        + (f"environment: {{environment_variables: [NETNS_PIDS={pids}]}}\n" if pids else "")
    )
    return config


def expected_rows(batches: int) -> list[tuple[str, int]]:
    """The ``(group, total_batches)`` of every metric row a finished trial of
    ``batches`` batches has, each once, sorted."""
    return sorted(
        [("training", b) for b in range(REPORT_EVERY, batches + 1, REPORT_EVERY)]
        + [("validation", batches)]
    )


def metric_rows(cluster, trial_id: int) -> list[tuple[str, int]]:
    """The ``(group, total_batches)`` of the metric rows the master stored for a trial,
    sorted (a row stored twice appears twice)."""
    rows = cluster.api(f"/trials/{trial_id}/metrics")["metrics"]
    return sorted((m["group"], m["total_batches"]) for m in rows)
