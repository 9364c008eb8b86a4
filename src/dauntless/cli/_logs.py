"""Log lines for ``det trial logs``, ``det experiment logs`` and the task commands:
Determined's filters ``--head N``, ``--tail N``, ``--rank-id N`` and ``--level LEVEL``, and
one printed line (JSON Lines with ``--json``)."""

from __future__ import annotations

import argparse
import collections
import json
import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from ._render import (
    format_log_line,
)
from ._util import (
    positive_int,
    write_line,
)

LOG_LEVELS = ("TRACE", "DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
"""Determined's log levels, lowest first (``--level X`` keeps X and above)."""


_LEVEL_RE = re.compile(r"^(?:\[rank=\d+\]\s*)?(TRACE|DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)\b:?")


def add_log_filters(p: argparse.ArgumentParser) -> None:
    """Add ``--head``, ``--tail``, ``--rank-id`` and ``--level`` to a logs command."""
    p.add_argument("--head", type=positive_int, metavar="N", help="only the first N lines")
    p.add_argument("--tail", type=positive_int, metavar="N", help="only the last N lines")
    p.add_argument("--rank-id", type=int, metavar="N", help="only lines of rank N")
    p.add_argument(
        "--level",
        type=str.upper,
        choices=LOG_LEVELS,
        metavar="LEVEL",
        help=f"only lines at LEVEL or above ({', '.join(LOG_LEVELS)})",
    )


_WARNING_RE = re.compile(r":\d+: \w*Warning: ")


_RANK_RE = re.compile(r"^\[rank=(\d+)\]")


def line_rank(line: Mapping[str, Any]) -> int | None:
    """The rank of a log line: its ``rank_id``, else the ``[rank=N]`` prefix the rank
    launcher (:mod:`dauntless.launch.wrap_rank`) wrote; None for lines of no rank."""
    if line.get("rank_id") is not None:
        return int(line["rank_id"])
    m = _RANK_RE.match(str(line.get("log", "")))
    return int(m.group(1)) if m else None


def line_level(line: Mapping[str, Any]) -> str:
    """The level of a log line: the ``LEVEL:`` it starts with (Python logging's format,
    after any ``[rank=N]`` prefix); else WARNING for a Python warning
    (``file:line: SomeWarning: ...``); else INFO for stdout and ERROR for stderr."""
    text = str(line.get("log", ""))
    m = _LEVEL_RE.match(text)
    if m:
        level = m.group(1)
        return "WARNING" if level == "WARN" else level
    if _WARNING_RE.search(text):
        return "WARNING"
    return "ERROR" if line.get("stdtype") == "stderr" else "INFO"


def filter_lines(
    lines: Iterable[Mapping[str, Any]], args: argparse.Namespace
) -> Iterator[Mapping[str, Any]]:
    """Apply the log filters of ``args`` (``--rank-id``, ``--level``, ``--head``,
    ``--tail``) to log lines, in order. ``--tail`` reads to the end first."""
    rank = getattr(args, "rank_id", None)
    level = getattr(args, "level", None)
    floor = LOG_LEVELS.index(level) if level else 0
    head = getattr(args, "head", None)
    tail = getattr(args, "tail", None)

    def keep(line: Mapping[str, Any]) -> bool:
        if rank is not None and line_rank(line) != rank:
            return False
        return not level or LOG_LEVELS.index(line_level(line)) >= floor

    chosen: Iterator[Mapping[str, Any]] = (line for line in lines if keep(line))
    if tail is not None:
        chosen = iter(collections.deque(chosen, maxlen=tail))
    for n, line in enumerate(chosen):
        if head is not None and n >= head:
            return
        yield line


def print_log_line(line: Mapping[str, Any], as_json: bool, prefix: str = "") -> None:
    """One log line: JSON Lines with ``--json``, else ``[rank=N] text``."""
    if as_json:
        write_line(json.dumps(line))
    else:
        write_line(prefix + format_log_line(line))


__all__ = [
    "LOG_LEVELS",
    "add_log_filters",
    "filter_lines",
    "line_level",
    "line_rank",
    "print_log_line",
]
