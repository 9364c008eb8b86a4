"""The agent: slot discovery, task launch, log shipping and heartbeats."""

from ._agent import Agent, task_command
from ._logs import LogShipper
from ._slots import Slot, discover_slots

__all__ = ["Agent", "LogShipper", "Slot", "discover_slots", "task_command"]
