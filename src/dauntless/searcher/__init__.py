"""Pure, deterministic hyperparameter searchers: single, random, grid, adaptive ASHA,
async halving; Optuna's TPE, CMA-ES, GP and NSGA-II samplers (alone or inside ASHA);
population-based training; custom search methods (:mod:`dauntless.searcher.custom`).

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
from ._custom import CustomSearch, MethodDriver
from ._errors import SearcherConfigError
from ._factory import make_searcher, restore_searcher
from ._model import (
    CmaEsSearch,
    GPSearch,
    ModelASHASearch,
    ModelAsyncHalvingSearch,
    ModelSearch,
    NSGAIISearch,
)
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
from ._pareto import pareto_front
from ._pbt import PBTSearch, explore_hparams
from ._preview import PREVIEW_TRIAL_LIMIT, PreviewTooLarge, planned_trials, preview_document
from ._simulate import (
    SimulatedTrial,
    SimulationResult,
    is_model_based,
    preview_search,
    simulate,
    synthetic_objective,
)
from ._space import GridSpace, grid_axis, grid_points, round_half_away, sample_hparams

__all__ = [
    "CmaEsSearch",
    "CustomSearch",
    "GPSearch",
    "MethodDriver",
    "ModelASHASearch",
    "ModelAsyncHalvingSearch",
    "ModelSearch",
    "NSGAIISearch",
    "PBTSearch",
    "explore_hparams",
    "is_model_based",
    "pareto_front",
    "synthetic_objective",
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
