"""Projects: create, read, edit, archive, move, delete, notes; moving experiments
between projects; the project a new experiment goes to (Determined's rules and
messages, reference §1.1-1.3). Rows only; the caller's write session commits.

Project 1 (``Uncategorized``, in workspace 1) is immutable. A project key is 1-5 letters
and digits, upper-cased, unique on the cluster; one is made from the name when none is
given (up to three of its letters and digits, then random ones to five).
"""

from __future__ import annotations

import re
import secrets
import string
from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from ..db import UNCATEGORIZED_ID, ExperimentRow, ProjectRow, TrialRow, WorkspaceRow
from ..errors import BadRequest, Conflict, NotFound
from ..states import State
from .workspaces import check_name, read_workspace, refuse_archived, workspace_by_name

KEY_PATTERN = re.compile(r"^[A-Za-z0-9]{1,5}$")
"""A project key as given (upper-cased when stored)."""

MAX_NOTES = 100
"""The most notes one project holds."""

MAX_NOTE_BYTES = 64 * 1024
"""The longest note (name plus contents), in UTF-8 bytes."""

_ACTIVE = (State.ACTIVE.value, State.PAUSED.value)


def read_project(s: Session, project_id: int) -> ProjectRow:
    """A project by id.

    Raises:
        NotFound: no such project.
    """
    p = s.get(ProjectRow, project_id)
    if p is None:
        raise NotFound(f"project {project_id} not found")
    return p


def list_projects(
    s: Session,
    workspace_id: int | None,
    *,
    visible: set[int] | None = None,
    name: str | None = None,
    archived: bool | None = None,
    user_ids: Sequence[int] = (),
    sort_by: str = "id",
    order_by: str = "asc",
    offset: int = 0,
    limit: int = 0,
) -> tuple[list[ProjectRow], int]:
    """A page of projects (of one workspace, or of the ``visible`` ones) and how many
    matched; ``sort_by`` is ``id``, ``name``, ``description`` or ``creation_time``."""
    q = select(ProjectRow)
    if workspace_id is not None:
        q = q.where(ProjectRow.workspace_id == workspace_id)
    if visible is not None:
        q = q.where(ProjectRow.workspace_id.in_(visible))
    if name:
        q = q.where(func.lower(ProjectRow.name) == name.lower())
    if archived is not None:
        q = q.where(ProjectRow.archived == archived)
    if user_ids:
        q = q.where(ProjectRow.user_id.in_(user_ids))
    total = s.scalar(select(func.count()).select_from(q.subquery())) or 0
    column = {
        "name": ProjectRow.name,
        "description": ProjectRow.description,
        "creation_time": ProjectRow.created_at,
    }.get(sort_by, ProjectRow.id)
    q = q.order_by(column.desc() if order_by == "desc" else column.asc(), ProjectRow.id)
    if offset:
        q = q.offset(offset)
    if limit:
        q = q.limit(limit)
    return list(s.scalars(q)), total


def project_counts(s: Session, ids: Iterable[int]) -> dict[int, dict[str, Any]]:
    """Per project: ``num_experiments``, ``num_active_experiments``, ``num_runs`` (its
    experiments' trials: Determined's runs) and ``last_experiment_started_at`` (seconds
    since the epoch, or None)."""
    ids = list(ids)
    out: dict[int, dict[str, Any]] = {
        i: {
            "num_experiments": 0,
            "num_active_experiments": 0,
            "num_runs": 0,
            "last_experiment_started_at": None,
        }
        for i in ids
    }
    if not ids:
        return out
    for pid, n, last in s.execute(
        select(ExperimentRow.project_id, func.count(), func.max(ExperimentRow.start_time))
        .where(ExperimentRow.project_id.in_(ids))
        .group_by(ExperimentRow.project_id)
    ):
        out[pid].update(num_experiments=n, last_experiment_started_at=last)
    for pid, n in s.execute(
        select(ExperimentRow.project_id, func.count())
        .where(ExperimentRow.project_id.in_(ids), ExperimentRow.state.in_(_ACTIVE))
        .group_by(ExperimentRow.project_id)
    ):
        out[pid]["num_active_experiments"] = n
    for pid, n in s.execute(
        select(ExperimentRow.project_id, func.count(TrialRow.id))
        .join(TrialRow, TrialRow.experiment_id == ExperimentRow.id)
        .where(ExperimentRow.project_id.in_(ids))
        .group_by(ExperimentRow.project_id)
    ):
        out[pid]["num_runs"] = n
    return out


def _key(s: Session, key: str | None, name: str, other_than: int | None = None) -> str:
    if key is None:
        stem = "".join(c for c in name.upper() if c in string.ascii_uppercase + string.digits)
        alphabet = string.ascii_uppercase + string.digits
        for _ in range(100):
            made = (stem[:3] + "".join(secrets.choice(alphabet) for _ in range(5)))[:5]
            if s.scalar(select(ProjectRow.id).where(ProjectRow.key == made)) is None:
                return made
        raise Conflict("could not make a unique project key; give one (--key)")
    if not KEY_PATTERN.match(key):
        raise BadRequest("invalid project key", [("key", "1 to 5 letters or digits")])
    key = key.upper()
    q = select(ProjectRow.id).where(ProjectRow.key == key)
    if other_than is not None:
        q = q.where(ProjectRow.id != other_than)
    if s.scalar(q) is not None:
        raise Conflict(f"project key {key} is already in use")
    return key


def _unique_name(s: Session, workspace_id: int, name: str, other_than: int | None = None) -> None:
    q = select(ProjectRow.id).where(
        ProjectRow.workspace_id == workspace_id, func.lower(ProjectRow.name) == name.lower()
    )
    if other_than is not None:
        q = q.where(ProjectRow.id != other_than)
    if s.scalar(q) is not None:
        raise Conflict(f"project name {name} is already in use")


def create_project(
    s: Session,
    now: float,
    user_id: int | None,
    workspace_id: int,
    name: str,
    description: str = "",
    key: str | None = None,
) -> ProjectRow:
    """Create a project in a workspace (its id assigned).

    Raises:
        NotFound: no such workspace. BadRequest: a bad name or key.
        Conflict: the workspace is archived or immutable; the name or key is taken.
    """
    ws = read_workspace(s, workspace_id)
    if ws.archived:
        raise Conflict(f"workspace ({ws.id}) is archived and cannot add new projects")
    if ws.immutable:
        raise Conflict(f"workspace ({ws.id}) is immutable and cannot add new projects")
    check_name(name, "project")
    _unique_name(s, workspace_id, name)
    p = ProjectRow(
        name=name,
        workspace_id=workspace_id,
        description=description or "",
        notes=[],
        archived=False,
        immutable=False,
        user_id=user_id,
        key=_key(s, key, name),
        created_at=now,
    )
    s.add(p)
    s.flush()
    return p


def _editable(s: Session, p: ProjectRow, verb: str) -> WorkspaceRow:
    ws = read_workspace(s, p.workspace_id)
    if p.immutable:
        raise Conflict(f"project {p.id} ({p.name}) is immutable and cannot be {verb}")
    if ws.archived:
        raise Conflict(
            "This project belongs to an archived workspace. To make changes, first unarchive "
            "the workspace."
        )
    return ws


def patch_project(
    s: Session,
    project_id: int,
    name: str | None = None,
    description: str | None = None,
    key: str | None = None,
) -> ProjectRow:
    """Rename a project, or set its description or key.

    Raises:
        NotFound, BadRequest, Conflict: as :func:`create_project`; also an archived or
            immutable project.
    """
    p = read_project(s, project_id)
    _editable(s, p, "edited")
    if p.archived:
        raise Conflict(f"project {p.id} ({p.name}) is archived and cannot be edited")
    if name is not None and name != p.name:
        check_name(name, "project")
        _unique_name(s, p.workspace_id, name, other_than=p.id)
        p.name = name
    if description is not None:
        p.description = description
    if key is not None:
        p.key = _key(s, key, p.name, other_than=p.id)
    return p


def set_archived(s: Session, project_id: int, archived: bool) -> ProjectRow:
    """Archive (no new experiments) or unarchive a project.

    Raises:
        NotFound: no such project. Conflict: immutable, or its workspace is archived.
    """
    p = read_project(s, project_id)
    _editable(s, p, "archived" if archived else "unarchived")
    p.archived = archived
    return p


def delete_project(s: Session, project_id: int) -> None:
    """Delete a project that holds no experiment.

    Raises:
        NotFound: no such project. Conflict: immutable, or it holds experiments.
    """
    p = read_project(s, project_id)
    _editable(s, p, "deleted")
    n = s.scalar(
        select(func.count()).select_from(ExperimentRow).where(ExperimentRow.project_id == p.id)
    )
    if n:
        raise Conflict(
            f"project {p.id} ({p.name}) contains {n} experiment(s); move or delete them first"
        )
    s.delete(p)


def move_project(s: Session, project_id: int, destination: int) -> ProjectRow:
    """Move a project to another workspace.

    Raises:
        NotFound: no such project or workspace.
        Conflict: immutable or archived source, a destination that takes no projects,
            or a project of the same name there.
    """
    p = read_project(s, project_id)
    _editable(s, p, "moved")
    if p.archived:
        raise Conflict(f"project {p.id} ({p.name}) is archived and cannot be moved")
    dest = read_workspace(s, destination)
    if dest.archived or dest.immutable:
        state = "archived" if dest.archived else "immutable"
        raise Conflict(f"workspace ({dest.id}) is {state} and cannot add new projects")
    if s.scalar(
        select(ProjectRow.id).where(
            ProjectRow.workspace_id == destination,
            func.lower(ProjectRow.name) == p.name.lower(),
        )
    ):
        raise Conflict(f"project with name '{p.name}' already exists in target workspace")
    p.workspace_id = destination
    return p


def set_notes(s: Session, project_id: int, notes: list[dict[str, str]], append: bool) -> list[Any]:
    """Append one note, or replace every note, of a project.

    Raises:
        NotFound: no such project. BadRequest: too many or too long notes.
        Conflict: an immutable or archived project (or workspace).
    """
    p = read_project(s, project_id)
    _editable(s, p, "edited")
    new = [*p.notes, *notes] if append else list(notes)
    if len(new) > MAX_NOTES:
        raise BadRequest("too many notes", [("notes", f"at most {MAX_NOTES} per project")])
    for n in new:
        if len((n["name"] + n["contents"]).encode()) > MAX_NOTE_BYTES:
            raise BadRequest("note too long", [("notes", f"at most {MAX_NOTE_BYTES} bytes each")])
    p.notes = new
    return new


# ---------------------------------------------------------------------- experiments


def accepting_project(s: Session, project_id: int) -> tuple[ProjectRow, WorkspaceRow]:
    """A project that takes new experiments, and its workspace.

    Raises:
        NotFound: no such project.
        Conflict: the project or its workspace is archived.
    """
    p = read_project(s, project_id)
    ws = read_workspace(s, p.workspace_id)
    if ws.archived:
        raise Conflict("workspace is archived and cannot add new experiments")
    if p.archived:
        raise Conflict("project is archived and cannot add new experiments")
    return p, ws


def project_for_create(s: Session, project_id: int | None, workspace: str, project: str) -> int:
    """The project a new experiment goes to: ``project_id`` (``--project_id``) first,
    else the config's ``workspace`` and ``project`` names, else Uncategorized
    (Determined's order and messages). Whether it takes new experiments is
    :func:`accepting_project`'s.

    Raises:
        BadRequest: only one of the two names given.
        NotFound: no such project, or no such workspace/project pair.
    """
    if project_id is None:
        if bool(workspace) != bool(project):
            raise BadRequest(
                "workspace and project must both be included in config if one is provided",
                [("workspace" if not workspace else "project", "give both or neither")],
            )
        project_id = UNCATEGORIZED_ID
        if workspace:
            ws = workspace_by_name(s, workspace)
            found = (
                s.scalar(
                    select(ProjectRow.id).where(
                        ProjectRow.workspace_id == ws.id, ProjectRow.name == project
                    )
                )
                if ws is not None
                else None
            )
            if found is None:
                raise NotFound(f"workspace '{workspace}' or project '{project}' not found")
            project_id = found
    elif s.get(ProjectRow, project_id) is None:
        raise NotFound(f"project ({project_id}) not found")
    return project_id


def move_experiment(s: Session, exp: ExperimentRow, destination: int) -> ProjectRow:
    """Move an experiment to project ``destination``.

    Raises:
        NotFound: no such project. Conflict: it (or its workspace) is archived.
    """
    p, _ws = accepting_project(s, destination)
    exp.project_id = p.id
    return p


def refuse_archived_workspace(s: Session, workspace_id: int) -> WorkspaceRow:
    """A workspace that takes new tasks.

    Raises:
        NotFound: no such workspace. Conflict: archived.
    """
    ws = read_workspace(s, workspace_id)
    refuse_archived(ws)
    return ws
