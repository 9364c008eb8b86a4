"""Determined's permissions and its fixed ("pre-canned") roles (issue 30; reference
``determined-surface-platform.md`` §2.4, the role -> permission map of Determined 0.38.1
after all its migrations).

A leaf module: plain data and pure functions, no database. Who holds which role where is
in the ``role_assignments`` table (:mod:`dauntless.master.models.groups`); what each
route needs is :mod:`dauntless.master.permissions`; the check is
:mod:`dauntless.master.authz`.

Roles cannot be created or edited (as in Determined). A permission marked *global* takes
effect only from an assignment at cluster scope.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum


class Perm(IntEnum):
    """Determined's permission ids (``PERMISSION_TYPE_<name>``)."""

    CREATE_EXPERIMENT = 2001
    VIEW_EXPERIMENT_ARTIFACTS = 2002
    VIEW_EXPERIMENT_METADATA = 2003
    UPDATE_EXPERIMENT = 2004
    UPDATE_EXPERIMENT_METADATA = 2005
    DELETE_EXPERIMENT = 2006
    CREATE_NSC = 3001
    VIEW_NSC = 3002
    UPDATE_NSC = 3003
    VIEW_WORKSPACE = 4002
    UPDATE_WORKSPACE = 4003
    DELETE_WORKSPACE = 4004
    SET_WORKSPACE_AGENT_USER_GROUP = 4005
    SET_WORKSPACE_CHECKPOINT_STORAGE_CONFIG = 4006
    SET_WORKSPACE_DEFAULT_RESOURCE_POOL = 4007
    CREATE_PROJECT = 5001
    VIEW_PROJECT = 5002
    UPDATE_PROJECT = 5003
    DELETE_PROJECT = 5004
    ASSIGN_ROLES = 6002
    VIEW_MODEL_REGISTRY = 7001
    EDIT_MODEL_REGISTRY = 7002
    CREATE_MODEL_REGISTRY = 7003
    DELETE_MODEL_REGISTRY = 7004
    DELETE_MODEL_VERSION = 7005
    DELETE_OTHER_USER_MODEL_REGISTRY = 7006
    DELETE_OTHER_USER_MODEL_VERSION = 7007
    VIEW_MASTER_LOGS = 8001
    VIEW_CLUSTER_USAGE = 8002
    UPDATE_AGENTS = 8003
    VIEW_SENSITIVE_AGENT_INFO = 8004
    VIEW_MASTER_CONFIG = 8005
    UPDATE_MASTER_CONFIG = 8006
    VIEW_EXTERNAL_JOBS = 8007
    CONTROL_STRICT_JOB_QUEUE = 8101
    VIEW_TEMPLATES = 9001
    UPDATE_TEMPLATES = 9002
    CREATE_TEMPLATES = 9003
    DELETE_TEMPLATES = 9004
    MODIFY_RP_WORKSPACE_BINDINGS = 10001
    SET_WORKSPACE_NAMESPACE_BINDINGS = 11001
    SET_RESOURCE_QUOTAS = 11002
    VIEW_RESOURCE_QUOTAS = 11003
    MODIFY_GLOBAL_CONFIG_POLICIES = 11004
    MODIFY_WORKSPACE_CONFIG_POLICIES = 11005
    VIEW_GLOBAL_CONFIG_POLICIES = 11006
    VIEW_WORKSPACE_CONFIG_POLICIES = 11007
    ADMINISTRATE_TOKEN = 12001
    UPDATE_TOKEN = 12002
    CREATE_TOKEN = 12003
    CREATE_OTHER_TOKEN = 12004
    VIEW_OTHER_TOKEN = 12005
    VIEW_TOKEN = 12006
    ADMINISTRATE_USER = 91001
    ADMINISTRATE_OAUTH = 91002
    UPDATE_GROUP = 93001
    CREATE_WORKSPACE = 94001
    UPDATE_ROLES = 96001
    EDIT_WEBHOOKS = 97001
    VIEW_WEBHOOKS = 97002

    @property
    def api_name(self) -> str:
        """Determined's enum name, ``PERMISSION_TYPE_<NAME>``."""
        return f"PERMISSION_TYPE_{self.name}"


GLOBAL_ONLY: frozenset[Perm] = frozenset(
    {
        Perm.VIEW_MASTER_LOGS,
        Perm.VIEW_CLUSTER_USAGE,
        Perm.UPDATE_AGENTS,
        Perm.VIEW_SENSITIVE_AGENT_INFO,
        Perm.VIEW_MASTER_CONFIG,
        Perm.UPDATE_MASTER_CONFIG,
        Perm.VIEW_EXTERNAL_JOBS,
        Perm.CONTROL_STRICT_JOB_QUEUE,
        Perm.MODIFY_RP_WORKSPACE_BINDINGS,
        Perm.SET_WORKSPACE_NAMESPACE_BINDINGS,
        Perm.SET_RESOURCE_QUOTAS,
        Perm.MODIFY_GLOBAL_CONFIG_POLICIES,
        Perm.ADMINISTRATE_TOKEN,
        Perm.UPDATE_TOKEN,
        Perm.CREATE_TOKEN,
        Perm.CREATE_OTHER_TOKEN,
        Perm.VIEW_OTHER_TOKEN,
        Perm.VIEW_TOKEN,
        Perm.ADMINISTRATE_USER,
        Perm.ADMINISTRATE_OAUTH,
        Perm.UPDATE_GROUP,
        Perm.CREATE_WORKSPACE,
        Perm.UPDATE_ROLES,
    }
)
"""Permissions that take effect only from a cluster-scope assignment (Determined's
``scope_type_mask`` with ``workspace: false``)."""


def _ids(*spans: int | tuple[int, int]) -> frozenset[Perm]:
    """Permissions by id: single ids and inclusive ``(first, last)`` ranges of ids."""
    out: set[Perm] = set()
    for span in spans:
        first, last = span if isinstance(span, tuple) else (span, span)
        out |= {p for p in Perm if first <= p.value <= last}
    return frozenset(out)


_EDITOR = _ids(
    (2001, 2006), (3001, 3003), 4002, 5001, 5002, 5003, (7001, 7005), (9001, 9004),
    11003, 11006, 11007, 97001, 97002,
)  # fmt: skip


@dataclass(frozen=True)
class Role:
    """A fixed role.

    Attributes:
        id: Determined's role id.
        name: Determined's role name (``ClusterAdmin`` ...).
        permissions: what it grants.
        global_only: assignable on the cluster only.
    """

    id: int
    name: str
    permissions: frozenset[Perm]
    global_only: bool = False
    """Assignable on the cluster only (Determined's ``WorkspaceCreator`` and
    ``TokenCreator``)."""


CLUSTER_ADMIN = 1
"""The id of the ``ClusterAdmin`` role (every permission)."""

ROLES: dict[int, Role] = {
    r.id: r
    for r in (
        Role(1, "ClusterAdmin", frozenset(Perm)),
        Role(
            2,
            "WorkspaceAdmin",
            _ids(
                (2001, 2006),
                (3001, 3003),
                4002,
                4003,
                4004,
                4006,
                4007,
                (5001, 5004),
                6002,
                (7001, 7007),
                (9001, 9004),
                11003,
                11005,
                11006,
                11007,
                97001,
                97002,
            ),  # fmt: skip
        ),
        Role(3, "WorkspaceCreator", _ids(94001, 11006, 11007), global_only=True),
        Role(
            4, "Viewer", _ids(2002, 2003, 3002, 4002, 5002, 7001, 9001, 11003, 11006, 11007, 97002)
        ),
        Role(5, "Editor", _EDITOR),
        Role(6, "ModelRegistryViewer", _ids(7001, 11006, 11007)),
        Role(7, "EditorRestricted", _EDITOR - _ids(3001, 3003)),
        Role(
            8,
            "GenAIUser",
            _ids(
                (2001, 2006),
                (3001, 3003),
                4002,
                (5001, 5004),
                (7001, 7005),
                (9001, 9004),
                11003,
                11006,
                11007,
                94001,
            ),  # fmt: skip
        ),
        Role(9, "EditorProjectRestricted", _EDITOR - _ids(5001, 5003)),
        Role(10, "TokenCreator", _ids(12002, 12003, 12006), global_only=True),
    )
}
"""Every role by id (Determined 0.38.1's ten)."""

ROLES_BY_NAME: dict[str, Role] = {r.name.lower(): r for r in ROLES.values()}
"""Every role by lower-case name (``det rbac`` takes names in any case)."""

BASIC_USER_PERMISSIONS: frozenset[Perm] = frozenset(
    p for p in Perm if p.name.startswith("VIEW_") and p not in GLOBAL_ONLY
) | frozenset(
    {
        Perm.CREATE_EXPERIMENT,
        Perm.CREATE_NSC,
        Perm.CREATE_WORKSPACE,
        Perm.SET_WORKSPACE_DEFAULT_RESOURCE_POOL,
        Perm.CREATE_MODEL_REGISTRY,
        Perm.EDIT_MODEL_REGISTRY,
        Perm.CREATE_TEMPLATES,
        Perm.UPDATE_TEMPLATES,
        Perm.DELETE_TEMPLATES,
        Perm.EDIT_WEBHOOKS,
    }
)
"""What every signed-in user holds on every workspace under ``security.authz.type:
basic`` (Determined's historical rules, reference §2.2: everyone views everything and
may create workspaces, experiments, tasks and models, edit models, set default pools, and
create, edit and delete templates and webhooks (global webhooks: admins only, checked by
the webhook routes); deleting a model or a version is its owner's or an admin's; projects are
created in a workspace by its owner; changes to what others own are the owner's or an
admin's)."""

OWNER_PERMISSIONS: dict[str, frozenset[Perm]] = {
    "experiment": frozenset(
        {Perm.UPDATE_EXPERIMENT, Perm.UPDATE_EXPERIMENT_METADATA, Perm.DELETE_EXPERIMENT}
    ),
    "task": frozenset({Perm.UPDATE_NSC}),
    "model": frozenset(
        {
            Perm.EDIT_MODEL_REGISTRY,
            Perm.DELETE_MODEL_REGISTRY,
            Perm.DELETE_MODEL_VERSION,
            Perm.DELETE_OTHER_USER_MODEL_VERSION,
        }
    ),
    "project": frozenset({Perm.UPDATE_PROJECT, Perm.DELETE_PROJECT}),
    "workspace": frozenset(
        {
            Perm.UPDATE_WORKSPACE,
            Perm.DELETE_WORKSPACE,
            Perm.SET_WORKSPACE_CHECKPOINT_STORAGE_CONFIG,
            Perm.CREATE_PROJECT,
            Perm.UPDATE_PROJECT,
            Perm.DELETE_PROJECT,
        }
    ),
}
"""What the owner (creator) of an object may do to it, by kind of object, while they may
see it (see :mod:`dauntless.master.authz`): Determined's "owner or admin" rules (basic
authz, reference §2.2), kept under RBAC too so that owners keep what they could do."""


def role_by_name(name: str) -> Role | None:
    """The role called ``name`` (any case), or None."""
    return ROLES_BY_NAME.get(name.strip().lower())


def role_json(role: Role) -> dict[str, object]:
    """A role as Determined's REST API shows it: ``{role_id, name, permissions: [{id,
    name, scope_type_mask: {cluster, workspace}}], scope_type_mask}``."""
    return {
        "role_id": role.id,
        "name": role.name,
        "permissions": [
            {
                "id": int(p),
                "name": p.api_name,
                "scope_type_mask": {"cluster": True, "workspace": p not in GLOBAL_ONLY},
            }
            for p in sorted(role.permissions)
        ],
        "scope_type_mask": {"cluster": True, "workspace": not role.global_only},
    }
