"""``det checkpoint|c``: describe a checkpoint, list an experiment's checkpoints, download
one, delete some, edit its metadata."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from ._files import unpack as _unpack
from ._render import show_checkpoints
from ._util import (
    add_json_flag,
    exit_with_error,
    fmt_bytes,
    fmt_time,
    open_session,
    positive_int,
    print_fields,
    print_json,
    print_table,
    write_line,
)


def _describe(args: argparse.Namespace) -> int:
    with open_session(args) as session:
        ckpt = session.get_checkpoint(args.uuid)
    if args.json:
        print_json({"checkpoint": ckpt})
        return 0
    resources = ckpt.get("resources") or {}
    total = sum(int(v) for v in resources.values() if isinstance(v, (int, float)))
    print_fields(
        [
            ("UUID", ckpt.get("uuid")),
            ("Experiment ID", ckpt.get("experiment_id")),
            ("Trial ID", ckpt.get("trial_id")),
            ("Batches", ckpt.get("total_batches")),
            ("State", ckpt.get("state")),
            ("Report time", fmt_time(ckpt.get("report_time"))),
            ("Storage path", ckpt.get("storage_path") or ""),
            ("Size", fmt_bytes(total)),
        ]
    )
    print_table(
        ["Path", "Size"],
        [[path, fmt_bytes(size)] for path, size in sorted(resources.items())],
        title="Resources",
    )
    metadata = ckpt.get("metadata") or {}
    if metadata:
        write_line("Metadata:")
        write_line(json.dumps(metadata, indent=2, sort_keys=True, default=str))
    return 0


def _list_checkpoints(args: argparse.Namespace) -> int:
    with open_session(args) as session:
        ckpts = session.get_experiment_checkpoints(args.experiment_id)
    return show_checkpoints(ckpts, args.json)


def _download_checkpoint(args: argparse.Namespace) -> int:
    dest = args.output or os.path.join("checkpoints", args.uuid)
    with open_session(args) as session:
        _unpack(session.download_checkpoint(args.uuid), dest)
    write_line(f"Checkpoint {args.uuid} downloaded to {dest}")
    return 0


def _checkpoint_delete(args: argparse.Namespace) -> int:
    uuids = [u.strip() for u in args.checkpoints_uuids.split(",") if u.strip()]
    if not uuids:
        exit_with_error("give one or more checkpoint UUIDs, separated by commas")
    if not args.yes:
        if not sys.stdin.isatty():
            exit_with_error(f"deleting {len(uuids)} checkpoint(s) removes their files; pass --yes")
        answer = input(f"Delete {len(uuids)} checkpoint(s) from storage? [y/N] ")
        if answer.strip().lower() not in ("y", "yes"):
            write_line("Not deleted.")
            return 1
    with open_session(args) as session:
        for uuid in uuids:
            answer = session.request("DELETE", f"/checkpoints/{uuid}").json()
            if isinstance(answer, dict) and answer.get("state") == "DELETING":
                write_line(
                    f"Deleting checkpoint {uuid}: its storage failed; the master retries "
                    "until its files are gone (state DELETING, then DELETED)"
                )
            else:
                write_line(f"Deleted checkpoint {uuid}")
    return 0


def _metadata(args: argparse.Namespace) -> int:
    from dauntless.client import Registry

    with open_session(args) as session:
        reg = Registry(session)
        if args.metadata_command == "add":
            try:
                value = json.loads(args.value)
            except ValueError as exc:
                exit_with_error(f"METADATA: not JSON: {exc}")
            if not isinstance(value, dict):
                exit_with_error("METADATA: must be a JSON object")
            after = reg.add_checkpoint_metadata(args.uuid, value)
        else:
            after = reg.remove_checkpoint_metadata(args.uuid, args.keys)
    print_json(after)
    return 0


def register(subparsers: Any, common: argparse.ArgumentParser) -> None:
    """Add the ``checkpoint`` (alias ``c``) command group."""
    group = subparsers.add_parser(
        "checkpoint", aliases=["c"], help="inspect checkpoints", parents=[common]
    )
    sub = group.add_subparsers(dest="checkpoint_command", metavar="COMMAND", required=True)
    p = sub.add_parser("describe", help="show a checkpoint and its files", parents=[common])
    p.add_argument("uuid", metavar="UUID", help="checkpoint UUID")
    add_json_flag(p)
    p.set_defaults(func=_describe)

    p = sub.add_parser(
        "metadata", help="add or remove a stored checkpoint's metadata", parents=[common]
    )
    msub = p.add_subparsers(dest="metadata_command", metavar="ACTION", required=True)
    q = msub.add_parser("add", help="merge a JSON object into the metadata", parents=[common])
    q.add_argument("uuid", metavar="UUID")
    q.add_argument("value", metavar="METADATA", help="a JSON object")
    q.set_defaults(func=_metadata)
    q = msub.add_parser("remove", help="remove top-level keys", parents=[common])
    q.add_argument("uuid", metavar="UUID")
    q.add_argument("keys", metavar="KEY", nargs="+")
    q.set_defaults(func=_metadata)

    p = sub.add_parser(
        "list", aliases=["ls"], help="list an experiment's checkpoints", parents=[common]
    )
    p.add_argument("experiment_id", metavar="ID", type=positive_int, help="experiment ID")
    add_json_flag(p)
    p.set_defaults(func=_list_checkpoints)
    p = sub.add_parser("download", help="download a checkpoint directory", parents=[common])
    p.add_argument("uuid", metavar="UUID")
    p.add_argument(
        "-o", "--output", "--output-dir", default=None, help="directory (default checkpoints/UUID)"
    )
    p.set_defaults(func=_download_checkpoint)

    p = sub.add_parser(
        "delete", help="delete checkpoints of finished experiments", parents=[common]
    )
    p.add_argument("checkpoints_uuids", metavar="UUIDS", help="comma-separated UUIDs")
    p.add_argument("--yes", "-y", action="store_true", help="do not ask for confirmation")
    p.set_defaults(func=_checkpoint_delete)


__all__ = ["register"]
