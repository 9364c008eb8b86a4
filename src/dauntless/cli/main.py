"""The ``det`` / ``dauntless`` command line: parser assembly and error handling."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from dauntless import __version__
from dauntless.client import (
    APIError,
    ContextError,
    MasterUnreachableError,
)

from . import (
    agent,
    checkpoint,
    deploy,
    experiment,
    master,
    preview,
    resource_pool,
    slot,
    trial,
    user,
    version,
)
from ._util import exit_unreachable, exit_with_api_error, exit_with_error

_GROUPS = (
    experiment, trial, checkpoint, agent, slot, resource_pool, master, preview, user, deploy,
    version,
)


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser (every command group registered)."""
    parser = argparse.ArgumentParser(
        prog="det",
        description="Dauntless: submit and inspect deep learning experiments.",
    )
    parser.add_argument(
        "-m",
        "--master",
        default=None,
        metavar="URL",
        help="master address, http://host:port or host:port "
        "(default: $DET_MASTER, else http://127.0.0.1:8080)",
    )
    parser.add_argument(
        "-u",
        "--user",
        default=None,
        metavar="NAME",
        help="act as this user (default: $DET_USER, else the user last signed in with "
        "`det user login`, else determined)",
    )
    parser.add_argument(
        "--cert-file",
        default=None,
        metavar="PATH",
        help="CA bundle (PEM) that signed an HTTPS master's certificate, or 'noverify' "
        "(default: $DET_MASTER_CERT_FILE, else the system's trust store)",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    # Lets -m/-u/--cert-file also follow the subcommand; SUPPRESS keeps the top-level
    # value otherwise.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "-m", "--master", default=argparse.SUPPRESS, metavar="URL", help=argparse.SUPPRESS
    )
    common.add_argument(
        "-u", "--user", default=argparse.SUPPRESS, metavar="NAME", help=argparse.SUPPRESS
    )
    common.add_argument(
        "--cert-file", default=argparse.SUPPRESS, metavar="PATH", help=argparse.SUPPRESS
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in _GROUPS:
        module.register(sub, common)
    return parser


def _run(argv: Sequence[str] | None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except APIError as exc:
        exit_with_api_error(exc)
    except MasterUnreachableError as exc:
        exit_unreachable(exc)
    except ContextError as exc:
        exit_with_error(str(exc))


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI.

    Args:
        argv: the arguments after the program name; ``sys.argv[1:]`` when None.

    Returns:
        The exit status: 0 success, 1 an error reported with ``Error: ...`` on stderr,
        2 bad command-line usage, 130 interrupted.
    """
    try:
        return _run(argv)
    except SystemExit as exc:
        code = exc.code
        if code is None:
            return 0
        if isinstance(code, int):
            return code
        sys.stderr.write(f"{code}\n")
        return 1
    except KeyboardInterrupt:
        sys.stderr.write("Interrupted.\n")
        return 130
    except BrokenPipeError:
        return 1


if __name__ == "__main__":
    sys.exit(main())
