"""What every REST route needs: ONE table, :data:`ROUTES`, keyed by ``(method, path)``
(docs/protocol.md, "Workspaces, projects and RBAC"; issue 30).

The application-wide dependency :func:`dauntless.master.auth.authenticate` looks the
matched route up here and applies its :class:`Rule` before the route runs
(:mod:`dauntless.master.authz` does the check). A route missing from the table is
refused (403) unless it still carries an old-style ``@access(...)`` rule
(:mod:`dauntless.master.auth_access`), which is honoured until it is moved here;
``tests/unit/master/test_permission_table.py`` fails on any route of the application
without a row and on any row without a route.

Adding a route: add its row here, naming the permission a user needs and where that
permission must be held (:class:`Rule`'s ``on``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from .rbac import Perm

On = Literal["any", "admin", "cluster", "self", "path", "body", "list"]


@dataclass(frozen=True)
class Rule:
    """Who may call one route.

    Attributes:
        perm: the permission a signed-in user needs (None for ``on`` any/admin).
        on: where the user must hold ``perm``:

            * ``any``: any signed-in user (what they read or change is their own);
            * ``admin``: only a ClusterAdmin (an admin) may, among users;
            * ``cluster``: ``perm`` from a cluster-scope role;
            * ``self``: the user the path's ``user_id`` names is the caller, else
              ``perm`` at cluster scope;
            * ``path``: on the workspace of the object the path names (``exp_id``,
              ``trial_id``, ``uuid``, ``model_name``, ``task_id``, ``job_id``,
              ``project_id``, ``workspace_id``), or as its owner (:data:`dauntless.master.rbac.
              OWNER_PERMISSIONS`);
            * ``body``: the route checks the object(s) its body names with
              :func:`dauntless.master.authz.require` before it changes anything;
            * ``list``: the route reads only what the caller holds ``perm`` on
              (:func:`dauntless.master.authz.visible`), filtering in SQL.
        by_action: for paths with ``{action}``: the permission per action (``perm``
            for the others).
        body_perm: a second permission the route checks on its body's target with
            :func:`dauntless.master.authz.require_body` (a move's destination).
        open: no credential needed.
        agent: agents (with the credential their registration returned) may call it.
        secret: the cluster secret itself may call it (it only registers agents and
            lists them: docs/protocol.md, "Authentication").
        trial: a trial's or task's session token: ``none``; ``own`` (every id in the
            path must be its own); ``route`` (the route checks the body).
        what: the action, for refusals (may name path parameters).
    """

    perm: Perm | None = None
    on: On = "any"
    by_action: tuple[tuple[str, Perm], ...] = field(default=())
    body_perm: Perm | None = None
    open: bool = False
    agent: bool = False
    secret: bool = False
    trial: Literal["none", "own", "route"] = "none"
    what: str = ""

    def perm_for(self, action: str | None) -> Perm | None:
        """The permission needed for ``action`` (the path's ``{action}``)."""
        for name, perm in self.by_action:
            if name == action:
                return perm
        return self.perm


P = Perm
V1 = "/api/v1"

OPEN = Rule(open=True)
ANY = Rule(on="any")
AGENT_ONLY = Rule(on="admin", agent=True)
TRIAL_ONLY = Rule(on="admin", trial="own")


def _path(perm: Perm, what: str = "", **kw: object) -> Rule:
    return Rule(perm=perm, on="path", what=what, **kw)  # type: ignore[arg-type]


def _cluster(perm: Perm, what: str = "", **kw: object) -> Rule:
    return Rule(perm=perm, on="cluster", what=what, **kw)  # type: ignore[arg-type]


def _list(perm: Perm, **kw: object) -> Rule:
    return Rule(perm=perm, on="list", **kw)  # type: ignore[arg-type]


VIEW_EXP = P.VIEW_EXPERIMENT_METADATA
VIEW_ART = P.VIEW_EXPERIMENT_ARTIFACTS
_TASK_FAMILIES = ("commands", "notebooks", "shells", "tensorboards")

ROUTES: dict[tuple[str, str], Rule] = {
    # -- sign-in, users, the master
    ("POST", f"{V1}/auth/login"): OPEN,
    ("GET", f"{V1}/master"): OPEN,
    ("GET", "/info"): OPEN,  # Determined's client asks here first (issue 33)
    ("POST", f"{V1}/auth/logout"): ANY,
    ("GET", f"{V1}/auth/user"): ANY,
    ("GET", f"{V1}/me"): ANY,
    ("GET", f"{V1}/users"): ANY,
    ("POST", f"{V1}/users"): _cluster(P.ADMINISTRATE_USER, "create users"),
    ("PATCH", f"{V1}/users/{{user_id}}"): Rule(
        perm=P.ADMINISTRATE_USER, on="self", what="edit another user"
    ),
    ("POST", f"{V1}/users/{{user_id}}/password"): Rule(
        perm=P.ADMINISTRATE_USER, on="self", what="change another user's password"
    ),
    ("PATCH", f"{V1}/users/assignments"): _cluster(P.UPDATE_GROUP, "change group members"),
    ("GET", f"{V1}/auth/csrf"): ANY,
    # -- access tokens, single sign-on, the audit trail (issue 30); the token routes let
    # a user reach their own tokens and ADMINISTRATE_USER everyone's (checked inside)
    ("POST", f"{V1}/tokens"): Rule(on="any", what="create access tokens"),
    ("GET", f"{V1}/tokens"): Rule(on="any", what="list tokens"),
    ("PATCH", f"{V1}/tokens/{{token_id}}"): Rule(on="any", what="edit tokens"),
    ("GET", "/oidc/sso"): OPEN,
    ("GET", "/oidc/callback"): OPEN,
    ("POST", "/oidc/cli-confirm"): OPEN,
    ("POST", f"{V1}/auth/sso/exchange"): OPEN,
    ("GET", f"{V1}/users/{{user_id}}/sso-groups"): Rule(
        perm=P.ADMINISTRATE_USER, on="self", what="read a user's single sign-on groups"
    ),
    ("GET", f"{V1}/audit"): Rule(on="admin", what="read the audit trail"),
    ("GET", f"{V1}/audit/verify"): Rule(on="admin", what="verify the audit trail"),
    ("POST", f"{V1}/preview-hp-search"): ANY,
    # -- the master's operation (issue 34)
    ("GET", f"{V1}/master/logs"): _cluster(P.VIEW_MASTER_LOGS, "read the master's logs"),
    ("GET", f"{V1}/master/config"): _cluster(P.VIEW_MASTER_CONFIG, "read the master's config"),
    ("PATCH", f"{V1}/master/config"): _cluster(
        P.UPDATE_MASTER_CONFIG, "change the master's config"
    ),
    ("GET", f"{V1}/master/cluster_message"): ANY,
    ("PUT", f"{V1}/master/cluster_message"): _cluster(
        P.UPDATE_MASTER_CONFIG, "set the cluster message"
    ),
    ("DELETE", f"{V1}/master/cluster_message"): _cluster(
        P.UPDATE_MASTER_CONFIG, "clear the cluster message"
    ),
    ("PUT", f"{V1}/experiments/{{exp_id}}/retain_logs"): _path(
        P.UPDATE_EXPERIMENT, "set its log retention"
    ),
    ("POST", f"{V1}/cleanup_logs"): Rule(on="admin", what="delete expired logs"),
    **{
        ("GET", f"{V1}/resources/{name}"): _cluster(P.VIEW_CLUSTER_USAGE, "read cluster usage")
        for name in ("allocation/raw", "allocation/aggregated", "usage")
    },
    # -- Prometheus (issue 34): admins, e.g. a scraper with an admin's access token
    ("GET", "/prom/det-state-metrics"): Rule(on="admin", what="read the cluster's metrics"),
    ("GET", "/debug/prom/metrics"): Rule(on="admin", what="read the master's metrics"),
    ("GET", "/prom/det-http-sd-config"): Rule(on="admin", what="discover the agents' metrics"),
    # -- agents, slots, pools (agents' own routes)
    ("GET", f"{V1}/agents"): Rule(on="any", agent=True, secret=True),
    ("POST", f"{V1}/agents"): _cluster(P.UPDATE_AGENTS, "register agents", secret=True),
    ("POST", f"{V1}/agents/{{agent_id}}/enable"): _cluster(P.UPDATE_AGENTS, "enable agents"),
    ("POST", f"{V1}/agents/{{agent_id}}/disable"): _cluster(P.UPDATE_AGENTS, "disable agents"),
    ("POST", f"{V1}/agents/{{agent_id}}/slots/{{slot_id}}/{{action}}"): _cluster(
        P.UPDATE_AGENTS, "{action} slots"
    ),
    ("GET", f"{V1}/resource-pools"): Rule(on="any", agent=True),
    ("POST", f"{V1}/agents/{{agent_id}}/heartbeat"): AGENT_ONLY,
    ("POST", f"{V1}/allocations/{{allocation_id}}/exited"): AGENT_ONLY,
    ("POST", f"{V1}/task/logs"): AGENT_ONLY,
    ("GET", f"{V1}/allocations"): _list(VIEW_EXP, trial="route"),
    ("GET", f"{V1}/allocations/{{allocation_id}}/signals/preemption"): TRIAL_ONLY,
    ("POST", f"{V1}/allocations/{{allocation_id}}/rendezvous"): TRIAL_ONLY,
    ("GET", f"{V1}/allocations/{{allocation_id}}/rendezvous"): TRIAL_ONLY,
    ("GET", f"{V1}/stream/cluster"): _list(VIEW_EXP),
    # -- resource pools bound to workspaces (reference §1.5)
    ("GET", f"{V1}/resource-pools/{{pool_name}}/workspace-bindings"): _list(P.VIEW_WORKSPACE),
    **{
        (m, f"{V1}/resource-pools/{{pool_name}}/workspace-bindings"): _cluster(
            P.MODIFY_RP_WORKSPACE_BINDINGS, "bind resource pools to workspaces"
        )
        for m in ("POST", "DELETE", "PUT")
    },
    # -- experiments
    ("POST", f"{V1}/experiments"): Rule(
        perm=P.CREATE_EXPERIMENT, on="body", what="create experiments in it"
    ),
    ("GET", f"{V1}/experiments"): _list(VIEW_EXP),
    ("GET", f"{V1}/stream/experiments"): _list(VIEW_EXP),
    ("GET", f"{V1}/experiments/{{exp_id}}"): _path(VIEW_EXP, trial="own"),
    ("GET", f"{V1}/stream/experiments/{{exp_id}}"): _path(VIEW_EXP),
    ("GET", f"{V1}/experiments/{{exp_id}}/trials"): _path(VIEW_EXP, trial="own"),
    ("GET", f"{V1}/experiments/{{exp_id}}/checkpoints"): _path(VIEW_ART, trial="own"),
    ("GET", f"{V1}/experiments/{{exp_id}}/model_def"): _path(VIEW_ART, agent=True, trial="own"),
    ("GET", f"{V1}/experiments/{{exp_id}}/model_def/tree"): _path(VIEW_ART, trial="own"),
    ("GET", f"{V1}/experiments/{{exp_id}}/model_def/file"): _path(VIEW_ART, trial="own"),
    ("GET", f"{V1}/experiments/{{exp_id}}/metrics"): _path(VIEW_EXP),
    ("GET", f"{V1}/experiments/{{exp_id}}/metrics/names"): _path(VIEW_EXP),
    # -- a search's summary, and the events and operations of a remote search runner
    ("GET", f"{V1}/experiments/{{exp_id}}/searcher"): _path(VIEW_EXP),
    ("GET", f"{V1}/experiments/{{exp_id}}/searcher_events"): _path(
        P.UPDATE_EXPERIMENT, "run its searcher"
    ),
    ("POST", f"{V1}/experiments/{{exp_id}}/searcher_operations"): _path(
        P.UPDATE_EXPERIMENT, "run its searcher"
    ),
    ("POST", f"{V1}/experiments/{{exp_id}}/{{action}}"): _path(
        P.UPDATE_EXPERIMENT,
        "{action} it",
        by_action=(
            ("archive", P.UPDATE_EXPERIMENT_METADATA),
            ("unarchive", P.UPDATE_EXPERIMENT_METADATA),
        ),
    ),
    ("PATCH", f"{V1}/experiments/{{exp_id}}"): _path(P.UPDATE_EXPERIMENT, "edit it"),
    ("DELETE", f"{V1}/experiments/{{exp_id}}"): _path(P.DELETE_EXPERIMENT, "delete it"),
    ("PUT", f"{V1}/experiments/{{exp_id}}/labels/{{label}}"): _path(
        P.UPDATE_EXPERIMENT_METADATA, "label it"
    ),
    ("DELETE", f"{V1}/experiments/{{exp_id}}/labels/{{label}}"): _path(
        P.UPDATE_EXPERIMENT_METADATA, "label it"
    ),
    ("POST", f"{V1}/experiments/continue"): Rule(
        perm=P.UPDATE_EXPERIMENT, on="body", what="continue it"
    ),
    ("POST", f"{V1}/experiments/{{exp_id}}/move"): _path(
        P.UPDATE_EXPERIMENT, "move it", body_perm=P.CREATE_EXPERIMENT
    ),
    ("POST", f"{V1}/projects/{{project_id}}/experiments/move"): Rule(
        perm=P.UPDATE_EXPERIMENT, on="body", body_perm=P.CREATE_EXPERIMENT, what="move it"
    ),
    # -- trials and checkpoints
    ("POST", f"{V1}/trials/{{trial_id}}/kill"): _path(
        P.UPDATE_EXPERIMENT, "kill its trial {trial_id}"
    ),
    ("GET", f"{V1}/trials/{{trial_id}}"): _path(VIEW_EXP, trial="own"),
    ("GET", f"{V1}/trials/{{trial_id}}/metrics"): _path(VIEW_EXP, trial="own"),
    # Determined's client (issue 33): workloads; several trials' metrics (checked inside)
    ("GET", f"{V1}/trials/{{trial_id}}/workloads"): _path(VIEW_EXP),
    ("GET", f"{V1}/trials/metrics/trial_metrics"): Rule(
        perm=VIEW_EXP, on="body", what="read trials' metrics"
    ),
    ("GET", f"{V1}/trials/{{trial_id}}/batch-metrics"): _path(VIEW_EXP, trial="own"),
    ("GET", f"{V1}/trials/{{trial_id}}/logs"): _path(VIEW_ART),
    ("GET", f"{V1}/stream/trials/{{trial_id}}/logs"): _path(VIEW_ART),
    ("GET", f"{V1}/trials/{{trial_id}}/checkpoints"): _path(VIEW_ART, trial="own"),
    ("GET", f"{V1}/checkpoints/{{uuid}}"): _path(VIEW_ART, trial="own"),
    ("GET", f"{V1}/checkpoints/{{uuid}}/download"): _path(VIEW_ART, trial="own"),
    ("DELETE", f"{V1}/checkpoints/{{uuid}}"): _path(
        P.UPDATE_EXPERIMENT, "delete its checkpoint {uuid}"
    ),
    # -- what trials report (their session token; admins may too)
    ("GET", f"{V1}/trials/{{trial_id}}/searcher/operation"): TRIAL_ONLY,
    ("POST", f"{V1}/trials/{{trial_id}}/searcher/completed_operation"): TRIAL_ONLY,
    ("POST", f"{V1}/trials/{{trial_id}}/metrics"): TRIAL_ONLY,
    ("POST", f"{V1}/trials/{{trial_id}}/metrics/batch"): TRIAL_ONLY,
    # issue 34: the system-metrics profiler
    ("POST", f"{V1}/trials/{{trial_id}}/profiler/metrics"): TRIAL_ONLY,
    ("GET", f"{V1}/trials/{{trial_id}}/profiler/metrics"): _path(VIEW_EXP, trial="own"),
    ("GET", f"{V1}/trials/{{trial_id}}/profiler/available_series"): _path(VIEW_EXP, trial="own"),
    ("POST", f"{V1}/trials/{{trial_id}}/progress"): TRIAL_ONLY,
    ("POST", f"{V1}/trials/{{trial_id}}/early_exit"): TRIAL_ONLY,
    ("POST", f"{V1}/checkpoints"): Rule(on="admin", trial="route"),
    # -- metadata and status set after the fact (issue 31 scope 3)
    ("POST", f"{V1}/trials/{{trial_id}}/runner/metadata"): TRIAL_ONLY,
    ("POST", f"{V1}/runs/{{trial_id}}/metadata"): _path(
        P.UPDATE_EXPERIMENT_METADATA, "set its trial's metadata", trial="own"
    ),
    ("GET", f"{V1}/runs/{{trial_id}}/metadata"): _path(VIEW_EXP, trial="own"),
    ("POST", f"{V1}/checkpoints/{{uuid}}/metadata"): _path(
        P.UPDATE_EXPERIMENT_METADATA, "edit the metadata of its checkpoint {uuid}"
    ),
    # -- the job queue
    ("GET", f"{V1}/job-queues"): _list(VIEW_EXP),
    ("PATCH", f"{V1}/jobs/{{job_id}}"): _path(P.UPDATE_EXPERIMENT, "change its scheduling"),
    # -- commands, notebooks, shells, TensorBoards (NSC: "notebooks, shells, commands")
    **{
        (m, f"{V1}/{f}"): r
        for f in _TASK_FAMILIES
        for m, r in (
            ("POST", Rule(perm=P.CREATE_NSC, on="body", what="start tasks in it")),
            ("GET", _list(P.VIEW_NSC)),
        )
    },  # fmt: skip
    **{
        ("POST", f"{V1}/{f}/{{task_id}}/kill"): _path(P.UPDATE_NSC, "kill it")
        for f in _TASK_FAMILIES
    },
    ("GET", f"{V1}/tasks"): _list(P.VIEW_NSC),
    ("GET", f"{V1}/tasks/{{task_id}}"): _path(P.VIEW_NSC),
    ("POST", f"{V1}/tasks/{{task_id}}/kill"): _path(P.UPDATE_NSC, "kill it", trial="route"),
    ("GET", f"{V1}/tasks/{{task_id}}/logs"): _path(P.VIEW_NSC),
    ("GET", f"{V1}/tasks/{{task_id}}/resource_metrics"): _path(P.VIEW_NSC),  # issue 34
    ("GET", f"{V1}/tasks/{{task_id}}/context"): _path(
        P.UPDATE_NSC, "download its context", agent=True
    ),
    ("POST", f"{V1}/tasks/{{task_id}}/service"): Rule(on="admin", trial="route"),
    # a shell's SSH key: UPDATE_NSC here, and the route gives it to the owner only
    ("GET", f"{V1}/shells/{{task_id}}/ssh_key"): _path(P.UPDATE_NSC, "have its SSH key"),
    ("PROXY", "/proxy/{task_id}/"): _path(P.UPDATE_NSC, "open it"),
    # -- workspaces (reference §1.4)
    ("GET", f"{V1}/workspaces"): _list(P.VIEW_WORKSPACE),
    ("POST", f"{V1}/workspaces"): _cluster(P.CREATE_WORKSPACE, "create workspaces"),
    ("GET", f"{V1}/workspaces/{{workspace_id}}"): _path(P.VIEW_WORKSPACE),
    ("PATCH", f"{V1}/workspaces/{{workspace_id}}"): _path(P.UPDATE_WORKSPACE, "edit it"),
    ("DELETE", f"{V1}/workspaces/{{workspace_id}}"): _path(P.DELETE_WORKSPACE, "delete it"),
    ("POST", f"{V1}/workspaces/{{workspace_id}}/archive"): _path(P.UPDATE_WORKSPACE, "archive it"),
    ("POST", f"{V1}/workspaces/{{workspace_id}}/unarchive"): _path(
        P.UPDATE_WORKSPACE, "unarchive it"
    ),
    ("POST", f"{V1}/workspaces/{{workspace_id}}/pin"): _path(P.VIEW_WORKSPACE),
    ("POST", f"{V1}/workspaces/{{workspace_id}}/unpin"): _path(P.VIEW_WORKSPACE),
    ("GET", f"{V1}/workspaces/{{workspace_id}}/projects"): _path(P.VIEW_PROJECT),
    ("POST", f"{V1}/workspaces/{{workspace_id}}/projects"): _path(
        P.CREATE_PROJECT, "create projects in it"
    ),
    ("GET", f"{V1}/workspaces/{{workspace_id}}/available-resource-pools"): _path(P.VIEW_WORKSPACE),
    # -- projects
    ("GET", f"{V1}/projects/{{project_id}}"): _path(P.VIEW_PROJECT),
    ("PATCH", f"{V1}/projects/{{project_id}}"): _path(P.UPDATE_PROJECT, "edit it"),
    ("DELETE", f"{V1}/projects/{{project_id}}"): _path(P.DELETE_PROJECT, "delete it"),
    ("POST", f"{V1}/projects/{{project_id}}/archive"): _path(P.UPDATE_PROJECT, "archive it"),
    ("POST", f"{V1}/projects/{{project_id}}/unarchive"): _path(P.UPDATE_PROJECT, "unarchive it"),
    ("POST", f"{V1}/projects/{{project_id}}/move"): _path(
        P.UPDATE_PROJECT, "move it", body_perm=P.CREATE_PROJECT
    ),
    ("POST", f"{V1}/projects/{{project_id}}/notes"): _path(P.UPDATE_PROJECT, "add notes to it"),
    ("PUT", f"{V1}/projects/{{project_id}}/notes"): _path(P.UPDATE_PROJECT, "edit its notes"),
    # -- the model registry (reference §4.3; issue 31): rights on the model's workspace
    ("GET", f"{V1}/models"): _list(P.VIEW_MODEL_REGISTRY),
    ("POST", f"{V1}/models"): Rule(
        perm=P.CREATE_MODEL_REGISTRY, on="body", what="create models in it"
    ),
    ("GET", f"{V1}/model/labels"): _list(P.VIEW_MODEL_REGISTRY),
    ("GET", f"{V1}/models/{{model_name}}"): _path(P.VIEW_MODEL_REGISTRY),
    ("PATCH", f"{V1}/models/{{model_name}}"): _path(P.EDIT_MODEL_REGISTRY, "edit it"),
    ("POST", f"{V1}/models/{{model_name}}/archive"): _path(P.EDIT_MODEL_REGISTRY, "archive it"),
    ("POST", f"{V1}/models/{{model_name}}/unarchive"): _path(P.EDIT_MODEL_REGISTRY, "unarchive it"),
    ("POST", f"{V1}/models/{{model_name}}/move"): _path(
        P.EDIT_MODEL_REGISTRY, "move it", body_perm=P.CREATE_MODEL_REGISTRY
    ),
    ("DELETE", f"{V1}/models/{{model_name}}"): _path(P.DELETE_MODEL_REGISTRY, "delete it"),
    ("GET", f"{V1}/models/{{model_name}}/versions"): _path(P.VIEW_MODEL_REGISTRY),
    ("POST", f"{V1}/models/{{model_name}}/versions"): _path(
        P.EDIT_MODEL_REGISTRY, "register versions of it"
    ),
    ("GET", f"{V1}/models/{{model_name}}/versions/{{model_version_num}}"): _path(
        P.VIEW_MODEL_REGISTRY
    ),
    ("PATCH", f"{V1}/models/{{model_name}}/versions/{{model_version_num}}"): _path(
        P.EDIT_MODEL_REGISTRY, "edit its versions"
    ),
    # the route checks the version's owner too (a version's owner may delete it)
    ("DELETE", f"{V1}/models/{{model_name}}/versions/{{model_version_num}}"): Rule(
        perm=P.DELETE_MODEL_VERSION, on="body", what="delete its versions"
    ),
    # -- config templates (reference §6.1): the routes check the template's workspace
    ("GET", f"{V1}/templates"): _list(P.VIEW_TEMPLATES),
    ("GET", f"{V1}/templates/{{template_name}}"): Rule(perm=P.VIEW_TEMPLATES, on="body"),
    ("POST", f"{V1}/templates/{{template_name}}"): Rule(
        perm=P.CREATE_TEMPLATES, on="body", what="create templates in it"
    ),
    ("PUT", f"{V1}/templates/{{template_name}}"): Rule(
        perm=P.UPDATE_TEMPLATES, on="body", what="replace its templates"
    ),
    ("PATCH", f"{V1}/templates/{{template_name}}"): Rule(
        perm=P.UPDATE_TEMPLATES, on="body", what="edit its templates"
    ),
    ("PATCH", f"{V1}/template/rename"): Rule(
        perm=P.UPDATE_TEMPLATES, on="body", what="rename its templates"
    ),
    ("DELETE", f"{V1}/templates/{{template_name}}"): Rule(
        perm=P.DELETE_TEMPLATES, on="body", what="delete its templates"
    ),
    # -- webhooks (reference §6.3): the routes check the webhook's workspace (the
    # cluster for a global webhook); custom alerts come from a trial's own token
    ("GET", f"{V1}/webhooks"): _list(P.VIEW_WEBHOOKS),
    ("POST", f"{V1}/webhooks"): Rule(perm=P.EDIT_WEBHOOKS, on="body", what="create webhooks"),
    ("PATCH", f"{V1}/webhooks/{{webhook_id}}"): Rule(
        perm=P.EDIT_WEBHOOKS, on="body", what="edit webhooks"
    ),
    ("DELETE", f"{V1}/webhooks/{{webhook_id}}"): Rule(
        perm=P.EDIT_WEBHOOKS, on="body", what="delete webhooks"
    ),
    ("POST", f"{V1}/webhooks/{{webhook_id}}/test"): Rule(
        perm=P.EDIT_WEBHOOKS, on="body", what="test webhooks"
    ),
    ("GET", f"{V1}/webhooks/{{webhook_id}}/events"): Rule(perm=P.VIEW_WEBHOOKS, on="body"),
    ("POST", f"{V1}/webhooks/custom"): Rule(on="admin", trial="route"),
    # -- roles and groups (reference §2.5)
    ("GET", f"{V1}/permissions/summary"): ANY,
    ("POST", f"{V1}/roles/search"): ANY,
    ("POST", f"{V1}/roles/search/by-ids"): ANY,
    ("POST", f"{V1}/roles/search/by-assignability"): ANY,
    ("GET", f"{V1}/roles/search/by-user/{{user_id}}"): Rule(
        perm=P.ASSIGN_ROLES, on="self", what="read other users' roles"
    ),
    ("GET", f"{V1}/roles/search/by-group/{{group_id}}"): _cluster(
        P.ASSIGN_ROLES, "read a group's roles"
    ),
    ("POST", f"{V1}/roles/add-assignments"): Rule(
        perm=P.ASSIGN_ROLES, on="body", what="assign roles"
    ),
    ("POST", f"{V1}/roles/remove-assignments"): Rule(
        perm=P.ASSIGN_ROLES, on="body", what="remove role assignments"
    ),
    ("GET", f"{V1}/roles/workspace/{{workspace_id}}"): _path(P.VIEW_WORKSPACE),
    ("POST", f"{V1}/groups"): _cluster(P.UPDATE_GROUP, "create groups"),
    ("POST", f"{V1}/groups/search"): ANY,
    ("GET", f"{V1}/groups/{{group_id}}"): ANY,
    ("PUT", f"{V1}/groups/{{group_id}}"): _cluster(P.UPDATE_GROUP, "edit groups"),
    ("DELETE", f"{V1}/groups/{{group_id}}"): _cluster(P.UPDATE_GROUP, "delete groups"),
}
"""Every route's :class:`Rule` by ``(method, path)`` (``PROXY`` for the task proxy)."""


def rule_for(method: str, path: str) -> Rule | None:
    """The rule of ``method path`` (a route's path template), or None."""
    return ROUTES.get((method.upper(), path))
