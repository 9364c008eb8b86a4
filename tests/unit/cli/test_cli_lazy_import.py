"""Which modules ``det -h``, ``det <group> ...`` and ``import dauntless.core`` load.

Each case runs a fresh interpreter and reads ``sys.modules`` as it exits: a check of what loads, not a timing (the timing is
``benchmarks/cli_import.py``).
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from dauntless.cli.main import _GROUPS, build_parser

# Heavy for a CLI that only prints help: rich (tables), httpx, numpy (searchers), torch,
# pydantic and the config models, yaml, the master's code.
_HEAVY = (
    "rich",
    "httpx",
    "numpy",
    "torch",
    "pydantic",
    "yaml",
    "websockets",
    "dauntless.config",
    "dauntless.client",
    "dauntless.searcher",
    "dauntless.master",
)


_REPORT = (
    "import atexit, sys\n"
    "atexit.register(lambda: print('MODULES', *sorted(sys.modules), file=sys.stderr))\n"
)


def _imported(code: str) -> set[str]:
    """Every module in ``sys.modules`` when a fresh interpreter running ``code`` exits."""
    proc = subprocess.run(
        [sys.executable, "-c", _REPORT + code],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = [line for line in proc.stderr.splitlines() if line.startswith("MODULES ")]
    assert len(lines) == 1, proc.stderr[-2000:]
    return set(lines[0].split()[1:])


def _det(*argv: str) -> set[str]:
    """The modules ``det ARGV`` imported (run as ``python -m dauntless.cli``)."""
    return _imported(
        f"import runpy; sys.argv = ['det', *{list(argv)!r}]\n"
        "runpy.run_module('dauntless.cli', run_name='__main__', alter_sys=True)"
    )


def _loaded(names: set[str], prefixes: tuple[str, ...]) -> list[str]:
    return sorted(n for n in names if any(n == p or n.startswith(p + ".") for p in prefixes))


def test_det_help_imports_nothing_heavy() -> None:
    names = _det("-h")
    assert "dauntless.cli.main" in names
    assert _loaded(names, _HEAVY) == []
    groups = tuple(f"dauntless.cli.{module}" for module, *_ in _GROUPS)
    assert _loaded(names, groups) == []


def test_a_group_imports_only_its_own_module() -> None:
    names = _det("agent", "list", "-h")
    assert "dauntless.cli.agent" in names
    others = tuple(f"dauntless.cli.{m}" for m, *_ in _GROUPS if m != "agent")
    assert _loaded(names, others) == []
    assert _loaded(names, ("numpy", "torch", "websockets", "dauntless.searcher")) == []


def test_import_core_leaves_out_the_cli_numpy_the_configs_and_the_master() -> None:
    # The config models load in core.init(), which parses the experiment config. httpx
    # (and with it rich, which httpx's __init__ imports when installed) stays: the Core
    # API's session is built on it.
    names = _imported("import dauntless.core")
    assert "dauntless.core" in names
    assert _loaded(names, ("pydantic", "dauntless.config", "yaml")) == []
    assert (
        _loaded(
            names, ("dauntless.cli", "numpy", "torch", "dauntless.searcher", "dauntless.master")
        )
        == []
    )


def test_lazy_parser_help_matches_the_full_parser() -> None:
    # The table in main._GROUPS must agree with each module's own register().
    assert build_parser(all_groups=False).format_help() == build_parser().format_help()


@pytest.mark.parametrize("module", [m for m, *_ in _GROUPS])
def test_each_group_registered_alone_matches_the_full_parser(module: str) -> None:
    assert build_parser(module, all_groups=False).format_help() == build_parser().format_help()
