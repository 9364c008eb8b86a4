// Charts on uPlot (https://github.com/leeoniya/uPlot, MIT, installed from npm).
//
// Learning curves of many trials use uPlot's mode 2 ("faceted" data: every series has
// its own x and y arrays), so trials that report at different batch counts never need
// to be joined onto one x axis. Each chart's container carries data-series (how many
// series it draws) and data-points (how many points) for tests and for people.

import uPlot from "./vendor/uPlot.esm.js";
import { fmtNum, h, palette, setChildren } from "./util.js";


function widthOf(el) {
  return Math.max(320, Math.floor(el.getBoundingClientRect().width || el.parentElement?.clientWidth || 640));
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
  return h("div.chart-legend", null, items.map(([label, color]) =>
    h("span", null, h("i", { style: { background: color } }), label)));
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

/**
 * Lines of several series, each with its own x values (uPlot mode 2).
 * Call `draw({series: [{label, x: number[], y: number[]}], xLabel, yLabel})`.
 */
export class MultiLineChart extends Chart {
  draw({ series, xLabel = "batches", yLabel = "", emptyText = "No data yet." }) {
    const drawn = series.filter((s) => s.x.length);
    if (!drawn.length) return this._empty(emptyText);
    const colors = palette(drawn.length);
    const points = drawn.reduce((n, s) => n + s.x.length, 0);
    const opts = {
      mode: 2,
      scales: { x: { time: false }, y: {} },
      axes: [axis(xLabel), axis(yLabel)],
      legend: { show: false },
      cursor: { drag: { x: true, y: false } },
      series: [
        {},
        ...drawn.map((s, i) => ({
          label: s.label,
          stroke: colors[i],
          width: 1.5,
          paths: uPlot.paths.linear(),
          points: { show: false },
          facets: [{ scale: "x", auto: true }, { scale: "y", auto: true }],
        })),
      ],
    };
    const data = [null, ...drawn.map((s) => [s.x, s.y])];
    this._mount(opts, data, drawn.length, points, drawn.map((s, i) => [s.label, colors[i]]));
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
