"""Generic tasks are session-first model functions like the other aggregates (issue 38
scope 7): the task modules open no transaction of their own and import nothing inside a
function, every task and allocation row is made under ``master/models/``, and nothing
reaches tasks through a service object on the context (the old ``ctx.tasks.*``).

The rules are plain functions over source text, so that the tests below can also run
them on small sources written here, to show that each breach is caught.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import dauntless.master

MASTER = Path(dauntless.master.__file__).parent

TRANSACTION_METHODS = frozenset({"begin", "begin_nested", "commit", "rollback"})
"""Session methods that open or end a transaction."""

SESSION_MAKERS = frozenset({"Session", "sessionmaker", "scoped_session"})
"""Callables that make a session."""

ROW_CLASSES = frozenset({"AllocationRow", "TaskRow"})
"""Rows that place or queue work: made under master/models only."""


def task_modules(master: Path) -> list[Path]:
    """The modules of generic tasks: ``master/task*.py`` and ``master/models/task*.py``."""
    return sorted([*master.glob("task*.py"), *(master / "models").glob("task*.py")])


def _calls(tree: ast.AST) -> Iterator[ast.Call]:
    """The calls of ``tree`` in source order."""
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)]
    return iter(sorted(calls, key=lambda c: (c.lineno, c.col_offset)))


def _name(node: ast.expr) -> str | None:
    """The last name of ``a.b.c`` or ``c`` (None for anything else)."""
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    return None


def own_transactions(source: str) -> list[str]:
    """Where ``source`` opens or ends a transaction itself: ``<x>.db.read()``,
    ``<x>.db.write()``, ``ctx.write(...)``, ``.begin()``/``.commit()``/``.rollback()``,
    or a new ``Session``. Returns ``"line N: what"`` per place."""
    found = []
    for call in _calls(ast.parse(source)):
        func = call.func
        what = None
        if isinstance(func, ast.Attribute):
            owner = _name(func.value)
            if func.attr in ("read", "write") and owner in ("db", "ctx"):
                what = f"{owner}.{func.attr}()"
            elif func.attr in TRANSACTION_METHODS:
                what = f".{func.attr}()"
        if _name(func) in SESSION_MAKERS:
            what = f"{_name(func)}()"
        if what is not None:
            found.append(f"line {call.lineno}: {what}")
    return found


def function_imports(source: str) -> list[str]:
    """Imports inside a function or method of ``source`` (``"line N: module"`` each)."""
    found: dict[int, str] = {}  # by line: a nested function's import counts once
    for fn in ast.walk(ast.parse(source)):
        if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for node in ast.walk(fn):
            if isinstance(node, ast.Import):
                found[node.lineno] = ", ".join(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                found[node.lineno] = "." * node.level + (node.module or "")
    return [f"line {n}: {what}" for n, what in sorted(found.items())]


def row_constructions(source: str) -> list[str]:
    """Where ``source`` makes an allocation or task row (``"line N: Row"`` each)."""
    return [
        f"line {c.lineno}: {_name(c.func)}"
        for c in _calls(ast.parse(source))
        if _name(c.func) in ROW_CLASSES
    ]


def context_services(source: str) -> list[str]:
    """Where ``source`` reaches a task service on the master's context (``ctx.tasks``)."""
    lines = {
        n.lineno
        for n in ast.walk(ast.parse(source))
        if isinstance(n, ast.Attribute) and n.attr == "tasks" and _name(n.value) == "ctx"
    }
    return [f"line {n}: ctx.tasks" for n in sorted(lines)]


def breaches(master: Path) -> dict[str, list[str]]:
    """Every breach of the rules in the master package at ``master``, by rule:
    ``{"transaction": [...], "import": [...], "allocation": [...], "service": [...]}``,
    each entry ``"<path relative to master>: line N: what"``."""
    out: dict[str, list[str]] = {"transaction": [], "import": [], "allocation": [], "service": []}

    def add(rule: str, path: Path, places: list[str]) -> None:
        out[rule] += [f"{path.relative_to(master)}: {p}" for p in places]

    for path in task_modules(master):
        text = path.read_text(encoding="utf-8")
        add("transaction", path, own_transactions(text))
        add("import", path, function_imports(text))
    for path in sorted(master.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        if "models" not in path.relative_to(master).parts:
            add("allocation", path, row_constructions(text))
        add("service", path, context_services(text))
    return out


# ---------------------------------------------------------------------- the real code


def test_task_modules_are_found() -> None:
    names = {p.relative_to(MASTER).as_posix() for p in task_modules(MASTER)}
    assert {
        "models/tasks.py",
        "models/task_runs.py",
        "models/task_services.py",
        "task_states.py",
    } <= names


def test_tasks_open_no_transaction_of_their_own() -> None:
    assert breaches(MASTER)["transaction"] == []


def test_tasks_import_nothing_inside_functions() -> None:
    assert breaches(MASTER)["import"] == []


def test_task_and_allocation_rows_are_made_under_models_only() -> None:
    assert breaches(MASTER)["allocation"] == []


def test_no_task_service_on_the_context() -> None:
    assert breaches(MASTER)["service"] == []


# ---------------------------------------------------------------------- the rules can fail

_SERVICE_STYLE = """
from .db import AllocationRow

class TaskService:
    def get(self, task_id):
        with self.ctx.db.read() as s:
            return s.get(TaskRow, task_id)

    def logdirs(self):
        from .tensorboard_storage import trial_logdir
        return trial_logdir

    def allocate(self, s, task_id):
        s.add(AllocationRow(id=task_id))
        s.commit()

def route(request):
    ctx = request.app.state.ctx
    return ctx.tasks.get("abc")
"""

_MODEL_STYLE = """
from ..db import AllocationRow, TaskRow

def get_task(s, task_id):
    return s.get(TaskRow, task_id)

def allocate_task(s, ctx, task_id):
    s.add(AllocationRow(id=task_id, created_at=ctx.clock()))
"""


def test_rules_catch_a_service_object() -> None:
    assert own_transactions(_SERVICE_STYLE) == ["line 6: db.read()", "line 15: .commit()"]
    assert function_imports(_SERVICE_STYLE) == ["line 10: .tensorboard_storage"]
    assert row_constructions(_SERVICE_STYLE) == ["line 14: AllocationRow"]
    assert context_services(_SERVICE_STYLE) == ["line 19: ctx.tasks"]


def test_rules_pass_session_first_functions() -> None:
    assert own_transactions(_MODEL_STYLE) == []
    assert function_imports(_MODEL_STYLE) == []
    assert context_services(_MODEL_STYLE) == []
    assert row_constructions(_MODEL_STYLE) == ["line 8: AllocationRow"]  # fine under models/


def test_breaches_name_the_file(tmp_path: Path) -> None:
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "tasks.py").write_text(_MODEL_STYLE, encoding="utf-8")
    (tmp_path / "tasks.py").write_text(_SERVICE_STYLE, encoding="utf-8")
    found = breaches(tmp_path)
    assert found["transaction"] == ["tasks.py: line 6: db.read()", "tasks.py: line 15: .commit()"]
    assert found["import"] == ["tasks.py: line 10: .tensorboard_storage"]
    assert found["allocation"] == ["tasks.py: line 14: AllocationRow"]
    assert found["service"] == ["tasks.py: line 19: ctx.tasks"]
