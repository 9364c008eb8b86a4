// The master's public REST API (/api/v1, docs/protocol.md) and its event streams.

const BASE = "/api/v1";

/** An error answered by the master: `status` and the `detail` line. */
export class ApiError extends Error {
  constructor(status, detail) {
    super(detail);
    this.status = status;
  }
}

// Credentials: the master's HttpOnly session cookie (set by POST /auth/login), sent by
// fetch and EventSource on their own; the UI never sees the token. A request that
// changes something also sends the session's CSRF token (X-CSRF-Token), which the
// master hands only to pages of its own origin (docs/protocol.md, "Authentication").

/** The event fired on `window` when the master answers 401 (not signed in / expired). */
export const UNAUTHORIZED_EVENT = "dauntless:unauthorized";

const SAFE = new Set(["GET", "HEAD", "OPTIONS"]);
let csrf = null; // a promise of the session's CSRF token (null: ask again)

/**
 * The headers a state-changing request sends with the session cookie: X-CSRF-Token,
 * fetched once per session from GET /api/v1/auth/csrf ({} when signed out).
 * @returns {Promise<Object<string, string>>}
 */
export async function csrfHeaders() {
  if (!csrf) {
    csrf = fetch(BASE + "/auth/csrf", { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then((r) => (r.ok ? r.json() : null))
      .then((d) => (d && d.csrf_token) || null)
      .catch(() => null);
  }
  const token = await csrf;
  if (!token) csrf = null;
  return token ? { "X-CSRF-Token": token } : {};
}

async function request(method, path, body) {
  const init = { method, headers: { Accept: "application/json" }, credentials: "same-origin" };
  if (!SAFE.has(method) && path !== "/auth/login") Object.assign(init.headers, await csrfHeaders());
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const resp = await fetch(BASE + path, init);
  const text = await resp.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch { data = null; }
  if (!resp.ok) {
    const err = new ApiError(resp.status, (data && data.detail) || `${resp.status} ${resp.statusText}`);
    if (resp.status === 401) csrf = null;
    if (resp.status === 401 && !path.startsWith("/auth/")) {
      window.dispatchEvent(new CustomEvent(UNAUTHORIZED_EVENT, { detail: err.message }));
    }
    throw err;
  }
  return data;
}

/** GET a path under /api/v1; resolves to the JSON body. */
export const get = (path) => request("GET", path);
/** POST to a path under /api/v1 (JSON body optional). */
export const post = (path, body) => request("POST", path, body);
/** PATCH a path under /api/v1 with a JSON body. */
export const patch = (path, body) => request("PATCH", path, body);
/** DELETE a path under /api/v1. */
export const del = (path) => request("DELETE", path);
/** PUT a JSON body to a path under /api/v1. */
export const put = (path, body) => request("PUT", path, body);

/**
 * GET a path under /api/v1 as text (a file, not JSON).
 * @throws {ApiError} for an error status, with the master's detail
 */
export async function getText(path) {
  const resp = await fetch(BASE + path, { credentials: "same-origin" });
  const text = await resp.text();
  if (!resp.ok) {
    let detail = `${resp.status} ${resp.statusText}`;
    try { detail = JSON.parse(text).detail || detail; } catch { /* not JSON */ }
    throw new ApiError(resp.status, detail);
  }
  return text;
}

/**
 * Sign in; the master sets the session cookie.
 * @returns {Promise<object>} the user ({id, username, admin, ...})
 * @throws {ApiError} 401 wrong user name or password, 403 deactivated user
 */
export async function login(username, password) {
  const data = await request("POST", "/auth/login", { username, password });
  csrf = Promise.resolve(data.csrf_token || null);
  return data.user;
}

/** Sign out: the master revokes the token and clears the cookie. */
export async function logout() {
  try {
    await request("POST", "/auth/logout", {});
  } finally {
    csrf = null;
  }
}

/** The signed-in user, or null when the master answers 401. */
export async function currentUser() {
  try {
    return (await request("GET", "/auth/user")).user;
  } catch (err) {
    if (err instanceof ApiError && err.status === 401) return null;
    throw err;
  }
}

/** Build a query string from an object (null/undefined values left out; arrays repeat). */
export function query(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) {
    if (v == null) continue;
    for (const item of Array.isArray(v) ? v : [v]) q.append(k, String(item));
  }
  const s = q.toString();
  return s ? `?${s}` : "";
}

const open = new Set();

function updateIndicator() {
  const el = document.getElementById("live-indicator");
  if (!el) return;
  const live = [...open].some((es) => es.readyState === EventSource.OPEN);
  el.classList.toggle("on", live);
  el.title = live ? "live updates: connected" : "live updates: connecting";
}

/**
 * Follow a server-sent event stream under /api/v1/stream.
 * @param {string} path  e.g. "/stream/experiments?archived=false"
 * @param {Object<string, function(object, MessageEvent)>} handlers  event name -> handler of the parsed JSON
 * @returns {function(): void}  closes the stream
 */
export function stream(path, handlers) {
  const early = takeEarlyStream(path);
  const es = early ? early.es : new EventSource(BASE + path);
  open.add(es);
  for (const [event, fn] of Object.entries(handlers)) {
    es.addEventListener(event, (msg) => fn(JSON.parse(msg.data), msg));
  }
  if (early) {
    // Events that came before the page asked: handled first, in order, once its
    // handlers are attached (later ones reach the handlers directly).
    early.adopted = true;
    for (const msg of early.queue) handlers[msg.type]?.(JSON.parse(msg.data), msg);
    early.queue.length = 0;
    updateIndicator();
  }
  es.addEventListener("open", updateIndicator);
  es.addEventListener("error", () => {
    updateIndicator();
    // A stream refused (401: the session expired) closes for good: ask who we are, which
    // fires UNAUTHORIZED_EVENT when signed out.
    if (es.readyState === EventSource.CLOSED) get("/me").catch(() => {});
  });
  return () => {
    es.close();
    open.delete(es);
    updateIndicator();
  };
}

/**
 * The stream index.html opened for `path` before the page's script ran ({es, queue,
 * adopted}), if it is still open; any other early stream is closed.
 */
function takeEarlyStream(path) {
  const early = window.dauntlessEarlyStream;
  if (!early) return null;
  window.dauntlessEarlyStream = null;
  if (early.path === path && early.es.readyState !== EventSource.CLOSED) return early;
  early.es.close();
  return null;
}

/** Close the stream index.html opened early if no page adopted it (e.g. signed out). */
export function dropEarlyStream() {
  takeEarlyStream(null);
}

/** The lifecycle actions of an experiment allowed in `state` (and `archived`). */
export function allowedActions(state, archived) {
  switch (state) {
    case "ACTIVE": return ["pause", "cancel", "kill"];
    case "PAUSED": return ["activate", "cancel", "kill"];
    case "STOPPING_CANCELED":
    case "STOPPING_COMPLETED":
    case "STOPPING_ERROR": return ["kill"];
    case "COMPLETED":
    case "CANCELED":
    case "ERROR": return [archived ? "unarchive" : "archive"];
    default: return [];
  }
}
