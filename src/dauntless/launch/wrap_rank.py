"""``python -m dauntless.launch.wrap_rank [--no-redirect-stdio] RANK [--] CMD...``: run
``CMD`` and prefix every line it writes with ``[rank=N] ``.

Determined's launch layer of the same name (``determined.launch.wrap_rank``): launchers
such as ``torchrun``, ``mpirun`` or ``deepspeed`` start it once per worker so that each
log line names the rank that wrote it (``det trial logs --rank-id`` filters on the
prefix). ``RANK`` is an integer, or a comma-separated list of environment variable
names tried in order (e.g. ``RANK,OMPI_COMM_WORLD_RANK``). A line ends at ``\\n`` or
``\\r`` (so progress bars become lines) and is cut at 8 KiB. stdout stays stdout and
stderr stays stderr; ``--no-redirect-stdio`` is accepted for compatibility (Dauntless
has no container log files to redirect to). SIGTERM, SIGINT and SIGHUP are forwarded to
the worker; the exit code is the worker's.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from typing import BinaryIO

LINE_LIMIT = 8192
"""Bytes after which a line without an end is emitted anyway."""

_LINE_END = re.compile(rb"[\r\n]")


def resolve_rank(spec: str, environ: dict[str, str] | None = None) -> int:
    """The rank ``spec`` names.

    Args:
        spec: digits, or comma-separated environment variable names.
        environ: the environment; ``os.environ`` when None.

    Returns:
        The rank.

    Raises:
        ValueError: no listed variable is set, or its value is not an integer.
    """
    env = os.environ if environ is None else environ
    if spec.isdigit():
        return int(spec)
    for name in spec.split(","):
        if name in env:
            try:
                return int(env[name])
            except ValueError:
                raise ValueError(f"{name} must be an integer rank, got {env[name]!r}") from None
    raise ValueError(f"rank variable(s) {spec} not set in the environment")


def _lines(stream: BinaryIO):  # type: ignore[no-untyped-def]
    """Yield lines ending at ``\\n`` or ``\\r`` (each given a ``\\n``), cut at the limit."""
    pending = b""
    while True:
        chunk = stream.read1(LINE_LIMIT) if hasattr(stream, "read1") else stream.read(1024)
        if not chunk:
            break
        pending += chunk
        while True:
            m = _LINE_END.search(pending)
            if m is None:
                break
            yield pending[: m.start()] + b"\n"
            pending = pending[m.end() :]
        while len(pending) >= LINE_LIMIT:
            yield pending[:LINE_LIMIT] + b"\n"
            pending = pending[LINE_LIMIT:]
    if pending:
        yield pending + b"\n"


def _forward(src: BinaryIO, dst_fd: int, prefix: bytes) -> None:
    with src:
        for line in _lines(src):
            os.write(dst_fd, prefix + line)


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the worker's exit code (1 on a bad rank, 2 on usage).

    Args:
        argv: the arguments after the module name; ``sys.argv[1:]`` when None.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["--no-redirect-stdio"]:
        args = args[1:]
    if len(args) < 2:
        sys.stderr.write("usage: python -m dauntless.launch.wrap_rank RANK [--] CMD...\n")
        return 2
    spec, cmd = args[0], args[1:]
    if cmd[:1] == ["--"]:
        cmd = cmd[1:]
    if not cmd:
        sys.stderr.write("wrap_rank: empty command\n")
        return 2
    try:
        rank = resolve_rank(spec)
    except ValueError as exc:
        sys.stderr.write(f"wrap_rank: {exc}\n")
        return 1
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=0)

    def _signal(signum, _frame):  # type: ignore[no-untyped-def]
        if proc.poll() is None:
            proc.send_signal(signum)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, _signal)
    prefix = f"[rank={rank}] ".encode()
    threads = [
        threading.Thread(target=_forward, args=(proc.stdout, 1, prefix), daemon=True),
        threading.Thread(target=_forward, args=(proc.stderr, 2, prefix), daemon=True),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    code = proc.wait()
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main())
