"""The model registry (issue 31 scope 1): models and the versions registered from
checkpoints, with Determined's rules and messages (reference
``determined-surface-platform.md`` §4). Rows only; the caller's write session commits.

A checkpoint that a version names is *registered*: checkpoint GC, the deletion of its
experiment and ``det checkpoint delete`` leave its files alone
(:mod:`.registered`). Deleting the last version that
names it releases it: its experiment's GC may collect it again, and when the experiment
is gone already, :func:`delete_version` returns the storage and uuid whose files the
caller deletes once the transaction has committed.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import func, or_, select
from sqlalchemy.orm import Session

from ..db import CheckpointRow, ExperimentRow, ModelRow, ModelVersionRow, UserRow
from ..errors import BadRequest, Conflict, NotFound
from .workspaces import read_workspace, refuse_archived, workspace_by_name

MAX_LABELS = 100
"""The most labels a model or version holds."""

MAX_LABEL_LENGTH = 255
"""The longest label, in characters."""

SORT_COLUMNS = {
    "name": ModelRow.name,
    "description": ModelRow.description,
    "creation_time": ModelRow.creation_time,
    "last_updated_time": ModelRow.last_updated_time,
    "workspace": ModelRow.workspace_id,
    "id": ModelRow.id,
}
"""``GET /models`` sort keys (``num_versions`` is sorted by its count)."""


def check_model_name(name: str) -> None:
    """Determined's rule for model names.

    Raises:
        BadRequest: blank, two spaces in a row, a ``/`` or ``\\``, all digits (a name
            that could be read as an id), or over 256 characters.
    """
    why = ""
    if not name.strip():
        why = "must not be blank"
    elif "  " in name:
        why = "must not contain two consecutive spaces"
    elif "/" in name or "\\" in name:
        why = "must not contain '/' or '\\'"
    elif name.isdigit():
        why = "must not be all digits (paths read such a name as a model id)"
    elif len(name) > 256:
        why = "must be at most 256 characters"
    if why:
        raise BadRequest(f"model name {name!r} {why}", [("name", why)])


def check_labels(labels: Sequence[str]) -> list[str]:
    """Labels as stored: unique, in the order given.

    Raises:
        BadRequest: more than :data:`MAX_LABELS`, or an empty or over-long label.
    """
    if len(labels) > MAX_LABELS:
        raise BadRequest("too many labels", [("labels", f"at most {MAX_LABELS}")])
    for label in labels:
        if not label or len(label) > MAX_LABEL_LENGTH:
            raise BadRequest(
                f"invalid label {label[:40]!r}",
                [("labels", f"each label is 1..{MAX_LABEL_LENGTH} characters")],
            )
    return list(dict.fromkeys(labels))


def read_model(s: Session, ident: str | int) -> ModelRow:
    """A model by name, or by id when ``ident`` is an int or all digits (Determined's
    rule for path segments).

    Raises:
        NotFound: no such model.
    """
    text = str(ident)
    if text.isdigit():
        row = s.get(ModelRow, int(text)) if int(text) < 2**31 else None
    else:
        row = s.scalar(select(ModelRow).where(ModelRow.name == text))
    if row is None:
        raise NotFound(f"model {text!r} not found")
    return row


def _workspace_id(s: Session, workspace_id: int | None, workspace_name: str | None) -> int:
    if workspace_name:
        ws = workspace_by_name(s, workspace_name)
        if ws is None:
            raise NotFound(f"workspace {workspace_name!r} not found")
        if workspace_id not in (None, 0, ws.id):
            raise BadRequest(
                "workspace_id and workspace_name name different workspaces",
                [("workspace_id", f"workspace {workspace_name!r} is {ws.id}")],
            )
        return ws.id
    return workspace_id or 1


def workspace_ids_named(s: Session, names: Sequence[str]) -> list[int]:
    """The ids of the workspaces called ``names`` (as :func:`workspace_by_name` finds
    them); unknown names are left out."""
    found = (workspace_by_name(s, n) for n in names)
    return [ws.id for ws in found if ws is not None]


def _unique(s: Session, name: str, other_than: int | None = None) -> None:
    q = select(ModelRow.id).where(ModelRow.name == name)
    if other_than is not None:
        q = q.where(ModelRow.id != other_than)
    if s.scalar(q) is not None:
        raise Conflict(
            f"model {name!r} already exists: avoid names equal to other models (case-sensitive)"
        )


def model_workspace(
    s: Session, workspace_id: int | None = None, workspace_name: str | None = None
) -> int:
    """The workspace a new or moved model goes to: the one named, else workspace 1.

    Raises:
        NotFound: no such workspace. BadRequest: id and name disagree.
    """
    ws_id = _workspace_id(s, workspace_id, workspace_name)
    read_workspace(s, ws_id)
    return ws_id


def create_model(
    s: Session,
    now: float,
    user_id: int | None,
    name: str,
    workspace_id: int,
    description: str = "",
    metadata: dict[str, Any] | None = None,
    labels: Sequence[str] = (),
    notes: str = "",
) -> ModelRow:
    """Create a model in ``workspace_id`` (resolved by :func:`model_workspace`).

    Raises:
        BadRequest: a bad name or labels. Conflict: the name is taken, or the workspace
            is archived.
    """
    check_model_name(name)
    refuse_archived(read_workspace(s, workspace_id))
    _unique(s, name)
    row = ModelRow(
        name=name,
        description=description,
        meta=dict(metadata or {}),
        labels=check_labels(labels),
        notes=notes,
        workspace_id=workspace_id,
        user_id=user_id,
        archived=False,
        creation_time=now,
        last_updated_time=now,
    )
    s.add(row)
    s.flush()
    return row


def list_models(
    s: Session,
    *,
    visible: set[int] | None = None,
    name: str | None = None,
    description: str | None = None,
    labels: Sequence[str] = (),
    archived: bool | None = None,
    user_ids: Sequence[int] = (),
    usernames: Sequence[str] = (),
    model_id: int | None = None,
    workspace_ids: Sequence[int] = (),
    sort_by: str = "name",
    order_by: str = "asc",
    offset: int = 0,
    limit: int = 0,
) -> tuple[list[ModelRow], int]:
    """A page of models and how many matched: ``name`` and ``description`` match
    substrings (any case), ``labels`` must all be present, ``visible`` limits to those
    workspaces (None: all); ``sort_by`` a key of :data:`SORT_COLUMNS` or
    ``num_versions``; ``limit`` 0: every model."""
    q = select(ModelRow)
    if visible is not None:
        q = q.where(ModelRow.workspace_id.in_(visible))
    if name:
        q = q.where(func.lower(ModelRow.name).contains(name.lower(), autoescape=True))
    if description:
        q = q.where(func.lower(ModelRow.description).contains(description.lower(), autoescape=True))
    if archived is not None:
        q = q.where(ModelRow.archived == archived)
    if user_ids or usernames:
        by_name = select(UserRow.id).where(UserRow.username.in_(list(usernames)))
        q = q.where(or_(ModelRow.user_id.in_(list(user_ids)), ModelRow.user_id.in_(by_name)))
    if model_id is not None:
        q = q.where(ModelRow.id == model_id)
    if workspace_ids:
        q = q.where(ModelRow.workspace_id.in_(list(workspace_ids)))
    if not labels and sort_by != "num_versions":  # sorted and paged in SQL
        total = s.scalar(select(func.count()).select_from(q.subquery())) or 0
        col = SORT_COLUMNS.get(sort_by, ModelRow.name)
        desc = order_by == "desc"
        q = q.order_by(col.desc() if desc else col, ModelRow.id.desc() if desc else ModelRow.id)
        q = q.offset(offset).limit(limit) if limit else q.offset(offset)
        return list(s.scalars(q)), total
    rows = list(s.scalars(q))
    if labels:  # labels live in a JSON list: filtered here, before counting and paging
        rows = [r for r in rows if set(labels) <= set(r.labels or [])]
    counts = version_counts(s, [r.id for r in rows]) if sort_by == "num_versions" else {}

    def key(r: ModelRow) -> Any:
        if sort_by == "num_versions":
            return (counts.get(r.id, 0), r.id)
        return (getattr(r, SORT_COLUMNS.get(sort_by, ModelRow.name).key), r.id)

    rows.sort(key=key, reverse=order_by == "desc")
    total = len(rows)
    page = rows[offset : offset + limit] if limit else rows[offset:]
    return page, total


def version_counts(s: Session, model_ids: Iterable[int]) -> dict[int, int]:
    """How many versions each model has, by model id (0s left out)."""
    ids = list(model_ids)
    if not ids:
        return {}
    return dict(
        s.execute(  # type: ignore[arg-type]
            select(ModelVersionRow.model_id, func.count())
            .where(ModelVersionRow.model_id.in_(ids))
            .group_by(ModelVersionRow.model_id)
        ).all()
    )


def _refuse_archived_model(model: ModelRow, what: str) -> None:
    if model.archived:
        raise Conflict(f"model {model.name!r} is archived and cannot {what}")


def patch_model(s: Session, now: float, model: ModelRow, fields: dict[str, Any]) -> ModelRow:
    """Change a model's ``name``, ``description``, ``metadata``, ``labels``, ``notes``
    (keys of ``fields`` that are present; ``workspace_id`` is a move, see
    :func:`move_model`).

    Raises:
        Conflict: the model is archived, or the new name is taken. BadRequest: bad name
            or labels.
    """
    _refuse_archived_model(model, "have attributes updated")
    if "name" in fields and fields["name"] != model.name:
        check_model_name(fields["name"])
        _unique(s, fields["name"], other_than=model.id)
        model.name = fields["name"]
    if "description" in fields:
        model.description = fields["description"]
    if "metadata" in fields:
        model.meta = dict(fields["metadata"])
    if "labels" in fields:
        model.labels = check_labels(fields["labels"])
    if "notes" in fields:
        model.notes = fields["notes"]
    model.last_updated_time = now
    return model


def set_archived(s: Session, now: float, model: ModelRow, archived: bool) -> None:
    """Archive (no edits, no new versions; still readable) or unarchive a model."""
    model.archived = archived
    model.last_updated_time = now


def move_model(s: Session, now: float, model: ModelRow, workspace_id: int) -> None:
    """Move a model to another workspace.

    Raises:
        NotFound: no such workspace. Conflict: the destination is archived.
    """
    refuse_archived(read_workspace(s, workspace_id))
    model.workspace_id = workspace_id
    model.last_updated_time = now


def delete_model(s: Session, model: ModelRow) -> list[tuple[dict[str, Any], str]]:
    """Delete a model with its versions (not their checkpoints).

    Returns:
        The checkpoints released that no experiment holds any more, as
        :func:`delete_version` returns them.
    """
    released: list[tuple[dict[str, Any], str]] = []
    for v in list(s.scalars(select(ModelVersionRow).where(ModelVersionRow.model_id == model.id))):
        released += delete_version(s, v)
    s.delete(model)
    return released


def model_labels(s: Session, visible: set[int] | None, workspace_id: int | None) -> list[str]:
    """Every label of the models (in ``visible`` workspaces, of ``workspace_id`` if
    given), the most used first (then by name)."""
    q = select(ModelRow.labels)
    if visible is not None:
        q = q.where(ModelRow.workspace_id.in_(visible))
    if workspace_id:
        q = q.where(ModelRow.workspace_id == workspace_id)
    counts: dict[str, int] = {}
    for labels in s.scalars(q):
        for label in labels or []:
            counts[label] = counts.get(label, 0) + 1
    return sorted(counts, key=lambda k: (-counts[k], k))


# ---------------------------------------------------------------------- versions


def checkpoint_copy(ckpt: CheckpointRow, exp: ExperimentRow) -> dict[str, Any]:
    """What a version keeps of its checkpoint (the module docstring of
    :mod:`dauntless.master.db.registry`)."""
    return {
        "uuid": ckpt.uuid,
        "trial_id": ckpt.trial_id,
        "experiment_id": ckpt.experiment_id,
        "total_batches": ckpt.total_batches,
        "resources": dict(ckpt.resources or {}),
        "metadata": dict(ckpt.meta or {}),
        "report_time": ckpt.report_time,
        "storage": dict((exp.config or {}).get("checkpoint_storage") or {}),
    }


def create_version(
    s: Session,
    now: float,
    user_id: int | None,
    model: ModelRow,
    checkpoint_uuid: str,
    name: str = "",
    comment: str = "",
    metadata: dict[str, Any] | None = None,
    labels: Sequence[str] = (),
    notes: str = "",
) -> ModelVersionRow:
    """Register ``checkpoint_uuid`` as the model's next version (the highest number so
    far plus one, from 1; the same checkpoint may be registered many times).

    Raises:
        NotFound: no such checkpoint. Conflict: the model is archived, the
            checkpoint is not COMPLETED, or its experiment is being deleted.
    """
    _refuse_archived_model(model, "register new versions")
    ckpt = s.get(CheckpointRow, checkpoint_uuid)
    exp = s.get(ExperimentRow, ckpt.experiment_id) if ckpt is not None else None
    if ckpt is None or exp is None:
        raise NotFound(f"checkpoint {checkpoint_uuid} not found")
    if exp.state in ("DELETING", "DELETE_FAILED"):  # its files are being deleted
        raise Conflict(
            f"checkpoint {checkpoint_uuid} belongs to experiment {exp.id}, which is "
            f"{exp.state}; its checkpoints cannot be registered"
        )
    if ckpt.state != "COMPLETED":
        raise Conflict(
            f"checkpoint {checkpoint_uuid} is in {ckpt.state} state. checkpoints for model "
            "versions must be in a COMPLETED state"
        )
    top = s.scalar(
        select(func.max(ModelVersionRow.version)).where(ModelVersionRow.model_id == model.id)
    )
    row = ModelVersionRow(
        model_id=model.id,
        version=(top or 0) + 1,
        checkpoint_uuid=checkpoint_uuid,
        checkpoint=checkpoint_copy(ckpt, exp),
        name=name,
        comment=comment,
        notes=notes,
        meta=dict(metadata or {}),
        labels=check_labels(labels),
        user_id=user_id,
        creation_time=now,
        last_updated_time=now,
    )
    s.add(row)
    model.last_updated_time = now
    s.flush()
    return row


def list_versions(
    s: Session, model: ModelRow, sort_by: str = "version", order_by: str = "asc"
) -> list[ModelVersionRow]:
    """A model's versions, by ``version`` or ``creation_time``."""
    col = ModelVersionRow.creation_time if sort_by == "creation_time" else ModelVersionRow.version
    q = select(ModelVersionRow).where(ModelVersionRow.model_id == model.id)
    q = q.order_by(col.desc() if order_by == "desc" else col, ModelVersionRow.id)
    return list(s.scalars(q))


def read_version(s: Session, model: ModelRow, version: int) -> ModelVersionRow:
    """One version of a model (``-1``: the highest).

    Raises:
        NotFound: no such version.
    """
    q = select(ModelVersionRow).where(ModelVersionRow.model_id == model.id)
    if version == -1:
        row = s.scalar(q.order_by(ModelVersionRow.version.desc()).limit(1))
    else:
        row = s.scalar(q.where(ModelVersionRow.version == version))
    if row is None:
        raise NotFound(f"version {version} for model {model.name!r} not found")
    return row


def patch_version(
    s: Session, now: float, model: ModelRow, v: ModelVersionRow, fields: dict[str, Any]
) -> ModelVersionRow:
    """Change a version's ``name``, ``comment``, ``notes``, ``metadata``, ``labels``.

    Raises:
        Conflict: its model is archived. BadRequest: bad labels.
    """
    _refuse_archived_model(model, "have attributes updated")
    for key in ("name", "comment", "notes"):
        if key in fields:
            setattr(v, key, fields[key])
    if "metadata" in fields:
        v.meta = dict(fields["metadata"])
    if "labels" in fields:
        v.labels = check_labels(fields["labels"])
    v.last_updated_time = now
    return v


def delete_version(s: Session, v: ModelVersionRow) -> list[tuple[dict[str, Any], str]]:
    """Delete a version, releasing its checkpoint when no other version names it.

    Returns:
        ``[(checkpoint_storage, uuid)]``: the released checkpoint whose experiment is
        gone (so no GC will ever collect it), whose files the caller deletes after the
        commit; empty otherwise (its experiment's GC decides, as for any checkpoint).
    """
    uuid = v.checkpoint_uuid
    storage = dict(v.checkpoint.get("storage") or {})
    s.delete(v)
    s.flush()
    if s.scalar(select(ModelVersionRow.id).where(ModelVersionRow.checkpoint_uuid == uuid)):
        return []
    if s.get(CheckpointRow, uuid) is not None:
        return []
    return [(storage, uuid)] if storage else []
