// The master's public REST API (/api/v1, docs/protocol.md) and its event streams.

const BASE = "/api/v1";

/** An error answered by the master: `status` and the `detail` line. */
export class ApiError extends Error {
  constructor(status, detail) {
    super(detail);
    this.status = status;
  }
}

async function request(method, path, body) {
  const init = { method, headers: { Accept: "application/json" } };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const resp = await fetch(BASE + path, init);
  const text = await resp.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch { data = null; }
  if (!resp.ok) throw new ApiError(resp.status, (data && data.detail) || `${resp.status} ${resp.statusText}`);
  return data;
}

/** GET a path under /api/v1; resolves to the JSON body. */
export const get = (path) => request("GET", path);
/** POST to a path under /api/v1 (JSON body optional). */
export const post = (path, body) => request("POST", path, body);

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
  const es = new EventSource(BASE + path);
  open.add(es);
  for (const [event, fn] of Object.entries(handlers)) {
    es.addEventListener(event, (msg) => fn(JSON.parse(msg.data), msg));
  }
  es.addEventListener("open", updateIndicator);
  es.addEventListener("error", updateIndicator);
  return () => {
    es.close();
    open.delete(es);
    updateIndicator();
  };
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
