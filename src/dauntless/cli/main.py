"""The ``det`` / ``dauntless`` command line: parser assembly and error handling."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from dauntless import __version__


def _skip_httpx_cli() -> None:
    """httpx's package imports its own command-line tool (``httpx._main``: click, rich's
    syntax highlighting and pygments) whenever click is installed, about half of what
    importing httpx costs; `det` never runs that tool. A None entry in ``sys.modules``
    makes that import fail, which httpx handles (it then defines a stub ``main``), so a
    short command such as `det e list` does not pay for it (issue 37 scope 5). Called
    before a command group (which imports httpx) is imported; only the `det` process is
    affected: the master, agents and tasks import httpx as usual."""
    if "httpx" not in sys.modules:
        sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]


# One row per command group: (module under dauntless.cli, name, aliases, help). The
# module is imported only when its group is the command being run, so `det -h` and
# `det <other group> ...` never import rich, httpx, numpy or the config models of
# groups they do not use. The name, aliases and help here must match the module's own
# ``register`` (tests/unit/cli/test_cli_lazy_import.py compares the two parsers' help).
_GROUPS: tuple[tuple[str, str, tuple[str, ...], str], ...] = (
    ("experiment", "experiment", ("e",), "create and inspect experiments"),
    ("trial", "trial", ("t",), "inspect trials"),
    ("checkpoint", "checkpoint", ("c",), "inspect checkpoints"),
    ("model", "model", ("m",), "the model registry"),
    ("agent", "agent", ("a",), "inspect agents"),
    ("slot", "slot", ("s",), "inspect slots"),
    ("resource_pool", "resource-pool", ("rp",), "inspect resource pools"),
    ("job", "job", ("j",), "inspect and reorder the job queue"),
    ("resources", "resources", ("res",), "historical cluster usage (slot-hours)"),
    ("master", "master", (), "inspect the master"),
    (
        "preview",
        "preview-search",
        (),
        "print the trials and lengths a config's searcher would create, running nothing",
    ),
    ("user", "user", ("u",), "sign in and out; manage users"),
    ("token", "token", ("tkn",), "access tokens for scripts and CI"),
    ("sso", "auth", (), "single sign-on through the master's identity provider"),
    ("audit", "audit", (), "the audit trail of who changed what (administrators)"),
    ("command", "command", ("cmd",), "run commands on the cluster"),
    ("notebook", "notebook", (), "JupyterLab notebooks"),
    ("shell", "shell", (), "shells on agents"),
    ("tensorboard", "tensorboard", (), "TensorBoards"),
    ("task", "task", (), "list every command, notebook, shell and TensorBoard"),
    ("workspace", "workspace", ("w",), "manage workspaces"),
    ("project", "project", ("p",), "manage projects"),
    ("rbac", "rbac", (), "roles and role assignments"),
    ("template", "template", ("tpl",), "manage config templates"),
    ("webhook", "webhook", (), "manage webhooks"),
    ("user_group", "user-group", (), "manage user groups"),
    ("deploy", "deploy", (), "run a cluster"),
    ("version", "version", (), "show client and master versions"),
)

_LAZY_REST = "_lazy_rest"


def _group_module(command: str) -> str | None:
    """The module name of the group called ``command`` (its name or an alias)."""
    for module, name, aliases, _help in _GROUPS:
        if command == name or command in aliases:
            return module
    return None


def build_parser(only: str | None = None, *, all_groups: bool = True) -> argparse.ArgumentParser:
    """The argument parser.

    Args:
        only: the module name (see ``_GROUPS``) of the one group to register in full
            when ``all_groups`` is False.
        all_groups: register every group in full (imports every CLI module). When
            False, the groups other than ``only`` get a placeholder parser with the same
            name, aliases and help that takes the rest of the command line unparsed, so
            the top-level help and errors are unchanged.

    Returns:
        The parser; ``parse_args`` sets ``func`` for a fully registered group, or
        ``_lazy_rest`` for a placeholder.
    """
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
    for module, name, aliases, help_text in _GROUPS:
        if all_groups or module == only:
            _skip_httpx_cli()
            importlib.import_module(f"{__package__}.{module}").register(sub, common)
            continue
        placeholder = sub.add_parser(name, aliases=list(aliases), help=help_text, add_help=False)
        placeholder.add_argument(_LAZY_REST, nargs=argparse.REMAINDER)
    return parser


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    """Parse with only the chosen group's module imported.

    A first pass with placeholders for every group handles the top-level options,
    ``-h`` and ``--version``, and finds the group (what it cannot place, such as a
    group's own ``-h``, is left to the second pass); a second pass registers that group
    in full and parses the command line again.
    """
    args, _unknown = build_parser(all_groups=False).parse_known_args(argv)
    module = _group_module(args.command)
    return build_parser(module, all_groups=False).parse_args(argv)


def _run(argv: Sequence[str] | None) -> int:
    args = _parse(argv)
    from dauntless.client import APIError, ContextError, MasterUnreachableError

    from ._util import exit_unreachable, exit_with_api_error, exit_with_error

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
