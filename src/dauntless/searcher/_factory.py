"""Building a searcher from an experiment config, and restoring one from a snapshot."""

from __future__ import annotations

from typing import Any

from dauntless.config import (
    AdaptiveASHASearcher,
    AsyncHalvingSearcher,
    ExperimentConfig,
    Length,
    searcher_length,
)

from ._asha import AdaptiveASHASearch, AsyncHalvingSearch, asha_length
from ._base import SNAPSHOT_VERSION, Searcher
from ._basic import GridSearch, RandomSearch, SingleSearch
from ._errors import SearcherConfigError
from ._rng import new_rng

_SEARCHERS: dict[str, type[Searcher]] = {
    "single": SingleSearch,
    "random": RandomSearch,
    "grid": GridSearch,
    "adaptive_asha": AdaptiveASHASearch,
    "async_halving": AsyncHalvingSearch,
}


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
    else:
        length = cfg.max_length
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


def make_searcher(config: ExperimentConfig, seed: int) -> Searcher:
    """The searcher of an experiment, ready for ``initial_operations()``.

    Args:
        config: the validated experiment config; ``config.searcher.name`` picks the
            searcher (``single``, ``random``, ``grid``, ``adaptive_asha``).
        seed: the experiment seed (``0..2**31-1`` in Determined; up to ``2**32-1`` is
            accepted); all of the search's randomness comes from it.

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
    return _SEARCHERS[config.searcher.name](config, new_rng(seed))


def restore_searcher(config: ExperimentConfig, snapshot: dict[str, Any] | None) -> Searcher:
    """Rebuild a searcher from :meth:`Searcher.snapshot` output.

    The restored searcher returns exactly the operations the original would have for the
    same events from then on.

    Args:
        config: the experiment's config (the one the snapshot's searcher was made with).
        snapshot: the JSON data (``{"version": 1, "searcher": ..., ...}``).

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
        return _SEARCHERS[kind]._from_snapshot(config, snapshot)
    except (KeyError, TypeError, AttributeError, IndexError) as exc:
        raise ValueError(f"malformed searcher snapshot: {exc!r}") from None
