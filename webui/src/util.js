// Small DOM and formatting helpers shared by the pages.

/**
 * Build a DOM element.
 * @param {string} tag  e.g. "div", "div.card.grow" (classes after dots)
 * @param {object|null} attrs  attributes; keys starting with "on" add listeners,
 *   "class" sets className, "dataset" an object of data-* values
 * @param {...(Node|string|number|null|Array)} children
 * @returns {HTMLElement}
 */
export function h(tag, attrs, ...children) {
  const [name, ...classes] = tag.split(".");
  const el = document.createElement(name);
  if (classes.length) el.className = classes.join(" ");
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v == null || v === false) continue;
    if (k.startsWith("on") && typeof v === "function") el.addEventListener(k.slice(2), v);
    else if (k === "class") el.className = (el.className ? el.className + " " : "") + v;
    else if (k === "dataset") Object.assign(el.dataset, v);
    else if (k === "style" && typeof v === "object") Object.assign(el.style, v);
    else if (k in el && typeof v !== "string") el[k] = v;
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children) {
    if (c == null || c === false) continue;
    if (Array.isArray(c)) append(el, c);
    else el.append(c instanceof Node ? c : String(c));
  }
}

/** Replace every child of `el` with `children`. */
export function setChildren(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

export const TERMINAL = new Set(["COMPLETED", "CANCELED", "ERROR", "DELETED"]);

export const EXPERIMENT_STATES = [
  "ACTIVE", "PAUSED", "STOPPING_COMPLETED", "STOPPING_CANCELED", "STOPPING_KILLED",
  "STOPPING_ERROR", "COMPLETED", "CANCELED", "ERROR", "DELETING", "DELETE_FAILED",
];

/** A coloured badge for a state name. */
export function badge(state) {
  return h("span.badge", { class: state, dataset: { state } }, state);
}

/** A number in at most 4 significant digits (null: "–"). */
export function fmtNum(v) {
  if (v == null || Number.isNaN(v)) return "–";
  if (typeof v !== "number") return String(v);
  if (Number.isInteger(v)) return v.toLocaleString("en-US");
  const a = Math.abs(v);
  if (a !== 0 && (a < 1e-3 || a >= 1e6)) return v.toExponential(3);
  return String(Number(v.toPrecision(4)));
}

/** Seconds since the epoch as local "YYYY-MM-DD HH:MM:SS". */
export function fmtTime(t) {
  if (t == null) return "–";
  const d = new Date(t * 1000);
  const p = (n) => String(n).padStart(2, "0");
  return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())} ` +
    `${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}`;
}

/** A duration in seconds as "1h 02m", "3m 05s" or "12s". */
export function fmtDuration(seconds) {
  if (seconds == null || seconds < 0) return "–";
  const s = Math.floor(seconds);
  const hh = Math.floor(s / 3600), mm = Math.floor((s % 3600) / 60), ss = s % 60;
  if (hh) return `${hh}h ${String(mm).padStart(2, "0")}m`;
  if (mm) return `${mm}m ${String(ss).padStart(2, "0")}s`;
  return `${ss}s`;
}

/** Bytes as "1.2 MB" (powers of 1000). */
export function fmtBytes(n) {
  if (n == null) return "–";
  const units = ["B", "kB", "MB", "GB", "TB"];
  let i = 0;
  let v = n;
  while (v >= 1000 && i < units.length - 1) { v /= 1000; i++; }
  return `${i ? v.toFixed(1) : v} ${units[i]}`;
}

/** How long something ran: end (or now) minus start, in seconds. */
export function durationOf(start, end) {
  if (start == null) return null;
  return (end ?? Date.now() / 1000) - start;
}

const PLAIN = /^[A-Za-z_][A-Za-z0-9_.\-/]*$/;
const RESERVED = /^(true|false|yes|no|on|off|null|~)$/i;

function yamlScalar(v) {
  if (v === null || v === undefined) return "null";
  if (typeof v === "number" || typeof v === "boolean") return String(v);
  const s = String(v);
  if (PLAIN.test(s) && !RESERVED.test(s) && Number.isNaN(Number(s))) return s;
  return JSON.stringify(s);
}

/**
 * JSON data as block-style YAML (mappings, sequences, scalars; strings quoted when they
 * would read as another type).
 * @param {*} value
 * @param {number} indent  spaces before each line
 * @returns {string}
 */
export function toYaml(value, indent = 0) {
  const pad = " ".repeat(indent);
  if (Array.isArray(value)) {
    if (!value.length) return "[]";
    return value.map((v) => {
      if (v !== null && typeof v === "object" && Object.keys(v).length) {
        const inner = toYaml(v, indent + 2).replace(/^\s+/, "");
        return `${pad}- ${inner}`;
      }
      return `${pad}- ${toYaml(v, 0)}`;
    }).join("\n");
  }
  if (value !== null && typeof value === "object") {
    const keys = Object.keys(value);
    if (!keys.length) return "{}";
    return keys.map((k) => {
      const v = value[k];
      const key = yamlScalar(k);
      if (v !== null && typeof v === "object" && (Array.isArray(v) ? v.length : Object.keys(v).length)) {
        return `${pad}${key}:\n${toYaml(v, indent + 2)}`;
      }
      return `${pad}${key}: ${toYaml(v, 0)}`;
    }).join("\n");
  }
  return yamlScalar(value);
}

/** Show a short message in the corner for a few seconds. */
export function toast(message, kind = "info") {
  const box = document.getElementById("toasts");
  const el = h("div.toast", { class: kind === "error" ? "error" : null }, message);
  box.append(el);
  setTimeout(() => el.remove(), kind === "error" ? 8000 : 4000);
}

/**
 * Ask the user to confirm, with the page's dialog.
 * @param {string} message
 * @param {string} okLabel  the confirming button's text
 * @returns {Promise<boolean>}
 */
export function confirmAction(message, okLabel = "OK") {
  const dialog = document.getElementById("confirm-dialog");
  document.getElementById("confirm-message").textContent = message;
  document.getElementById("confirm-yes").textContent = okLabel;
  return new Promise((resolve) => {
    dialog.addEventListener("close", () => resolve(dialog.returnValue === "ok"), { once: true });
    dialog.returnValue = "cancel";
    dialog.showModal();
  });
}

/** Distinct colours for n series (golden-angle hues). */
export function palette(n) {
  const out = [];
  for (let i = 0; i < n; i++) out.push(`hsl(${(i * 137.508) % 360}, 65%, 45%)`);
  return out;
}

/** A function that calls `fn` at most once per `ms` milliseconds (the last call wins). */
export function throttle(fn, ms) {
  let timer = null;
  let last = 0;
  return (...args) => {
    const wait = Math.max(0, last + ms - Date.now());
    clearTimeout(timer);
    timer = setTimeout(() => { last = Date.now(); fn(...args); }, wait);
  };
}
