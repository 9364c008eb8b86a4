"""Experiments: search across them on the server (issue 31 scope 7, issue 37 scope 5):
the filters, sort and page of ``GET /api/v1/experiments``, and the projected columns of
a page. The index it reads is kept by :mod:`.experiment_index`; its design is in
:mod:`dauntless.master.db.search_index`. Rows only (imports no other model module).

A hyperparameter or best-metric condition is text of the form ``NAME OP VALUE``, ``OP``
one of ``>=``, ``<=``, ``>``, ``<``, ``=`` and ``!=`` (``lr>=0.001``, ``optimizer=adam``,
``validation_loss<0.3``). This small grammar is parsed by one regular expression
(:func:`parse_condition`): a query-string filter of three parts needs no parsing library.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import ColumnElement, and_, func, select
from sqlalchemy.orm import Session, aliased

from ..db import (
    ExperimentHparamRow,
    ExperimentLabelRow,
    ExperimentRow,
    ProjectRow,
    TrialRow,
    WorkspaceRow,
)
from ..errors import BadRequest

MAX_CONDITIONS = 32
"""The most hyperparameter plus best-metric conditions one search takes."""

_CONDITION = re.compile(
    r"^\s*(?P<name>[^<>=!\s][^<>=!]*?)\s*(?P<op>>=|<=|!=|=|>|<)\s*(?P<value>.*?)\s*$"
)
_NUMERIC_OPS = {">=", "<=", ">", "<"}

#: ``sort_by`` values that name a column of ``experiments`` (``hp.<name>`` sorts by a
#: hyperparameter, ``num_trials`` by the trial count).
SORT_COLUMNS: dict[str, Any] = {
    "id": ExperimentRow.id,
    "name": ExperimentRow.name,
    "description": ExperimentRow.description,
    "state": ExperimentRow.state,
    "owner": ExperimentRow.owner,
    "user": ExperimentRow.owner,
    "project_id": ExperimentRow.project_id,
    "start_time": ExperimentRow.start_time,
    "end_time": ExperimentRow.end_time,
    "progress": ExperimentRow.progress,
    "searcher": ExperimentRow.searcher_name,
    "best_searcher_metric": ExperimentRow.best_searcher_metric,
    "searcher_metric_val": ExperimentRow.best_searcher_metric,
}

#: Fields a page can be projected to that are columns of ``experiments``.
COLUMN_FIELDS: dict[str, Any] = {
    "id": ExperimentRow.id,
    "name": ExperimentRow.name,
    "description": ExperimentRow.description,
    "state": ExperimentRow.state,
    "archived": ExperimentRow.archived,
    "owner": ExperimentRow.owner,
    "username": ExperimentRow.owner,
    "user_id": ExperimentRow.owner_id,
    "project_id": ExperimentRow.project_id,
    "config": ExperimentRow.config,
    "seed": ExperimentRow.seed,
    "progress": ExperimentRow.progress,
    "start_time": ExperimentRow.start_time,
    "end_time": ExperimentRow.end_time,
    "searcher": ExperimentRow.searcher_name,
    "searcher_metric": ExperimentRow.searcher_metric,
    "smaller_is_better": ExperimentRow.smaller_is_better,
    "best_searcher_metric": ExperimentRow.best_searcher_metric,
    "best_trial_id": ExperimentRow.best_trial_id,
}
#: Fields computed from other tables: the trial count, labels, every indexed
#: hyperparameter (``hparams``; ``hp.<name>`` gives one) and the project's place.
DERIVED_FIELDS = (
    "num_trials",
    "labels",
    "hparams",
    "project_name",
    "workspace_id",
    "workspace_name",
)


@dataclass(frozen=True)
class Condition:
    """One ``NAME OP VALUE`` condition: ``value`` a float when it reads as a number,
    else the text (then only ``=`` and ``!=`` apply)."""

    name: str
    op: str
    value: float | str


def parse_condition(text: str, field_name: str, numeric: bool = False) -> Condition:
    """Parse ``NAME OP VALUE`` (see the module's docstring).

    Args:
        text: the condition, e.g. ``lr>=0.001``.
        field_name: the query parameter it came from, named by errors.
        numeric: the value must be a number (best-metric conditions).

    Raises:
        BadRequest: not of that form, an empty name or value, a text value with an
            order operator (``>=``, ``<=``, ``>``, ``<``) or where ``numeric``.
    """
    m = _CONDITION.match(text)
    if m is None or not m["value"]:
        raise BadRequest(
            f"invalid {field_name}: {text!r}",
            [(field_name, "NAME OP VALUE, OP one of >= <= > < = != (e.g. lr>=0.001)")],
        )
    name, op, raw = m["name"].strip(), m["op"], m["value"]
    value: float | str
    try:
        value = float(raw)
    except ValueError:
        value = raw
    if value != value or value in (float("inf"), float("-inf")):  # NaN, inf
        value = raw
    if isinstance(value, str) and (numeric or op in _NUMERIC_OPS):
        raise BadRequest(
            f"invalid {field_name}: {text!r}",
            [(field_name, f"{op} needs a number, got {raw!r}")],
        )
    return Condition(name, op, value)


@dataclass(frozen=True)
class ExperimentQuery:
    """What ``GET /experiments`` asks for (every filter is ANDed; a list filter matches
    any of its values, ``labels`` all of them).

    Attributes:
        archived: True: archived only; False: unarchived only; None: both.
        ids: only these experiments (any; empty: every one).
        workspace_id, project_id: only those of this workspace or project.
        states, owners, searchers: experiment states, owners' usernames, searcher names.
        labels: experiments carrying every one of these labels.
        name: a case-insensitive part of the name.
        start_after, start_before, end_after, end_before: times, seconds since the
            epoch (inclusive bounds).
        hparams: conditions on the representative trial's hyperparameters.
        metrics: conditions on the best searcher-metric value (``NAME`` must be the
            experiment's searcher metric).
        sort_by: a key of :data:`SORT_COLUMNS`, ``num_trials`` or ``hp.<name>``.
        descending: the order (ties broken by id in the same order).
        limit, offset: the page.
    """

    archived: bool | None = False
    ids: Sequence[int] = ()
    workspace_id: int | None = None
    project_id: int | None = None
    states: Sequence[str] = ()
    owners: Sequence[str] = ()
    searchers: Sequence[str] = ()
    labels: Sequence[str] = ()
    name: str | None = None
    start_after: float | None = None
    start_before: float | None = None
    end_after: float | None = None
    end_before: float | None = None
    hparams: Sequence[Condition] = field(default_factory=tuple)
    metrics: Sequence[Condition] = field(default_factory=tuple)
    sort_by: str = "id"
    descending: bool = True
    limit: int = 100
    offset: int = 0


def _compare(column: Any, op: str, value: Any) -> ColumnElement[bool]:
    ops = {
        ">=": column >= value,
        "<=": column <= value,
        ">": column > value,
        "<": column < value,
        "=": column == value,
        "!=": column != value,
    }
    return ops[op]


def _hparam_filters(conditions: Sequence[Condition]) -> list[ColumnElement[bool]]:
    """One ``experiment_id IN (...)`` per hyperparameter name, its conditions ANDed, so
    that ``lr>=a`` and ``lr<=b`` are one range scan of ``ix_experiment_hparams_num``."""
    by_name: dict[str, list[Condition]] = defaultdict(list)
    for c in conditions:
        by_name[c.name].append(c)
    out: list[ColumnElement[bool]] = []
    for name, conds in by_name.items():
        H = ExperimentHparamRow
        parts: list[ColumnElement[bool]] = [H.name == name]
        for c in conds:
            column = H.num_value if isinstance(c.value, float) else H.text_value
            parts.append(_compare(column, c.op, c.value))
        out.append(ExperimentRow.id.in_(select(H.experiment_id).where(and_(*parts))))
    return out


def _filters(q: ExperimentQuery, visible: set[int] | None) -> list[ColumnElement[bool]]:
    E = ExperimentRow
    where: list[ColumnElement[bool]] = []
    if q.archived is not None:
        where.append(E.archived == q.archived)
    if q.ids:
        where.append(E.id.in_(list(q.ids)))
    if q.project_id is not None:
        where.append(E.project_id == q.project_id)
    if visible is not None or q.workspace_id is not None:
        projects = select(ProjectRow.id)
        if visible is not None:
            projects = projects.where(ProjectRow.workspace_id.in_(visible))
        if q.workspace_id is not None:
            projects = projects.where(ProjectRow.workspace_id == q.workspace_id)
        where.append(E.project_id.in_(projects))
    if q.states:
        where.append(E.state.in_(list(q.states)))
    if q.owners:
        where.append(E.owner.in_(list(q.owners)))
    if q.searchers:
        where.append(E.searcher_name.in_(list(q.searchers)))
    for label in dict.fromkeys(q.labels):
        L = ExperimentLabelRow
        where.append(E.id.in_(select(L.experiment_id).where(L.label == label)))
    if q.name:
        where.append(func.lower(E.name).contains(q.name.lower(), autoescape=True))
    for column, op, bound in (
        (E.start_time, ">=", q.start_after),
        (E.start_time, "<=", q.start_before),
        (E.end_time, ">=", q.end_after),
        (E.end_time, "<=", q.end_before),
    ):
        if bound is not None:
            where.append(_compare(column, op, bound))
    where += _hparam_filters(q.hparams)
    for c in q.metrics:
        if not isinstance(c.value, float):
            raise BadRequest(
                f"invalid best_metric: {c.name}{c.op}{c.value}",
                [("best_metric", "compares the best searcher metric with a number")],
            )
        where.append(E.searcher_metric == c.name)
        where.append(_compare(E.best_searcher_metric, c.op, c.value))
    return where


def check_sort(sort_by: str) -> None:
    """Raises BadRequest (naming ``sort_by``) unless it names a sortable column."""
    if sort_by in SORT_COLUMNS or sort_by == "num_trials":
        return
    if sort_by.startswith("hp.") and len(sort_by) > 3:
        return
    raise BadRequest(
        f"invalid sort_by: {sort_by!r}",
        [("sort_by", f"one of {', '.join(sorted(SORT_COLUMNS))}, num_trials or hp.<name>")],
    )


def search_experiments(
    s: Session, q: ExperimentQuery, visible: set[int] | None
) -> tuple[list[int], int]:
    """The ids of one page of experiments matching ``q``, in its order, and how many
    matched in all.

    Args:
        q: the filters, order and page.
        visible: only those of these workspaces (the caller's view; None: every one),
            applied in SQL so that the count holds only what the caller may see.

    Raises:
        BadRequest: an unknown ``sort_by`` or a best-metric condition on text.
    """
    check_sort(q.sort_by)
    E = ExperimentRow
    where = _filters(q, visible)
    # One statement answers the page and the count (a window over every matching row):
    # the filters are evaluated once, not once for the count and again for the page.
    ids = select(E.id, func.count().over()).where(*where)
    keys: list[Any] = []
    if q.sort_by.startswith("hp."):
        H = aliased(ExperimentHparamRow)
        ids = ids.outerjoin(H, and_(H.experiment_id == E.id, H.name == q.sort_by[3:]))
        keys = [H.num_value, H.text_value]
    elif q.sort_by == "num_trials":
        keys = [
            select(func.count(TrialRow.id))
            .where(TrialRow.experiment_id == E.id)
            .correlate(E)
            .scalar_subquery()
        ]
    elif q.sort_by != "id":
        keys = [SORT_COLUMNS[q.sort_by]]
    order = [(k.desc() if q.descending else k.asc()).nulls_last() for k in keys]
    order.append(E.id.desc() if q.descending else E.id.asc())
    page = s.execute(ids.order_by(*order).limit(q.limit).offset(q.offset)).all()
    if page:
        return [row[0] for row in page], int(page[0][1])
    if q.offset == 0:
        return [], 0
    # Paged past the end: no row carries the count, so ask for it alone.
    return [], s.scalar(select(func.count()).select_from(E).where(*where)) or 0


def check_fields(fields: Sequence[str]) -> None:
    """Raises BadRequest (naming ``fields``) for a field a page cannot be projected to."""
    for name in fields:
        if name in COLUMN_FIELDS or name in DERIVED_FIELDS:
            continue
        if name.startswith("hp.") and len(name) > 3:
            continue
        raise BadRequest(
            f"invalid fields: {name!r}",
            [
                (
                    "fields",
                    f"one of {', '.join(sorted([*COLUMN_FIELDS, *DERIVED_FIELDS]))} or hp.<name>",
                )
            ],
        )


def _among(column: Any, ids: list[int]) -> ColumnElement[bool]:
    """``column`` is one of ``ids`` -- or, for a dense page (the newest 1,000 of an
    unfiltered list), merely between its smallest and largest id: one range instead of
    1,000 bound parameters per query, whose rendering cost more than the queries
    themselves. Callers keep only the rows of ``ids``."""
    lo, hi = min(ids), max(ids)
    if hi - lo < 2 * len(ids) + 64:
        return column.between(lo, hi)
    return column.in_(ids)


def experiment_columns(s: Session, ids: list[int], fields: Sequence[str]) -> list[dict[str, Any]]:
    """The projected views of experiments ``ids`` (in that order): ``id`` and each of
    ``fields`` (checked by :func:`check_fields`), reading only the columns and tables
    they need. ``hp.<name>`` is that hyperparameter of the representative trial (None
    when it has none); ``hparams`` all of them, ``{dotted name: value}``.

    The queries run on the session's connection (SQLAlchemy Core): plain rows, none of
    the ORM's per-row work (a third of a 1,000-row page's CPU)."""
    if not ids:
        return []
    conn = s.connection()
    wanted_ids = set(ids)
    wanted = ["id", *[f for f in dict.fromkeys(fields) if f != "id"]]
    columns = [f for f in wanted if f in COLUMN_FIELDS]
    need_project = any(f in ("project_name", "workspace_id", "workspace_name") for f in wanted)
    select_cols = [COLUMN_FIELDS[f] for f in columns]
    if need_project and "project_id" not in columns:
        select_cols.append(ExperimentRow.project_id)
    rows = conn.execute(select(*select_cols).where(_among(ExperimentRow.id, ids))).all()
    views: dict[int, dict[str, Any]] = {}
    projects: dict[int, int] = {}
    for row in rows:
        if row[0] not in wanted_ids:
            continue
        view = dict(zip(columns, row, strict=False))
        views[row[0]] = view
        if need_project:
            projects[row[0]] = (
                row[len(columns)] if "project_id" not in columns else view["project_id"]
            )
    if "num_trials" in wanted:
        counts = dict(
            conn.execute(
                select(TrialRow.experiment_id, func.count(TrialRow.id))
                .where(_among(TrialRow.experiment_id, ids))
                .group_by(TrialRow.experiment_id)
            ).all()
        )
        for exp_id, view in views.items():
            view["num_trials"] = counts.get(exp_id, 0)
    if "labels" in wanted:
        labels: dict[int, list[str]] = defaultdict(list)
        for exp_id, label in conn.execute(
            select(ExperimentLabelRow.experiment_id, ExperimentLabelRow.label)
            .where(_among(ExperimentLabelRow.experiment_id, ids))
            .order_by(ExperimentLabelRow.label)
        ):
            labels[exp_id].append(label)
        for exp_id, view in views.items():
            view["labels"] = labels.get(exp_id, [])
    _add_hparams(s, ids, wanted, views)
    if need_project:
        _add_places(s, projects, wanted, views)
    return [views[i] for i in ids if i in views]


def _add_hparams(
    s: Session, ids: list[int], wanted: list[str], views: dict[int, dict[str, Any]]
) -> None:
    names = [f[3:] for f in wanted if f.startswith("hp.")]
    if not names and "hparams" not in wanted:
        return
    H = ExperimentHparamRow
    query = select(H.experiment_id, H.name, H.num_value, H.text_value).where(
        _among(H.experiment_id, ids)
    )
    if "hparams" not in wanted:
        query = query.where(H.name.in_(names))
    found: dict[int, dict[str, Any]] = defaultdict(dict)
    for exp_id, name, num, text in s.connection().execute(query):
        value: Any = text
        if num is not None:
            value = int(num) if num.is_integer() and abs(num) < 2**53 else num
        found[exp_id][name] = value
    for exp_id, view in views.items():
        values = found.get(exp_id, {})
        if "hparams" in wanted:
            view["hparams"] = values
        for name in names:
            view[f"hp.{name}"] = values.get(name)


def _add_places(
    s: Session, projects: dict[int, int], wanted: list[str], views: dict[int, dict[str, Any]]
) -> None:
    rows = s.execute(
        select(ProjectRow.id, ProjectRow.name, WorkspaceRow.id, WorkspaceRow.name)
        .join(WorkspaceRow, WorkspaceRow.id == ProjectRow.workspace_id)
        .where(ProjectRow.id.in_(set(projects.values())))
    )
    places = {
        pid: {"project_name": pname, "workspace_id": wid, "workspace_name": wname}
        for pid, pname, wid, wname in rows
    }
    for exp_id, view in views.items():
        place = places.get(projects[exp_id], {})
        for key in ("project_name", "workspace_id", "workspace_name"):
            if key in wanted:
                view[key] = place.get(key)
