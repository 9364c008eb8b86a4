"""What the master does for Determined 0.38 configs and habits (issue 17, part A).

- create: a ``checkpoint_storage`` without ``type`` takes the cluster default's fields
  (as Determined merges it with the master's default); fields this master cannot honour
  are refused naming the field (:func:`dauntless.config.config_refusals`); a
  ``module:Class`` entrypoint without any training length is refused naming both places
  a length can come from; warm-start sources (``searcher.source_trial_id`` /
  ``source_checkpoint_uuid``) must exist and are resolved to one checkpoint uuid that
  every trial starts from.
- validation metrics reach the searcher (0.38 ASHA decides from them); a trial the
  searcher stops is stopped through the preemption path and ends COMPLETED.
- ``continue`` of a finished experiment (reference §7.3) lives here; ``fork`` is
  ``parent_id`` on create (the parent's model definition is reused).

This module holds the pure config steps; the checks that read rows are
:mod:`dauntless.master.models.experiment_checks` (``refuse_unsupported``,
``resolve_warm_start``) and :mod:`dauntless.master.models.experiments`
(``continue_experiment``), and the searcher's side is
:mod:`dauntless.master.models.metrics` (``searcher_sees_validation``) and
:mod:`dauntless.master.models.lifecycle` (``searcher_failed``).
"""

from __future__ import annotations

from typing import Any

from dauntless.config import ConfigError, LimitError, check_tree, load_yaml


def prepare_raw_config(config: str | dict[str, Any], default_storage: dict[str, Any]) -> Any:
    """The user's config as a mapping, with a type-less ``checkpoint_storage`` completed
    from the cluster default (the user's keys win).

    Args:
        config: YAML text or a mapping.
        default_storage: the master's default checkpoint storage (JSON form).

    Returns:
        A new mapping (the input is not changed), or what the YAML holds when it is not a
        mapping (the parser then reports it).

    Raises:
        ConfigError: the text is not valid YAML, or it or the mapping breaks a limit of
            :mod:`dauntless.config._limits` (naming the field).
    """
    try:
        if isinstance(config, (str, bytes)):
            raw = load_yaml(config)
        else:
            check_tree(config)
            raw = config
    except LimitError as exc:
        raise ConfigError(exc.errors) from None
    if not isinstance(raw, dict):
        return raw
    raw = dict(raw)
    storage = raw.get("checkpoint_storage")
    if isinstance(storage, dict) and "type" not in storage:
        merged = dict(default_storage)
        if storage.keys() - {"save_experiment_best", "save_trial_best", "save_trial_latest"}:
            # Location fields of another storage make no sense merged into the default.
            merged = {"type": default_storage["type"]}
        merged.update(storage)
        raw["checkpoint_storage"] = merged
    return raw


def _merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def merge_config_overrides(base: dict[str, Any], override: Any) -> dict[str, Any]:
    """Deep-merge config overrides (YAML text or mapping) into a stored config.

    Raises:
        ConfigError: the overrides are not a YAML mapping, or break a limit of
            :mod:`dauntless.config._limits` (naming the field).
    """
    try:
        if isinstance(override, str):
            override = load_yaml(override) if override.strip() else {}
        else:
            check_tree(override)
    except LimitError as exc:
        raise ConfigError(exc.errors) from None
    if override is None:
        override = {}
    if not isinstance(override, dict):
        raise ConfigError([("", "the config overrides must be a mapping")])
    return _merge(base, override)
