"""``det agent|a``: list the agents registered with the master."""

from __future__ import annotations

import argparse
from typing import Any

from ._util import add_json_flag, fmt_time, open_session, print_json, print_table, write_line

AGENT_COLUMNS = (
    "Agent ID",
    "Hostname",
    "Resource pool",
    "State",
    "Runtime",
    "Slots",
    "Used",
    "Last heartbeat",
)


def agent_row(agent: dict[str, Any]) -> list[str]:
    """One row of :data:`AGENT_COLUMNS`; ``Used`` counts slots with an allocation."""
    slots = agent.get("slots") or []
    used = sum(1 for s in slots if s.get("allocation_id"))
    return [
        str(agent.get("id", "")),
        str(agent.get("hostname", "")),
        str(agent.get("resource_pool", "")),
        str(agent.get("state", "")),
        str((agent.get("runtime") or {}).get("name", "process")),
        str(len(slots)),
        str(used),
        fmt_time(agent.get("last_heartbeat")),
    ]


def _list(args: argparse.Namespace) -> int:
    with open_session(args) as session:
        agents = session.list_agents()
    if args.json:
        print_json({"agents": agents})
        return 0
    print_table(AGENT_COLUMNS, [agent_row(dict(a)) for a in agents])
    return 0


def _switch(args: argparse.Namespace) -> int:
    with open_session(args) as session:
        agent = session.set_agent_enabled(args.agent_id, args.enabled, args.drain)
    state = (
        "enabled" if agent.get("enabled") else ("draining" if agent.get("draining") else "disabled")
    )
    write_line(f"Agent {agent['id']} {state}")
    return 0


def register(subparsers: Any, common: argparse.ArgumentParser) -> None:
    """Add the ``agent`` (alias ``a``) command group."""
    group = subparsers.add_parser("agent", aliases=["a"], help="inspect agents", parents=[common])
    sub = group.add_subparsers(dest="agent_command", metavar="COMMAND", required=True)
    p = sub.add_parser("list", aliases=["ls"], help="list agents", parents=[common])
    add_json_flag(p)
    p.set_defaults(func=_list)
    p = sub.add_parser("enable", help="let the scheduler use an agent", parents=[common])
    p.add_argument("agent_id", metavar="AGENT_ID")
    p.set_defaults(func=_switch, enabled=True, drain=False)
    p = sub.add_parser("disable", help="give an agent no new work", parents=[common])
    p.add_argument("agent_id", metavar="AGENT_ID")
    p.add_argument(
        "--drain", action="store_true", help="let running trials finish (default: preempt them now)"
    )
    p.set_defaults(func=_switch, enabled=False)


__all__ = ["AGENT_COLUMNS", "agent_row", "register"]
