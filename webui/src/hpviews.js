// Hyperparameter views of a search: parallel coordinates (brushable) and a heat map of
// two hyperparameters. Both take "dimensions": [{key, label, values: (number|string)[],
// log: boolean}] aligned with a list of trial ids.

import { fmtNum, h, rankColor, setChildren } from "./util.js";

const SVG = "http://www.w3.org/2000/svg";

function svg(tag, attrs, ...children) {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) if (v != null) el.setAttribute(k, String(v));
  for (const c of children) if (c != null) el.append(c);
  return el;
}

/**
 * A scale from a dimension's values to [0, 1] (1 at the top): numeric (log-10 when
 * `log` and every value is > 0) or categorical (evenly spaced, in first-seen order).
 * @returns {{pos: function(*): (number|null), ticks: Array<[number, string]>, numeric: boolean,
 *   value: function(number): *}}
 */
export function scaleOf(dim) {
  const vals = dim.values.filter((v) => v != null);
  const numeric = vals.length > 0 && vals.every((v) => typeof v === "number");
  if (!numeric) {
    const cats = [...new Set(vals.map(String))];
    const n = Math.max(1, cats.length - 1);
    const pos = (v) => (v == null ? null : cats.length === 1 ? 0.5 : cats.indexOf(String(v)) / n);
    return { numeric, pos, ticks: cats.map((c) => [pos(c), c]), cats };
  }
  const log = dim.log && vals.every((v) => v > 0);
  const f = log ? Math.log10 : (v) => v;
  let lo = Math.min(...vals.map(f));
  let hi = Math.max(...vals.map(f));
  if (lo === hi) { lo -= 1; hi += 1; }
  const pos = (v) => (v == null || (log && v <= 0) ? null : (f(v) - lo) / (hi - lo));
  const ticks = [0, 0.25, 0.5, 0.75, 1].map((t) => {
    const raw = lo + t * (hi - lo);
    return [t, fmtNum(log ? Math.pow(10, raw) : raw)];
  });
  return { numeric, pos, ticks, log };
}

/**
 * Parallel coordinates: one vertical axis per dimension, one line per trial. Drag along
 * an axis to brush a range (several axes: lines must pass all); click an axis without
 * dragging to clear its brush. `onBrush(ids|null)` gets the trial ids inside every brush
 * (null: no brush). The container carries data-lines and data-brushed (counts).
 *
 * The lines are drawn on a canvas under the SVG of the axes and brushes, coloured and
 * made opaque by rank (the best trial strong and on top, the worst faint), so that a
 * thousand lines show where the good trials are rather than a solid block; a brush
 * repaints the canvas once per frame while it is dragged.
 */
export class ParallelCoords {
  constructor(el, { onBrush } = {}) {
    this.el = el;
    this.onBrush = onBrush || (() => {});
    this.brushes = new Map(); // dim key -> [lo, hi] in [0, 1]
    this.frame = 0;
  }

  /**
   * @param {number[]} ids  trial ids
   * @param {Array<{key, label, values, log}>} dims  the last one is the metric (ranks lines)
   * @param {{smallerIsBetter: boolean}} opts
   */
  draw(ids, dims, { smallerIsBetter = true } = {}) {
    this.ids = ids;
    this.dims = dims;
    for (const k of [...this.brushes.keys()]) if (!dims.some((d) => d.key === k)) this.brushes.delete(k);
    const width = Math.max(340, this.el.clientWidth || 800);
    const height = 300;
    const top = 24, bottom = 34, left = 40, right = 50;
    const step = dims.length > 1 ? (width - left - right) / (dims.length - 1) : 0;
    const scales = dims.map(scaleOf);
    const y = (t) => top + (1 - t) * (height - top - bottom);
    const metric = dims[dims.length - 1].values;
    // Rank 1 for the best trial, 0 for the worst; trials without a metric value: null.
    const order = ids.map((_, i) => i).filter((i) => metric[i] != null)
      .sort((a, b) => (smallerIsBetter ? metric[b] - metric[a] : metric[a] - metric[b]));
    const rank = new Array(ids.length).fill(null);
    order.forEach((i, k) => { rank[i] = order.length > 1 ? k / (order.length - 1) : 1; });
    this.rank = rank;
    this.paintOrder = [...ids.map((_, i) => i).filter((i) => rank[i] == null), ...order];
    this.points = ids.map((id, i) => {
      const pts = [];
      dims.forEach((d, k) => {
        const t = scales[k].pos(d.values[i]);
        if (t != null) pts.push(left + k * step, y(t));
      });
      return pts;
    });
    const ratio = window.devicePixelRatio || 1;
    const canvas = h("canvas", { class: "pcoords-lines", width: Math.round(width * ratio), height: Math.round(height * ratio) });
    canvas.style.width = `${width}px`;
    canvas.style.height = `${height}px`;
    this.canvas = canvas;
    this.ratio = ratio;
    const root = svg("svg", { width, height, viewBox: `0 0 ${width} ${height}`, class: "pcoords" });
    this.axisEls = dims.map((d, k) => {
      const x = left + k * step;
      const g = svg("g", { class: "axis", "data-dim": d.key });
      g.append(svg("line", { x1: x, x2: x, y1: y(1), y2: y(0) }));
      for (const [t, label] of scales[k].ticks) {
        g.append(svg("text", { x: x + 5, y: y(t) + 4, class: "tick" }, label.length > 12 ? label.slice(0, 11) + "…" : label));
      }
      const name = svg("text", { x, y: height - 10, class: "name", "text-anchor": "middle" }, d.label);
      g.append(name);
      const brush = svg("rect", { x: x - 8, width: 16, class: "brush", visibility: "hidden" });
      g.append(brush);
      const hit = svg("rect", { x: x - 14, y: y(1), width: 28, height: y(0) - y(1), class: "hit" });
      g.append(hit);
      this._brushable(hit, brush, d.key, y);
      return { g, brush };
    });
    for (const d of dims) if (this.brushes.has(d.key)) this._showBrush(d.key, y);
    root.append(...this.axisEls.map((a) => a.g));
    setChildren(this.el, h("div.pcoords-stack", { style: { width: `${width}px`, height: `${height}px` } }, canvas, root));
    this.y = y;
    this.el.dataset.lines = String(ids.length);
    this.el.dataset.rendered = "1";
    this._apply(false);
  }

  /** Paint every line: worst first and faint, best last and strong; outside a brush grey. */
  _paint() {
    const ctx = this.canvas.getContext("2d");
    const r = this.ratio;
    ctx.setTransform(r, 0, 0, r, 0, 0);
    ctx.clearRect(0, 0, this.canvas.width / r, this.canvas.height / r);
    ctx.lineWidth = 1.2;
    ctx.lineJoin = "round";
    const keep = this.kept;
    const line = (i) => {
      const pts = this.points[i];
      if (pts.length < 4) return;
      ctx.beginPath();
      ctx.moveTo(pts[0], pts[1]);
      for (let k = 2; k < pts.length; k += 2) ctx.lineTo(pts[k], pts[k + 1]);
      ctx.stroke();
    };
    if (keep) { // the lines outside the brushes, faint and grey, under the others
      ctx.strokeStyle = "#d0d5dd";
      ctx.globalAlpha = 0.25;
      for (const i of this.paintOrder) if (!keep.has(this.ids[i])) line(i);
    }
    for (const i of this.paintOrder) {
      if (keep && !keep.has(this.ids[i])) continue;
      const rk = this.rank[i];
      ctx.strokeStyle = rk == null ? "#b0b7c3" : rankColor(rk);
      // Opacity by rank: with many lines the worst fade into the background.
      ctx.globalAlpha = rk == null ? 0.3 : this.ids.length > 50 ? 0.06 + 0.84 * rk * rk : 0.35 + 0.6 * rk;
      line(i);
    }
    ctx.globalAlpha = 1;
  }

  _brushable(hit, brush, key, y) {
    hit.addEventListener("pointerdown", (ev) => {
      ev.preventDefault();
      const box = hit.ownerSVGElement.getBoundingClientRect();
      const toT = (clientY) => Math.max(0, Math.min(1, 1 - (clientY - box.top - y(1)) / (y(0) - y(1))));
      const start = toT(ev.clientY);
      let moved = false;
      const move = (e) => {
        const now = toT(e.clientY);
        if (Math.abs(now - start) > 0.01) moved = true;
        if (!moved) return;
        this.brushes.set(key, [Math.min(start, now), Math.max(start, now)]);
        this._showBrush(key, y);
        this._apply(false);
      };
      const up = () => {
        window.removeEventListener("pointermove", move);
        window.removeEventListener("pointerup", up);
        if (!moved) { this.brushes.delete(key); this._showBrush(key, y); }
        this._apply(true);
      };
      window.addEventListener("pointermove", move);
      window.addEventListener("pointerup", up);
    });
  }

  _showBrush(key, y) {
    const k = this.dims.findIndex((d) => d.key === key);
    if (k < 0) return;
    const { brush } = this.axisEls[k];
    const b = this.brushes.get(key);
    if (!b) { brush.setAttribute("visibility", "hidden"); return; }
    brush.setAttribute("visibility", "visible");
    brush.setAttribute("y", String(y(b[1])));
    brush.setAttribute("height", String(Math.max(2, y(b[0]) - y(b[1]))));
  }

  /** Trial ids inside every brush, or null when nothing is brushed. */
  selected() {
    if (!this.brushes.size) return null;
    const scales = this.dims.map(scaleOf);
    return this.ids.filter((id, i) => this.dims.every((d, k) => {
      const b = this.brushes.get(d.key);
      if (!b) return true;
      const t = scales[k].pos(d.values[i]);
      return t != null && t >= b[0] - 1e-9 && t <= b[1] + 1e-9;
    }));
  }

  clear() {
    this.brushes.clear();
    for (const d of this.dims || []) this._showBrush(d.key, this.y);
    this._apply(true);
  }

  _apply(notify) {
    const sel = this.selected();
    this.kept = sel ? new Set(sel) : null;
    this.el.dataset.brushed = sel ? String(sel.length) : "";
    if (!this.frame) {
      this.frame = requestAnimationFrame(() => { this.frame = 0; this._paint(); });
    }
    if (notify) this.onBrush(sel);
  }
}

function bins(scale, dim, n) {
  if (!scale.numeric) return { count: scale.cats.length, of: (v) => scale.cats.indexOf(String(v)), labels: scale.cats };
  const distinct = [...new Set(dim.values.filter((v) => v != null))].sort((a, b) => a - b);
  if (distinct.length <= n) {
    return { count: distinct.length, of: (v) => distinct.indexOf(v), labels: distinct.map(fmtNum) };
  }
  const labels = [];
  for (let i = 0; i < n; i++) {
    const lo = scale.log ? 10 ** (Math.log10(distinct[0]) + (i / n) * (Math.log10(distinct.at(-1)) - Math.log10(distinct[0])))
      : distinct[0] + (i / n) * (distinct.at(-1) - distinct[0]);
    labels.push(`≥${fmtNum(lo)}`);
  }
  return { count: n, of: (v) => (v == null ? -1 : Math.min(n - 1, Math.floor(scale.pos(v) * n))), labels };
}

/**
 * A heat map of the best metric over two hyperparameters: numeric ones are cut into at
 * most 8 bins (log-spaced for log hyperparameters), categorical ones keep their values.
 * Each cell shows the best value of the trials in it and how many there are.
 */
export class HeatMap {
  constructor(el) { this.el = el; }

  draw(xDim, yDim, metric, { smallerIsBetter = true } = {}) {
    const xs = scaleOf(xDim), ys = scaleOf(yDim);
    const bx = bins(xs, xDim, 8), by = bins(ys, yDim, 8);
    const cells = new Map();
    metric.forEach((m, i) => {
      if (m == null) return;
      const cx = bx.of(xDim.values[i]), cy = by.of(yDim.values[i]);
      if (cx < 0 || cy < 0) return;
      const key = `${cx},${cy}`;
      const c = cells.get(key) || { best: m, n: 0 };
      c.n++;
      c.best = smallerIsBetter ? Math.min(c.best, m) : Math.max(c.best, m);
      cells.set(key, c);
    });
    const bests = [...cells.values()].map((c) => c.best);
    const lo = Math.min(...bests), hi = Math.max(...bests);
    const grid = h("div.heatmap", { style: { gridTemplateColumns: `auto repeat(${bx.count}, minmax(34px, 1fr))` } });
    for (let r = by.count - 1; r >= 0; r--) {
      grid.append(h("div.hm-label", null, by.labels[r]));
      for (let c = 0; c < bx.count; c++) {
        const cell = cells.get(`${c},${r}`);
        if (!cell) { grid.append(h("div.hm-cell.empty")); continue; }
        const t = hi === lo ? 1 : (cell.best - lo) / (hi - lo);
        const good = smallerIsBetter ? 1 - t : t;
        grid.append(h("div.hm-cell", {
          style: { background: `hsl(${Math.round(10 + good * 200)}, 70%, ${88 - good * 40}%)` },
          title: `${xDim.label} ${bx.labels[c]}, ${yDim.label} ${by.labels[r]}: best ${fmtNum(cell.best)} of ${cell.n} trial(s)`,
          dataset: { best: cell.best, n: cell.n },
        }, fmtNum(cell.best)));
      }
    }
    grid.append(h("div"));
    for (let c = 0; c < bx.count; c++) grid.append(h("div.hm-label.x", null, bx.labels[c]));
    setChildren(this.el, h("div.small.muted", null, `rows: ${yDim.label}, columns: ${xDim.label}; cells: best metric`), grid);
    this.el.dataset.cells = String(cells.size);
    this.el.dataset.rendered = "1";
  }
}
