// A page's view state (filters, sort, page, chosen metric...) kept in the URL's query
// string, so that a view can be bookmarked, shared and restored with Back.

/**
 * Read the view state from the URL: each key of `defaults` from the query string,
 * converted to the default's type (number, boolean as "1"/"0", string).
 * @param {object} defaults  key -> default value
 * @returns {object}
 */
export function readState(defaults) {
  const q = new URLSearchParams(window.location.search);
  const out = {};
  for (const [k, d] of Object.entries(defaults)) {
    const raw = q.get(k);
    if (raw == null) out[k] = d;
    else if (typeof d === "number") out[k] = Number.isFinite(Number(raw)) ? Number(raw) : d;
    else if (typeof d === "boolean") out[k] = raw === "1";
    else out[k] = raw;
  }
  return out;
}

/**
 * Write the view state to the URL (replacing the history entry): values equal to their
 * default are left out.
 */
export function writeState(state, defaults) {
  const q = new URLSearchParams(window.location.search);
  for (const [k, d] of Object.entries(defaults)) {
    const v = state[k];
    if (v === d || v == null || v === "") q.delete(k);
    else q.set(k, typeof v === "boolean" ? (v ? "1" : "0") : String(v));
  }
  const s = q.toString();
  const url = window.location.pathname + (s ? `?${s}` : "");
  if (url !== window.location.pathname + window.location.search) window.history.replaceState(null, "", url);
}

/**
 * A filter typed by the user: for a numeric column "> 0.5", "<= 3", "0.1..0.3" or a
 * number (equal); for text, a substring (case-insensitive).
 * @returns {function(*): boolean}  true for values that pass
 */
export function parseFilter(text) {
  const t = (text || "").trim();
  if (!t) return () => true;
  let m = t.match(/^(<=|>=|<|>|=)\s*(-?[\d.eE+-]+)$/);
  if (m && Number.isFinite(Number(m[2]))) {
    const n = Number(m[2]);
    const op = { "<": (v) => v < n, "<=": (v) => v <= n, ">": (v) => v > n, ">=": (v) => v >= n, "=": (v) => v === n }[m[1]];
    return (v) => typeof v === "number" && op(v);
  }
  m = t.match(/^(-?[\d.eE+-]+)\s*\.\.\s*(-?[\d.eE+-]+)$/);
  if (m && Number.isFinite(Number(m[1])) && Number.isFinite(Number(m[2]))) {
    const lo = Number(m[1]), hi = Number(m[2]);
    return (v) => typeof v === "number" && v >= lo && v <= hi;
  }
  if (Number.isFinite(Number(t))) {
    const n = Number(t);
    return (v) => v === n || String(v) === t;
  }
  const low = t.toLowerCase();
  return (v) => v != null && String(typeof v === "object" ? JSON.stringify(v) : v).toLowerCase().includes(low);
}

/** Compare two values for sorting: nulls last, numbers numerically, else as text. */
export function compareValues(a, b) {
  if (a == null && b == null) return 0;
  if (a == null) return 1;
  if (b == null) return -1;
  if (typeof a === "number" && typeof b === "number") return a - b;
  return String(a).localeCompare(String(b), undefined, { numeric: true });
}
