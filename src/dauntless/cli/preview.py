"""``det preview-search``: the trials and lengths a config's searcher would create.

Nothing runs and no master is asked: the config is validated here and its searcher is
driven by :func:`dauntless.searcher.preview_search`, which assumes that every trial
reports the same metric (so an adaptive search promotes by its tie rule only; the
``Brackets`` table gives the rung lengths its trials may reach). The ``--json`` answer
has the shape of the master's ``POST /api/v1/preview-hp-search``.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from dauntless.config import ConfigError, parse_experiment_config
from dauntless.searcher import PREVIEW_TRIAL_LIMIT, preview_document

from ._util import add_json_flag, exit_with_error, fmt_hparams, print_json, print_table, write_line

MAX_SEED = 2**32 - 1
"""The largest experiment seed the searchers accept."""


def _seed(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer seed, got {text!r}") from None
    if not 0 <= value <= MAX_SEED:
        raise argparse.ArgumentTypeError(f"the seed must be in 0..{MAX_SEED}, got {value}")
    return value


def print_preview(doc: dict[str, Any], source: str) -> None:
    """Print a :func:`preview_document` as tables: brackets (adaptive), trials, totals.

    Args:
        doc: the preview.
        source: where the config came from (shown in the heading).
    """
    summary = doc["summary"]
    fed = (
        f"each trial is fed a synthetic objective ({summary['objective']})"
        if "objective" in summary
        else "every trial is assumed to report the same metric"
    )
    write_line(
        f"Preview of the {summary['searcher']} search of {source} (seed {summary['seed']}); {fed}."
    )
    if "brackets" in summary:
        print_table(
            ["Bracket", "Rung lengths", "Trials", "Max concurrent"],
            [
                [
                    str(i + 1),
                    ", ".join(str(n) for n in b["rungs"]) + f" {b['unit']}",
                    str(b["trials"]),
                    str(b["max_concurrent"]),
                ]
                for i, b in enumerate(summary["brackets"])
            ],
            title="Brackets",
        )
    unit = summary.get("length_unit", "batches")
    if unit is None:
        print_table(
            ["Trial", "H-Params"],
            [[str(i + 1), fmt_hparams(t["hparams"])] for i, t in enumerate(doc["trials"])],
            title="Trials",
        )
        write_line(
            f"Total: {summary['num_trials']} trials; each trains as long as its own code "
            "says (no searcher.max_length)"
        )
        return
    heading = "Lengths (batches)" if unit == "batches" else f"Stopped at ({unit})"
    print_table(
        ["Trial", "H-Params", heading],
        [
            [str(i + 1), fmt_hparams(t["hparams"]), ", ".join(str(n) for n in t["lengths"])]
            for i, t in enumerate(doc["trials"])
        ],
        title="Trials",
    )
    print_table(
        ["Trials", f"Train for ({unit})"],
        [[str(row["trials"]), str(row["batches"])] for row in summary["final_lengths"]],
        title="Summary",
    )
    write_line(f"Total: {summary['num_trials']} trials, {summary['total_batches']} {unit}")


def _preview(args: argparse.Namespace) -> int:
    from dauntless.searcher import SearcherConfigError

    path = args.config_file
    try:
        text = Path(path).expanduser().read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        exit_with_error(
            f"cannot read the config file {path}: {getattr(exc, 'strerror', None) or exc}"
        )
    try:
        config = parse_experiment_config(text)
    except ConfigError as exc:
        exit_with_error(f"the experiment config {path} is invalid", exc.errors)
    seed = args.seed
    if seed is None:
        seed = config.reproducibility.experiment_seed or 0
    method = None
    name = getattr(config.searcher, "method", None)
    if name is not None:
        method = _load_method(str(name), args.model_dir)
    try:
        doc = preview_document(config, seed, method=method)
    except SearcherConfigError as exc:
        exit_with_error(f"the experiment config {path} is invalid", [(exc.field, exc.detail)])
    except ValueError as exc:
        exit_with_error(f"cannot preview {path}", [("searcher", str(exc))])
    if args.json:
        print_json(doc)
    else:
        print_preview(doc, path)
    return 0


def _load_method(name: str, model_dir: str | None) -> Any:
    """The class ``module:Class`` of a custom search method, from ``model_dir``: the
    user's own code, run in the user's own ``det`` process."""
    import importlib.util

    module_name, _, class_name = name.partition(":")
    if model_dir is None:
        exit_with_error(
            f"searcher.method {name}: give the context directory holding it "
            "(det preview-search CONFIG MODEL_DIR)"
        )
    path = Path(model_dir) / (module_name.replace(".", "/") + ".py")
    spec = importlib.util.spec_from_file_location(f"det_preview_{module_name}", path)
    if spec is None or spec.loader is None or not path.is_file():
        exit_with_error(f"searcher.method {name}: no file {path}")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        exit_with_error(f"searcher.method {name}: {path} raised {type(exc).__name__}: {exc}")
    cls = getattr(module, class_name, None)
    if cls is None:
        exit_with_error(f"searcher.method {name}: no {class_name} in {path}")
    return cls


def register(subparsers: Any, common: argparse.ArgumentParser) -> None:
    """Add the ``preview-search`` command.

    Args:
        subparsers: the top-level ``add_subparsers()`` object.
        common: a parent parser with the options every command takes (``-m``).
    """
    p = subparsers.add_parser(
        "preview-search",
        help="print the trials and lengths a config's searcher would create, running nothing",
        parents=[common],
    )
    p.add_argument("config_file", metavar="CONFIG", help="experiment config (YAML)")
    p.add_argument(
        "model_dir",
        metavar="MODEL_DIR",
        nargs="?",
        default=None,
        help="the context directory, for a custom searcher.method (module:Class) in it",
    )
    p.add_argument(
        "--seed",
        type=_seed,
        default=None,
        help="experiment seed to preview with (default: the config's "
        "reproducibility.experiment_seed, else 0; an experiment created without one "
        "gets a random seed, hence other hyperparameters)",
    )
    add_json_flag(p)
    p.set_defaults(func=_preview)


__all__ = ["PREVIEW_TRIAL_LIMIT", "preview_document", "print_preview", "register"]
