"""Users: accounts (``UserRow``) and the revocation of their login sessions and tokens.
Signing in, tokens and password hashing are :mod:`dauntless.master.auth`'s; access
tokens' lists and edits are :mod:`dauntless.master.models.tokens`'."""

from __future__ import annotations

from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session

from dauntless.config import AgentUserGroup, DefaultTaskConfig, TaskIdentity, resolve_task_identity

from ..db import (
    USER_SESSION,
    AgentRow,
    ProjectRow,
    UserRow,
    UserSessionRow,
    WorkspaceRow,
    held_memo,
)
from ..environments import check_pool_identity
from ..errors import Conflict, NotFound


def user_id(session: Session, username: str) -> int | None:
    """The id of the user named ``username``, None when there is none."""
    return session.scalar(select(UserRow.id).where(UserRow.username == username))


def agent_link(user: UserRow) -> AgentUserGroup | None:
    """A user's link to a Unix identity (Determined's ``agent_user_group``), None when
    no field of it is set."""
    link = AgentUserGroup.model_construct(
        agent_uid=user.agent_uid,
        agent_gid=user.agent_gid,
        agent_user=user.agent_user,
        agent_group=user.agent_group,
    )
    return None if link.is_empty() else link


def task_identity(
    session: Session,
    owner_id: int | None,
    default_task: DefaultTaskConfig,
    workspace_id: int | None = None,
    workspace: WorkspaceRow | None = None,
) -> TaskIdentity:
    """The Unix identity a task of ``owner_id`` in workspace ``workspace_id`` runs as:
    field by field, the workspace's ``agent_user_group`` where it sets the field, else
    the owner's link, else ``default_task`` (Determined's order;
    :func:`dauntless.config.resolve_task_identity`). An owner that no longer exists, or
    None (work from before users existed), has no link; neither has an unknown
    workspace or None.

    ``workspace``: the row of ``workspace_id`` when the caller read it in ``session``
    (:func:`project_workspace`); it is then not read again. A row of another id is
    ignored."""
    user = session.get(UserRow, owner_id) if owner_id is not None else None
    ws = None
    if workspace is not None and workspace.id == workspace_id:
        ws = workspace
    elif workspace_id is not None:
        ws = session.get(WorkspaceRow, workspace_id)
    ws_link = None
    if ws is not None and ws.agent_user_group:
        fields = AgentUserGroup.model_fields
        ws_link = AgentUserGroup.model_construct(
            **{k: v for k, v in ws.agent_user_group.items() if k in fields}
        )
    return resolve_task_identity(agent_link(user) if user else None, default_task, ws_link)


def identity_refusals(
    session: Session,
    owner_id: int | None,
    default_task: DefaultTaskConfig,
    workspace_id: int | None,
    pool: str,
) -> list[tuple[str, str]]:
    """Config errors (``[(field, message)]``) when agents are registered in ``pool`` and
    none of them can run a task of ``owner_id`` in ``workspace_id`` as its Unix identity
    (:func:`task_identity`; a non-root agent runs only its own uid and gid); ``[]``
    otherwise, and for a pool without agents (they may join later)."""
    known = [(a.id, a.resource_pool, a.runtime) for a in session.scalars(select(AgentRow))]
    identity = task_identity(session, owner_id, default_task, workspace_id)
    return check_pool_identity(identity, pool, known)


def project_workspace(
    session: Session, project_id: int | None
) -> tuple[int | None, WorkspaceRow | None]:
    """The workspace id of an experiment's project (None for no or an unknown project)
    and that workspace's row (None for no or an unknown workspace), read in one
    statement (an outer join). Both callers (the scheduler, a trial's task spec)
    pass the row on to :func:`task_identity`, which then reads no workspace (issue 37:
    statements per trial)."""
    if project_id is None:
        return None, None
    memo = held_memo(session)  # a heartbeat's one transaction reads it once (issue 37)
    key = ("project_workspace", project_id)
    if memo is not None and key in memo:
        found: tuple[int | None, WorkspaceRow | None] = memo[key]
        return found
    row = session.execute(
        select(ProjectRow.workspace_id, WorkspaceRow)
        .outerjoin(WorkspaceRow, WorkspaceRow.id == ProjectRow.workspace_id)
        .where(ProjectRow.id == project_id)
    ).first()
    found = (None, None) if row is None else (row[0], row[1])
    if memo is not None:
        memo[key] = found
    return found


def read_user(session: Session, user_id: int) -> UserRow:
    """A user by id.

    Raises:
        NotFound: no such user.
    """
    user = session.get(UserRow, user_id)
    if user is None:
        raise NotFound(f"user {user_id} not found")
    return user


def read_user_by_name(session: Session, username: str) -> UserRow | None:
    """The user named ``username``, None when there is none."""
    return session.scalar(select(UserRow).where(UserRow.username == username))


def read_users(session: Session) -> list[UserRow]:
    """Every user, by id."""
    return list(session.scalars(select(UserRow).order_by(UserRow.id)))


def create_user(
    session: Session,
    username: str,
    password_hash: str | None,
    admin: bool,
    display_name: str | None,
    now: float,
    remote: bool = False,
) -> UserRow:
    """Create an active user (its id assigned).

    Args:
        password_hash: the password as :func:`dauntless.master.auth.hash_password` stores
            it (hashed before the transaction: hashing is slow on purpose); None for a
            ``remote`` user, who has no password.
        now: seconds since the epoch (``modified_at``).
        remote: the user signs in only through single sign-on.

    Raises:
        Conflict: the name is taken.
    """
    if session.scalar(select(UserRow.id).where(UserRow.username == username)) is not None:
        raise Conflict(f"user {username} already exists")
    user = UserRow(
        username=username,
        password_hash=password_hash,
        admin=admin,
        active=True,
        display_name=display_name,
        modified_at=now,
        remote=remote,
    )
    session.add(user)
    session.flush()
    return user


def is_last_admin(session: Session, user: UserRow) -> bool:
    """Whether ``user`` is the only active admin."""
    if not (user.admin and user.active):
        return False
    count = session.scalar(
        select(func.count())
        .select_from(UserRow)
        .where(UserRow.admin.is_(True), UserRow.active.is_(True))
    )
    return (count or 0) <= 1


def revoke_sessions(session: Session, user_id: int) -> None:
    """End every login session of a user (its access tokens stay: see
    :class:`~dauntless.master.db.UserSessionRow`)."""
    session.execute(
        delete(UserSessionRow).where(
            UserSessionRow.user_id == user_id, UserSessionRow.token_type == USER_SESSION
        )
    )


def revoke_token(session: Session, token_id: int) -> UserSessionRow | None:
    """Revoke one token (a login session at logout, or an access token): its row is kept,
    marked revoked, so that lists can show it; ended sessions are deleted at the next
    sign-in. Returns the row, None when there is none."""
    row = session.get(UserSessionRow, token_id)
    if row is not None:
        row.revoked = True
    return row


def update_user(
    session: Session,
    user_id: int,
    now: float,
    *,
    active: bool | None = None,
    admin: bool | None = None,
    display_name: str | None = None,
    set_display_name: bool = False,
    agent_user_group: AgentUserGroup | None = None,
    set_agent_user_group: bool = False,
) -> UserRow:
    """Activate or deactivate a user (deactivating revokes its sessions), make or unmake
    it admin, (with ``set_display_name``) set its display name ("" or None: none), or
    (with ``set_agent_user_group``) replace its link to a Unix identity (None or an empty
    link: unlinked; its next tasks run as ``security.default_task``). None leaves a
    field as it is.

    Raises:
        NotFound: no such user.
        Conflict: the change would leave no active admin.
    """
    user = read_user(session, user_id)
    if (active is False or admin is False) and is_last_admin(session, user):
        raise Conflict(f"{user.username} is the only active admin; make another admin first")
    if active is not None:
        user.active = active
        if not active:
            revoke_sessions(session, user.id)
    if admin is not None:
        user.admin = admin
    if set_display_name:
        user.display_name = display_name or None
    if set_agent_user_group:
        link = agent_user_group or AgentUserGroup()
        user.agent_uid, user.agent_gid = link.agent_uid, link.agent_gid
        user.agent_user, user.agent_group = link.agent_user, link.agent_group
    user.modified_at = now
    return user


def set_password(session: Session, user_id: int, password_hash: str, now: float) -> UserRow:
    """Store a user's new password (hashed) and revoke every session of that user.

    Raises:
        NotFound: no such user.
    """
    user = read_user(session, user_id)
    user.password_hash, user.modified_at = password_hash, now
    revoke_sessions(session, user.id)
    return user


def upgrade_password_hash(session: Session, user_id: int, old: str, new: str) -> None:
    """Replace a user's stored password hash by another hash of the same password
    (:func:`dauntless.master.auth_secrets.needs_rehash`), if it is still ``old``; sessions
    stay and ``modified_at`` is unchanged (the password is the same)."""
    user = session.get(UserRow, user_id)
    if user is not None and user.password_hash == old:
        user.password_hash = new


def session_user(session: Session, session_id: int, now: float) -> UserRow | None:
    """The user of login session ``session_id`` while it is valid (not revoked, not
    expired at ``now``, seconds since the epoch, its user active); None otherwise."""
    row = session.get(UserSessionRow, session_id)
    if row is None or row.revoked or row.expires_at <= now:
        return None
    user = session.get(UserRow, row.user_id)
    return user if user is not None and user.active else None
