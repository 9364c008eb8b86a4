"""Tables for the API objects, shared by the command modules."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from dauntless.client import Checkpoint, Experiment, Metric, Trial

from ._util import (
    fmt_bytes,
    fmt_duration,
    fmt_hparams,
    fmt_number,
    fmt_percent,
    fmt_time,
    print_json,
    print_table,
)

EXPERIMENT_COLUMNS = (
    "ID",
    "Name",
    "State",
    "Progress",
    "Trials",
    "Best metric",
    "Start time",
    "Duration",
)
TRIAL_COLUMNS = (
    "Trial ID",
    "State",
    "H-Params",
    "Batches",
    "Best validation",
    "Restarts",
    "Latest checkpoint",
)
CHECKPOINT_COLUMNS = ("UUID", "Trial ID", "Batches", "State", "Size", "Report time")
#: Metric keys that every report carries and that get their own column.
_LENGTH_KEYS = ("batches",)


def best_metric_cell(exp: Mapping[str, Any]) -> str:
    """``name=value`` of the experiment's best searcher metric; empty when none yet."""
    value = exp.get("best_searcher_metric")
    if value is None:
        return ""
    name = exp.get("searcher_metric")
    return f"{name}={fmt_number(value)}" if name else fmt_number(value)


def experiment_row(exp: Experiment, now: float | None = None) -> list[str]:
    """One row of :data:`EXPERIMENT_COLUMNS`."""
    return [
        str(exp.get("id", "")),
        str(exp.get("name") or ""),
        str(exp.get("state", "")),
        fmt_percent(exp.get("progress")),
        str(exp.get("num_trials", "")),
        best_metric_cell(exp),
        fmt_time(exp.get("start_time")),
        fmt_duration(exp.get("start_time"), exp.get("end_time"), now),
    ]


#: Marks a COMPLETED trial that the searcher stopped before the search's full length.
STOPPED_EARLY = "stopped early"
_TERMINAL_TRIAL_STATES = ("COMPLETED", "CANCELED", "ERROR")


def full_length_batches(
    config: Mapping[str, Any] | None, hparams: Mapping[str, Any] | None
) -> int | None:
    """The full training length of a search's trials, in batches, from the resolved
    experiment config (as the master returns it) and one trial's hyperparameters.

    ``searcher.max_time`` with ``time_metric: batches`` wins; otherwise
    ``searcher.max_length`` in batches, or in records / epochs converted through the
    trial's ``global_batch_size`` and the config's ``records_per_epoch``.

    Args:
        config: the experiment's resolved config (JSON), or None.
        hparams: the trial's hyperparameters, or None.

    Returns:
        The length in batches, or None when the config gives none that converts.
    """
    from dauntless.config import Length  # not at import: `det e list` is cheap

    searcher = (config or {}).get("searcher") or {}
    max_time = searcher.get("max_time")
    if isinstance(max_time, int) and searcher.get("time_metric") == "batches":
        return max_time
    raw = searcher.get("max_length")
    if not isinstance(raw, Mapping):
        return None
    try:
        length = Length(**{k: v for k, v in raw.items() if v is not None})
        gbs = (hparams or {}).get("global_batch_size")
        records_per_epoch = int((config or {}).get("records_per_epoch") or 0)
        return length.to_batches(gbs if isinstance(gbs, int) else None, records_per_epoch)
    except (ValueError, TypeError):
        return None


def stopped_early(trial: Mapping[str, Any], full_batches: int | None) -> bool:
    """Whether a trial ended COMPLETED below the search's full length: the searcher
    stopped it at a lower rung (adaptive ASHA) rather than training it to the end.

    Args:
        trial: the trial (``state``, ``total_batches``, and ``searcher_closed`` when the
            master sends it).
        full_batches: the search's full length for this trial in batches
            (:func:`full_length_batches`), or None when unknown (never stopped early).
    """
    if trial.get("state") != "COMPLETED" or full_batches is None:
        return False
    if trial.get("searcher_closed") is False:
        return False
    batches = trial.get("total_batches")
    return isinstance(batches, int) and batches < full_batches


def batches_cell(trial: Mapping[str, Any]) -> str:
    """Batches trained; ``trained/target`` while a running trial has a searcher target."""
    batches = trial.get("total_batches", "")
    target = trial.get("target_length")
    if target is not None and trial.get("state") not in _TERMINAL_TRIAL_STATES:
        return f"{batches}/{target}"
    return str(batches)


def trial_row(trial: Trial, config: Mapping[str, Any] | None = None) -> list[str]:
    """One row of :data:`TRIAL_COLUMNS`.

    Args:
        trial: the trial.
        config: the experiment's resolved config; with it, a trial the searcher stopped
            early shows ``COMPLETED (stopped early)`` as its state.
    """
    state = str(trial.get("state", ""))
    if config is not None and stopped_early(
        trial, full_length_batches(config, trial.get("hparams"))
    ):
        state = f"{state} ({STOPPED_EARLY})"
    return [
        str(trial.get("id", "")),
        state,
        fmt_hparams(trial.get("hparams")),
        batches_cell(trial),
        fmt_number(trial.get("best_validation")),
        str(trial.get("restarts", "")),
        str(trial.get("latest_checkpoint") or ""),
    ]


def checkpoint_row(ckpt: Checkpoint) -> list[str]:
    """One row of :data:`CHECKPOINT_COLUMNS`; the size sums ``resources``."""
    resources = ckpt.get("resources") or {}
    size = sum(int(v) for v in resources.values() if isinstance(v, (int, float)))
    return [
        str(ckpt.get("uuid", "")),
        str(ckpt.get("trial_id", "")),
        str(ckpt.get("total_batches", "")),
        str(ckpt.get("state", "")),
        fmt_bytes(size),
        fmt_time(ckpt.get("report_time")),
    ]


def show_checkpoints(ckpts: Sequence[Checkpoint], as_json: bool) -> int:
    """Print checkpoints as ``{"checkpoints": [...]}`` JSON or as a table of
    :data:`CHECKPOINT_COLUMNS`; returns the exit code (0)."""
    if as_json:
        print_json({"checkpoints": list(ckpts)})
    else:
        print_table(CHECKPOINT_COLUMNS, [checkpoint_row(c) for c in ckpts])
    return 0


def latest_validation(trial: Mapping[str, Any]) -> tuple[Any, dict[str, Any]]:
    """The batches and metric values of a trial's latest validation.

    ``latest_validation`` may be the values themselves or a Metric-like object with
    ``values`` and ``total_batches``; both are understood. The batches of flat values
    are the trial's ``latest_validation_batches`` (the batch count the master stored
    with the report), else the values' own ``batches`` key (PyTorch trials report one,
    Core API trials do not; masters before ``latest_validation_batches`` send only it).

    Returns:
        ``(batches or None, {name: value})``; empty values when there was no validation.
    """
    raw = trial.get("latest_validation")
    if not isinstance(raw, Mapping):
        return None, {}
    if isinstance(raw.get("values"), Mapping):
        values = dict(raw["values"])
        batches = raw.get("total_batches", values.get("batches"))
    else:
        values = dict(raw)
        batches = trial.get("latest_validation_batches")
        if batches is None:
            batches = values.get("batches")
    return batches, values


def metric_columns(values_list: Iterable[Mapping[str, Any]]) -> list[str]:
    """The sorted union of metric names, without the length keys shown elsewhere."""
    names: set[str] = set()
    for values in values_list:
        names.update(k for k in values if k not in _LENGTH_KEYS)
    return sorted(names)


def print_latest_validations(trials: Sequence[Trial]) -> None:
    """Print one row per validated trial: its batches and each validation metric."""
    rows = []
    found = [(t, *latest_validation(t)) for t in trials]
    found = [f for f in found if f[2]]
    if not found:
        print_table(["Trial ID", "Batches"], [], title="Latest validation metrics (none yet)")
        return
    names = metric_columns(v for _, _, v in found)
    for trial, batches, values in found:
        rows.append(
            [str(trial.get("id", "")), str(batches if batches is not None else "")]
            + [fmt_number(values.get(n)) for n in names]
        )
    print_table(["Trial ID", "Batches", *names], rows, title="Latest validation metrics")


def print_metrics(metrics: Sequence[Metric], group: str) -> None:
    """Print the reports of one group: batches, epoch and each metric, by batches."""
    chosen = [m for m in metrics if m.get("group") == group]
    names = metric_columns(m.get("values") or {} for m in chosen)
    names = [n for n in names if n != "epochs"]
    rows = [
        [str(m.get("total_batches", "")), fmt_number(m.get("epoch"))]
        + [fmt_number((m.get("values") or {}).get(n)) for n in names]
        for m in chosen
    ]
    print_table(["Batches", "Epoch", *names], rows, title=f"{group.capitalize()} metrics")


def format_log_line(line: Mapping[str, Any]) -> str:
    """A log line as printed by ``logs`` and ``--follow``: ``[rank=N] text`` or text."""
    rank = line.get("rank_id")
    text = str(line.get("log", ""))
    return f"[rank={rank}] {text}" if rank is not None else text
