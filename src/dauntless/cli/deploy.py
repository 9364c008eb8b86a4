"""``det deploy local``: run a master and agents on this machine."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from dauntless.config import LimitError, load_yaml

from ._local_cluster import (
    LocalClusterError,
    default_data_dir,
    start_local_cluster,
    stop_local_cluster,
)
from ._util import exit_with_error, positive_int, write_line


def _non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}")
    return value


def _data_dir(args: argparse.Namespace) -> Path:
    return Path(args.data_dir).expanduser() if args.data_dir else default_data_dir()


def _cluster_up(args: argparse.Namespace) -> int:
    if args.master_port > 65535:
        exit_with_error(f"--master-port must be in 1..65535, got {args.master_port}")
    data_dir = _data_dir(args)
    master_config = None
    if args.master_config_path:
        try:
            with open(args.master_config_path, "rb") as f:
                master_config = load_yaml(f.read(), "") or {}
        except OSError as exc:
            exit_with_error(f"cannot read {args.master_config_path}: {exc.strerror or exc}")
        except LimitError as exc:
            exit_with_error(f"{args.master_config_path}: {exc}")
        if not isinstance(master_config, dict):
            exit_with_error(f"{args.master_config_path}: the master config must be a mapping")
    write_line(f"Starting a local cluster in {data_dir} ...")
    try:
        state = start_local_cluster(
            data_dir,
            master_port=args.master_port,
            agents=args.agents,
            artificial_slots=args.artificial_slots,
            timeout=args.timeout,
            initial_user_password=args.initial_user_password,
            default_task_user=args.default_task_user,
            master_config=master_config,
        )
    except (LocalClusterError, ValueError) as exc:
        exit_with_error(str(exc))
    write_line(f"Started the master (pid {state.master.pid}) at {state.master_url}")
    write_line(f"  log: {state.master.log}")
    for agent in state.agents:
        write_line(f"Started agent {agent.name} (pid {agent.pid})")
        write_line(f"  log: {agent.log}")
    write_line(f"Data directory: {state.data_dir}")
    write_line(f"Use it with: export DET_MASTER={state.master_url}")
    write_line("Stop it with: det deploy local cluster-down")
    return 0


def _cluster_down(args: argparse.Namespace) -> int:
    data_dir = _data_dir(args)
    try:
        state = stop_local_cluster(data_dir, grace=args.grace)
    except LocalClusterError as exc:
        exit_with_error(str(exc))
    if state is None:
        write_line(f"No local cluster is recorded in {data_dir}; nothing to stop.")
        return 0
    write_line(
        f"Stopped the master (pid {state.master.pid}) and {len(state.agents)} agent(s) "
        f"of {state.data_dir}"
    )
    return 0


def register(subparsers: Any, common: argparse.ArgumentParser) -> None:
    """Add the ``deploy local cluster-up|cluster-down`` commands."""
    group = subparsers.add_parser("deploy", help="run a cluster", parents=[common])
    targets = group.add_subparsers(dest="deploy_target", metavar="TARGET", required=True)
    local = targets.add_parser(
        "local", help="run a master and agents on this machine", parents=[common]
    )
    sub = local.add_subparsers(dest="deploy_command", metavar="COMMAND", required=True)

    data_help = (
        "the cluster's directory (database, checkpoints, logs); default "
        "$DAUNTLESS_DATA_DIR/local-cluster or the user data directory"
    )
    p = sub.add_parser(
        "cluster-up", help="start a master and agents in the background", parents=[common]
    )
    p.add_argument(
        "--master-port", type=positive_int, default=8080, help="the master's port (default 8080)"
    )
    p.add_argument(
        "--agents", type=_non_negative_int, default=1, help="how many agents (default 1)"
    )
    p.add_argument("--data-dir", default=None, help=data_help)
    p.add_argument(
        "--artificial-slots",
        type=_non_negative_int,
        default=None,
        metavar="N",
        help="give each agent N CPU slots instead of discovering devices",
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=60.0,
        help="seconds to wait for the master and agents to come up (default 60)",
    )
    p.add_argument(
        "--initial-user-password",
        default=None,
        metavar="PASSWORD",
        help="the first password of the built-in users admin and determined (default: "
        "empty); applies to a new data directory only",
    )
    p.add_argument(
        "--default-task-user",
        default=None,
        metavar="USER",
        help="run tasks of users without a link (det user link-with-agent-user) as this "
        "user of this host (security.default_task; default: yourself, who deploys the "
        "cluster; another user needs root)",
    )
    p.add_argument(
        "--master-config-path",
        default=None,
        metavar="FILE",
        help="a master config to start the master with (Dauntless's or Determined's "
        "master.yaml: TLS, resource pools, providers, ...); --master-port and --data-dir "
        "still apply",
    )
    p.set_defaults(func=_cluster_up)

    p = sub.add_parser("cluster-down", help="stop the local cluster", parents=[common])
    p.add_argument("--data-dir", default=None, help=data_help)
    p.add_argument(
        "--grace",
        type=float,
        default=10.0,
        help="seconds between SIGTERM and SIGKILL (default 10)",
    )
    p.set_defaults(func=_cluster_down)


__all__ = ["register"]
