"""``det experiment continue`` and ``det experiment fork`` (Determined habits).

``continue ID [--config-file F] [--config K=V ...] [-f]`` continues a finished experiment
with config overrides (``POST /experiments/continue``). ``fork ID [--config-file F]
[--config K=V ...] [--paused] [-f]`` creates a new experiment from another's config, with
the overrides merged in and the parent's model definition (``POST /experiments`` with
``parent_id``; Determined has it in its API and WebUI)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ._submit import apply_overrides, follow_experiment, print_warnings
from ._util import (
    exit_with_error,
    open_session,
    positive_int,
    write_line,
)


def _merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def _overrides(args: argparse.Namespace) -> dict[str, Any]:
    from dauntless.config import LimitError, load_yaml

    raw: dict[str, Any] = {}
    if args.config_file:
        try:
            loaded = load_yaml(Path(args.config_file).expanduser().read_bytes())
        except (OSError, LimitError) as exc:
            exit_with_error(f"cannot read the config file {args.config_file}: {exc}")
        if loaded is not None and not isinstance(loaded, dict):
            exit_with_error(f"the config file {args.config_file} must hold a mapping")
        raw = loaded or {}
    try:
        apply_overrides(raw, args.config or [])
    except ValueError as exc:
        exit_with_error(str(exc))
    return raw


def _continue(args: argparse.Namespace) -> int:
    overrides = _overrides(args)
    with open_session(args) as session:
        session.continue_experiment(args.experiment_id, overrides or None)
        write_line(f"Continued experiment {args.experiment_id}")
        if args.follow:
            return follow_experiment(session, args.experiment_id)
    return 0


def _fork(args: argparse.Namespace) -> int:
    overrides = _overrides(args)
    with open_session(args) as session:
        parent = session.get_experiment(args.experiment_id)
        config = parent["experiment"]["config"]
        merged = _merge(dict(config), overrides)
        exp = session.create_experiment(
            merged, None, activate=not args.paused, parent_id=args.experiment_id
        )
        print_warnings(list(exp.get("warnings", [])))
        write_line(f"Created experiment {exp['id']} (forked from {args.experiment_id})")
        if args.follow:
            return follow_experiment(session, int(exp["id"]))
    return 0


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add ``continue`` and ``fork`` to ``det experiment``."""
    for name, func, help_text in (
        ("continue", _continue, "continue a finished experiment, with config overrides"),
        ("fork", _fork, "create an experiment from another's config (with overrides) and code"),
    ):
        p = sub.add_parser(name, help=help_text, parents=[common])
        p.add_argument("experiment_id", metavar="ID", type=positive_int, help="experiment ID")
        p.add_argument("--config-file", help="YAML file of config fields to override")
        p.add_argument(
            "--config",
            action="append",
            metavar="KEY=VALUE",
            help="override a config field, e.g. --config searcher.max_length.batches=200",
        )
        p.add_argument(
            "-f",
            "--follow",
            "--follow-first-trial",
            dest="follow",
            action="store_true",
            help="stream the first trial's logs until the experiment ends",
        )
        if name == "fork":
            p.add_argument("--paused", action="store_true", help="create it paused")
        p.set_defaults(func=func)


__all__ = ["register"]
