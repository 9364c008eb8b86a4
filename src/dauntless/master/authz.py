"""The one permission check of the master (issue 30): who holds which permission where,
and whether a caller may do what a route's :class:`~dauntless.master.permissions.Rule`
asks.

**Grants.** A user's permissions are the union of the roles (:mod:`.rbac`) assigned to
them and to their groups, each at cluster scope (every workspace; global permissions
count only from here) or on one workspace; the ``admin`` flag counts as ClusterAdmin.
Under ``security.authz.type: basic`` (the default) every user also holds
:data:`~dauntless.master.rbac.BASIC_USER_PERMISSIONS` at cluster scope: Determined's
historical rules. Grants are read with one query per user and kept in memory until a
commit changes role assignments, groups, members, users or workspaces (a
:class:`~dauntless.master.db.changes.ChangeFlag`; model functions that delete such rows
in bulk set it themselves).

**Owners.** The owner of an experiment, a task, a project or a workspace holds
:data:`~dauntless.master.rbac.OWNER_PERMISSIONS` on it while they hold its view
permission: the historical "owner or admin" rules, kept under RBAC too.

**Lists** ask :meth:`Authorizer.visible` for the workspaces where the caller holds a
view permission and filter on them in SQL, so counts and pages never include what the
caller may not see.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from fastapi import Request
from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from dauntless.config import MasterConfig

from .auth_access import Principal, forbidden, unauthorized
from .authz_targets import (
    Target,
    experiment_target,
    model_target,
    path_target,
    project_target,
    registered_model_targets,
    task_target,
    workspace_target,
)
from .db import (
    Database,
    ProjectRow,
    RoleAssignmentRow,
    UserGroupMemberRow,
    UserGroupRow,
    UserRow,
    WorkspaceRow,
)
from .errors import NotFound
from .permissions import Rule, rule_for
from .rbac import (
    BASIC_USER_PERMISSIONS,
    GLOBAL_ONLY,
    OWNER_PERMISSIONS,
    ROLES,
    Perm,
)

VIEW_OF_KIND: dict[str, Perm] = {
    "experiment": Perm.VIEW_EXPERIMENT_METADATA,
    "task": Perm.VIEW_NSC,
    "project": Perm.VIEW_PROJECT,
    "workspace": Perm.VIEW_WORKSPACE,
    "model": Perm.VIEW_MODEL_REGISTRY,
}
"""The permission that lets a user see an object of each kind."""

TASK_EQUIVALENT: dict[Perm, Perm] = {
    Perm.UPDATE_EXPERIMENT: Perm.UPDATE_NSC,
    Perm.VIEW_EXPERIMENT_METADATA: Perm.VIEW_NSC,
}
"""For a route that reaches an experiment or a task (a job): the task's permission."""

MODEL_EQUIVALENT: dict[Perm, Perm] = {
    Perm.VIEW_EXPERIMENT_ARTIFACTS: Perm.VIEW_MODEL_REGISTRY,
    Perm.VIEW_EXPERIMENT_METADATA: Perm.VIEW_MODEL_REGISTRY,
}
"""For a checkpoint that only a model version keeps: the model's permission."""

ALL = frozenset(Perm)


@dataclass(frozen=True)
class Grants:
    """What one user holds.

    Attributes:
        cluster: permissions on every workspace (and the global ones).
        workspaces: permissions by workspace id, from workspace-scope roles (global
            permissions left out: they count only at cluster scope).
    """

    cluster: frozenset[Perm]
    workspaces: dict[int, frozenset[Perm]]

    def has(self, perm: Perm, workspace_id: int | None = None) -> bool:
        """Whether ``perm`` is held on ``workspace_id`` (None: at cluster scope)."""
        if perm in self.cluster:
            return True
        if workspace_id is None:
            return False
        return perm in self.workspaces.get(workspace_id, ())

    def visible(self, perm: Perm) -> set[int] | None:
        """The workspace ids where ``perm`` is held; None when held everywhere."""
        if perm in self.cluster:
            return None
        return {ws for ws, perms in self.workspaces.items() if perm in perms}


class Authorizer:
    """Grants, targets and checks (one per master application).

    Args:
        db: the master database.
        config: the master config (``security.authz``).
    """

    def __init__(self, db: Database, config: MasterConfig) -> None:
        self.db = db
        self.basic = config.security.authz.type == "basic"
        self.strict_queue = config.security.authz.strict_job_queue_control
        ignore = frozenset({"password_hash", "modified_at", "display_name"})
        self.changes = db.change_flag(
            (
                RoleAssignmentRow,
                UserGroupMemberRow,
                UserGroupRow,
                UserRow,
                WorkspaceRow,
                ProjectRow,  # not in grants, but in what lists show (a project moved)
            ),
            ignore={UserRow: ignore},
        )
        self._lock = threading.Lock()
        self._grants: dict[int, tuple[int, Grants]] = {}

    # ------------------------------------------------------------------ grants

    def grants(self, who: Principal) -> Grants:
        """What ``who`` (a user) holds; everything for an admin.

        Read from the database at most once per user between changes of roles,
        groups, members, users and workspaces.
        """
        if who.admin:
            return Grants(ALL, {})
        uid = who.user_id
        if uid is None:
            return Grants(frozenset(), {})
        version = self.changes.version()
        with self._lock:
            cached = self._grants.get(uid)
        if cached is not None and cached[0] == version:
            return cached[1]
        with self.db.read() as s:
            grants = read_grants(s, uid, self.basic)
        with self._lock:
            if len(self._grants) > 10_000:
                self._grants.clear()
            self._grants[uid] = (version, grants)
        return grants

    # ------------------------------------------------------------------ checks

    def allowed(self, who: Principal, perm: Perm, target: Target | None) -> bool:
        """Whether user ``who`` holds ``perm`` on ``target`` (None: at cluster scope),
        directly or as one of its owners."""
        grants = self.grants(who)
        if target is None:
            return grants.has(perm)
        if target.kind == "task":
            perm = TASK_EQUIVALENT.get(perm, perm)
        elif target.kind == "model":  # a registered checkpoint of a deleted experiment
            perm = MODEL_EQUIVALENT.get(perm, perm)
        if grants.has(perm, target.workspace_id):
            return True
        if perm in GLOBAL_ONLY:
            return False
        return any(
            uid is not None
            and uid == who.user_id
            and perm in OWNER_PERMISSIONS[kind]
            and grants.has(VIEW_OF_KIND[kind], target.workspace_id)
            for uid, kind in target.owners
        )

    def is_admin(self, who: Principal) -> bool:
        """Whether user ``who`` is an admin: the ``admin`` flag, or ClusterAdmin (every
        permission) from a cluster-scope role."""
        return who.admin or (who.kind == "user" and self.grants(who).cluster >= ALL)

    def visible(self, who: Principal, perm: Perm) -> set[int] | None:
        """The workspaces whose objects ``who`` may see with ``perm`` (None: all)."""
        if who.kind != "user":
            return None if who.kind == "agent" else set()
        return self.grants(who).visible(perm)

    def refuse(self, who: Principal, perm: Perm, target: Target | None, what: str) -> Exception:
        """The 403 for ``who`` lacking ``perm`` on ``target`` (None: the cluster), naming
        what is needed: under basic authz in the historical words ("only the owner ...
        or an admin may ..."), under RBAC with the permission's name."""
        if target is None:
            if self.basic:
                return forbidden(f"only an admin may {what}")
            return forbidden(f"permission denied: to {what} needs {perm.api_name} on the cluster")
        if target.kind == "task":
            perm = TASK_EQUIVALENT.get(perm, perm)
        view = VIEW_OF_KIND[target.kind]
        if perm == view:
            return forbidden(f"permission denied: {target.label} needs {view.api_name}")
        if not self.allowed(who, view, target):
            return forbidden(
                f"permission denied: to {what}, {target.label} needs {perm.api_name} on its "
                f"workspace (and {view.api_name} to see it)"
            )
        owned = any(perm in OWNER_PERMISSIONS[kind] for _, kind in target.owners)
        if self.basic and owned:
            owner = f" ({target.owner_name})" if target.owner_name else ""
            return forbidden(f"only the owner of {target.label}{owner} or an admin may {what}")
        return forbidden(
            f"permission denied: to {what}, {target.label} needs {perm.api_name} on its "
            "workspace" + (" (or its owner)" if owned else "")
        )

    def check(self, who: Principal, rule: Rule, request: Request) -> None:
        """Apply ``rule`` (its user part) for user ``who`` calling ``request``.

        Raises:
            HTTPException: 403 naming what is needed.
        """
        params = {k: str(v) for k, v in request.path_params.items()}
        route = request.scope.get("route")
        what = _what(rule, request, params, getattr(route, "path", request.url.path))
        if rule.on in ("any", "body", "list") or self.is_admin(who):
            return  # admins pass every rule
        if rule.on == "admin":
            others = [
                n for n, ok in (("agents", rule.agent), ("trials", rule.trial != "none")) if ok
            ]
            who_may = ", ".join(others) + " or an admin" if others else "an admin"
            raise forbidden(f"only {who_may} may {what}")
        perm = rule.perm_for(params.get("action"))
        assert perm is not None, f"rule {rule} names no permission"
        if rule.on == "cluster":
            if not self.allowed(who, perm, None):
                raise self.refuse(who, perm, None, what)
            return
        if rule.on == "self":
            if params.get("user_id") == str(who.user_id) or self.allowed(who, perm, None):
                return
            raise self.refuse(who, perm, None, what)
        target = self.path_target(params)
        if target is None:
            return  # no such object: the route answers 404
        if self.strict_queue and "job_id" in params:
            perm = Perm.CONTROL_STRICT_JOB_QUEUE
            if not self.allowed(who, perm, None):
                raise self.refuse(who, perm, None, what)
            return
        if not self.allowed(who, perm, target):
            if "uuid" in params and perm in MODEL_EQUIVALENT and self._via_model(who, params):
                return  # a registered checkpoint, read through its model (reference §4.2)
            raise self.refuse(who, perm, target, what)

    def _via_model(self, who: Principal, params: dict[str, str]) -> bool:
        """Whether ``who`` may view a model one of whose versions names the checkpoint
        ``params["uuid"]``."""
        with self.db.read() as s:
            targets = registered_model_targets(s, params["uuid"])
        return any(self.allowed(who, Perm.VIEW_MODEL_REGISTRY, t) for t in targets)

    # ------------------------------------------------------------------ targets

    def path_target(self, params: dict[str, str]) -> Target | None:
        """The object a route's path names, or None when it names none that exists."""
        with self.db.read() as s:
            return path_target(s, params)


def read_grants(s: Session, user_id: int, basic: bool) -> Grants:
    """A user's grants read from their role assignments and their groups'."""
    groups = select(UserGroupMemberRow.group_id).where(UserGroupMemberRow.user_id == user_id)
    rows = s.execute(
        select(RoleAssignmentRow.role_id, RoleAssignmentRow.workspace_id).where(
            or_(RoleAssignmentRow.user_id == user_id, RoleAssignmentRow.group_id.in_(groups))
        )
    ).all()
    cluster: set[Perm] = set(BASIC_USER_PERMISSIONS) if basic else set()
    workspaces: dict[int, set[Perm]] = {}
    for role_id, ws in rows:
        role = ROLES.get(role_id)
        if role is None:
            continue
        if ws is None:
            cluster |= role.permissions
        else:
            workspaces.setdefault(ws, set()).update(role.permissions - GLOBAL_ONLY)
    return Grants(frozenset(cluster), {ws: frozenset(p) for ws, p in workspaces.items()})


def _what(rule: Rule, request: Request, params: dict[str, str], path: str) -> str:
    try:
        return rule.what.format(**params) if rule.what else f"call {request.method} {path}"
    except (KeyError, IndexError):
        return rule.what


# ---------------------------------------------------------------------- for routes


def authorizer(request: Request) -> Authorizer:
    """The application's :class:`Authorizer`."""
    return request.app.state.authz


def _principal(request: Request) -> Principal:
    who = getattr(request.state, "principal", None)
    if who is None:
        raise unauthorized("authentication required")
    return who


def _route_rule(request: Request) -> Rule:
    route = request.scope.get("route")
    rule = rule_for(request.method, getattr(route, "path", ""))
    if rule is None:
        raise forbidden(f"{request.method} {request.url.path} declares no permission")
    return rule


def require(
    request: Request,
    target: Target | None,
    *,
    perm: Perm | None = None,
    second: bool = False,
) -> None:
    """For ``on="body"`` routes: check the route's permission (``perm`` if given; with
    ``second``, its ``body_perm``) on ``target`` (None: at cluster scope) for the
    caller. Agents pass; trials and tasks never do (their own routes check their ids).

    Raises:
        HTTPException: 403 naming what is needed.
    """
    who = _principal(request)
    if who.kind == "agent":
        return
    rule = _route_rule(request)
    needed = perm or (rule.body_perm if second else rule.perm)
    assert needed is not None, f"{request.url.path}: no permission to require"
    if who.kind != "user":
        raise forbidden(f"a {who.kind}'s session token may not {rule.what or 'do this'}")
    az = authorizer(request)
    if not az.allowed(who, needed, target):
        raise az.refuse(who, needed, target, rule.what or "do this")


def require_destination(request: Request, workspace_id: int) -> None:
    """A move's destination: the workspace must exist and the caller must hold the
    route's ``body_perm`` there (creating what is moved).

    Raises:
        NotFound: no workspace ``workspace_id``. HTTPException: 403 naming what is needed.
    """
    target = read_target(request, "workspace", workspace_id)
    if target is None:
        raise NotFound(f"workspace {workspace_id} not found")
    require(request, target, second=True)


def visible(request: Request, perm: Perm | None = None) -> set[int] | None:
    """For ``on="list"`` routes: the workspace ids whose objects the caller may list
    with the route's permission (or ``perm``); None: every workspace."""
    who = _principal(request)
    needed = perm or _route_rule(request).perm
    assert needed is not None
    return authorizer(request).visible(who, needed)


def read_target(request: Request, kind: str, ident: Any) -> Target | None:
    """The target of the ``kind`` (experiment, trial: its experiment, task, project,
    model, workspace) ``ident``."""
    with authorizer(request).db.read() as s:
        if kind == "experiment":
            return experiment_target(s, ident)
        if kind == "trial":  # its experiment
            return path_target(s, {"trial_id": str(ident)})
        if kind == "task":
            return task_target(s, ident)
        if kind == "project":
            return project_target(s, ident)
        if kind == "model":
            return model_target(s, str(ident))
        return workspace_target(s, ident)


def may(request: Request, perm: Perm, targets: Iterable[Target | None]) -> list[bool]:
    """Whether the caller holds ``perm`` on each target (for views that hide actions)."""
    who = _principal(request)
    az = authorizer(request)
    if who.kind != "user":
        return [False for _ in targets]
    return [az.allowed(who, perm, t) for t in targets]


def may_open(az: Authorizer, who: Principal, task_id: str) -> str | None:
    """Whether user ``who`` may open task ``task_id``'s service through the proxy (the
    ``PROXY`` row of :data:`dauntless.master.permissions.ROUTES`): None if so, else why
    not (the 403's detail). An unknown task passes (the proxy answers 404)."""
    rule = rule_for("PROXY", "/proxy/{task_id}/")
    assert rule is not None and rule.perm is not None
    with az.db.read() as s:
        target = task_target(s, task_id)
    if target is None or az.allowed(who, rule.perm, target):
        return None
    return str(getattr(az.refuse(who, rule.perm, target, rule.what), "detail", "forbidden"))
