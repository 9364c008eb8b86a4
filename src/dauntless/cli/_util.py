"""Helpers shared by the command modules: sessions, errors, JSON, tables, formatting."""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NoReturn

from dauntless.client import APIError, MasterUnreachableError, Session

if TYPE_CHECKING:  # rich is imported where a table is drawn: `det e list` draws none
    from rich.console import Console
    from rich.table import Table

#: Seconds between polls of the follow loops (tests lower it).
POLL_INTERVAL = 0.5


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1 (an experiment or trial ID).

    Raises:
        argparse.ArgumentTypeError: for anything else.
    """
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def add_json_flag(parser: argparse.ArgumentParser) -> None:
    """Add ``--json`` (print the master's JSON answer) to a read command."""
    parser.add_argument("--json", action="store_true", help="print the master's JSON answer")


def open_session(args: argparse.Namespace, **kwargs: Any) -> Session:
    """A :class:`Session` for the master named by ``-m/--master`` (or ``DET_MASTER``),
    acting as ``-u/--user`` and verifying TLS with ``--cert-file`` when given; it
    prints the cluster message, if one shows, to stderr once.

    Args:
        args: the parsed command line; its ``master``, ``user`` and ``cert_file``
            attributes may be None or absent.
        **kwargs: passed on to :class:`Session` (``timeout``, ``retries``).

    Raises:
        SystemExit: (1) through :func:`exit_with_error` when the master URL or the CA
            bundle is invalid.
    """
    kwargs.setdefault("user", getattr(args, "user", None))
    kwargs.setdefault("cert_file", getattr(args, "cert_file", None))
    try:
        session = Session(getattr(args, "master", None), **kwargs)
        session.show_cluster_message = True  # the admins' cluster message, on stderr
        return session
    except ValueError as exc:
        exit_with_error(str(exc) if "CA bundle" in str(exc) else f"invalid master address: {exc}")


def exit_with_error(
    message: str,
    errors: Iterable[tuple[str, str] | Mapping[str, str]] | None = None,
    code: int = 1,
) -> NoReturn:
    """Print ``Error: <message>`` and field errors (one a line) to stderr, then exit.

    Args:
        message: the one-line problem.
        errors: ``(field, message)`` pairs or ``{"field", "message"}`` dicts, printed as
            ``  field: message``.
        code: the exit status (non-zero).

    Raises:
        SystemExit: always, with ``code``.
    """
    lines = [f"Error: {message}"]
    for item in errors or []:
        if isinstance(item, Mapping):
            field, msg = str(item.get("field") or ""), str(item.get("message") or "")
        else:
            field, msg = item
        lines.append(f"  {field}: {msg}" if field else f"  {msg}")
    sys.stderr.write("\n".join(lines) + "\n")
    sys.stderr.flush()
    raise SystemExit(code)


def exit_with_api_error(exc: APIError) -> NoReturn:
    """Report an error answer from the master (see :func:`exit_with_error`)."""
    message = exc.detail
    if exc.status >= 500:
        message += f" (HTTP {exc.status}: the master failed; its log has the details)"
    exit_with_error(message, exc.errors)


def exit_unreachable(exc: MasterUnreachableError) -> NoReturn:
    """Report a master that cannot be reached, and how to point at another one."""
    exit_with_error(
        f"{exc}. Is a master running there? Start a local one with "
        "`det deploy local cluster-up`, or point the CLI at another master with "
        "-m/--master URL or the DET_MASTER environment variable."
    )


def print_json(data: Any) -> None:
    """Print ``data`` as indented JSON on stdout."""
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")
    sys.stdout.flush()


def console() -> Console:
    """A rich console on the current stdout; unlimited width when it is not a terminal."""
    from rich.console import Console

    out = sys.stdout
    width = None if out.isatty() else 100_000
    return Console(file=out, width=width, highlight=False, soft_wrap=True)


def make_table(
    columns: Sequence[str], rows: Iterable[Sequence[Any]], title: str | None = None
) -> Table:
    """Build a table whose cells are plain text (no rich markup is interpreted).

    Args:
        columns: the header names.
        rows: one sequence per row, as long as ``columns``; None cells print empty.
        title: an optional caption above the table.

    Raises:
        ValueError: when a row's length differs from the number of columns.
    """
    from rich import box
    from rich.table import Table
    from rich.text import Text

    table = Table(
        box=box.SIMPLE_HEAD,
        title=title,
        title_justify="left",
        show_edge=False,
        pad_edge=False,
        title_style="bold",
    )
    for name in columns:
        table.add_column(name, overflow="fold")
    for row in rows:
        cells = list(row)
        if len(cells) != len(columns):
            raise ValueError(f"row has {len(cells)} cells, expected {len(columns)}: {cells!r}")
        table.add_row(*(Text("" if c is None else str(c)) for c in cells))
    return table


def print_table(
    columns: Sequence[str], rows: Iterable[Sequence[Any]], title: str | None = None
) -> None:
    """Print :func:`make_table` to stdout (without trailing spaces when not a terminal).

    A titled table is preceded by an empty line, to separate it from what came before.
    """
    con = console()
    table = make_table(columns, rows, title)
    if title:
        sys.stdout.write("\n")  # a titled table is a section of a longer report
    if sys.stdout.isatty():
        con.print(table)
        return
    with con.capture() as captured:
        con.print(table)
    text = "\n".join(line.rstrip() for line in captured.get().splitlines())
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def print_fields(pairs: Sequence[tuple[str, Any]]) -> None:
    """Print ``Label: value`` lines with aligned values (None prints empty)."""
    width = max((len(k) for k, _ in pairs), default=0)
    out = "".join(
        f"{k + ':':<{width + 1}} {'' if v is None else v}".rstrip() + "\n" for k, v in pairs
    )
    sys.stdout.write(out)


def fmt_time(ts: float | None) -> str:
    """Seconds since the epoch as local ``YYYY-MM-DD HH:MM:SS``; empty for None."""
    if ts is None:
        return ""
    return _dt.datetime.fromtimestamp(float(ts)).strftime("%Y-%m-%d %H:%M:%S")


def fmt_duration(start: float | None, end: float | None, now: float | None = None) -> str:
    """The time from ``start`` to ``end`` (or to ``now`` while running) as ``H:MM:SS``.

    Args:
        start: seconds since the epoch, or None (gives an empty string).
        end: seconds since the epoch, or None for a running object.
        now: the current time in seconds since the epoch; ``time.time()`` when None.
    """
    if start is None:
        return ""
    stop = end if end is not None else (time.time() if now is None else now)
    seconds = max(0, int(round(float(stop) - float(start))))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}"


def fmt_number(value: Any) -> str:
    """Numbers with up to 6 significant digits; other values as ``str``; None empty."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def fmt_percent(value: float | None) -> str:
    """A 0..1 fraction as a percentage (``"42.0%"``); empty for None."""
    return "" if value is None else f"{100.0 * float(value):.1f}%"


def fmt_bytes(n: int | None) -> str:
    """A byte count in B / KiB / MiB / GiB."""
    if n is None:
        return ""
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{int(size)} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GiB"


def fmt_hparams(hparams: Mapping[str, Any] | None) -> str:
    """Hyperparameters as ``name=value`` pairs, sorted by name; nested values as JSON."""
    if not hparams:
        return ""
    parts = []
    for name in sorted(hparams):
        value = hparams[name]
        text = (
            json.dumps(value, sort_keys=True, separators=(",", ":"))
            if isinstance(value, (dict, list))
            else fmt_number(value)
        )
        parts.append(f"{name}={text}")
    return ", ".join(parts)


def write_line(text: str) -> None:
    """Write one line to stdout and flush (log streaming)."""
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def note(text: str) -> None:
    """Write one line to stderr (progress notes that must not mix with data on stdout)."""
    sys.stderr.write(text + "\n")
    sys.stderr.flush()
