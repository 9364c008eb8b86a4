"""What the framework integrations share: throttled progress, metric values, the
experiment config's searcher section, and the state file written into checkpoints."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dauntless import core

STATE_FILE = "det_state.json"
"""The integration's own state in a checkpoint: ``continue_id`` and counters (JSON)."""

PROGRESS_INTERVAL = 5.0
"""Seconds between progress reports (the master only shows progress; each is a request)."""


def float_metrics(metrics: Mapping[str, Any]) -> dict[str, float]:
    """The numeric entries of ``metrics`` as floats (tensors and numpy scalars included).

    Entries that are not numbers (strings, tensors of more than one element) are left
    out; NaN and infinities are kept (the Core API reports them as such).

    Args:
        metrics: name -> value, as a framework logs them.

    Returns:
        name -> float.
    """
    out: dict[str, float] = {}
    for name, value in metrics.items():
        if isinstance(value, bool):
            continue
        if hasattr(value, "numel") and hasattr(value, "item"):
            if value.numel() != 1:
                continue
            value = value.item()
        elif hasattr(value, "item") and getattr(value, "size", 1) == 1:
            value = value.item()
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            out[str(name)] = float(value)
    return out


def searcher_config(core_context: core.Context) -> dict[str, Any]:
    """The experiment config's ``searcher`` section ({} off the cluster)."""
    section = core_context.trial.config.get("searcher")
    return dict(section) if isinstance(section, Mapping) else {}


def check_searcher_metric(core_context: core.Context, metrics: Mapping[str, Any]) -> None:
    """Refuse validation metrics that lack the searcher's metric.

    Raises:
        ValueError: naming ``searcher.metric`` and the metrics that were reported.
    """
    name = searcher_config(core_context).get("metric")
    if isinstance(name, str) and name and name not in metrics:
        raise ValueError(
            f"the validation metrics {sorted(metrics)} lack searcher.metric {name!r} of "
            "the experiment config: log it in validation, or name one of these in the config"
        )


class Progress:
    """Report a trial's progress (a fraction in [0, 1]) at most every
    :data:`PROGRESS_INTERVAL` seconds, and always when it reaches 1 (chief only)."""

    def __init__(self, core_context: core.Context) -> None:
        self._core = core_context
        self._sent_at = -math.inf

    def report(self, fraction: float) -> None:
        """Args: fraction: finished part of the training, clipped to [0, 1]."""
        if not self._core.distributed.is_chief or not math.isfinite(fraction):
            return
        fraction = min(1.0, max(0.0, fraction))
        now = time.monotonic()
        if fraction < 1.0 and now - self._sent_at < PROGRESS_INTERVAL:
            return
        self._sent_at = now
        self._core.train.report_progress(fraction)


def write_state(path: Path, state: Mapping[str, Any]) -> None:
    """Write the integration's state (JSON) into checkpoint directory ``path``."""
    (path / STATE_FILE).write_text(json.dumps(dict(state), sort_keys=True))


def read_state(path: Path) -> dict[str, Any]:
    """The integration's state in checkpoint directory ``path`` ({} when absent).

    Raises:
        ValueError: if the file is not a JSON object.
    """
    file = path / STATE_FILE
    if not file.is_file():
        return {}
    state = json.loads(file.read_text())
    if not isinstance(state, dict):
        raise ValueError(f"{file} holds {type(state).__name__}, not a JSON object")
    return state
