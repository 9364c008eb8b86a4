"""Merging a config template under an experiment's or a task's config (issue 31 scope 5).

Determined applies a template at submit time, on the master: the submitted config is laid
over the template's, field by field (reference §6.1, from Determined's
``master/pkg/schemas/merge.go`` and the custom mergers of its ``expconf`` types). The
rules, each from that source:

* mappings merge recursively; where both give a scalar, the config's wins;
* a list in the config replaces the template's list, except:

  * ``bind_mounts`` and ``resources.devices``: the config's entries, then the
    template's entries whose ``container_path`` the config does not already use;
  * ``environment.environment_variables``: the template's entries first and the
    config's after them (a later ``NAME=value`` wins), per device type when either is
    given per type (``{cpu: [...], cuda: [...], rocm: [...]}``);
  * ``environment.proxy_ports``: the config's, then the template's ports the config
    does not declare;
  * ``log_policies``: the config's, then the template's policies of a name the config
    does not use (unnamed template policies are kept unless the same policy is there);

* ``checkpoint_storage`` and ``searcher`` whose ``type`` / ``name`` differ: the config's
  whole section wins (a template's ``s3`` keys never leak into a ``shared_fs``);
* a hyperparameter whose ``type`` differs between the two: the config's wins whole;
  otherwise hyperparameters merge per key like any mapping.

Everything here is pure: no I/O, no clock.
"""

from __future__ import annotations

import copy
from typing import Any

__all__ = ["merge_template"]

_DEVICE_TYPES = ("cpu", "cuda", "rocm")


def merge_template(template: dict[str, Any], config: dict[str, Any]) -> dict[str, Any]:
    """The config ``config`` laid over the template ``template`` (new objects; neither
    argument is changed).

    Args:
        template: a template's config (a mapping as parsed from its YAML).
        config: the submitted config (a mapping).

    Returns:
        The merged config, by the rules of this module's docstring.

    Raises:
        TypeError: ``template`` or ``config`` is not a mapping.
    """
    if not isinstance(template, dict) or not isinstance(config, dict):
        raise TypeError(
            "a template and a config must both be mappings, got "
            f"{type(template).__name__} and {type(config).__name__}"
        )
    return _merge(template, config, ())


def _merge(tpl: Any, cfg: Any, path: tuple[str, ...]) -> Any:
    if cfg is None:
        return copy.deepcopy(tpl)
    if tpl is None:
        return copy.deepcopy(cfg)
    if isinstance(tpl, dict) and isinstance(cfg, dict):
        if _replaces_whole(tpl, cfg, path):
            return copy.deepcopy(cfg)
        out = {k: copy.deepcopy(v) for k, v in tpl.items()}
        for key, value in cfg.items():
            out[key] = _merge(tpl.get(key), value, (*path, str(key)))
        return out
    if path == ("environment", "environment_variables"):
        return _merge_env(tpl, cfg)
    if isinstance(tpl, list) and isinstance(cfg, list):
        if path in (("bind_mounts",), ("resources", "devices")):
            return _merge_by_key(tpl, cfg, _container_path)
        if path == ("environment", "proxy_ports"):
            return _merge_by_key(tpl, cfg, lambda p: _get(p, "proxy_port"))
        if path == ("log_policies",):
            return _merge_by_key(tpl, cfg, _policy_key)
    return copy.deepcopy(cfg)


def _replaces_whole(tpl: dict[str, Any], cfg: dict[str, Any], path: tuple[str, ...]) -> bool:
    """Whether the config's mapping at ``path`` replaces the template's whole: a
    storage of another ``type``, a searcher of another ``name``, a hyperparameter of
    another ``type``."""
    if path == ("checkpoint_storage",):
        key = "type"
    elif path == ("searcher",):
        key = "name"
    elif len(path) >= 2 and path[0] == "hyperparameters":
        key = "type"
    else:
        return False
    return key in cfg and key in tpl and cfg[key] != tpl[key]


def _get(item: Any, key: str) -> Any:
    return item.get(key) if isinstance(item, dict) else None


def _container_path(item: Any) -> Any:
    """A bind mount's or device's ``container_path`` (devices may be
    ``"/host:/container[:mode]"`` strings)."""
    if isinstance(item, str):
        parts = item.split(":")
        return parts[1] if len(parts) > 1 else parts[0]
    return _get(item, "container_path")


def _policy_key(item: Any) -> Any:
    name = _get(item, "name")
    return ("name", name) if name else ("policy", repr(item))


def _merge_by_key(tpl: list[Any], cfg: list[Any], key: Any) -> list[Any]:
    used = {key(item) for item in cfg}
    extra = [item for item in tpl if key(item) is None or key(item) not in used]
    return copy.deepcopy(cfg) + copy.deepcopy(extra)


def _merge_env(tpl: Any, cfg: Any) -> Any:
    """Environment variables: the template's first, the config's after them."""
    if isinstance(tpl, list) and isinstance(cfg, list):
        return [*tpl, *cfg]
    if isinstance(tpl, dict) or isinstance(cfg, dict):
        t = tpl if isinstance(tpl, dict) else {d: list(tpl or []) for d in _DEVICE_TYPES}
        c = cfg if isinstance(cfg, dict) else {d: list(cfg or []) for d in _DEVICE_TYPES}
        keys = list(dict.fromkeys([*t, *c]))
        return {k: [*(t.get(k) or []), *(c.get(k) or [])] for k in keys}
    return copy.deepcopy(cfg)
