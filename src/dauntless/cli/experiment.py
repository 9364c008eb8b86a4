"""``det experiment|e``: create, list, describe and inspect experiments."""

from __future__ import annotations

import argparse
import csv
import io
import json
import sys
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from dauntless.client import (
    build_context_tarball,
)

from . import experiment_control, experiment_files, experiment_fork
from ._failure import failure_text
from ._render import (
    TRIAL_COLUMNS,
    best_metric_cell,
    full_length_batches,
    print_latest_validations,
    show_checkpoints,
    stopped_early,
    trial_row,
)
from ._submit import (
    build_context_with_includes,
    follow_experiment,
    print_warnings,
    test_mode_overrides,
)
from ._submit import load_config as _load_config
from ._util import (
    add_json_flag,
    exit_with_error,
    fmt_duration,
    fmt_number,
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
from .project import register_experiment_move


def _create(args: argparse.Namespace) -> int:
    """``det experiment create CONFIG [MODEL_DEF]``.

    The config is validated by the master, with the same models; the CLI validates it
    itself only when the submission fails (the master refused it, could not be reached,
    or anything else), and then prints the config's field errors if it is invalid, else
    the failure. Why: building the config models cost the CLI 0.3 s of its 0.8 s of CPU
    (issue 37, create -> first metric), while an invalid config gets the same lines as
    before, with or without a master.
    """
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
        try:
            exp = session.create_experiment(
                text,
                context,
                activate=not args.paused,
                project_id=args.project_id,
                template=args.template,
            )
        except Exception:
            if args.template is None:  # with a template the master checks the merged config
                _exit_if_invalid(args.config_file, raw)
            raise
        print_warnings(list(exp.get("warnings", [])))
        write_line(f"Created experiment {exp['id']}")
        if args.follow:
            return follow_experiment(session, int(exp["id"]))
    return 0


def _exit_if_invalid(config_file: str, raw: Any) -> None:
    """Exit through :func:`exit_with_error` with the field errors of the experiment
    config ``raw`` (its YAML text or parsed value, read from ``config_file``) if it is
    invalid; return if it is valid."""
    from dauntless.config import ConfigError, parse_experiment_config

    try:
        parse_experiment_config(raw)
    except ConfigError as exc:
        exit_with_error(f"the experiment config {config_file} is invalid", exc.errors)


def _list(args: argparse.Namespace) -> int:
    from ._experiment_list import list_experiments

    return list_experiments(args)


#: Searchers whose describe adds the search summary (objectives, Pareto front, lineage,
#: a custom method's error): ``GET /experiments/{id}/searcher``.
SUMMARY_SEARCHERS = frozenset({"tpe", "cmaes", "gp", "nsgaii", "pbt", "custom"})


def _describe(args: argparse.Namespace) -> int:
    """``det experiment describe ID... [--metrics] [--csv] [--outdir DIR] [--json]``: one
    experiment and no table flag gets the full report; several, or any of the flags, get
    the tables of experiments, trials and (``--metrics``) every metric report."""
    ids: list[int] = args.experiment_ids
    if len(ids) == 1 and not (args.metrics or args.csv or args.outdir):
        return _report(args, ids[0])
    return _tables(args, ids)


def _report(args: argparse.Namespace, experiment_id: int) -> int:
    with open_session(args) as session:
        detail = session.get_experiment(experiment_id)
        searcher_cfg = (detail["experiment"].get("config") or {}).get("searcher") or {}
        summary = None
        if searcher_cfg.get("name") in SUMMARY_SEARCHERS:
            summary = session.get_json(f"/experiments/{experiment_id}/searcher")
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


def _flat_metric_rows(
    exp_id: int, trial: Mapping[str, Any], metrics: Sequence[Mapping[str, Any]]
) -> list[list[Any]]:
    rows = []
    for m in metrics:
        for name, value in sorted((m.get("values") or {}).items()):
            rows.append([exp_id, trial["id"], m.get("group"), m.get("total_batches"), name, value])
    return rows


def _tables(args: argparse.Namespace, ids: list[int]) -> int:
    with open_session(args) as session:
        details = [session.get_experiment(i) for i in ids]
        metrics = {
            int(t["id"]): session.get_trial_metrics(int(t["id"]))
            for d in details
            for t in (d.get("trials") or [])
            if args.metrics
        }
    if args.json:
        body: dict[str, Any] = {"experiments": details}
        if args.metrics:
            body["metrics"] = {str(k): v for k, v in metrics.items()}
        print_json(body)
        return 0
    exp_cols = ["Experiment ID", "Name", "State", "Searcher", "Best metric", "Trials"]
    exp_rows = [
        [
            d["experiment"]["id"],
            d["experiment"].get("name") or "",
            d["experiment"].get("state"),
            ((d["experiment"].get("config") or {}).get("searcher") or {}).get("name", ""),
            fmt_number(d["experiment"].get("best_searcher_metric")),
            len(d.get("trials") or []),
        ]
        for d in details
    ]
    trial_cols = ["Experiment ID", "Trial ID", "State", "Batches", "H-Params", "Best validation"]
    trial_rows = [
        [
            d["experiment"]["id"],
            t["id"],
            t.get("state"),
            t.get("total_batches"),
            json.dumps(t.get("hparams") or {}, sort_keys=True),
            fmt_number(t.get("best_validation")),
        ]
        for d in details
        for t in sorted(d.get("trials") or [], key=lambda t: int(t["id"]))
    ]
    metric_cols = ["Experiment ID", "Trial ID", "Group", "Batches", "Metric", "Value"]
    metric_rows = [
        row
        for d in details
        for t in (d.get("trials") or [])
        for row in _flat_metric_rows(d["experiment"]["id"], t, metrics.get(int(t["id"]), []))
    ]
    tables = [("experiments", exp_cols, exp_rows), ("trials", trial_cols, trial_rows)]
    if args.metrics:
        tables.append(("metrics", metric_cols, metric_rows))
    if args.outdir:
        out = Path(args.outdir)
        out.mkdir(parents=True, exist_ok=True)
        for name, cols, rows in tables:
            with (out / f"{name}.csv").open("w", newline="") as f:
                writer = csv.writer(f)
                writer.writerow(cols)
                writer.writerows(rows)
        write_line(f"Wrote {', '.join(f'{n}.csv' for n, _, _ in tables)} to {out}")
        return 0
    for name, cols, rows in tables:
        if args.csv:
            buf = io.StringIO()
            writer = csv.writer(buf, lineterminator="\n")
            writer.writerow(cols)
            writer.writerows(rows)
            sys.stdout.write(buf.getvalue())
        else:
            print_table(cols, rows, title=name.capitalize())
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
    p.add_argument("--template", metavar="NAME", help="a config template merged under the config")
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

    p = sub.add_parser(
        "describe", help="show experiments, their trials and metrics", parents=[common]
    )
    p.add_argument("experiment_ids", metavar="ID", type=positive_int, nargs="+")
    p.add_argument("--metrics", action="store_true", help="also every metric report")
    p.add_argument("--csv", action="store_true", help="print CSV tables")
    p.add_argument("--outdir", metavar="DIR", help="write experiments/trials/metrics CSV files")
    p.add_argument("--json", action="store_true", help="print the master's JSON answers")
    p.set_defaults(func=_describe)

    register_experiment_move(sub, common)
    experiment_control.register(sub, common)
    experiment_files.register(sub, common)
    experiment_fork.register(sub, common)


__all__ = ["register"]
