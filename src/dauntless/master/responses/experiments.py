"""Answers of the experiment routes: experiments, their metric series, labels, model
definitions and search previews.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from ._base import _Open
from .trials import TrialOut


class ExperimentOut(_Open):
    id: int
    name: str
    description: str | None
    notes: str
    labels: list[str]
    state: str
    archived: bool
    owner: str
    username: str
    user_id: int | None
    config: dict[str, Any]
    seed: int
    progress: float
    start_time: float
    end_time: float | None
    num_trials: int
    best_searcher_metric: float | None
    searcher_metric: str | None
    smaller_is_better: bool


class ExperimentBody(BaseModel):
    experiment: ExperimentOut


class ExperimentDetail(BaseModel):
    experiment: ExperimentOut
    trials: list[TrialOut]


class ExperimentPage(BaseModel):
    experiments: list[ExperimentOut]
    total: int


class ExperimentListItem(_Open):
    """An experiment of a search page: the full experiment (:class:`ExperimentOut`)
    without ``fields``; else ``id`` and the fields asked for (``hp.<name>`` keys for
    hyperparameters, ``labels``, ``hparams``, ``num_trials``, ...)."""

    id: int
    name: str | None = None
    state: str | None = None
    owner: str | None = None
    progress: float | None = None
    start_time: float | None = None
    end_time: float | None = None
    num_trials: int | None = None
    best_searcher_metric: float | None = None
    searcher_metric: str | None = None
    labels: list[str] | None = None
    hparams: dict[str, Any] | None = None


class ExperimentListPage(BaseModel):
    """``GET /experiments``: one page of a search and how many matched in all."""

    experiments: list[ExperimentListItem]
    total: int


class ExperimentCreated(BaseModel):
    """``POST /experiments``: the new experiment (None for ``validate_only``) and one
    warning per deprecated or ignored config field (``"<field>: <why>"``)."""

    experiment: ExperimentOut | None
    warnings: list[str]


class TrialSeriesOut(BaseModel):
    """One trial's series of a metric: ``batches`` (x) and ``values`` (y), downsampled
    when ``downsampled`` (``raw_points`` stored points). With ``x_axis=epochs`` also
    ``epochs`` at the same points, with ``x_axis=time`` ``timestamps`` (seconds since the
    epoch when each report was stored); null when not known for the trial."""

    trial_id: int
    batches: list[int | float]
    values: list[int | float | None]
    raw_points: int
    downsampled: bool
    epochs: list[float] | None = None
    timestamps: list[float] | None = None


class ExperimentSeriesOut(BaseModel):
    """``GET /experiments/{id}/metrics``: one metric of an experiment's trials."""

    experiment_id: int
    group: str
    name: str
    max_points: int
    downsampling: str
    x_axis: str = "batches"
    series: list[TrialSeriesOut]


class MetricNamesOut(BaseModel):
    """The numeric metric names of an experiment's trials' latest reports, by group."""

    training: list[str]
    validation: list[str]


class LabelsOut(BaseModel):
    """An experiment's labels after the change."""

    labels: list[str]


class PreviewTrialOut(BaseModel):
    """One trial a search would create: its hyperparameters and the cumulative lengths
    (batches) it would train to and validate at."""

    hparams: dict[str, Any]
    lengths: list[int]


class PreviewFinalLength(BaseModel):
    """``trials`` trials would end after ``batches`` batches."""

    batches: int
    trials: int


class PreviewBracket(BaseModel):
    """An ``adaptive_asha`` bracket: its rung lengths in ``unit``, trials, and how many
    it runs at once."""

    rungs: list[int]
    unit: str
    trials: int
    max_concurrent: int


class PreviewSummary(_Open):
    """Totals of a previewed search (``brackets`` for ``adaptive_asha`` only)."""

    searcher: str
    seed: int
    num_trials: int
    total_batches: int
    final_lengths: list[PreviewFinalLength]
    length_unit: str
    brackets: list[PreviewBracket] | None = None


class PreviewOut(BaseModel):
    """``POST /preview-hp-search``: see :func:`dauntless.searcher.preview_document`."""

    trials: list[PreviewTrialOut]
    summary: PreviewSummary


class ModelDefEntry(BaseModel):
    """A file (``type`` ``file``, ``size`` in bytes) or directory (``dir``, size 0) of an
    experiment's model definition, by its path inside the context directory."""

    path: str
    size: int
    type: str


class ModelDefTree(BaseModel):
    """``GET /experiments/{id}/model_def/tree``: every entry, sorted by path."""

    files: list[ModelDefEntry]
