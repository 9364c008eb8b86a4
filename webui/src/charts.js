// Charts on uPlot (https://github.com/leeoniya/uPlot, MIT, installed from npm).
//
// Learning curves of many trials use uPlot's mode 2 ("faceted" data: every series has
// its own x and y arrays), so trials that report at different batch counts never need
// to be joined onto one x axis. Each chart's container carries data-series (how many
// series it draws) and data-points (how many points) for tests and for people.

import uPlot from "./vendor/uPlot.esm.js";
import { fmtNum, h, palette, setChildren } from "./util.js";


function widthOf(el) {
  return Math.max(260, Math.floor(el.getBoundingClientRect().width || el.parentElement?.clientWidth || 640));
}

const axis = (label) => ({
  label,
  labelSize: 18,
  size: 56,
  stroke: "#475467",
  grid: { stroke: "#eef0f4", width: 1 },
  ticks: { stroke: "#e4e7ec", width: 1 },
  values: (u, vals) => vals.map((v) => (v == null ? "" : fmtNum(v))),
});

/** [lo, hi] widened by 8% of the span (a factor on a log scale) so edge points show. */
function padRange(lo, hi, log) {
  if (lo == null || hi == null) return [0, 1];
  if (log && lo > 0) {
    const f = lo === hi ? 2 : Math.pow(hi / lo, 0.08);
    return [lo / f, hi * f];
  }
  const pad = lo === hi ? Math.abs(lo) * 0.1 || 1 : (hi - lo) * 0.08;
  return [lo - pad, hi + pad];
}

function legend(items) {
  return h("div.chart-legend", null, items.map(([label, color, idx]) =>
    h("span", { dataset: idx ? { idx } : null, title: idx ? "click to highlight" : null },
      h("i", { style: { background: color } }), label)));
}

/**
 * A chart drawn into a container; resizes with it and can be redrawn with new data.
 */
class Chart {
  /**
   * @param {HTMLElement} el  the container
   * @param {{height?: number}} opts  the plot's height in CSS pixels (default 300)
   */
  constructor(el, { height = 300 } = {}) {
    this.el = el;
    this.height = height;
    this.plot = null;
    this.observer = new ResizeObserver(() => {
      if (this.plot) this.plot.setSize({ width: widthOf(this.el), height: this.height });
    });
    this.observer.observe(el);
  }

  _mount(opts, data, seriesCount, pointCount, legendItems) {
    this.plot?.destroy();
    this.plot = null;
    this.el.dataset.series = String(seriesCount);
    this.el.dataset.points = String(pointCount);
    const plotBox = h("div.plot");
    const legendBox = legendItems.length <= 40 ? legend(legendItems)
      : h("div.muted.small", null, `${legendItems.length} series`);
    setChildren(this.el, plotBox, legendItems.length > 1 ? legendBox : null);
    this.plot = new uPlot({ ...opts, width: widthOf(this.el), height: this.height }, data, plotBox);
    this.el.dataset.rendered = "1";
  }

  _empty(text) {
    this.plot?.destroy();
    this.plot = null;
    this.el.dataset.series = "0";
    this.el.dataset.points = "0";
    this.el.dataset.rendered = "1";
    setChildren(this.el, h("div.empty", null, text));
  }

  /** Stop following the container and free the canvas. */
  destroy() {
    this.observer.disconnect();
    this.plot?.destroy();
    this.plot = null;
  }
}

/** The y values of a series are all > 0 (a log scale can draw them). */
const allPositive = (series) => series.every((s) => s.y.every((v) => v == null || v > 0));

/**
 * Exponential moving average of `y` with weight `w` in [0, 1) on the previous value,
 * debiased at the start (as TensorBoard's smoothing slider does: the running value
 * starts at 0 and is divided by 1 - w^n after n points, so the first points are not
 * pulled towards 0). Nulls and non-finite values are kept as they are and skipped.
 * @param {ArrayLike<number|null>} y
 * @param {number} w  0: no smoothing
 * @returns {Array<number|null>}
 */
export function smooth(y, w) {
  if (!(w > 0)) return Array.from(y);
  const out = new Array(y.length);
  let last = 0;
  let n = 0;
  for (let i = 0; i < y.length; i++) {
    const v = y[i];
    if (v == null || !Number.isFinite(v)) { out[i] = v; continue; }
    last = last * w + (1 - w) * v;
    n++;
    out[i] = last / (1 - Math.pow(w, n));
  }
  return out;
}

/** Milliseconds of drawing per slice (one a frame): the page stays responsive meanwhile. */
const SLICE_MS = 8;

/**
 * Lines of several series, each with its own x values, drawn in slices of at most
 * SLICE_MS so that a thousand curves never hold the page for long (the Long Tasks API
 * reports any task over 50 ms; the test allows none over 100 ms).
 *
 * uPlot draws the axes, the grid and the cursor, with its scales fitted to an invisible
 * series spanning the data's extent; the series themselves are drawn here on uPlot's
 * canvas, a slice per task, after each uPlot draw (a resize or a zoom starts again).
 *
 * Call `draw({series: [{label, id, x: number[], y: number[], color?}], xLabel, yLabel,
 * log, time, smoothing})`: `time` x values are seconds since the epoch (a date axis);
 * `smoothing` in [0, 1) smooths y with an exponential moving average (hover shows the
 * raw value too); a series of one point is drawn as a marker. Hovering shows the nearest
 * point's series label, x and value (also left in the container's data-hover for tests);
 * clicking a point or a legend entry highlights that series (the others fade) and calls
 * `onSelect(id or null)`; clicking it again clears. `log: true` draws y on a log-10 scale
 * when every value is > 0 (data-log says which scale was used). The container's
 * data-rendered is "1" once every series is drawn.
 */
export class MultiLineChart extends Chart {
  constructor(el, opts = {}) {
    super(el, opts);
    this.onSelect = opts.onSelect || null;
    this.highlighted = null;
    this.job = 0;
  }

  draw({ series, xLabel = "batches", yLabel = "", emptyText = "No data yet.", log = false, time = false, smoothing = 0 }) {
    const drawn = series.filter((s) => s.x.length);
    this.job++;
    if (!drawn.length) return this._empty(emptyText);
    const colors = palette(drawn.length);
    drawn.forEach((s, i) => { s.color = s.color || colors[i]; });
    for (const s of drawn) s.ys = smoothing > 0 ? smooth(s.y, smoothing) : s.y;
    const points = drawn.reduce((n, s) => n + s.x.length, 0);
    const useLog = log && allPositive(drawn);
    let x0 = Infinity, x1 = -Infinity, y0 = Infinity, y1 = -Infinity;
    for (const s of drawn) {
      for (let j = 0; j < s.x.length; j++) {
        const x = s.x[j], y = s.ys[j];
        if (x == null || y == null || !Number.isFinite(y) || (useLog && y <= 0)) continue;
        if (x < x0) x0 = x;
        if (x > x1) x1 = x;
        if (y < y0) y0 = y;
        if (y > y1) y1 = y;
      }
    }
    if (x0 > x1) return this._empty(emptyText);
    const xAxis = axis(xLabel);
    if (time) delete xAxis.values; // uPlot's own date and time labels
    // Explicit ranges: uPlot's automatic range for a scale whose values are all equal
    // (every trial validated at the same single batch count) has zero width, and its tick
    // generator then loops until the tab runs out of memory (RangeError: Invalid array
    // length). padRange widens such a range; a spread range keeps uPlot's own.
    const opts = {
      scales: {
        x: { time, range: (u, lo, hi) => (lo === hi ? padRange(lo, hi, false) : [lo, hi]) },
        y: useLog
          ? { distr: 3, log: 10, range: (u, lo, hi) => padRange(lo, hi, true) }
          : { range: (u, lo, hi) => (lo === hi ? padRange(lo, hi, false) : uPlot.rangeNum(lo, hi, 0.1, true)) },
      },
      axes: [xAxis, axis(yLabel)],
      legend: { show: false },
      cursor: { drag: { x: true, y: false }, points: { show: false } },
      // The extent only: the series are drawn by _render, after uPlot's own drawing.
      series: [{}, { stroke: "transparent", paths: () => null, points: { show: false } }],
      hooks: { draw: [(u) => this._render(u)] },
    };
    this.series = drawn;
    this.smoothing = smoothing;
    this.time = time;
    this.xName = xLabel;
    this.el.dataset.log = useLog ? "1" : "0";
    this.el.dataset.smoothing = String(smoothing);
    this.el.dataset.xAxis = xLabel;
    const legendItems = drawn.map((s, i) => [s.label, s.color, i + 1]);
    this._mount(opts, [[x0, x1], [y0, y1]], drawn.length, points, legendItems);
    this._hover();
    if (this.highlighted != null) {
      const i = drawn.findIndex((s) => (s.id ?? s.label) === this.highlighted);
      if (i < 0) this.highlighted = null;
    }
  }

  _mount(opts, data, seriesCount, pointCount, legendItems) {
    this.done = false;
    super._mount(opts, data, seriesCount, pointCount, legendItems);
    // uPlot drew in its constructor: every series may be drawn already.
    this.el.dataset.rendered = this.done ? "1" : "0";
  }

  destroy() {
    this.job++;
    super.destroy();
  }

  /** Draw every series onto uPlot's canvas, SLICE_MS at a time (a new draw cancels it). */
  _render(u) {
    const job = ++this.job;
    this.done = false;
    this.el.dataset.rendered = "0";
    const series = this.series;
    const ctx = u.ctx;
    const { left, top, width, height } = u.bbox;
    const ratio = devicePixelRatio || 1;
    this.px = new Array(series.length);
    let i = 0;
    const step = () => {
      if (job !== this.job) return; // redrawn or destroyed since
      const until = performance.now() + SLICE_MS;
      ctx.save();
      ctx.beginPath();
      ctx.rect(left, top, width, height);
      ctx.clip();
      ctx.lineJoin = "round";
      while (i < series.length && performance.now() < until) {
        this.px[i] = this._stroke(u, ctx, series[i], 1.5 * ratio, ratio);
        i++;
      }
      ctx.restore();
      // The next slice in the next frame: the canvas is rasterised when a frame is made,
      // so each frame rasterises one slice's lines, not all of them at once.
      if (i < series.length) { requestAnimationFrame(step); return; }
      this.done = true;
      this.el.dataset.rendered = "1";
      this.drawnOn = u;
      this._overlay(u);
    };
    step();
  }

  /**
   * Stroke one series (a marker when it has one point) and return its points' positions
   * in CSS pixels of the plotting area, for hovering: [Float32Array x, Float32Array y].
   */
  _stroke(u, ctx, s, lineWidth, ratio, color = s.color) {
    const n = s.x.length;
    const xs = new Float32Array(n), ys = new Float32Array(n);
    ctx.strokeStyle = color;
    ctx.fillStyle = color;
    ctx.lineWidth = lineWidth;
    ctx.beginPath();
    let pen = false, shown = 0, lastX = 0, lastY = 0;
    for (let j = 0; j < n; j++) {
      const v = s.ys[j];
      if (v == null || !Number.isFinite(v)) { pen = false; xs[j] = ys[j] = NaN; continue; }
      const cx = u.valToPos(s.x[j], "x", true), cy = u.valToPos(v, "y", true);
      xs[j] = cx / ratio - u.bbox.left / ratio;
      ys[j] = cy / ratio - u.bbox.top / ratio;
      if (pen) ctx.lineTo(cx, cy); else ctx.moveTo(cx, cy);
      pen = true;
      shown++;
      lastX = cx;
      lastY = cy;
    }
    if (shown > 1) ctx.stroke();
    else if (shown === 1) {
      // One point: a marker, ringed in white so that it shows over other lines too.
      ctx.beginPath();
      ctx.arc(lastX, lastY, 4 * ratio, 0, 2 * Math.PI);
      ctx.fill();
      ctx.lineWidth = 1.5 * ratio;
      ctx.strokeStyle = "#fff";
      ctx.stroke();
    }
    return [xs, ys];
  }

  /** The highlight: other series faded under a veil, the chosen one drawn over it. */
  _overlay(u = this.drawnOn) {
    if (!u) return;
    let canvas = u.over.querySelector("canvas.highlight");
    const i = this.highlighted == null ? -1 : this.series.findIndex((s) => (s.id ?? s.label) === this.highlighted);
    if (i < 0) {
      if (canvas) canvas.hidden = true;
      this.el.dataset.highlight = "";
      this._legendOn(null);
      return;
    }
    const ratio = devicePixelRatio || 1;
    const { width, height } = u.bbox;
    if (!canvas) {
      canvas = document.createElement("canvas");
      canvas.className = "highlight";
      u.over.prepend(canvas);
    }
    canvas.width = width;
    canvas.height = height;
    canvas.style.width = `${width / ratio}px`;
    canvas.style.height = `${height / ratio}px`;
    canvas.hidden = false;
    const ctx = canvas.getContext("2d");
    ctx.clearRect(0, 0, width, height);
    ctx.fillStyle = "rgba(255, 255, 255, 0.78)";
    ctx.fillRect(0, 0, width, height);
    ctx.translate(-u.bbox.left, -u.bbox.top);
    ctx.lineJoin = "round";
    // Dark ink under the series' own colour: it stands out whatever that colour is (a
    // faint one, for a trial of low rank).
    this._stroke(u, ctx, this.series[i], 4 * ratio, ratio, "#14192b");
    this._stroke(u, ctx, this.series[i], 2 * ratio, ratio);
    ctx.setTransform(1, 0, 0, 1, 0, 0);
    this.el.dataset.highlight = this.series[i].label;
    this._legendOn(i + 1);
  }

  _legendOn(idx) {
    for (const item of this.el.querySelectorAll(".chart-legend [data-idx]")) {
      item.classList.toggle("on", Number(item.dataset.idx) === idx);
    }
  }

  /** Highlight the series with this id (or label); null clears. */
  highlight(id) {
    this.highlighted = id;
    if (this.done) this._overlay();
  }

  _select(idx) {
    const s = idx == null ? null : this.series[idx - 1];
    const id = s ? (s.id ?? s.label) : null;
    const next = id === this.highlighted ? null : id;
    this.highlight(next);
    if (this.onSelect) this.onSelect(next);
  }

  _nearest(px, py) {
    let best = null;
    let bestD = 144; // within 12 CSS pixels
    const all = this.px || [];
    for (let i = 0; i < all.length; i++) {
      if (!all[i]) continue;
      const [xs, ys] = all[i];
      for (let j = 0; j < xs.length; j++) {
        const dx = xs[j] - px;
        if (dx > 12 || dx < -12) continue;
        const dy = ys[j] - py;
        const d = dx * dx + dy * dy;
        if (d < bestD) { bestD = d; best = [i + 1, j]; }
      }
    }
    return best;
  }

  _xText(v) {
    if (!this.time) return `${this.xName} ${fmtNum(v)}`;
    const d = new Date(v * 1000);
    return d.toLocaleString("en-GB", { hour12: false });
  }

  _hover() {
    const u = this.plot;
    const tip = h("div.chart-tip", { hidden: true });
    u.over.append(tip);
    let frame = 0;
    u.over.addEventListener("mousemove", (ev) => {
      if (frame) return;
      frame = requestAnimationFrame(() => {
        frame = 0;
        const rect = u.over.getBoundingClientRect();
        const hit = this._nearest(ev.clientX - rect.left, ev.clientY - rect.top);
        if (!hit) { tip.hidden = true; this.el.dataset.hover = ""; return; }
        const [idx, j] = hit;
        const s = this.series[idx - 1];
        const raw = this.smoothing > 0 ? ` (raw ${fmtNum(s.y[j])})` : "";
        const text = `${s.label} · ${this._xText(s.x[j])} · ${fmtNum(s.ys[j])}${raw}`;
        tip.textContent = text;
        tip.hidden = false;
        const [xs, ys] = this.px[idx - 1];
        tip.style.left = `${Math.min(xs[j] + 10, rect.width - 180)}px`;
        tip.style.top = `${Math.max(0, ys[j] - 28)}px`;
        this.el.dataset.hover = text;
        this.hoverIdx = idx;
      });
    });
    u.over.addEventListener("mouseleave", () => { tip.hidden = true; this.hoverIdx = null; });
    u.over.addEventListener("click", (ev) => {
      const rect = u.over.getBoundingClientRect();
      const hit = this._nearest(ev.clientX - rect.left, ev.clientY - rect.top);
      if (hit) this._select(hit[0]);
    });
    for (const item of this.el.querySelectorAll(".chart-legend [data-idx]")) {
      item.addEventListener("click", () => this._select(Number(item.dataset.idx)));
    }
  }
}

/**
 * Points (x, y) in one series (uPlot mode 2), e.g. a hyperparameter against a metric.
 * Call `draw({x: number[], y: number[], xLabel, yLabel, log})`.
 */
export class ScatterChart extends Chart {
  draw({ x, y, xLabel, yLabel, log = false, emptyText = "No trial has a value yet." }) {
    if (!x.length) return this._empty(emptyText);
    const opts = {
      mode: 2,
      scales: { x: { time: false, distr: log ? 3 : 1, range: (u, lo, hi) => padRange(lo, hi, log) }, y: {
        range: (u, lo, hi) => padRange(lo, hi, false),
      } },
      axes: [axis(xLabel), axis(yLabel)],
      legend: { show: false },
      cursor: { drag: { x: false, y: false } },
      series: [
        {},
        {
          label: yLabel,
          stroke: "#2f5bea",
          fill: "rgba(47, 91, 234, 0.35)",
          paths: uPlot.paths.points(),
          points: { show: true, size: 12, width: 1.5 },
          facets: [{ scale: "x", auto: true }, { scale: "y", auto: true }],
        },
      ],
    };
    this._mount(opts, [null, [x, y]], 1, x.length, []);
  }
}

/**
 * A multi-objective search's trials on its first two objectives, the Pareto front
 * highlighted (issue 35). Call `draw({points: [{trial_id, values}], front: [trial ids],
 * xLabel, yLabel})`: every trial is a blue point, the trials on the front are red points
 * joined in x order. data-front holds the front's size for tests and people.
 */
export class ParetoChart extends Chart {
  draw({ points, front, xLabel, yLabel }) {
    if (!points.length) return this._empty("No trial has validated every objective yet.");
    const on = new Set(front);
    const all = [points.map((p) => p.values[0]), points.map((p) => p.values[1])];
    const best = points.filter((p) => on.has(p.trial_id)).sort((a, b) => a.values[0] - b.values[0]);
    const edge = [best.map((p) => p.values[0]), best.map((p) => p.values[1])];
    const opts = {
      mode: 2,
      scales: {
        x: { time: false, range: (u, lo, hi) => padRange(lo, hi, false) },
        y: { range: (u, lo, hi) => padRange(lo, hi, false) },
      },
      axes: [axis(xLabel), axis(yLabel)],
      legend: { show: false },
      cursor: { drag: { x: false, y: false } },
      series: [
        {},
        {
          label: "trials",
          stroke: "#2f5bea",
          fill: "rgba(47, 91, 234, 0.35)",
          paths: uPlot.paths.points(),
          points: { show: true, size: 10, width: 1.5 },
          facets: [{ scale: "x", auto: true }, { scale: "y", auto: true }],
        },
        {
          label: "Pareto front",
          stroke: "#d92d20",
          width: 2,
          points: { show: false },
          facets: [{ scale: "x", auto: true }, { scale: "y", auto: true }],
        },
        {
          label: "on the front",
          stroke: "#d92d20",
          fill: "rgba(217, 45, 32, 0.85)",
          paths: uPlot.paths.points(),
          points: { show: true, size: 13, width: 2 },
          facets: [{ scale: "x", auto: true }, { scale: "y", auto: true }],
        },
      ],
    };
    this._mount(opts, [null, all, edge, edge], 2, points.length,
      [["trials", "#2f5bea", 0], ["Pareto front", "#d92d20", 0]]);
    this.el.dataset.front = String(best.length);
  }
}
