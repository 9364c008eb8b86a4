"""Answers of the trial routes: trials, their metrics and logs."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from ._base import _Open


class TrialOut(_Open):
    id: int
    experiment_id: int
    request_id: str
    state: str
    hparams: dict[str, Any]
    seed: int
    restarts: int
    run_id: int
    total_batches: int
    target_length: int | None
    searcher_closed: bool
    best_validation: float | None
    latest_validation: dict[str, Any] | None
    latest_validation_batches: int | None
    latest_checkpoint: str | None
    start_time: float
    end_time: float | None
    log_policy_matches: list[str]
    failure: dict[str, Any] | None
    parent_id: int | None = None
    warm_start_checkpoint: str | None = None


class TrialBody(BaseModel):
    trial: TrialOut


class TrialsOut(BaseModel):
    trials: list[TrialOut]


class MetricOut(_Open):
    trial_id: int
    group: str
    total_batches: int
    epoch: float | None
    trial_run_id: int
    values: dict[str, Any]
    reported_at: float


class MetricSeriesOut(_Open):
    group: str
    name: str
    batches: list[int]
    values: list[float]
    raw_points: int
    downsampled: bool


class MetricsOut(BaseModel):
    metrics: list[MetricOut]
    next_after_batches: int | None = None
    series: list[MetricSeriesOut] | None = None
    downsampling: str | None = None


class LogLineOut(_Open):
    id: int
    trial_id: int | None
    allocation_id: str
    timestamp: float
    stdtype: str
    rank_id: int | None
    log: str


class LogsOut(BaseModel):
    logs: list[LogLineOut]
    trial_state: str


class BatchSeriesOut(BaseModel):
    """One per-batch training metric of a trial: ``values[i]`` at batch ``batches[i]``;
    ``raw_points`` stored points, ``downsampled`` when M4 kept fewer."""

    name: str
    batches: list[int]
    values: list[float]
    raw_points: int
    downsampled: bool


class BatchMetricsOut(BaseModel):
    """``GET /trials/{id}/batch-metrics``: the metric names and one series per name."""

    names: list[str]
    series: list[BatchSeriesOut]
