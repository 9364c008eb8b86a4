"""Which checkpoints model versions hold (issue 31 scope 1), for checkpoint GC, the
deletion of experiments and checkpoints and the edits of their metadata, which leave a
registered checkpoint alone and name its versions when they refuse; and the small reads
the registry's views need. Rows only. Split out of :mod:`.registry`.
"""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from ..db import CheckpointRow, ModelRow, ModelVersionRow, UserRow
from ..errors import Conflict


def registered_uuids(s: Session, uuids: Iterable[str] | None = None) -> set[str]:
    """The uuids (of ``uuids``, else of every checkpoint) some version names."""
    q = select(ModelVersionRow.checkpoint_uuid).distinct()
    if uuids is not None:
        wanted = list(uuids)
        if not wanted:
            return set()
        q = q.where(ModelVersionRow.checkpoint_uuid.in_(wanted))
    return set(s.scalars(q))


def registrations(s: Session, uuid: str) -> list[str]:
    """How refusals name the versions of checkpoint ``uuid``: ``<model> (model #id),
    version N`` (Determined's words), in version order."""
    rows = s.execute(
        select(ModelRow.name, ModelRow.id, ModelVersionRow.version)
        .join(ModelRow, ModelRow.id == ModelVersionRow.model_id)
        .where(ModelVersionRow.checkpoint_uuid == uuid)
        .order_by(ModelRow.id, ModelVersionRow.version)
    ).all()
    return [f"{name} (model #{mid}), version {n}" for name, mid, n in rows]


def refuse_registered(s: Session, uuid: str, what: str) -> None:
    """Raises Conflict naming the model versions of checkpoint ``uuid``, if any.

    Args:
        what: the refused action (``be deleted``).
    """
    names = registrations(s, uuid)
    if names:
        raise Conflict(
            f"checkpoint {uuid} cannot {what}: it is registered to "
            + "; ".join(names)
            + " (delete those model versions first)"
        )


def version_of_checkpoint(s: Session, uuid: str) -> ModelVersionRow | None:
    """A version naming checkpoint ``uuid`` (the first registered), or None."""
    return s.scalar(
        select(ModelVersionRow)
        .where(ModelVersionRow.checkpoint_uuid == uuid)
        .order_by(ModelVersionRow.id)
        .limit(1)
    )


def models_in_workspace(s: Session, workspace_id: int) -> int:
    """How many models workspace ``workspace_id`` holds (its deletion waits for 0)."""
    return (
        s.scalar(
            select(func.count()).select_from(ModelRow).where(ModelRow.workspace_id == workspace_id)
        )
        or 0
    )


def kept_only_by_version(s: Session, uuid: str) -> ModelVersionRow | None:
    """A version naming checkpoint ``uuid`` when only versions keep it (its row went
    with its experiment), else None."""
    if s.get(CheckpointRow, uuid) is not None:
        return None
    return version_of_checkpoint(s, uuid)


def checkpoint_row(s: Session, uuid: str) -> CheckpointRow | None:
    """Checkpoint ``uuid``'s row, or None (deleted with its experiment, or never)."""
    return s.get(CheckpointRow, uuid)


def usernames(s: Session, ids: Iterable[int | None]) -> dict[int, str]:
    """The names of users ``ids`` (None and unknown ids left out), by id."""
    wanted = [i for i in set(ids) if i is not None]
    if not wanted:
        return {}
    q = select(UserRow.id, UserRow.username).where(UserRow.id.in_(wanted))
    return {uid: name for uid, name in s.execute(q)}
