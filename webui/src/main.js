// The WebUI's entry point: a small router over the page modules. Every page exports
// `render(root, params)`, which draws into `root` and returns a function that stops its
// streams and charts when the user navigates away.

import { UNAUTHORIZED_EVENT, currentUser, dropEarlyStream, get, login, logout } from "./api.js";
import * as admin from "./pages/admin.js";
import * as cluster from "./pages/cluster.js";
import * as compare from "./pages/compare.js";
import * as experiment from "./pages/experiment.js";
import * as experiments from "./pages/experiments.js";
import * as loginPage from "./pages/login.js";
import * as models from "./pages/models.js";
import * as project from "./pages/project.js";
import * as queue from "./pages/queue.js";
import { redirectIfAlways, returnedFromSso } from "./pages/sso.js";
import * as tasks from "./pages/tasks.js";
import * as tokens from "./pages/tokens.js";
import * as trial from "./pages/trial.js";
import * as workspace from "./pages/workspace.js";
import * as workspaces from "./pages/workspaces.js";
import {
  canAdminister, forgetPermissions, loadPermissions, permissionsJson, primePermissions,
} from "./perms.js";
import { h, setChildren } from "./util.js";

const ROUTES = [
  [/^\/(?:experiments\/?)?$/, experiments, "experiments"],
  [/^\/experiments\/(\d+)\/?$/, experiment, "experiments"],
  [/^\/compare\/?$/, compare, "experiments"],
  [/^\/trials\/(\d+)\/?$/, trial, "experiments"],
  [/^\/cluster\/?$/, cluster, "cluster"],
  [/^\/tasks\/?$/, tasks, "tasks"],
  [/^\/queue\/?$/, queue, "queue"],
  [/^\/tokens\/?$/, tokens, "tokens"],
  [/^\/workspaces\/?$/, workspaces, "workspaces"],
  [/^\/workspaces\/(\d+)\/?$/, workspace, "workspaces"],
  [/^\/projects\/(\d+)\/?$/, project, "workspaces"],
  [/^\/models\/?$/, models, "models"],
  [/^\/models\/(\d+)\/?$/, models, "models"],
  [/^\/admin\/?$/, admin, "admin"],
];

/** Where the user's permissions are remembered between page loads (issue 30). */
const PERMS_KEY = "dauntless-permissions";
/** The header's Admin link and the link it goes before, while it is out of the page. */
const ADMIN_LINK = document.querySelector("[data-nav=admin]");
const ADMIN_PLACE = ADMIN_LINK?.nextElementSibling;
ADMIN_LINK?.remove();
if (ADMIN_LINK) ADMIN_LINK.hidden = false;

let cleanup = null;
/** The signed-in user ({username, admin, ...}), or null while signed out. */
let user = null;
/** Set after "Sign out": the next sign-in must be typed (no silent default sign-in). */
const SIGNED_OUT_KEY = "dauntless-signed-out";
/**
 * Set while this browser holds a session cookie (it is HttpOnly: the page cannot see it):
 * the signed-in user as JSON, so that a page load draws at once and asks the master who
 * we are alongside, not before (issue 22).
 */
const SIGNED_IN_KEY = "dauntless-signed-in";
/** True while a page drawn for the remembered user waits for the master to confirm it. */
let confirming = false;

function remember(u) {
  const changed = u?.username !== user?.username;
  user = u;
  if (u) {
    window.localStorage.setItem(SIGNED_IN_KEY, JSON.stringify(u));
    window.sessionStorage.removeItem(SIGNED_OUT_KEY);
  } else {
    window.localStorage.removeItem(SIGNED_IN_KEY);
    window.localStorage.removeItem(PERMS_KEY);
    forgetPermissions();
  }
  if (u && changed) window.localStorage.removeItem(PERMS_KEY);
}

/**
 * Read what the user may do (remembered from the last page load, then asked again) and
 * the workspaces they may see; draw the page again when that changed what it shows.
 */
async function refreshPermissions() {
  try {
    const changed = await loadPermissions();
    window.localStorage.setItem(PERMS_KEY, permissionsJson());
    if (changed && user) route();
  } catch { /* signed out or unreachable: the page says so */ }
}

/** When the cluster message was last asked for (ms since the epoch). */
let messageAskedAt = 0;

/**
 * Show the admins' cluster message (`det master cluster-message set`) as a banner under
 * the header, asking the master (GET /master, open) at most once a minute (issue 34).
 */
async function showClusterMessage() {
  if (Date.now() - messageAskedAt < 60_000) return;
  messageAskedAt = Date.now();
  const banner = document.getElementById("cluster-message");
  if (!banner) return;
  let message = null;
  try { ({ cluster_message: message } = await get("/master")); } catch { return; }
  banner.textContent = message || "";
  banner.hidden = !message;
}

/** Fill the header's workspace switcher and show the Admin link to administrators. */
async function drawChrome() {
  showClusterMessage();
  if (ADMIN_LINK) {
    // In the page only for administrators (a hidden link would still take nav space).
    if (canAdminister() && !ADMIN_LINK.isConnected) ADMIN_PLACE?.before(ADMIN_LINK);
    else if (!canAdminister()) ADMIN_LINK.remove();
  }
  const switcher = document.getElementById("workspace-switcher");
  if (!switcher || !user) return;
  let list = [];
  try { ({ workspaces: list } = await get("/workspaces?archived=false")); } catch { return; }
  const m = window.location.pathname.match(/^\/workspaces\/(\d+)/);
  const current = m ? Number(m[1]) : Number(switcher.dataset.current || 0);
  setChildren(switcher, h("option", { value: "" }, "All workspaces"),
    list.map((w) => h("option", { value: w.id, selected: w.id === current }, w.name)));
}

/** Mark workspace `id` as the one the page shows (0: none) in the switcher. */
export function showWorkspace(id) {
  const switcher = document.getElementById("workspace-switcher");
  if (!switcher) return;
  switcher.dataset.current = String(id || 0);
  switcher.value = id ? String(id) : "";
}

/** The user remembered by the last page load, or null. */
function rememberedUser() {
  try {
    const u = JSON.parse(window.localStorage.getItem(SIGNED_IN_KEY) || "null");
    return u && typeof u.username === "string" ? u : null;
  } catch {
    return null;
  }
}

function showUser() {
  const box = document.getElementById("user-box");
  document.body.classList.toggle("signed-out", !user);
  if (!box) return;
  setChildren(box, user ? [
    h("span", { id: "user-name", title: user.admin ? "administrator" : "user" }, user.username),
    h("button.link", { id: "sign-out", type: "button", onclick: signOut }, "Sign out"),
  ] : null);
}

function showLogin(reason) {
  if (cleanup) cleanup();
  cleanup = null;
  dropEarlyStream();
  remember(null);
  showUser();
  loginPage.render(document.getElementById("app"), async (u) => {
    remember(u);
    showUser();
    await refreshPermissions();
    route();
  }, reason);
}

async function signOut() {
  window.sessionStorage.setItem(SIGNED_OUT_KEY, "1");
  try { await logout(); } catch { /* signed out already */ }
  showLogin();
}

/**
 * Find who we are. A fresh cluster's `determined` user has an empty password, so like
 * Determined's UI we first try signing in as it silently (not after an explicit sign-out).
 */
async function boot() {
  let u = null;
  // Ask who we are only when a session may exist, so that a first visit to a new cluster
  // signs in silently without a 401 in the browser's console. With a remembered user the
  // page is drawn first and the answer checked when it comes.
  const cached = rememberedUser();
  if (returnedFromSso()) {
    // Back from the identity provider: the master set the session cookie.
    try { u = await currentUser(); } catch { u = null; }
    if (u) {
      remember(u);
      showUser();
      route();
      return;
    }
  }
  if (cached) {
    remember(cached);
    try {
      const perms = JSON.parse(window.localStorage.getItem(PERMS_KEY) || "null");
      if (perms) primePermissions(perms);
    } catch { /* drawn without, then again once known */ }
    refreshPermissions();
    showUser();
    confirming = true;
    route();
    try {
      u = await currentUser();
    } catch {
      confirming = false;
      return;  // master unreachable: the page shows its own error
    }
    confirming = false;
    if (u) {
      remember(u);
      showUser();
      return;
    }
    user = null;  // the session ended: sign in again below
  } else if (window.localStorage.getItem(SIGNED_IN_KEY)) {
    try {
      u = await currentUser();
    } catch {
      route();  // master unreachable: the page shows its own error
      return;
    }
  }
  if (!u && !window.sessionStorage.getItem(SIGNED_OUT_KEY)) {
    if (await redirectIfAlways()) return;  // oidc.always_redirect: the provider signs in
    try { u = await login("determined", ""); } catch { u = null; }
  }
  if (!u) {
    showLogin();
    return;
  }
  remember(u);
  showUser();
  await refreshPermissions();
  route();
}

window.addEventListener(UNAUTHORIZED_EVENT, () => {
  // While the remembered user is being confirmed, boot() decides what follows a 401.
  if (user && !confirming) showLogin("Your session ended; sign in again.");
});

function route() {
  const root = document.getElementById("app");
  if (cleanup) cleanup();
  cleanup = null;
  const path = window.location.pathname;
  for (const [pattern, page, nav] of ROUTES) {
    const m = path.match(pattern);
    if (!m) continue;
    for (const a of document.querySelectorAll("[data-nav]")) {
      a.classList.toggle("active", a.dataset.nav === nav);
    }
    setChildren(root);
    cleanup = page.render(root, m.slice(1).map(Number)) || null;
    dropEarlyStream();  // opened for a view this page did not ask for
    if (!/^\/(workspaces|projects)\//.test(path)) showWorkspace(0);
    drawChrome();
    return;
  }
  dropEarlyStream();
  setChildren(root, h("div.card", null, h("h1", null, "Not found"),
    h("p", null, "No page at ", h("code", null, path), ". ", h("a", { href: "/" }, "Experiments"))));
}

/** Go to a path of the UI without reloading the page. */
export function navigate(path) {
  if (path === window.location.pathname + window.location.search) return;
  window.history.pushState(null, "", path);
  if (user) route();
}

document.addEventListener("click", (ev) => {
  const a = ev.target.closest("a");
  if (!a || ev.defaultPrevented || ev.button !== 0 || ev.metaKey || ev.ctrlKey || ev.shiftKey) return;
  const url = new URL(a.href, window.location.href);
  if (url.origin !== window.location.origin || a.dataset.external || a.target) return;
  if (url.pathname.startsWith("/api/") || url.pathname.startsWith("/docs")) return;
  ev.preventDefault();
  navigate(url.pathname + url.search);
});

window.addEventListener("popstate", () => { if (user) route(); });
document.getElementById("workspace-switcher")?.addEventListener("change", (ev) => {
  const id = ev.target.value;
  navigate(id ? `/workspaces/${id}` : "/workspaces");
});
boot();
