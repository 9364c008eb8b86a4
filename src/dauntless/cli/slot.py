"""``det slot|s``: list the slots (GPUs or CPUs) of every agent."""

from __future__ import annotations

import argparse
from typing import Any

from ._util import add_json_flag, open_session, print_json, print_table, write_line

SLOT_COLUMNS = ("Agent ID", "Slot ID", "Type", "Device", "Enabled", "Allocation")


def slot_rows(agents: list[Any]) -> list[list[str]]:
    """Rows of :data:`SLOT_COLUMNS`, agents in the master's order; free slots say FREE."""
    rows = []
    for agent in agents:
        for slot in agent.get("slots") or []:
            rows.append(
                [
                    str(agent.get("id", "")),
                    str(slot.get("id", "")),
                    str(slot.get("type", "")),
                    str(slot.get("device", "")),
                    str(slot.get("enabled", "")),
                    str(slot.get("allocation_id") or "FREE"),
                ]
            )
    return rows


def _list(args: argparse.Namespace) -> int:
    with open_session(args) as session:
        agents = session.list_agents()
    if args.json:
        print_json(
            {
                "slots": [
                    {"agent_id": a.get("id"), **slot}
                    for a in agents
                    for slot in a.get("slots") or []
                ]
            }
        )
        return 0
    print_table(SLOT_COLUMNS, slot_rows(list(agents)))
    return 0


def _switch(args: argparse.Namespace) -> int:
    with open_session(args) as session:
        session.set_slot_enabled(args.agent_id, args.slot_id, args.enabled)
    write_line(
        f"Slot {args.slot_id} of agent {args.agent_id} {'enabled' if args.enabled else 'disabled'}"
    )
    return 0


def register(subparsers: Any, common: argparse.ArgumentParser) -> None:
    """Add the ``slot`` (alias ``s``) command group."""
    group = subparsers.add_parser("slot", aliases=["s"], help="inspect slots", parents=[common])
    sub = group.add_subparsers(dest="slot_command", metavar="COMMAND", required=True)
    p = sub.add_parser("list", aliases=["ls"], help="list every agent's slots", parents=[common])
    add_json_flag(p)
    p.set_defaults(func=_list)
    for action in ("enable", "disable"):
        p = sub.add_parser(action, help=f"{action} one slot of an agent", parents=[common])
        p.add_argument("agent_id", metavar="AGENT_ID")
        p.add_argument("slot_id", metavar="SLOT_ID")
        p.set_defaults(func=_switch, enabled=action == "enable")


__all__ = ["SLOT_COLUMNS", "register", "slot_rows"]
