"""A search preview: the trials and lengths a config's searcher would create.

Pure: it drives the searcher with :func:`preview_search`, which assumes every trial
reports the same metric (so an adaptive search promotes by its tie rule only). Used by
``det preview-search`` and the master's ``POST /api/v1/preview-hp-search``.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from dauntless.config import ExperimentConfig

from ._asha import AdaptiveASHASearch
from ._basic import GridSearch
from ._custom import CustomSearch
from ._errors import SearcherConfigError
from ._factory import make_searcher
from ._pbt import PBTSearch
from ._simulate import SYNTHETIC_OBJECTIVE_TEXT, is_model_based, preview_search

PREVIEW_TRIAL_LIMIT = 10_000
"""The most trials a preview simulates (about 0.7 s of CPU for 10,000 trials)."""


class PreviewTooLarge(ValueError):
    """The search would create more than :data:`PREVIEW_TRIAL_LIMIT` trials.

    Attributes:
        field: the config field that makes it so large.
    """

    def __init__(self, field: str, count: int) -> None:
        super().__init__(
            f"the search would create {count} trials; a preview simulates at most "
            f"{PREVIEW_TRIAL_LIMIT}"
        )
        self.field = field
        self.count = count


def planned_trials(config: ExperimentConfig, searcher: Any) -> int:
    """How many trials a search creates when no trial has invalid hyperparameters: the
    grid size for ``grid``, the brackets' trials for ``adaptive_asha``, ``max_trials``
    for ``random``, 1 for ``single``."""
    if isinstance(searcher, GridSearch):
        return searcher.grid_size
    if isinstance(searcher, AdaptiveASHASearch):
        return sum(plan.trials for plan in searcher.brackets)
    if isinstance(searcher, PBTSearch):
        cfg: Any = config.searcher
        k = int(cfg.replace_function.truncate_fraction * cfg.population_size)
        return cfg.population_size + k * (cfg.num_rounds - 1)
    return int(getattr(config.searcher, "max_trials", 1))


def length_unit(config: ExperimentConfig) -> str | None:
    """The unit of a preview's lengths: ``batches`` (ValidateAfter lengths), the ASHA
    ``time_metric`` (0.38 mode, rung thresholds reached), or None when each trial's own
    code decides its length (no ``searcher.max_length``)."""
    cfg = config.searcher
    if getattr(cfg, "max_time", None) is not None:
        return str(getattr(cfg, "time_metric", None))
    if getattr(cfg, "max_length", None) is None:
        return None
    return "batches"


def preview_document(config: ExperimentConfig, seed: int, *, method: Any = None) -> dict[str, Any]:
    """Preview a validated config's search.

    Args:
        config: the experiment config.
        seed: the experiment seed (``0..2**32-1``).

    Returns:
        ``{"trials": [{"hparams", "lengths"}], "summary": {"searcher", "seed",
        "num_trials", "total_batches", "final_lengths": [{"batches", "trials"}],
        "length_unit", "brackets" (adaptive_asha only): [{"rungs", "unit", "trials",
        "max_concurrent"}], "objective" (model-based searchers: the synthetic objective
        the preview fed them)}}``; lengths in batches (cumulative, one per validation).
        ``method``: a custom searcher's search method (required for ``custom``).

    Raises:
        SearcherConfigError: the searcher cannot search the config (names the field).
        PreviewTooLarge: more than :data:`PREVIEW_TRIAL_LIMIT` trials.
    """
    searcher = make_searcher(config, seed, method=method)
    if isinstance(searcher, CustomSearch) and searcher.remote:
        raise SearcherConfigError(
            "searcher.method",
            "a custom search answered by a remote runner cannot be previewed; name the "
            "search method (module:Class) to preview it",
        )
    count = planned_trials(config, searcher)
    if count > PREVIEW_TRIAL_LIMIT:
        field = "hyperparameters" if isinstance(searcher, GridSearch) else "searcher.max_trials"
        raise PreviewTooLarge(field, count)
    plan = preview_search(config, seed, method=method)
    finals = Counter(lengths[-1] if lengths else 0 for _, lengths in plan)
    summary: dict[str, Any] = {
        "searcher": config.searcher.name,
        "seed": seed,
        "num_trials": len(plan),
        "total_batches": sum(lengths[-1] for _, lengths in plan if lengths),
        "final_lengths": [{"batches": k, "trials": finals[k]} for k in sorted(finals)],
        "length_unit": length_unit(config),
    }
    if is_model_based(config):
        summary["objective"] = SYNTHETIC_OBJECTIVE_TEXT
    if isinstance(searcher, AdaptiveASHASearch):
        cfg = config.searcher
        unit = "batches"
        max_length = getattr(cfg, "max_length", None)
        if getattr(cfg, "max_time", None) is not None:
            unit = str(getattr(cfg, "time_metric", None))
        elif max_length is not None:
            unit = max_length.unit.value
        summary["brackets"] = [
            {
                "rungs": list(b.lengths),
                "unit": unit,
                "trials": b.trials,
                "max_concurrent": b.max_concurrent,
            }
            for b in searcher.brackets
        ]
    return {
        "trials": [{"hparams": hparams, "lengths": lengths} for hparams, lengths in plan],
        "summary": summary,
    }
