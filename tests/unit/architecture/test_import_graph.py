"""The package table of docs/architecture.md is the real import graph, and master/ has no
import circle.

The graph comes from grimp (the library behind import-linter), which parses the imports of
every module of the installed package, function-local ones included. The checks are plain
functions over a grimp graph so that the tests below can also run them on a small package
written to a temp dir, to show that a forbidden import and a circle are caught.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable
from pathlib import Path

import grimp
import pytest

DOC = Path(__file__).resolve().parents[3] / "docs" / "architecture.md"
_ROW = re.compile(r"^\|\s*`(?P<name>[\w.]+)`\s*\|[^|]*\|(?P<deps>[^|]*)\|\s*$")


def read_table(text: str) -> dict[str, set[str]]:
    """The package table of docs/architecture.md: ``{package: packages it may import}``.

    Rows look like ``| `name` | what it holds | `a`, `b` |`` or end in ``nothing of
    ours``; the root package is written `dauntless`.

    Raises:
        ValueError: if the document has no such row.
    """
    table: dict[str, set[str]] = {}
    for line in text.splitlines():
        m = _ROW.match(line)
        if m:
            table[m["name"]] = set(re.findall(r"`([\w.]+)`", m["deps"]))
    if not table:
        raise ValueError("no package table found (rows of `| `name` | holds | may import |`)")
    return table


def _top(root: str, module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else root


def package_edges(graph: grimp.ImportGraph, root: str) -> dict[tuple[str, str], str]:
    """Imports between top-level packages of ``root``: ``{(importer, imported): example}``,
    where the example names one importing module and line. The root package's own
    ``__init__`` is named ``root``."""
    edges: dict[tuple[str, str], str] = {}
    for module in graph.modules:
        for imported in graph.find_modules_directly_imported_by(module):
            a, b = _top(root, module), _top(root, imported)
            if a != b and (a, b) not in edges:
                details = graph.get_import_details(importer=module, imported=imported)
                line = details[0]["line_number"] if details else "?"
                edges[(a, b)] = f"{module}:{line} imports {imported}"
    return edges


def table_violations(graph: grimp.ImportGraph, root: str, table: dict[str, set[str]]) -> list[str]:
    """What differs between the graph and the table: imports it does not allow, packages
    it does not list, and allowances no import uses (a stale table). Empty when they
    agree."""
    edges = package_edges(graph, root)
    problems = []
    packages = {_top(root, m) for m in graph.modules}
    for pkg in sorted(packages - set(table)):
        problems.append(f"{pkg}: not in the package table")
    for pkg in sorted(set(table) - packages):
        problems.append(f"{pkg}: in the package table but no such package")
    for (a, b), example in sorted(edges.items()):
        if a in table and b not in table[a]:
            problems.append(f"{a} may not import {b} ({example})")
    for a, allowed in sorted(table.items()):
        for b in sorted(allowed - {b for (x, b) in edges if x == a}):
            problems.append(f"{a} is allowed to import {b} but does not: drop it from the table")
    return problems


def import_cycles(graph: grimp.ImportGraph, package: str) -> list[list[str]]:
    """The import circles among the modules of ``package`` (and its subpackages): each
    strongly connected component of more than one module, as a sorted list of module
    names (Tarjan's algorithm, R. Tarjan, "Depth-first search and linear graph
    algorithms", SIAM J. Comput. 1(2), 1972, written iteratively)."""
    inside = {m for m in graph.modules if m == package or m.startswith(package + ".")}
    succ = {m: sorted(graph.find_modules_directly_imported_by(m) & inside) for m in inside}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []
    for start in sorted(inside):
        if start in index:
            continue
        work = [(start, iter(succ[start]))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(succ[child])))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    m = stack.pop()
                    on_stack.discard(m)
                    component.append(m)
                    if m == node:
                        break
                if len(component) > 1:
                    cycles.append(sorted(component))
    return cycles


def test_package_table_is_the_import_graph() -> None:
    graph = grimp.build_graph("dauntless", cache_dir=None)
    problems = table_violations(graph, "dauntless", read_table(DOC.read_text()))
    assert not problems, "docs/architecture.md's package table and the imports disagree:\n" + (
        "\n".join(problems)
    )


def test_master_has_no_import_circle() -> None:
    # Imports under `if TYPE_CHECKING:` count too: since issue 18 scope 4 the master is
    # model functions over a shared context, and nothing in it names a host class that
    # imports it back (docs/architecture.md).
    graph = grimp.build_graph("dauntless", exclude_type_checking_imports=False, cache_dir=None)
    assert import_cycles(graph, "dauntless.master") == []


def test_cli_has_no_import_circle() -> None:
    # Issue 38 scope 7: the `det experiment` commands were spread over four modules that
    # imported each other in a loop held apart by function-level imports; each command
    # group is now a module that imports only the helpers below it.
    graph = grimp.build_graph("dauntless", exclude_type_checking_imports=False, cache_dir=None)
    assert import_cycles(graph, "dauntless.cli") == []


# ------------------------------------------------------------------ the checks can fail


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


@pytest.fixture
def toy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterable[Path]:
    """A throwaway package ``toypkg`` on sys.path (removed from sys.modules after)."""
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    for name in [m for m in sys.modules if m == "toypkg" or m.startswith("toypkg.")]:
        del sys.modules[name]


TOY_TABLE = """
| package | holds | may import |
| --- | --- | --- |
| `toypkg` | root | nothing of ours |
| `low` | leaf | nothing of ours |
| `high` | user of low | `low` |
"""


def test_a_forbidden_import_is_reported(toy: Path) -> None:
    _write(
        toy,
        {
            "toypkg/__init__.py": "",
            "toypkg/low/__init__.py": "",
            "toypkg/low/a.py": "def f():\n    from toypkg.high import b  # upward\n",
            "toypkg/high/__init__.py": "",
            "toypkg/high/b.py": "from toypkg.low import a\n",
        },
    )
    problems = table_violations(
        grimp.build_graph("toypkg", cache_dir=None), "toypkg", read_table(TOY_TABLE)
    )
    assert problems == ["low may not import high (toypkg.low.a:2 imports toypkg.high.b)"]


def test_an_unlisted_package_and_a_stale_allowance_are_reported(toy: Path) -> None:
    _write(
        toy,
        {
            "toypkg/__init__.py": "",
            "toypkg/low/__init__.py": "",
            "toypkg/high/__init__.py": "",
            "toypkg/extra.py": "",
        },
    )
    table = read_table(TOY_TABLE + "| `gone` | removed | nothing of ours |\n")
    problems = table_violations(grimp.build_graph("toypkg", cache_dir=None), "toypkg", table)
    assert problems == [
        "extra: not in the package table",
        "gone: in the package table but no such package",
        "high is allowed to import low but does not: drop it from the table",
    ]


def test_an_import_circle_is_reported(toy: Path) -> None:
    _write(
        toy,
        {
            "toypkg/__init__.py": "",
            "toypkg/m/__init__.py": "",
            "toypkg/m/a.py": "from toypkg.m import b\n",
            "toypkg/m/b.py": "def g():\n    from toypkg.m import c\n",
            "toypkg/m/c.py": "import toypkg.m.a\n",
            "toypkg/m/d.py": "from toypkg.m import a\n",
        },
    )
    graph = grimp.build_graph("toypkg", cache_dir=None)
    assert import_cycles(graph, "toypkg.m") == [["toypkg.m.a", "toypkg.m.b", "toypkg.m.c"]]


def test_the_document_has_a_row_per_package() -> None:
    table = read_table(DOC.read_text())
    assert {"master", "agent", "core", "client", "cli", "config"} <= set(table)
    assert table["config"] == set()
