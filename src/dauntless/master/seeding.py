"""Synthetic finished experiments written straight into a master's database, for the
WebUI's browser tests and ``benchmarks/webui_load.py``: an experiment of 1,000 trials
with 1,000 validations each would take hours to train for real, and the pages only read
rows.

The rows are the ones a real search leaves behind: the experiment (COMPLETED, a
``random`` search over a log-uniform ``lr``, a uniform ``dropout`` and a categorical
``optimizer``), its model definition, its trials with hyperparameters and best
validation, their training and validation reports (with the chart summaries
:func:`dauntless.master.metric_series.fold_metric_reports` keeps), one checkpoint per
trial with its files on ``shared_fs`` storage, and a few log lines per trial.
"""

from __future__ import annotations

import io
import math
import os
import random
import tarfile
import time
import uuid
from typing import Any

import yaml
from sqlalchemy import insert, select

from .db import (
    CheckpointRow,
    Database,
    ExperimentRow,
    MetricRow,
    ModelDefinitionRow,
    TaskLogRow,
    TrialRow,
    UserRow,
)
from .metric_series import fold_metric_reports
from .models.experiment_index import reindex_experiment

MODEL_DEF = b"# a synthetic model definition\nprint('hello from model_def.py')\n"


def _context() -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in (("model_def.py", MODEL_DEF), ("README.md", b"# seeded\n")):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _config(name: str, trials: int, points: int, every: int, storage: str) -> dict[str, Any]:
    return {
        "name": name,
        "entrypoint": "model_def:Trial",
        "hyperparameters": {
            "global_batch_size": 32,
            "lr": {"type": "log", "base": 10, "minval": -4.0, "maxval": -1.0},
            "dropout": {"type": "double", "minval": 0.0, "maxval": 0.5},
            "optimizer": {"type": "categorical", "vals": ["adam", "sgd"]},
        },
        "searcher": {
            "name": "single" if trials == 1 else "random",
            "metric": "validation_loss",
            "smaller_is_better": True,
            **({} if trials == 1 else {"max_trials": trials}),
            "max_length": {"batches": max(1, points) * every},
        },
        "checkpoint_storage": {"type": "shared_fs", "host_path": storage},
        "labels": ["seeded"],
    }


def seed_experiment(
    db_url: str,
    *,
    name: str,
    trials: int,
    points: int,
    storage_dir: str,
    owner: str = "determined",
    every: int = 100,
    training: bool = True,
    log_lines: int = 0,
    batch_metrics: bool = False,
    seed: int = 0,
) -> int:
    """Write one finished experiment into the database at ``db_url`` (migrated first).

    Args:
        db_url: the master's database URL (the master may be running: SQLite and
            PostgreSQL both take the concurrent writes).
        name: the experiment's name.
        trials: how many trials (>= 1; one trial makes a ``single`` search).
        points: validation reports per trial (>= 0), one every ``every`` batches; the
            same count of training reports when ``training``.
        storage_dir: the ``shared_fs`` directory its checkpoints' files are written to.
        owner: the owning user's name (an existing user, else no owner id).
        every: batches between reports.
        training: also write training reports (``loss``).
        log_lines: log lines per trial (INFO lines and one ERROR line in ten).
        batch_metrics: give each training report its per-batch ``loss`` values (one
            dict per batch of the ``every`` it covers).
        seed: the random seed of the hyperparameters and curves.

    Returns:
        The experiment's id.

    Raises:
        ValueError: ``trials`` < 1 or ``points`` < 0.
    """
    if trials < 1 or points < 0:
        raise ValueError(f"trials must be >= 1 and points >= 0, got {trials} and {points}")
    rng = random.Random(seed)
    db = Database(db_url)
    db.migrate()
    now = time.time()
    config = _config(name, trials, points, every, storage_dir)
    try:
        with db.write() as s:
            owner_id = s.scalar(select(UserRow.id).where(UserRow.username == owner))
            exp = ExperimentRow(
                name=name,
                description=f"seeded: {trials} trials x {points} validations",
                state="COMPLETED",
                archived=False,
                owner=owner,
                owner_id=owner_id,
                config=config,
                original_config=yaml.safe_dump(config),
                seed=seed,
                progress=1.0,
                start_time=now - 3600,
                end_time=now,
            )
            s.add(exp)
            s.flush()
            ctx = _context()
            s.add(ModelDefinitionRow(experiment_id=exp.id, content=ctx, size=len(ctx)))
            exp_id = exp.id
            rows: list[TrialRow] = []
            for i in range(trials):
                hp = {
                    "global_batch_size": 32,
                    "lr": 10 ** rng.uniform(-4, -1),
                    "dropout": rng.uniform(0, 0.5),
                    "optimizer": rng.choice(["adam", "sgd"]),
                }
                rows.append(
                    TrialRow(
                        experiment_id=exp_id,
                        request_id=str(uuid.UUID(int=rng.getrandbits(128))),
                        state="COMPLETED",
                        hparams=hp,
                        seed=i,
                        total_batches=points * every,
                        searcher_op_length=points * every,
                        searcher_completed_length=points * every,
                        searcher_closed=True,
                        start_time=now - 3600 + i,
                        end_time=now - 60,
                    )
                )
            s.add_all(rows)
            s.flush()
            for t in rows:
                _seed_trial(
                    s, t, points, every, training, log_lines, batch_metrics, storage_dir, rng, now
                )
            s.flush()
            reindex_experiment(s, exp)
        return exp_id
    finally:
        db.dispose()


def _seed_trial(
    s: Any,
    t: TrialRow,
    points: int,
    every: int,
    training: bool,
    log_lines: int,
    batch_metrics: bool,
    storage_dir: str,
    rng: random.Random,
    now: float,
) -> None:
    hp = t.hparams
    floor = 0.05 + abs(math.log10(hp["lr"]) + 2.5) * 0.2 + hp["dropout"] * 0.3
    floor += 0.1 if hp["optimizer"] == "sgd" else 0.0
    val = []
    train = []
    for k in range(1, points + 1):
        b = k * every
        v = floor + 2.0 / (1 + k * 0.05) + rng.uniform(0, 0.02)
        val.append((b, {"validation_loss": v, "accuracy": max(0.0, 1 - v / 3)}))
        if training:
            train.append((b, {"loss": v * 1.1 + rng.uniform(0, 0.05)}))
    # Reports spread over the trial's run, one per (points + 1)-th of it (a time x axis).
    start = t.start_time if t.start_time is not None else now - 3600
    end = t.end_time if t.end_time is not None else now
    step = (end - start) / (points + 1)
    at = {b: start + (b // every) * step for b, _ in val}
    for group, reports in (("validation", val), ("training", train)):
        if not reports:
            continue
        s.execute(
            insert(MetricRow),
            [
                {
                    "trial_id": t.id,
                    "kind": group,
                    "total_batches": b,
                    "epoch": None,
                    "trial_run_id": 1,
                    "values": values,
                    "batch_metrics": (
                        [{"loss": values["loss"] + 0.01 * (every - i)} for i in range(every)]
                        if batch_metrics and group == "training"
                        else None
                    ),
                    "reported_at": at[b],
                }
                for b, values in reports
            ],
        )
        fold_metric_reports(s, t.id, group, [(b, values, at[b]) for b, values in reports])
    if val:
        t.best_validation = min(v["validation_loss"] for _, v in val)
        ckpt = str(uuid.UUID(int=rng.getrandbits(128)))
        path = os.path.join(storage_dir, ckpt)
        os.makedirs(path, exist_ok=True)
        with open(os.path.join(path, "state.txt"), "w") as f:
            f.write(f"trial {t.id} at batch {val[-1][0]}\n")
        s.add(
            CheckpointRow(
                uuid=ckpt,
                trial_id=t.id,
                experiment_id=t.experiment_id,
                total_batches=val[-1][0],
                state="COMPLETED",
                resources={"state.txt": os.path.getsize(os.path.join(path, "state.txt"))},
                meta={"framework": "torch", "steps_completed": val[-1][0], "format": "seeded"},
                report_time=now - 60,
            )
        )
        t.latest_checkpoint = ckpt
    if log_lines:
        s.execute(
            insert(TaskLogRow),
            [
                {
                    "trial_id": t.id,
                    "allocation_id": f"seeded-{t.id}",
                    "seq": i,
                    "timestamp": now - 60 + i * 0.01,
                    "stdtype": "stderr" if i % 10 == 9 else "stdout",
                    "rank_id": 0,
                    "log": (
                        f"ERROR trial {t.id}: synthetic failure line {i}"
                        if i % 10 == 9
                        else f"INFO trial {t.id}: step {i} done"
                    ),
                }
                for i in range(log_lines)
            ],
        )


def seed_experiment_table(
    db_url: str,
    count: int,
    *,
    trials: int = 1,
    owner: str = "determined",
    seed: int = 0,
    chunk: int = 1000,
) -> list[int]:
    """Write ``count`` finished experiments, with their trials (no metrics, checkpoints
    or model definitions) and their search index, for the list and search benchmarks
    (``benchmarks/experiment_search.py``): the experiment list reads no metric.

    Each experiment is a search of ``trials`` trials over ``lr`` (log-uniform in
    1e-4..1e-1), ``dropout`` (0..0.5) and ``optimizer`` (adam/sgd); its trials'
    best ``validation_loss`` follows the curve of :func:`seed_experiment`, and one
    experiment in three carries the label ``tuned``.

    Args:
        db_url: the master's database URL (migrated first).
        count: how many experiments (>= 1).
        trials: trials per experiment (>= 1).
        owner: the owning user's name (an existing user, else no owner id).
        seed: the random seed of the hyperparameters.
        chunk: experiments written per transaction.

    Returns:
        The new experiments' ids.

    Raises:
        ValueError: ``count`` or ``trials`` < 1.
    """
    from .db import ExperimentHparamRow, ExperimentLabelRow
    from .models.experiment_index import hparam_rows

    if count < 1 or trials < 1:
        raise ValueError(f"count and trials must be >= 1, got {count} and {trials}")
    rng = random.Random(seed)
    db = Database(db_url)
    db.migrate()
    now = time.time()
    ids: list[int] = []
    try:
        for start in range(0, count, chunk):
            with db.write() as s:
                owner_id = s.scalar(select(UserRow.id).where(UserRow.username == owner))
                exps = []
                for i in range(start, min(count, start + chunk)):
                    config = _config(f"search-{i}", trials, 10, 100, "/tmp/unused")
                    config["labels"] = ["seeded", "tuned"] if i % 3 == 0 else ["seeded"]
                    exps.append(
                        ExperimentRow(
                            name=f"search-{i}",
                            description="seeded for the list benchmarks",
                            state="COMPLETED" if i % 5 else "CANCELED",
                            archived=False,
                            owner=owner,
                            owner_id=owner_id,
                            config=config,
                            original_config="",
                            seed=i,
                            progress=1.0,
                            start_time=now - 86_400 + i,
                            end_time=now - 86_400 + i + 600,
                            searcher_name=config["searcher"]["name"],
                            searcher_metric="validation_loss",
                            smaller_is_better=True,
                        )
                    )
                s.add_all(exps)
                s.flush()
                trial_rows: list[dict[str, Any]] = []
                hp_rows: list[dict[str, Any]] = []
                label_rows: list[dict[str, Any]] = []
                best_index: dict[int, int] = {}  # experiment id -> index of its best trial
                for exp in exps:
                    best: tuple[float, dict[str, Any]] | None = None
                    for k in range(trials):
                        lr, dropout = 10 ** rng.uniform(-4, -1), rng.uniform(0, 0.5)
                        optimizer = rng.choice(["adam", "sgd"])
                        hp = {
                            "global_batch_size": 32,
                            "lr": lr,
                            "dropout": dropout,
                            "optimizer": optimizer,
                        }
                        loss = 0.05 + abs(math.log10(lr) + 2.5) * 0.2 + dropout * 0.3
                        loss += (0.1 if optimizer == "sgd" else 0.0) + rng.uniform(0, 0.02)
                        if best is None or loss < best[0]:
                            best = (loss, hp)
                            best_index[exp.id] = len(trial_rows)
                        trial_rows.append(
                            {
                                "experiment_id": exp.id,
                                "request_id": str(uuid.UUID(int=rng.getrandbits(128))),
                                "state": "COMPLETED",
                                "hparams": hp,
                                "seed": k,
                                "restarts": 0,
                                "run_id": 1,
                                "total_batches": 1000,
                                "searcher_closed": True,
                                "best_validation": loss,
                                "start_time": exp.start_time,
                                "end_time": exp.end_time,
                            }
                        )
                    assert best is not None  # trials >= 1
                    exp.best_searcher_metric = best[0]
                    hp_rows += [
                        {"experiment_id": exp.id, "name": n, "num_value": v, "text_value": t}
                        for n, v, t in hparam_rows(best[1])
                    ]
                    label_rows += [
                        {"experiment_id": exp.id, "label": x} for x in exp.config["labels"]
                    ]
                    ids.append(exp.id)
                trial_ids = list(
                    s.scalars(
                        insert(TrialRow).returning(TrialRow.id, sort_by_parameter_order=True),
                        trial_rows,
                    )
                )
                s.execute(insert(ExperimentHparamRow), hp_rows)
                s.execute(insert(ExperimentLabelRow), label_rows)
                for exp in exps:  # the representative trial: its best one
                    exp.best_trial_id = trial_ids[best_index[exp.id]]
        return ids
    finally:
        db.dispose()
