"""``det job list`` and ``det job update``: the scheduler's queue of experiments and
tasks (``GET /api/v1/job-queues``, ``PATCH /api/v1/jobs/{job_id}``), as Determined's
``det job`` commands."""

from __future__ import annotations

import argparse
import time
from typing import Any

from ._util import add_json_flag, open_session, print_json, print_table

COLUMNS = (
    "#",
    "Job ID",
    "Type",
    "Name",
    "Owner",
    "Pool",
    "State",
    "Priority",
    "Weight",
    "Slots",
    "Submitted",
)


def _priority(job: dict[str, Any]) -> str:
    if job["priority"] is None:
        return f"{job['effective_priority']} (default)"
    return str(job["priority"])


def _list(args: argparse.Namespace) -> int:
    params = {"resource_pool": args.resource_pool} if args.resource_pool else None
    with open_session(args) as session:
        jobs = session.get_json("/job-queues", params=params)["jobs"]
    if args.json:
        print_json({"jobs": jobs})
        return 0
    print_table(
        COLUMNS,
        [
            [
                str(j["queue_position"]),
                j["job_id"],
                j["type"],
                j["name"],
                j["owner"],
                j["resource_pool"],
                j["state"],
                _priority(j),
                f"{j['weight']:g}",
                f"{j['allocated_slots']}/{j['requested_slots']}",
                time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(j["submission_time"])),
            ]
            for j in jobs
        ],
    )
    return 0


def _update(args: argparse.Namespace) -> int:
    body = {"priority": args.priority} if args.priority is not None else {"weight": args.weight}
    with open_session(args) as session:
        job = session.request("PATCH", f"/jobs/{args.job_id}", json=body).json()["job"]
    field = "priority" if args.priority is not None else "weight"
    print(f"Job {job['job_id']}: {field} {job[field]}, queue position {job['queue_position']}")
    return 0


def register(subparsers: Any, common: argparse.ArgumentParser) -> None:
    """Add the ``job`` (alias ``j``) command group."""
    group = subparsers.add_parser(
        "job", aliases=["j"], help="inspect and reorder the job queue", parents=[common]
    )
    sub = group.add_subparsers(dest="job_command", metavar="COMMAND", required=True)
    p = sub.add_parser(
        "list", aliases=["ls"], help="list queued and running jobs", parents=[common]
    )
    p.add_argument("-p", "--resource-pool", default=None, help="only this resource pool")
    add_json_flag(p)
    p.set_defaults(func=_list)
    u = sub.add_parser(
        "update", help="change a job's priority or fair-share weight", parents=[common]
    )
    u.add_argument("job_id", help="a job id from `det job list` (experiment-3, task-...)")
    which = u.add_mutually_exclusive_group(required=True)
    which.add_argument(
        "--priority", type=int, help="1..99, smaller runs first (priority scheduler)"
    )
    which.add_argument("--weight", type=float, help="> 0, the fair-share weight")
    u.set_defaults(func=_update)
