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

/**
 * 20 colours that stay apart from each other and readable on white (each has a contrast
 * of at least 3:1 with white), in an order where neighbours differ in hue and lightness.
 */
const CATEGORICAL = [
  "#1f5fbf", "#d1442c", "#15803d", "#8e44ad", "#b45309", "#0e7490", "#be185d", "#4d5d13",
  "#5b4bd6", "#9a3412", "#047857", "#a21caf", "#1e3a8a", "#b91c1c", "#3f6212", "#6d28d9",
  "#0f766e", "#c2410c", "#334155", "#86198f",
];

/**
 * Colours for n series: the 20 categorical colours, then (past 20) the same hues at a
 * second and third lightness, so that neighbours in a legend stay distinguishable. With
 * more than about 20 series no palette keeps every line apart: the experiment page colours
 * them by rank instead (rankColor) and highlights one on click.
 */
export function palette(n) {
  const out = [];
  for (let i = 0; i < n; i++) {
    const base = CATEGORICAL[i % CATEGORICAL.length];
    const round = Math.floor(i / CATEGORICAL.length) % 3;
    out.push(round === 0 ? base : mix(base, round === 1 ? "#000000" : "#ffffff", 0.35));
  }
  return out;
}

function mix(a, b, t) {
  const pa = [1, 3, 5].map((i) => parseInt(a.slice(i, i + 2), 16));
  const pb = [1, 3, 5].map((i) => parseInt(b.slice(i, i + 2), 16));
  return `rgb(${pa.map((v, k) => Math.round(v + (pb[k] - v) * t)).join(", ")})`;
}

/** Anchors of the rank ramp: worst (light, greyish blue) to best (strong red). */
const RANK_RAMP = [[0, "#c9d3e0"], [0.45, "#6f8fc4"], [0.75, "#6d3fb0"], [1, "#d1243f"]];

/**
 * A colour for a rank in [0, 1] (1: the best trial): faint for the worst, strong for the
 * best, so that with hundreds of curves the good ones stand out and are drawn last.
 */
export function rankColor(t) {
  const v = Math.max(0, Math.min(1, Number.isFinite(t) ? t : 0));
  for (let k = 1; k < RANK_RAMP.length; k++) {
    const [t1, c1] = RANK_RAMP[k];
    if (v <= t1) {
      const [t0, c0] = RANK_RAMP[k - 1];
      return mix(c0, c1, (v - t0) / (t1 - t0));
    }
  }
  return RANK_RAMP[RANK_RAMP.length - 1][1];
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
