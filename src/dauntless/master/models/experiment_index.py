"""Experiments: keeping the search index in step (issue 31 scope 7; the index's tables
and design are in :mod:`dauntless.master.db.search_index`).

What an experiment is searched by:

- its searcher's ``name``, ``metric`` and ``smaller_is_better``, copied from the config
  at create (:func:`index_new_experiment`);
- ``best_searcher_metric``: the best searcher-metric value any of its trials validated
  (:func:`note_best_validation`, called when a trial's own best improves);
- its *representative trial* (``best_trial_id``): the trial that holds that best value,
  else its first trial; ``experiment_hparams`` holds that trial's hyperparameters. A
  single-trial experiment is thus searched by its one trial's hyperparameters; a search
  by its best trial's;
- its labels (:func:`set_labels`).

Each function costs the same at trial 10,000 as at trial 10: it touches the experiment
row and the representative trial's hyperparameters only (issue 37 scope 1). Rows only:
it imports no other model module, so any of them may import it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from sqlalchemy import delete, insert, select
from sqlalchemy.orm import Session

from ..db import ExperimentHparamRow, ExperimentLabelRow, ExperimentRow, TrialRow
from ..db.search_index import MAX_HPARAM_NAME, MAX_HPARAM_TEXT


def hparam_rows(hparams: Any, prefix: str = "") -> list[tuple[str, float | None, str | None]]:
    """The index rows of a trial's hyperparameters: ``(name, num_value, text_value)``.

    Nested dicts are flattened to dotted names (``{"opt": {"lr": 0.1}}`` ->
    ``opt.lr``); ints and floats go to ``num_value``; booleans become the text
    ``true``/``false``, strings themselves and anything else its JSON, cut to
    :data:`~dauntless.master.db.search_index.MAX_HPARAM_TEXT` characters. Names longer
    than :data:`~dauntless.master.db.search_index.MAX_HPARAM_NAME` are left out.

    Args:
        hparams: the trial's ``hparams`` (a dict; anything else has no rows).
        prefix: the dotted path of the enclosing names (``""`` at the top).
    """
    out: list[tuple[str, float | None, str | None]] = []
    if not isinstance(hparams, dict):
        return out
    for key in sorted(hparams, key=str):
        name = f"{prefix}{key}"
        value = hparams[key]
        if isinstance(value, dict) and value:
            out.extend(hparam_rows(value, name + "."))
            continue
        if len(name) > MAX_HPARAM_NAME:
            continue
        if isinstance(value, bool):
            out.append((name, None, "true" if value else "false"))
        elif isinstance(value, (int, float)):
            out.append((name, float(value), None))
        elif isinstance(value, str):
            out.append((name, None, value[:MAX_HPARAM_TEXT]))
        elif value is not None:
            out.append((name, None, json.dumps(value, sort_keys=True)[:MAX_HPARAM_TEXT]))
    return out


def _set_hparams(s: Session, exp_id: int, hparams: Any) -> None:
    s.execute(delete(ExperimentHparamRow).where(ExperimentHparamRow.experiment_id == exp_id))
    rows = hparam_rows(hparams)
    if rows:
        s.execute(
            insert(ExperimentHparamRow),
            [
                {"experiment_id": exp_id, "name": n, "num_value": v, "text_value": t}
                for n, v, t in rows
            ],
        )


def set_labels(s: Session, exp_id: int, labels: Iterable[str]) -> None:
    """Make the experiment's indexed labels exactly ``labels`` (each cut to 255
    characters; duplicates are one)."""
    s.execute(delete(ExperimentLabelRow).where(ExperimentLabelRow.experiment_id == exp_id))
    names = sorted({str(x)[:255] for x in labels})
    if names:
        s.execute(
            insert(ExperimentLabelRow), [{"experiment_id": exp_id, "label": x} for x in names]
        )


def index_new_experiment(s: Session, exp: ExperimentRow) -> None:
    """Index a new experiment (flushed, so it has an id): its searcher columns from
    ``exp.config`` and its labels. Its trials come later (:func:`note_trial_created`)."""
    searcher = exp.config.get("searcher") or {}
    name = searcher.get("name")
    metric = searcher.get("metric")
    exp.searcher_name = str(name)[:64] if name else None
    exp.searcher_metric = metric[:255] if isinstance(metric, str) else None
    exp.smaller_is_better = bool(searcher.get("smaller_is_better", True))
    set_labels(s, exp.id, exp.config.get("labels") or [])


def note_trial_created(s: Session, exp: ExperimentRow, trial: TrialRow) -> None:
    """A new trial (flushed): the experiment's first trial becomes its representative
    until a trial validates."""
    if exp.best_trial_id is None:
        exp.best_trial_id = trial.id
        _set_hparams(s, exp.id, trial.hparams)


def note_best_validation(s: Session, exp: ExperimentRow, trial: TrialRow, value: float) -> None:
    """A trial's best searcher-metric value improved to ``value``: when it beats the
    experiment's best (per ``smaller_is_better``), the experiment's best and
    representative trial become these."""
    best = exp.best_searcher_metric
    if best is not None and not (value < best if exp.smaller_is_better else value > best):
        return
    exp.best_searcher_metric = value
    if exp.best_trial_id != trial.id:
        exp.best_trial_id = trial.id
        _set_hparams(s, exp.id, trial.hparams)


def forget_experiment(s: Session, exp_id: int) -> None:
    """Delete the experiment's index rows (before its row is deleted)."""
    s.execute(delete(ExperimentHparamRow).where(ExperimentHparamRow.experiment_id == exp_id))
    s.execute(delete(ExperimentLabelRow).where(ExperimentLabelRow.experiment_id == exp_id))


def reindex_experiment(s: Session, exp: ExperimentRow) -> None:
    """Recompute every index entry of an experiment from its config and trials (for
    rows written without the model functions: ``seeding``)."""
    index_new_experiment(s, exp)
    best_value: float | None = None
    best_id: int | None = None
    first: tuple[int, Any] | None = None
    rep_hparams: Any = None
    for trial_id, hparams, value in s.execute(
        select(TrialRow.id, TrialRow.hparams, TrialRow.best_validation)
        .where(TrialRow.experiment_id == exp.id)
        .order_by(TrialRow.id)
    ):
        if first is None:
            first = (trial_id, hparams)
        if value is not None and (
            best_value is None
            or (value < best_value if exp.smaller_is_better else value > best_value)
        ):
            best_value, best_id, rep_hparams = value, trial_id, hparams
    if best_id is None and first is not None:
        best_id, rep_hparams = first
    exp.best_searcher_metric = best_value
    exp.best_trial_id = best_id
    _set_hparams(s, exp.id, rep_hparams)
