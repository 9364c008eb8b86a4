// What the signed-in user may do (GET /api/v1/permissions/summary, issue 30), so that the
// pages show only the actions the master would allow. The master checks every request
// anyway; this only keeps buttons the user may not press off the page.

import { get } from "./api.js";

/** Determined's permission ids (docs/protocol.md, "Workspaces, projects and RBAC"). */
export const P = {
  CREATE_EXPERIMENT: 2001,
  VIEW_EXPERIMENT_METADATA: 2003,
  UPDATE_EXPERIMENT: 2004,
  UPDATE_EXPERIMENT_METADATA: 2005,
  DELETE_EXPERIMENT: 2006,
  CREATE_NSC: 3001,
  VIEW_NSC: 3002,
  UPDATE_NSC: 3003,
  VIEW_WORKSPACE: 4002,
  UPDATE_WORKSPACE: 4003,
  DELETE_WORKSPACE: 4004,
  CREATE_PROJECT: 5001,
  VIEW_PROJECT: 5002,
  UPDATE_PROJECT: 5003,
  DELETE_PROJECT: 5004,
  ASSIGN_ROLES: 6002,
  VIEW_MODEL_REGISTRY: 7001,
  EDIT_MODEL_REGISTRY: 7002,
  CREATE_MODEL_REGISTRY: 7003,
  DELETE_MODEL_REGISTRY: 7004,
  DELETE_MODEL_VERSION: 7005,
  ADMINISTRATE_USER: 91001,
  UPDATE_GROUP: 93001,
  CREATE_WORKSPACE: 94001,
};

/** What the owner of an object may do to it while they may see it (the master's rule). */
const OWNER = {
  experiment: [P.UPDATE_EXPERIMENT, P.UPDATE_EXPERIMENT_METADATA, P.DELETE_EXPERIMENT],
  task: [P.UPDATE_NSC],
  project: [P.UPDATE_PROJECT, P.DELETE_PROJECT],
  workspace: [P.UPDATE_WORKSPACE, P.DELETE_WORKSPACE, P.CREATE_PROJECT, P.UPDATE_PROJECT, P.DELETE_PROJECT],
  model: [P.EDIT_MODEL_REGISTRY, P.DELETE_MODEL_REGISTRY, P.DELETE_MODEL_VERSION],
};
const VIEW = {
  experiment: P.VIEW_EXPERIMENT_METADATA, task: P.VIEW_NSC,
  project: P.VIEW_PROJECT, workspace: P.VIEW_WORKSPACE, model: P.VIEW_MODEL_REGISTRY,
};

/** The event fired on `window` once the permissions are known (again). */
export const PERMISSIONS_EVENT = "dauntless:permissions";

let summary = null;
let pending = null;

/** Use `s` (a summary as the master sends it) as the caller's permissions. */
export function primePermissions(s) {
  summary = { ...s, cluster: new Set(s.cluster_permissions) };
  summary.ws = Object.fromEntries(Object.entries(s.workspace_permissions)
    .map(([k, v]) => [Number(k), new Set(v)]));
  summary.raw = JSON.stringify(s);
}

/**
 * Read the caller's permissions (again); resolves to true when they differ from those
 * known before (the page should be drawn again).
 */
export function loadPermissions() {
  if (!pending) {
    const before = summary?.raw;
    pending = get("/permissions/summary").then((s) => {
      primePermissions(s);
      window.dispatchEvent(new CustomEvent(PERMISSIONS_EVENT));
      return summary.raw !== before;
    }).finally(() => { pending = null; });
  }
  return pending;
}

/** The summary as the master sent it (JSON text, to remember), or null. */
export function permissionsJson() { return summary?.raw ?? null; }

/** Forget them (signed out). */
export function forgetPermissions() { summary = null; }

/** Whether they are known yet. */
export function permissionsKnown() { return summary !== null; }

/**
 * Whether the user holds `perm` on workspace `workspaceId` (undefined/null: on the cluster).
 * @param {number} perm
 * @param {number|null} workspaceId
 */
export function can(perm, workspaceId = null) {
  if (!summary) return false;
  if (summary.cluster.has(perm)) return true;
  return workspaceId != null && !!summary.ws[workspaceId]?.has(perm);
}

/**
 * `can`, or as the owner (`ownerIds`: the object's owner, and for a project its
 * workspace's) of an object of `kind` that the user may see.
 */
export function canOn(perm, kind, workspaceId, ownerIds) {
  if (can(perm, workspaceId)) return true;
  if (!summary || !ownerIds) return false;
  const owns = (Array.isArray(ownerIds) ? ownerIds : [[ownerIds, kind]])
    .some(([uid, k]) => uid != null && uid === summary.user_id && OWNER[k].includes(perm));
  return owns && can(VIEW[kind], workspaceId);
}

/** Whether the user may change experiment `exp` with `perm`. */
export function canExperiment(exp, perm) {
  return canOn(perm, "experiment", exp.workspace_id, exp.user_id);
}

/** Whether the user is an administrator of users or groups (the Admin page). */
export function canAdminister() {
  return can(P.ADMINISTRATE_USER) || can(P.UPDATE_GROUP) || can(P.ASSIGN_ROLES);
}
