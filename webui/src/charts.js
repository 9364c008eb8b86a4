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
const allPositive = (series) => series.every((s) => s.y.every((v) => v > 0));

/**
 * Lines of several series, each with its own x values (uPlot mode 2).
 *
 * Call `draw({series: [{label, id, x: number[], y: number[]}], xLabel, yLabel, log})`.
 * Hovering shows the nearest point's series label, batches and value (also left in the
 * container's data-hover for tests); clicking a point or a legend entry highlights that
 * series (others dimmed) and calls `onSelect(id or null)`; clicking it again clears.
 * `log: true` draws y on a log-10 scale when every value is > 0 (else linear, and
 * data-log says which scale was used).
 */
export class MultiLineChart extends Chart {
  constructor(el, opts = {}) {
    super(el, opts);
    this.onSelect = opts.onSelect || null;
    this.highlighted = null;
  }

  draw({ series, xLabel = "batches", yLabel = "", emptyText = "No data yet.", log = false }) {
    const drawn = series.filter((s) => s.x.length);
    if (!drawn.length) return this._empty(emptyText);
    const colors = palette(drawn.length);
    const points = drawn.reduce((n, s) => n + s.x.length, 0);
    const useLog = log && allPositive(drawn);
    // Explicit ranges: uPlot's automatic range for a scale whose values are all equal
    // (every trial validated at the same single batch count) has zero width, and its tick
    // generator then loops until the tab runs out of memory (RangeError: Invalid array
    // length). padRange widens such a range; a spread range keeps uPlot's own.
    const opts = {
      mode: 2,
      scales: {
        x: { time: false, range: (u, lo, hi) => (lo === hi ? padRange(lo, hi, false) : [lo, hi]) },
        y: useLog
          ? { distr: 3, log: 10, range: (u, lo, hi) => padRange(lo, hi, true) }
          : { range: (u, lo, hi) => (lo === hi ? padRange(lo, hi, false) : uPlot.rangeNum(lo, hi, 0.1, true)) },
      },
      axes: [axis(xLabel), axis(yLabel)],
      legend: { show: false },
      focus: { alpha: 0.15 },
      cursor: { drag: { x: true, y: false }, points: { show: false } },
      series: [
        {},
        ...drawn.map((s, i) => ({
          label: s.label,
          stroke: colors[i],
          width: 1.5,
          paths: uPlot.paths.linear(),
          // A line needs two points: a series with one is drawn as a point instead.
          points: s.x.length === 1 ? { show: true, size: 7, fill: colors[i] } : { show: false },
          facets: [{ scale: "x", auto: true }, { scale: "y", auto: true }],
        })),
      ],
    };
    const data = [null, ...drawn.map((s) => [s.x, s.y])];
    this.series = drawn;
    this._mount(opts, data, drawn.length, points, drawn.map((s, i) => [s.label, colors[i], i + 1]));
    this.el.dataset.log = useLog ? "1" : "0";
    this._hover();
    if (this.highlighted != null) {
      const i = drawn.findIndex((s) => (s.id ?? s.label) === this.highlighted);
      if (i >= 0) this._focus(i + 1); else this.highlighted = null;
    }
  }

  /** Highlight the series with this id (or label); null clears. */
  highlight(id) {
    this.highlighted = id;
    const i = id == null ? -1 : (this.series || []).findIndex((s) => (s.id ?? s.label) === id);
    this._focus(i >= 0 ? i + 1 : null);
  }

  _focus(idx) {
    if (!this.plot) return;
    // uPlot's focus dims every other series to focus.alpha; null restores all.
    this.plot.setSeries(idx, { focus: true }, false);
    if (idx == null) for (let i = 1; i < this.plot.series.length; i++) this.plot.series[i].alpha = 1;
    if (idx == null) this.plot.redraw(false, false);
    this.el.dataset.highlight = idx == null ? "" : this.series[idx - 1].label;
    for (const item of this.el.querySelectorAll(".chart-legend [data-idx]")) {
      item.classList.toggle("on", Number(item.dataset.idx) === idx);
    }
  }

  _select(idx) {
    const s = idx == null ? null : this.series[idx - 1];
    const id = s ? (s.id ?? s.label) : null;
    const next = id === this.highlighted ? null : id;
    this.highlight(next);
    if (this.onSelect) this.onSelect(next);
  }

  _nearest(px, py) {
    const u = this.plot;
    let best = null;
    let bestD = 144; // within 12 CSS pixels
    for (let i = 0; i < this.series.length; i++) {
      const s = this.series[i];
      for (let j = 0; j < s.x.length; j++) {
        const dx = u.valToPos(s.x[j], "x") - px;
        if (dx > 12 || dx < -12) continue;
        const dy = u.valToPos(s.y[j], "y") - py;
        const d = dx * dx + dy * dy;
        if (d < bestD) { bestD = d; best = [i + 1, j]; }
      }
    }
    return best;
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
        const text = `${s.label} · batches ${fmtNum(s.x[j])} · ${fmtNum(s.y[j])}`;
        tip.textContent = text;
        tip.hidden = false;
        tip.style.left = `${Math.min(u.valToPos(s.x[j], "x") + 10, rect.width - 180)}px`;
        tip.style.top = `${Math.max(0, u.valToPos(s.y[j], "y") - 28)}px`;
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
