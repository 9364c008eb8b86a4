"""Building a searcher from an experiment config, and restoring one from a snapshot."""

from __future__ import annotations

from typing import Any

from dauntless.config import (
    AdaptiveASHASearcher,
    AsyncHalvingSearcher,
    ExperimentConfig,
    Length,
    PBTSearcher,
    searcher_length,
)

from ._asha import AdaptiveASHASearch, AsyncHalvingSearch, asha_length
from ._base import SNAPSHOT_VERSION, Searcher
from ._basic import GridSearch, RandomSearch, SingleSearch
from ._custom import CustomSearch
from ._errors import SearcherConfigError
from ._model import (
    CmaEsSearch,
    GPSearch,
    ModelASHASearch,
    ModelAsyncHalvingSearch,
    ModelSearch,
    NSGAIISearch,
)
from ._pbt import PBTSearch
from ._rng import new_rng
from .custom import SearchMethod

_SEARCHERS: dict[str, type[Searcher]] = {
    "single": SingleSearch,
    "random": RandomSearch,
    "grid": GridSearch,
    "adaptive_asha": AdaptiveASHASearch,
    "async_halving": AsyncHalvingSearch,
    "tpe": ModelSearch,
    "cmaes": CmaEsSearch,
    "gp": GPSearch,
    "nsgaii": NSGAIISearch,
    "pbt": PBTSearch,
    "custom": CustomSearch,
}

_WITH_SAMPLER: dict[str, type[Searcher]] = {
    "adaptive_asha": ModelASHASearch,
    "async_halving": ModelAsyncHalvingSearch,
}


def _searcher_class(config: ExperimentConfig) -> type[Searcher]:
    name = config.searcher.name
    if getattr(config.searcher, "sampler", "random") != "random":
        return _WITH_SAMPLER[name]
    return _SEARCHERS[name]


def _method_kwargs(config: ExperimentConfig, method: Any) -> dict[str, Any]:
    if config.searcher.name != "custom":
        if method is not None:
            raise TypeError("method is for custom searchers only")
        return {}
    if method is None:
        return {}
    if not isinstance(method, SearchMethod) and callable(method):
        method = method()
    return {"method": method}


def _check_config(config: Any) -> ExperimentConfig:
    if not isinstance(config, ExperimentConfig):
        raise TypeError(f"config must be an ExperimentConfig, got {type(config).__name__}")
    name = config.searcher.name
    if name not in _SEARCHERS:
        raise SearcherConfigError(
            "searcher.name", f"unsupported searcher {name!r}; expected one of {sorted(_SEARCHERS)}"
        )
    cfg = config.searcher
    if isinstance(cfg, (AdaptiveASHASearcher, AsyncHalvingSearcher)):
        unit, value = asha_length(cfg)
        if searcher_length(config) is None:
            return config  # 0.38 mode: rungs are in the time metric's own unit
        length: Length | None = Length(**{unit: value})
    elif isinstance(cfg, PBTSearcher):
        length = cfg.length_per_round
    else:
        length = getattr(cfg, "max_length", None)
    if length is None:
        return config
    if length.unit.value != "batches" and "global_batch_size" not in config.hyperparameters:
        raise SearcherConfigError(
            "hyperparameters.global_batch_size",
            f"a training length in {length.unit.value} needs a global_batch_size "
            "hyperparameter to convert it to batches",
        )
    if length.unit.value == "epochs" and config.records_per_epoch <= 0:
        raise SearcherConfigError(
            "records_per_epoch", "a training length in epochs needs records_per_epoch > 0"
        )
    return config


def make_searcher(config: ExperimentConfig, seed: int, *, method: Any = None) -> Searcher:
    """The searcher of an experiment, ready for ``initial_operations()``.

    Args:
        config: the validated experiment config; ``config.searcher.name`` picks the
            searcher (``single``, ``random``, ``grid``, ``adaptive_asha``).
        seed: the experiment seed (``0..2**31-1`` in Determined; up to ``2**32-1`` is
            accepted); all of the search's randomness comes from it.
        method: custom searchers only: the
            :class:`~dauntless.searcher.custom.SearchMethod` to run (or a zero-argument
            callable that builds one); None: a remote runner answers the events.

    Returns:
        A fresh :class:`Searcher`.

    Raises:
        SearcherConfigError: if the config cannot be searched (a grid hyperparameter
            without ``count``, a length
            unit that cannot be converted to batches); the message names the field.
        TypeError: if ``config`` is not an ``ExperimentConfig`` or ``seed`` not an int.
        ValueError: if ``seed`` is out of range.
    """
    _check_config(config)
    return _searcher_class(config)(config, new_rng(seed), **_method_kwargs(config, method))


def restore_searcher(
    config: ExperimentConfig, snapshot: dict[str, Any] | None, *, method: Any = None
) -> Searcher:
    """Rebuild a searcher from :meth:`Searcher.snapshot` output.

    The restored searcher returns exactly the operations the original would have for the
    same events from then on.

    Args:
        config: the experiment's config (the one the snapshot's searcher was made with).
        snapshot: the JSON data (``{"version": 1, "searcher": ..., ...}``).
        method: custom searchers run in the master: a fresh instance of the search
            method (or a zero-argument callable), whose state the snapshot restores.

    Returns:
        The searcher.

    Raises:
        TypeError: if ``snapshot`` is not a dict (None: no snapshot was saved) or ``config`` not an ``ExperimentConfig``.
        ValueError: for an unknown snapshot version, a snapshot of another searcher or a
            config whose search space differs, or malformed data.
        SearcherConfigError: if the config cannot be searched.
    """
    _check_config(config)
    if not isinstance(snapshot, dict):
        raise TypeError(f"snapshot must be a dict, got {type(snapshot).__name__}")
    version = snapshot.get("version")
    if version != SNAPSHOT_VERSION:
        raise ValueError(
            f"unsupported searcher snapshot version {version!r}; this Dauntless reads "
            f"version {SNAPSHOT_VERSION}"
        )
    kind = snapshot.get("searcher")
    if kind != config.searcher.name:
        raise ValueError(
            f"the snapshot is of a {kind!r} searcher but the config's searcher is "
            f"{config.searcher.name!r}"
        )
    try:
        return _searcher_class(config)._from_snapshot(
            config, snapshot, **_method_kwargs(config, method)
        )
    except (KeyError, TypeError, AttributeError, IndexError) as exc:
        raise ValueError(f"malformed searcher snapshot: {exc!r}") from None
