"""Pure, deterministic hyperparameter searchers: single, random, grid, adaptive ASHA,
async halving.

A searcher takes events (``initial_operations``, ``on_trial_created``,
``on_validation_completed``, ``on_trial_exited_early``, ``on_trial_closed``) and returns
operations (``Create``, ``ValidateAfter``, ``Close``, ``Shutdown``); all its randomness
comes from the experiment seed, and its state is versioned JSON (``snapshot`` /
``restore_searcher``). No I/O, no clocks. :func:`simulate` drives a searcher against a
synthetic objective in memory.
"""

from ._asha import AdaptiveASHASearch, AsyncHalvingSearch
from ._asha_math import (
    BracketPlan,
    bracket_concurrency,
    bracket_rungs,
    bracket_trials,
    floor_log,
    insert_result,
    num_rungs,
    plan_brackets,
    promotion_quota,
    rung_lengths,
)
from ._base import SNAPSHOT_VERSION, Searcher, TrialRecord
from ._basic import GridSearch, RandomSearch, SingleSearch
from ._errors import SearcherConfigError
from ._factory import make_searcher, restore_searcher
from ._ops import (
    Close,
    Create,
    ExitedReason,
    Operation,
    Shutdown,
    ValidateAfter,
    operation_from_json,
    operation_to_json,
)
from ._preview import PREVIEW_TRIAL_LIMIT, PreviewTooLarge, planned_trials, preview_document
from ._simulate import SimulatedTrial, SimulationResult, preview_search, simulate
from ._space import GridSpace, grid_axis, grid_points, round_half_away, sample_hparams

__all__ = [
    "PREVIEW_TRIAL_LIMIT",
    "PreviewTooLarge",
    "planned_trials",
    "preview_document",
    "SNAPSHOT_VERSION",
    "AdaptiveASHASearch",
    "AsyncHalvingSearch",
    "BracketPlan",
    "Close",
    "Create",
    "ExitedReason",
    "GridSearch",
    "GridSpace",
    "Operation",
    "RandomSearch",
    "Searcher",
    "SearcherConfigError",
    "Shutdown",
    "SimulatedTrial",
    "SimulationResult",
    "SingleSearch",
    "TrialRecord",
    "ValidateAfter",
    "bracket_concurrency",
    "bracket_rungs",
    "bracket_trials",
    "floor_log",
    "grid_axis",
    "grid_points",
    "insert_result",
    "make_searcher",
    "num_rungs",
    "operation_from_json",
    "operation_to_json",
    "plan_brackets",
    "preview_search",
    "promotion_quota",
    "restore_searcher",
    "round_half_away",
    "rung_lengths",
    "sample_hparams",
    "simulate",
]
