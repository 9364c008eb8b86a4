"""Resource pools bound to workspaces (reference §1.5): a pool with bindings is usable
only by its workspaces' experiments and tasks; the cluster's default pool cannot be
bound. Rows only; the caller's write session commits."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from ..db import PoolBindingRow, WorkspaceRow
from ..errors import BadRequest, NotFound


def bindings(s: Session) -> dict[str, set[int]]:
    """Every bound pool: its workspace ids."""
    out: dict[str, set[int]] = {}
    for pool, ws in s.execute(select(PoolBindingRow.pool_name, PoolBindingRow.workspace_id)):
        out.setdefault(pool, set()).add(ws)
    return out


def available_pools(s: Session, workspace_id: int, pools: Sequence[str]) -> list[str]:
    """The pools among ``pools`` that ``workspace_id`` may use: unbound, or bound to it."""
    bound = bindings(s)
    return [p for p in pools if p not in bound or workspace_id in bound[p]]


def check_pool_usable(s: Session, pool: str, workspace_id: int, field: str) -> None:
    """Refuse a pool bound to other workspaces only (reference §1.5).

    Raises:
        BadRequest: naming ``field`` and the pool.
    """
    bound = bindings(s).get(pool)
    if bound and workspace_id not in bound:
        ws = s.get(WorkspaceRow, workspace_id)
        name = ws.name if ws is not None else str(workspace_id)
        raise BadRequest(
            f"resource pool {pool!r} is bound to other workspaces and not available to "
            f"workspace {name!r}",
            [(field, f"pool {pool!r} is not bound to workspace {name!r}")],
        )


def change_bindings(
    s: Session,
    pool: str,
    workspace_ids: Sequence[int],
    mode: str,
    pools: Sequence[str],
    default_pools: Sequence[str] = (),
) -> None:
    """Bind (``add``), unbind (``remove``) or set exactly (``replace``) the workspaces
    of ``pool``. Unbinding stops nothing that runs: only new work is refused.

    Args:
        pools: the cluster's pools; default_pools: those that cannot be bound (the
            cluster's default pools, as Determined's).

    Raises:
        NotFound: an unknown pool or workspace.
        BadRequest: a default pool.
    """
    if pool not in pools:
        raise NotFound(f"resource pool {pool!r} not found; pools: {list(pools)}")
    if pool in default_pools and mode != "remove" and workspace_ids:
        raise BadRequest(
            f"resource pool {pool!r} is a default pool and cannot be bound to workspaces",
            [("resource_pool_name", "a default pool")],
        )
    for ws in workspace_ids:
        if s.get(WorkspaceRow, ws) is None:
            raise NotFound(f"workspace {ws} not found")
    current = set(
        s.scalars(select(PoolBindingRow.workspace_id).where(PoolBindingRow.pool_name == pool))
    )
    wanted = set(workspace_ids)
    if mode == "add":
        add, drop = wanted - current, set()
    elif mode == "remove":
        add, drop = set(), wanted & current
    else:
        add, drop = wanted - current, current - wanted
    for ws in sorted(add):
        s.add(PoolBindingRow(pool_name=pool, workspace_id=ws))
    if drop:
        s.execute(
            delete(PoolBindingRow).where(
                PoolBindingRow.pool_name == pool, PoolBindingRow.workspace_id.in_(drop)
            )
        )


def pool_workspaces(s: Session, pool: str, visible: set[int] | None) -> list[WorkspaceRow]:
    """The workspaces ``pool`` is bound to, among ``visible`` (None: all), by id."""
    q = (
        select(WorkspaceRow)
        .join(PoolBindingRow, PoolBindingRow.workspace_id == WorkspaceRow.id)
        .where(PoolBindingRow.pool_name == pool)
        .order_by(WorkspaceRow.id)
    )
    if visible is not None:
        q = q.where(WorkspaceRow.id.in_(visible))
    return list(s.scalars(q))
