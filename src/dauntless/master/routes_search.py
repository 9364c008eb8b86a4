"""REST routes of hyperparameter search under ``/api/v1``: previewing a search.

``POST /api/v1/preview-hp-search`` answers, without creating anything, the trials and the
training lengths (batches) a config's searcher would create, computed by
:func:`dauntless.searcher.preview_search` (every trial assumed to report the same metric,
so an adaptive search promotes by its tie rule only). Bad input raises
:class:`~dauntless.master.errors.BadRequest`, which the app's handlers answer with 400
and the ``errors`` naming each config field.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field

from dauntless.config import ConfigError, parse_experiment_config
from dauntless.searcher import (
    PREVIEW_TRIAL_LIMIT,
    PreviewTooLarge,
    SearcherConfigError,
    planned_trials,
    preview_document,
)

from . import responses as R
from .errors import BadRequest

MAX_SEED = 2**32 - 1
"""The largest experiment seed the searchers accept."""

router = APIRouter(prefix="/api/v1")


class PreviewSearchBody(BaseModel):
    """Body of ``POST /preview-hp-search``: the config as YAML (or JSON) text, and the
    experiment seed to preview with (None: the config's ``experiment_seed``, else 0)."""

    model_config = ConfigDict(extra="forbid")

    config: str = Field(min_length=1)
    seed: int | None = Field(default=None, ge=0, le=MAX_SEED)


def _invalid(field: str, message: str) -> BadRequest:
    return BadRequest("invalid experiment config", [(field, message)])


def preview_hp_search(config_text: str, seed: int | None = None) -> dict[str, Any]:
    """Preview a search: the trials and lengths its searcher would create.

    Args:
        config_text: the experiment config as YAML (or JSON) text; ``entrypoint`` may be
            left out, as nothing runs.
        seed: the experiment seed (``0..2**32-1``); None takes the config's
            ``reproducibility.experiment_seed``, else 0. The hyperparameters of random
            and adaptive searches depend on it.

    Returns:
        ``{"trials": [{"hparams": {...}, "lengths": [batches, ...]}], "summary": {...}}``;
        each trial's ``lengths`` are the cumulative batch counts it would be asked to
        train to and validate at, in creation order. ``summary`` holds ``searcher``,
        ``seed``, ``num_trials``, ``total_batches`` (what all trials train in all),
        ``final_lengths`` (``[{"batches": L, "trials": n}]``: how many trials end after
        L batches, ascending) and, for ``adaptive_asha``, ``brackets`` (``[{"rungs":
        [lengths], "unit": "batches"|"records"|"epochs", "trials": n, "max_concurrent":
        m}]``).

    Raises:
        BadRequest: an invalid config (one ``(field, message)`` per problem), a config
            the searcher cannot search (the field named), a seed out of range, or a
            search of more than :data:`PREVIEW_TRIAL_LIMIT` trials.
    """
    if seed is not None and (
        isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= MAX_SEED
    ):
        raise BadRequest(
            "invalid seed", [("seed", f"expected an int in 0..{MAX_SEED}, got {seed!r}")]
        )
    try:
        config = parse_experiment_config(config_text)
    except ConfigError as exc:
        raise BadRequest("invalid experiment config", exc.errors) from None
    if seed is None:
        seed = config.reproducibility.experiment_seed or 0
    try:
        return preview_document(config, seed)
    except SearcherConfigError as exc:
        raise _invalid(exc.field, exc.detail) from None
    except PreviewTooLarge as exc:
        raise _invalid(exc.field, str(exc)) from None


# exclude_unset: ``summary.brackets`` is left out (not null) for searchers other than
# adaptive_asha, as the CLI tests for the key.
@router.post("/preview-hp-search", response_model=R.PreviewOut, response_model_exclude_unset=True)
def preview_hp_search_route(body: PreviewSearchBody) -> dict[str, Any]:
    """``POST /api/v1/preview-hp-search``: see :func:`preview_hp_search`."""
    return preview_hp_search(body.config, body.seed)


__all__ = [
    "PREVIEW_TRIAL_LIMIT",
    "PreviewSearchBody",
    "planned_trials",
    "preview_hp_search",
    "router",
]
