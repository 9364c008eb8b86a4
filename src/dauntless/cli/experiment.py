"""``det experiment|e``: create, list, describe and inspect experiments."""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path
from typing import Any

import yaml

from dauntless.client import (
    Session,
    build_context_tarball,
    experiment_done_checker,
    follow_trial_logs,
    wait_for_first_trial,
)

from . import _util
from ._failure import failure_text
from ._render import (
    TRIAL_COLUMNS,
    best_metric_cell,
    format_log_line,
    full_length_batches,
    print_latest_validations,
    show_checkpoints,
    stopped_early,
    trial_row,
)
from ._util import (
    add_json_flag,
    exit_with_error,
    fmt_duration,
    fmt_percent,
    fmt_time,
    note,
    open_session,
    positive_int,
    print_fields,
    print_json,
    print_table,
    write_line,
)


def apply_overrides(raw: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply ``--config key.sub=value`` overrides to a parsed config, in order.

    Values are parsed as YAML (``0.1`` is a float, ``true`` a bool, ``[1, 2]`` a list);
    missing intermediate keys become mappings.

    Args:
        raw: the parsed config mapping (changed in place and returned).
        overrides: ``"dotted.key=value"`` strings.

    Returns:
        ``raw``.

    Raises:
        ValueError: for an override without ``=`` or an empty key part, a value that is
            not YAML, or a path that runs through a non-mapping.
    """
    from dauntless.config import LimitError, load_yaml  # not at import: `det e list` is cheap

    for item in overrides:
        key, sep, text = item.partition("=")
        parts = key.strip().split(".")
        if not sep or not all(p.strip() for p in parts):
            raise ValueError(
                f"--config {item!r}: expected KEY=VALUE, e.g. searcher.max_length.batches=100"
            )
        try:
            value = load_yaml(text, key.strip()) if text.strip() else ""
        except LimitError as exc:
            raise ValueError(f"--config {item!r}: {exc}") from None
        node: Any = raw
        for depth, part in enumerate(parts[:-1]):
            child = node.get(part)
            if child is None:
                child = node[part] = {}
            if not isinstance(child, dict):
                where = ".".join(parts[: depth + 1])
                raise ValueError(f"--config {item!r}: {where} is not a mapping in the config")
            node = child
        node[parts[-1]] = value
    return raw


def _load_config(path: str, overrides: list[str]) -> tuple[str, Any]:
    """Read the config file; returns (text to upload, value to validate)."""
    from dauntless.config import LimitError, load_yaml

    try:
        text = Path(path).expanduser().read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        exit_with_error(
            f"cannot read the config file {path}: {getattr(exc, 'strerror', None) or exc}"
        )
    if not overrides:
        return text, text
    try:
        raw = load_yaml(text)
    except LimitError as exc:
        exit_with_error(f"the config file {path}: {exc}")
    if not isinstance(raw, dict):
        exit_with_error(f"the config file {path} must hold a mapping, got {type(raw).__name__}")
    try:
        apply_overrides(raw, overrides)
    except ValueError as exc:
        exit_with_error(str(exc))
    return yaml.safe_dump(raw, sort_keys=False), raw


def follow_experiment(session: Session, experiment_id: int) -> int:
    """Stream the first trial's logs until the experiment ends; print its final state.

    Returns:
        0 when the experiment COMPLETED, 130 when interrupted (Ctrl-C), else 1.
    """
    try:
        return _follow(session, experiment_id)
    except KeyboardInterrupt:
        note(
            f"Stopped following; experiment {experiment_id} keeps running "
            f"(see `det experiment describe {experiment_id}`)."
        )
        return 130


def _follow(session: Session, experiment_id: int) -> int:
    def lost(exc: Exception) -> None:
        note(f"Lost the connection to the master ({exc}); retrying...")

    trial, state = wait_for_first_trial(
        session, experiment_id, poll_interval=_util.POLL_INTERVAL, on_connection_lost=lost
    )
    if trial is not None:
        note(f"Following the logs of trial {trial['id']} of experiment {experiment_id}")
        done, last_state = experiment_done_checker(session, experiment_id, on_connection_lost=lost)
        for line in follow_trial_logs(
            session,
            int(trial["id"]),
            done=done,
            poll_interval=_util.POLL_INTERVAL,
            on_connection_lost=lost,
        ):
            write_line(format_log_line(line))
        state = last_state() or state
    write_line(f"Experiment {experiment_id} finished: {state}")
    return 0 if state == "COMPLETED" else 1


def print_warnings(warnings: list[str]) -> None:
    """Print the master's config warnings (see :mod:`.experiment_compat`)."""
    from .experiment_compat import print_warnings as _print

    _print(warnings)


def _create(args: argparse.Namespace) -> int:
    if args.template is not None:
        exit_with_error(
            f"--template {args.template}: this master has no config templates; merge the "
            "template's fields into the config file (or use --config KEY=VALUE)"
        )
    overrides = list(args.config or [])
    if args.test_mode:
        overrides += test_mode_overrides()
    text, raw = _load_config(args.config_file, overrides)
    if args.test_mode and isinstance(raw, dict):
        searcher = raw.get("searcher")
        if not isinstance(searcher, dict):
            searcher = {}
        raw["searcher"] = {
            "name": "single",
            "metric": searcher.get("metric"),
            "smaller_is_better": searcher.get("smaller_is_better", True),
            "max_length": {"batches": 1},
        }
        raw["name"] = f"{raw.get('name') or 'experiment'} (test mode)"
        text = yaml.safe_dump(raw, sort_keys=False)
    from dauntless.config import ConfigError, parse_experiment_config

    try:
        parse_experiment_config(raw)
    except ConfigError as exc:
        exit_with_error(f"the experiment config {args.config_file} is invalid", exc.errors)
    if args.include and args.context is None:
        exit_with_error("-i/--include needs a context directory (the model_def argument)")
    context = None
    if args.context is not None:
        context = (
            build_context_with_includes(args.context, args.include)
            if args.include
            else build_context_tarball(args.context)
        )
    if args.test_mode:
        args.follow = True
        note("Test mode: one batch of training, a validation and a checkpoint, no restarts")
    with open_session(args) as session:
        exp = session.create_experiment(
            text, context, activate=not args.paused, project_id=args.project_id
        )
        print_warnings(list(exp.get("warnings", [])))
        write_line(f"Created experiment {exp['id']}")
        if args.follow:
            return follow_experiment(session, int(exp["id"]))
    return 0


def _list(args: argparse.Namespace) -> int:
    from ._experiment_list import list_experiments

    return list_experiments(args)


def test_mode_overrides() -> list[str]:
    """``--config`` overrides of ``det experiment create -t/--test-mode`` (Determined's
    deprecated test mode): with the searcher replaced by ``single`` of one batch (same
    metric), the experiment trains one batch, validates and checkpoints once, with one
    trial and no restarts."""
    return [
        "min_validation_period={batches: 1}",
        "min_checkpoint_period={batches: 1}",
        "scheduling_unit=1",
        "max_restarts=0",
    ]


def build_context_with_includes(context: str, includes: list[str]) -> bytes:
    """The context tarball of ``context`` plus each ``-i/--include`` path, put under its
    base name (as Determined does); a file or directory whose name is already taken in
    the context is refused.

    Raises:
        SystemExit: (via :func:`exit_with_error`) a missing path or a name clash.
    """
    import shutil
    import tempfile

    with tempfile.TemporaryDirectory(prefix="dauntless-context-") as tmp:
        staged = Path(tmp) / "context"
        shutil.copytree(context, staged, symlinks=True)
        for inc in includes:
            src = Path(inc).expanduser()
            if not src.exists():
                exit_with_error(f"-i/--include {inc}: no such file or directory")
            dest = staged / src.resolve().name
            if dest.exists():
                exit_with_error(
                    f"-i/--include {inc}: {dest.name} already exists in the context directory"
                )
            if src.is_dir():
                shutil.copytree(src, dest, symlinks=True)
            else:
                shutil.copy2(src, dest)
        return build_context_tarball(staged)


def describe_one(args: argparse.Namespace) -> int:
    """``det experiment describe ID`` for one experiment (the plain report)."""
    return _describe(args)


#: Searchers whose describe adds the search summary (objectives, Pareto front, lineage,
#: a custom method's error): ``GET /experiments/{id}/searcher``.
SUMMARY_SEARCHERS = frozenset({"tpe", "cmaes", "gp", "nsgaii", "pbt", "custom"})


def _describe(args: argparse.Namespace) -> int:
    with open_session(args) as session:
        detail = session.get_experiment(args.experiment_id)
        searcher_cfg = (detail["experiment"].get("config") or {}).get("searcher") or {}
        summary = None
        if searcher_cfg.get("name") in SUMMARY_SEARCHERS:
            summary = session.get_json(f"/experiments/{args.experiment_id}/searcher")
    if args.json:
        out: dict[str, Any] = dict(detail)
        if summary is not None:
            out["search"] = summary
        print_json(out)
        return 0
    exp = detail["experiment"]
    trials = sorted(detail.get("trials") or [], key=lambda t: int(t.get("id", 0)))
    config = exp.get("config") or {}
    searcher = config.get("searcher") or {}
    order = "smaller is better" if exp.get("smaller_is_better", True) else "larger is better"
    metric = exp.get("searcher_metric") or searcher.get("metric")
    print_fields(
        [
            ("Experiment ID", exp.get("id")),
            ("Name", exp.get("name") or ""),
            ("Description", exp.get("description") or ""),
            ("State", exp.get("state")),
            ("Archived", exp.get("archived")),
            ("Progress", fmt_percent(exp.get("progress"))),
            ("Searcher", searcher.get("name", "")),
            ("Searcher metric", f"{metric} ({order})" if metric else ""),
            ("Best metric", best_metric_cell(exp)),
            ("Seed", exp.get("seed")),
            ("Owner", exp.get("owner") or ""),
            ("Start time", fmt_time(exp.get("start_time"))),
            ("End time", fmt_time(exp.get("end_time"))),
            ("Duration", fmt_duration(exp.get("start_time"), exp.get("end_time"))),
            ("Trials", exp.get("num_trials", len(trials))),
            *_search_fields(config, trials),
        ]
    )
    print_table(TRIAL_COLUMNS, [trial_row(t, config) for t in trials], title="Trials")
    print_latest_validations(trials)
    errors = [(t, failure_text(t)) for t in trials if t.get("state") == "ERROR"]
    if errors:
        print_table(
            ["Trial", "Why it failed"],
            [[str(t.get("id")), text or "no failure recorded"] for t, text in errors],
            title="Errors",
        )
    if summary is not None:
        print_search_summary(summary)
    return 0


def print_search_summary(summary: dict[str, Any]) -> None:
    """The describe sections of ``GET /experiments/{id}/searcher``: the Pareto front of
    a multi-objective search, the trials' lineage (PBT), a custom method's error."""
    front = summary.get("pareto_front")
    if front is not None:
        names = [o["name"] for o in summary["objectives"]]
        on_front = set(front["front"])
        print_table(
            ["Trial", *names],
            [
                [str(p["trial_id"]), *(f"{v:.6g}" for v in p["values"])]
                for p in front["points"]
                if p["trial_id"] in on_front
            ],
            title=f"Pareto front ({len(on_front)} of {len(front['points'])} trials)",
        )
    parents = [row for row in summary.get("lineage") or [] if row.get("parent_id") is not None]
    if parents:
        print_table(
            ["Trial", "Parent (warm-started from)"],
            [[str(r["trial_id"]), str(r["parent_id"])] for r in parents],
            title="Lineage",
        )
    if summary.get("error"):
        write_line("Searcher error (the custom search method raised):")
        write_line(str(summary["error"]).rstrip("\n"))


def _search_fields(config: dict[str, Any], trials: list[Any]) -> list[tuple[str, str]]:
    """Describe lines about the search: trials per state, the full trial length, and
    (for an adaptive search, or when any) the trials the searcher stopped early."""
    if not trials:
        return []
    states = Counter(str(t.get("state", "")) for t in trials)
    fields = [("Trial states", ", ".join(f"{k} {states[k]}" for k in sorted(states)))]
    searcher = config.get("searcher") or {}
    if searcher.get("max_time") is not None and searcher.get("time_metric"):
        fields.append(("Trial length", f"{searcher['max_time']} {searcher['time_metric']}"))
    elif isinstance(searcher.get("max_length"), dict):
        unit, value = next(
            ((k, v) for k, v in searcher["max_length"].items() if v is not None), ("", "")
        )
        fields.append(("Trial length", f"{value} {unit}".strip()))
    early = sum(stopped_early(t, full_length_batches(config, t.get("hparams"))) for t in trials)
    if early or searcher.get("name") == "adaptive_asha":
        fields.append(("Stopped early", f"{early} of {len(trials)} trials"))
    return fields


def _list_trials(args: argparse.Namespace) -> int:
    with open_session(args) as session:
        detail = session.get_experiment(args.experiment_id)
    trials = detail.get("trials") or []
    if args.json:
        print_json({"trials": trials})
        return 0
    config = detail["experiment"].get("config") or {}
    rows = [trial_row(t, config) for t in sorted(trials, key=lambda t: int(t["id"]))]
    print_table(TRIAL_COLUMNS, rows)
    return 0


def _list_checkpoints(args: argparse.Namespace) -> int:
    with open_session(args) as session:
        ckpts = session.get_experiment_checkpoints(args.experiment_id)
    return show_checkpoints(ckpts, args.json)


def _config(args: argparse.Namespace) -> int:
    with open_session(args) as session:
        config = session.get_experiment(args.experiment_id)["experiment"].get("config") or {}
    if args.json:
        print_json(config)
    else:
        write_line(yaml.safe_dump(config, sort_keys=False).rstrip("\n"))
    return 0


def register(subparsers: Any, common: argparse.ArgumentParser) -> None:
    """Add the ``experiment`` (alias ``e``) command group.

    Args:
        subparsers: the top-level ``add_subparsers()`` object.
        common: a parent parser with the options every command takes (``-m``).
    """
    group = subparsers.add_parser(
        "experiment", aliases=["e"], help="create and inspect experiments", parents=[common]
    )
    sub = group.add_subparsers(dest="experiment_command", metavar="COMMAND", required=True)

    p = sub.add_parser("create", help="submit an experiment", parents=[common])
    p.add_argument("config_file", metavar="CONFIG", help="experiment config (YAML)")
    p.add_argument(
        "context",
        metavar="CONTEXT",
        nargs="?",
        default=None,
        help="context directory with the model code (omit to upload no code)",
    )
    p.add_argument(
        "-f",
        "--follow",
        "--follow-first-trial",
        dest="follow",
        action="store_true",
        help="stream the first trial's logs until the experiment ends; exit 0 only if it COMPLETED",
    )
    p.add_argument("--paused", action="store_true", help="create the experiment paused")
    p.add_argument(
        "-i",
        "--include",
        action="append",
        metavar="PATH",
        help="also upload this file or directory, under its base name (repeatable)",
    )
    p.add_argument("--template", metavar="NAME", help="config template (none exist here: error)")
    p.add_argument(
        "--project_id",
        "--project-id",
        dest="project_id",
        type=positive_int,
        default=None,
        help="create it in this project (over the config's workspace and project)",
    )
    p.add_argument(
        "-t",
        "--test-mode",
        action="store_true",
        help="run one batch of training, one validation and one checkpoint, then report",
    )
    p.add_argument(
        "--config",
        action="append",
        metavar="KEY=VALUE",
        help="override a config field, e.g. --config searcher.max_length.batches=200 (repeatable)",
    )
    p.set_defaults(func=_create)

    p = sub.add_parser(
        "list",
        aliases=["ls"],
        help="list and search experiments",
        description="List experiments, filtered, sorted and paged on the master "
        "(docs/protocol.md, 'Searching experiments').",
        parents=[common],
    )
    from ._experiment_list import add_list_arguments

    add_list_arguments(p)
    add_json_flag(p)
    p.set_defaults(func=_list)

    for name, aliases, func, help_text in (
        ("list-trials", ["lt"], _list_trials, "list an experiment's trials"),
        ("list-checkpoints", ["lc"], _list_checkpoints, "list an experiment's checkpoints"),
        ("config", [], _config, "print an experiment's resolved config (YAML)"),
    ):
        p = sub.add_parser(name, aliases=aliases, help=help_text, parents=[common])
        p.add_argument("experiment_id", metavar="ID", type=positive_int, help="experiment ID")
        add_json_flag(p)
        p.set_defaults(func=func)

    from .compat_cmds import register_experiment_extras
    from .experiment_compat import register_compat_commands
    from .lifecycle import register_experiment_commands
    from .project import register_experiment_move

    register_experiment_move(sub, common)
    register_experiment_extras(sub, common)
    register_experiment_commands(sub, common)
    register_compat_commands(sub, common)


__all__ = ["apply_overrides", "follow_experiment", "register"]
