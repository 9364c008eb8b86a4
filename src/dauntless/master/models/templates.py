"""Config templates (issue 31 scope 5; reference §6.1): create, read, list, replace,
rename, delete, and applying one to a submitted config.

A template is ``{name, config, workspace_id}``; its name is unique on the cluster. It is
applied when an experiment or a task is submitted (:func:`apply_template`), so editing a
template later changes nothing that already runs. Templates do not nest: a template's
own config naming another template is not followed.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from dauntless.config import merge_template

from ..db import TemplateRow, WorkspaceRow
from ..errors import BadRequest, Conflict, NotFound

MAX_NAME = 256
"""The longest template name, in characters."""


def check_name(name: str, field: str = "name") -> str:
    """A template name, stripped of surrounding blanks.

    Raises:
        BadRequest: empty, longer than :data:`MAX_NAME` characters, or holding ``/``
            (a name is one path segment of the REST API).
    """
    name = name.strip() if isinstance(name, str) else ""
    if not name or len(name) > MAX_NAME or "/" in name:
        raise BadRequest(
            f"invalid template {field}: 1-{MAX_NAME} characters without '/'",
            [(field, f"1-{MAX_NAME} characters without '/'")],
        )
    return name


def read_template(s: Session, name: str) -> TemplateRow | None:
    """The template called ``name``, or None."""
    return s.get(TemplateRow, name)


def require_template(s: Session, name: str) -> TemplateRow:
    """The template called ``name``.

    Raises:
        NotFound: no such template.
    """
    row = read_template(s, name)
    if row is None:
        raise NotFound(f"template {name!r} not found")
    return row


def read_templates(
    s: Session,
    *,
    visible: set[int] | None,
    name: str = "",
    workspace_ids: list[int] | None = None,
    descending: bool = False,
    offset: int = 0,
    limit: int = 0,
) -> tuple[list[TemplateRow], int]:
    """A page of templates sorted by name, and how many match in all.

    Args:
        visible: the workspaces whose templates the caller may see (None: all).
        name: only names containing this text (case-insensitive).
        workspace_ids: only templates of these workspaces (None or empty: any).
        descending: sort by name from Z to A.
        offset, limit: the page (``limit`` 0: every match).
    """
    q = select(TemplateRow)
    if visible is not None:
        q = q.where(TemplateRow.workspace_id.in_(sorted(visible)))
    if workspace_ids:
        q = q.where(TemplateRow.workspace_id.in_(workspace_ids))
    if name:
        q = q.where(func.lower(TemplateRow.name).contains(name.lower(), autoescape=True))
    total = s.scalar(select(func.count()).select_from(q.subquery())) or 0
    q = q.order_by(TemplateRow.name.desc() if descending else TemplateRow.name)
    if offset:
        q = q.offset(offset)
    if limit:
        q = q.limit(limit)
    return list(s.scalars(q)), total


def _check_config(config: Any) -> dict[str, Any]:
    if not isinstance(config, dict):
        raise BadRequest(
            "invalid template config: expected a mapping", [("config", "a mapping (object)")]
        )
    return config


def create_template(
    s: Session,
    name: str,
    config: Any,
    workspace_id: int,
    user_id: int | None,
    now: float,
    *,
    replace: bool = False,
) -> TemplateRow:
    """Create template ``name`` in workspace ``workspace_id``; with ``replace``, an
    existing one of that name takes the new config (and workspace) instead.

    Raises:
        BadRequest: a bad name, or a config that is not a mapping.
        NotFound: no such workspace.
        Conflict: the name is taken (without ``replace``).
    """
    name = check_name(name)
    config = _check_config(config)
    if s.get(WorkspaceRow, workspace_id) is None:
        raise NotFound(f"workspace {workspace_id} not found")
    row = read_template(s, name)
    if row is not None:
        if not replace:
            raise Conflict(f"template {name!r} already exists")
        row.config, row.workspace_id, row.updated_at = config, workspace_id, now
        return row
    row = TemplateRow(
        name=name,
        config=config,
        workspace_id=workspace_id,
        user_id=user_id,
        created_at=now,
        updated_at=now,
    )
    s.add(row)
    s.flush()
    return row


def update_config(s: Session, name: str, config: Any, now: float) -> TemplateRow:
    """Replace template ``name``'s config.

    Raises:
        NotFound: no such template. BadRequest: a config that is not a mapping.
    """
    row = require_template(s, name)
    row.config, row.updated_at = _check_config(config), now
    return row


def rename_template(s: Session, old: str, new: str, now: float) -> TemplateRow:
    """Rename template ``old`` to ``new``.

    Raises:
        NotFound: no template ``old``. BadRequest: a bad new name. Conflict: ``new`` is
        taken.
    """
    row = require_template(s, old)
    new = check_name(new, "new_name")
    if new == old:
        return row
    if read_template(s, new) is not None:
        raise Conflict(f"template {new!r} already exists")
    copy = TemplateRow(
        name=new,
        config=row.config,
        workspace_id=row.workspace_id,
        user_id=row.user_id,
        created_at=row.created_at,
        updated_at=now,
    )
    s.delete(row)
    s.flush()
    s.add(copy)
    s.flush()
    return copy


def delete_template(s: Session, name: str) -> None:
    """Delete template ``name``.

    Raises:
        NotFound: no such template.
    """
    s.delete(require_template(s, name))


def apply_template(template: TemplateRow, config: dict[str, Any]) -> dict[str, Any]:
    """``config`` merged over ``template``'s config (Determined's rules:
    :func:`dauntless.config.merge_template`)."""
    return merge_template(template.config, config)
