"""``det experiment download`` (the best checkpoints) and ``download-model-def``."""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ._files import unpack as _unpack
from ._util import (
    exit_with_error,
    open_session,
    positive_int,
    write_line,
)


def _download_experiment(args: argparse.Namespace) -> int:
    with open_session(args) as session:
        exp = session.get_experiment(args.experiment_id)["experiment"]
        ckpts = [
            c
            for c in session.get_experiment_checkpoints(args.experiment_id)
            if c["state"] == "COMPLETED"
        ]
        smaller = exp.get("smaller_is_better", True)

        def key(c: Mapping[str, Any]) -> tuple[int, float, int]:
            m = c.get("searcher_metric")
            if not isinstance(m, (int, float)) or not math.isfinite(m):
                return (1, 0.0, -c["total_batches"])
            return (0, m if smaller else -m, -c["total_batches"])

        best = sorted(ckpts, key=key)[: args.top_n]
        if not best:
            exit_with_error(f"experiment {args.experiment_id} has no checkpoint to download")
        for c in best:
            dest = os.path.join(args.output, c["uuid"])
            _unpack(session.download_checkpoint(c["uuid"]), dest)
            write_line(
                f"Checkpoint {c['uuid']} (trial {c['trial_id']}, batches "
                f"{c['total_batches']}, {exp.get('searcher_metric')}="
                f"{c.get('searcher_metric')}) -> {dest}"
            )
    return 0


def _download_model_def(args: argparse.Namespace) -> int:
    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    with open_session(args) as session:
        data = session.request("GET", f"/experiments/{args.experiment_id}/model_def").content
    dest = out / f"experiment_{args.experiment_id}_model_def.tgz"
    dest.write_bytes(data)
    write_line(f"Model definition of experiment {args.experiment_id} saved to {dest}")
    return 0


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add ``download`` and ``download-model-def`` to the ``experiment`` group."""
    p = sub.add_parser("download", help="download the best checkpoints", parents=[common])
    p.add_argument("experiment_id", metavar="ID", type=positive_int)
    p.add_argument("--top-n", type=positive_int, default=1, help="how many (by searcher metric)")
    p.add_argument(
        "-o",
        "--output",
        "--output-dir",
        default="checkpoints",
        help="directory (default checkpoints)",
    )
    p.set_defaults(func=_download_experiment)

    p = sub.add_parser(
        "download-model-def", help="save the experiment's model code (.tgz)", parents=[common]
    )
    p.add_argument("experiment_id", metavar="ID", type=positive_int)
    p.add_argument("--output-dir", default=".", help="directory (default .)")
    p.set_defaults(func=_download_model_def)


__all__ = ["register"]
