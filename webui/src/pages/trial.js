// Page 3: one trial: hyperparameters, training and validation charts against batches,
// live logs, checkpoints and restarts. The trial's state comes live from its
// experiment's stream; logs from /stream/trials/{id}/logs.

import { get, post, query, stream } from "../api.js";
import { MultiLineChart } from "../charts.js";
import { readState, writeState } from "../urlstate.js";
import {
  TERMINAL, badge, confirmAction, durationOf, fmtBytes, fmtDuration, fmtNum, fmtTime, h, setChildren,
  throttle, toast,
} from "../util.js";
import { hparamText } from "./experiment.js";
import { P, canExperiment } from "../perms.js";

const MAX_LOG_LINES = 5000;
const LEVELS = ["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"];
const LEVEL_RE = /\b(DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|FATAL)\b/;
const LOG_DEFAULTS = { level: "", q: "" };

/** A log line's level: the first level word in it (WARN: WARNING, FATAL: CRITICAL), else
 * ERROR for stderr lines that say "Traceback", else INFO for stdout and WARNING for stderr. */
export function lineLevel(line) {
  const m = line.log.match(LEVEL_RE);
  if (m) return m[1] === "WARN" ? "WARNING" : m[1] === "FATAL" ? "CRITICAL" : m[1];
  if (line.stdtype === "stderr") return /Traceback|Error/.test(line.log) ? "ERROR" : "WARNING";
  return "INFO";
}
const AXIS_KEYS = new Set(["batches", "epochs"]);
const CHART_DEFAULTS = { x: "batches", sm: 0 };

/** A report's x value on an axis: batches, epochs (reported, else null) or its time. */
function xOf(r, axis) {
  if (axis === "time") return r.reported_at;
  if (axis === "epochs") {
    const e = r.values?.epochs ?? r.epoch;
    return typeof e === "number" && Number.isFinite(e) ? e : null;
  }
  return r.total_batches;
}

/** Series {label, x, y} of each numeric metric in `reports` (Metric objects), x on `axis`
 * (reports without a value there are left out). */
function metricSeries(reports, axis = "batches") {
  const byName = new Map();
  for (const r of reports) {
    const x = xOf(r, axis);
    if (x == null) continue;
    for (const [k, v] of Object.entries(r.values || {})) {
      if (AXIS_KEYS.has(k) || typeof v !== "number" || !Number.isFinite(v)) continue;
      if (!byName.has(k)) byName.set(k, { label: k, x: [], y: [] });
      const s = byName.get(k);
      s.x.push(x);
      s.y.push(v);
    }
  }
  return [...byName.values()].sort((a, b) => a.label.localeCompare(b.label));
}

/** Charts {label, lines: [{label, x, y}]} of the profiler's rows ({group, agent_id,
 * time, values}): one chart per group and value name, a line per agent (per GPU for the
 * gpu group); timings chart their mean seconds per batch. */
export function profilerSeries(rows) {
  const charts = new Map();
  const add = (chart, line, x, y) => {
    if (typeof y !== "number" || !Number.isFinite(y)) return;
    if (!charts.has(chart)) charts.set(chart, new Map());
    const lines = charts.get(chart);
    if (!lines.has(line)) lines.set(line, { label: line, x: [], y: [] });
    lines.get(line).x.push(x);
    lines.get(line).y.push(y);
  };
  for (const r of rows) {
    for (const [k, v] of Object.entries(r.values || {})) {
      if (v === null || typeof v !== "object") add(`${r.group}.${k}`, r.agent_id, r.time, v);
      else if (r.group === "gpu") for (const [sub, y] of Object.entries(v)) add(`gpu.${sub}`, `${r.agent_id}/${k.slice(0, 12)}`, r.time, y);
      else add(`${r.group}.${k}.mean_seconds`, r.agent_id, r.time, v.mean_seconds);
    }
  }
  return [...charts].map(([label, lines]) => ({ label, lines: [...lines.values()] }))
    .sort((a, b) => a.label.localeCompare(b.label));
}

/**
 * One small chart per metric, made and dropped as metric names come and go.
 * The container carries data-charts: how many charts it shows.
 */
class MetricGrid {
  constructor(el, group) {
    this.el = el;
    this.group = group;
    this.charts = new Map();
  }

  draw(series, { axis = "batches", smoothing = 0 } = {}) {
    const names = new Set(series.map((s) => s.label));
    for (const [name, c] of this.charts) {
      if (!names.has(name)) { c.chart.destroy(); c.box.remove(); this.charts.delete(name); }
    }
    if (!series.length) {
      setChildren(this.el, h("div.muted", null, `No ${this.group} metrics yet.`));
    } else {
      this.el.querySelector(":scope > .muted")?.remove();
    }
    for (const s of series) {
      let c = this.charts.get(s.label);
      if (!c) {
        const box = h("div.chart", { dataset: { metric: s.label } });
        this.el.append(h("div.metric-cell", null, h("div.small.muted", null, s.label), box));
        c = { box: box.parentElement, chart: new MultiLineChart(box, { height: 220 }) };
        this.charts.set(s.label, c);
      }
      c.chart.draw({
        series: s.lines || [s], yLabel: s.label, xLabel: axis === "time" ? "time" : axis, time: axis === "time", smoothing,
      });
    }
    this.el.dataset.charts = String(series.length);
    this.el.dataset.rendered = "1";
  }

  destroy() {
    for (const c of this.charts.values()) c.chart.destroy();
  }
}

/** Draw the trial page into `root`; returns its cleanup. */
export function render(root, [trialId]) {
  const header = h("div.card", { id: "trial-header" }, h("div.muted", null, "Loading…"));
  const hpBox = h("div", { id: "trial-hparams" });
  const trainBox = h("div.chart-grid", { id: "training-charts" });
  const validBox = h("div.chart-grid", { id: "validation-charts" });
  const logsPre = h("pre.logs", { id: "trial-logs" });
  const follow = h("input", { type: "checkbox", checked: true, id: "follow-logs" });
  const logCount = h("span.muted.small", { id: "log-count" });
  const logView = readState(LOG_DEFAULTS);
  const chartView = readState(CHART_DEFAULTS);
  const chartX = h("select", { id: "trial-x", "aria-label": "x axis" },
    [["batches", "batches"], ["epochs", "epochs"], ["time", "wall time"]].map(([v, label]) =>
      h("option", { value: v, selected: v === chartView.x }, label)));
  const chartSmooth = h("input", {
    type: "range", id: "trial-smoothing", min: "0", max: "0.99", step: "0.01", value: String(chartView.sm),
    "aria-label": "smoothing", title: "smoothing: exponential moving average of each curve",
  });
  const chartSmoothValue = h("output", { for: "trial-smoothing" }, String(chartView.sm));
  const logLevel = h("select", { id: "log-level", "aria-label": "log level" },
    h("option", { value: "" }, "All levels"), LEVELS.map((l) => h("option", { value: l, selected: l === logView.level }, `${l} and above`)));
  const logSearch = h("input", { type: "search", id: "log-search", placeholder: "Search logs", value: logView.q, "aria-label": "search logs" });
  const logDownload = h("button", { id: "log-download", type: "button", title: "every line of the trial's logs (the level and search filters applied)" }, "Download");
  const batchCard = h("div.card", { id: "batch-card", hidden: true }, h("h2", null, "Batch metrics"));
  const batchBox = h("div.chart-grid", { id: "batch-charts" });
  batchCard.append(batchBox);
  const profCard = h("div.card", { id: "profiler-card", hidden: true },
    h("h2", null, "System metrics"),
    h("div.small.muted", null, "The profiler's averages (profiling.enabled or fit(profiling_enabled=True)), one report per agent every 10 s."));
  const profBox = h("div.chart-grid", { id: "profiler-charts" });
  profCard.append(profBox);
  const ckptBox = h("div.table-wrap", { id: "trial-checkpoints" });
  const runsBox = h("div.table-wrap", { id: "trial-restarts" });
  const backLink = h("span");

  setChildren(root,
    h("div.toolbar", null, backLink),
    header,
    h("div.row", null,
      h("div.card", { style: { flex: "0 1 320px" } }, h("h2", null, "Hyperparameters"), hpBox),
      h("div.card.grow", null,
        h("div.toolbar", null, h("h2", null, "Training metrics"), h("span.spacer"), chartX,
          h("label.smoothing", null, "smoothing ", chartSmooth, chartSmoothValue)),
        trainBox)),
    h("div.card", null, h("h2", null, "Validation metrics"), validBox),
    batchCard,
    profCard,
    h("div.card", null,
      h("div.toolbar", null, h("h2", null, "Logs"), h("span.spacer"), logCount, logLevel, logSearch, logDownload,
        h("label", null, follow, " Follow")),
      logsPre),
    h("div.row", null,
      h("div.card.grow", null, h("h2", null, "Checkpoints"), ckptBox),
      h("div.card.grow", null, h("h2", null, "Runs and restarts"), runsBox)));

  const trainCharts = new MetricGrid(trainBox, "training");
  const validCharts = new MetricGrid(validBox, "validation");
  const batchCharts = new MetricGrid(batchBox, "batch");
  const profCharts = new MetricGrid(profBox, "system");
  const profRows = [];
  let profAfter = 0;
  const closers = [];
  let closed = false;
  let signature = "";
  let lines = 0;

  function drawHeader(t, exp) {
    setChildren(backLink, h("a", { href: `/experiments/${t.experiment_id}` },
      `‹ Experiment ${t.experiment_id}${exp ? `: ${exp.name}` : ""}`));
    const metric = exp?.searcher_metric;
    setChildren(header,
      h("div.toolbar", null, h("h1", null, `Trial ${t.id}`), badge(t.state), h("span.spacer"),
        TERMINAL.has(t.state) || !exp || !canExperiment(exp, P.UPDATE_EXPERIMENT) ? null : h("button.danger", {
          id: "kill-trial", type: "button", title: "stop this trial at once, without a checkpoint",
          onclick: async () => {
            if (!await confirmAction(`Kill trial ${t.id}? It stops at once, without a checkpoint, and ends CANCELED.`, "Kill")) return;
            try { await post(`/trials/${t.id}/kill`); toast(`Killed trial ${t.id}`); } catch (err) { toast(`Kill failed: ${err.message}`, "error"); }
          },
        }, "Kill")),
      h("div.row", null,
        h("table.kv", null, h("tbody", null,
          h("tr", null, h("td", null, "Experiment"), h("td", null,
            h("a", { href: `/experiments/${t.experiment_id}` }, t.experiment_id))),
          h("tr", null, h("td", null, "Batches"), h("td", { id: "trial-batches" },
            `${fmtNum(t.total_batches)}${t.target_length != null ? ` of ${fmtNum(t.target_length)}` : ""}`)),
          h("tr", null, h("td", null, "Restarts"), h("td", { id: "trial-restart-count" }, t.restarts)),
          h("tr", null, h("td", null, "Seed"), h("td", null, t.seed)),
          h("tr", null, h("td", null, "Status"), h("td", { id: "trial-status" }, t.runner_state || "–")),
          h("tr", null, h("td", null, "Metadata"), h("td", null,
            h("code", { id: "trial-metadata" }, JSON.stringify(t.metadata || {})))))),
        h("table.kv", null, h("tbody", null,
          h("tr", null, h("td", null, `Best ${metric || "validation"}`), h("td", null, fmtNum(t.best_validation))),
          h("tr", null, h("td", null, "Latest checkpoint"), h("td", null,
            t.latest_checkpoint ? h("code", null, t.latest_checkpoint.slice(0, 8)) : "–")),
          h("tr", null, h("td", null, "Started"), h("td", null, fmtTime(t.start_time))),
          h("tr", null, h("td", null, "Duration"), h("td", null, fmtDuration(durationOf(t.start_time, t.end_time))))))));
    setChildren(hpBox, h("table.kv", null, h("tbody", null,
      Object.entries(t.hparams || {}).map(([k, v]) => h("tr", null, h("td", null, k), h("td", null, hparamText(v)))))));
  }

  let reports = [];
  function drawMetrics() {
    const opts = { axis: chartX.value, smoothing: Number(chartSmooth.value) };
    trainCharts.draw(metricSeries(reports.filter((m) => m.group === "training"), opts.axis), opts);
    validCharts.draw(metricSeries(reports.filter((m) => m.group === "validation"), opts.axis), opts);
  }
  chartX.addEventListener("change", () => { chartView.x = chartX.value; writeState(chartView, CHART_DEFAULTS); drawMetrics(); });
  chartSmooth.addEventListener("input", () => {
    chartView.sm = Number(chartSmooth.value);
    chartSmoothValue.textContent = chartSmooth.value;
    writeState(chartView, CHART_DEFAULTS);
    drawMetrics();
  });

  async function loadMetrics() {
    const { metrics } = await get(`/trials/${trialId}/metrics`);
    if (closed) return;
    reports = metrics;
    drawMetrics();
    const batch = await get(`/trials/${trialId}/batch-metrics`);
    if (closed) return;
    batchCard.hidden = !batch.series.length;
    if (batch.series.length) {
      batchCharts.draw(batch.series.map((x) => ({ label: x.name, x: x.batches, y: x.values })));
    }
    // The profiler's new rows since the last load (at most 20,000 kept: 10 hours of one agent).
    for (;;) {
      const page = await get(`/trials/${trialId}/profiler/metrics${query({ after_id: profAfter, limit: 5000 })}`);
      if (closed) return;
      profRows.push(...page.metrics);
      profAfter = page.next_after_id;
      if (page.metrics.length < 5000) break;
    }
    if (profRows.length > 20000) profRows.splice(0, profRows.length - 20000);
    profCard.hidden = !profRows.length;
    if (profRows.length) profCharts.draw(profilerSeries(profRows), { axis: "time" });
  }

  const levelRank = (l) => LEVELS.indexOf(l);
  function lineShown(el) {
    const min = logView.level ? levelRank(logView.level) : -1;
    const q = logView.q.trim().toLowerCase();
    return levelRank(el.dataset.level) >= min && (!q || el.textContent.toLowerCase().includes(q));
  }
  function applyLogFilter() {
    let n = 0;
    for (const el of logsPre.children) { el.hidden = !lineShown(el); if (!el.hidden) n++; }
    logsPre.dataset.shown = String(n);
    logCount.textContent = logView.level || logView.q ? `${n} of ${lines} lines` : `${lines} lines`;
  }
  logLevel.addEventListener("change", () => { logView.level = logLevel.value; writeState(logView, LOG_DEFAULTS); applyLogFilter(); });
  logSearch.addEventListener("input", () => { logView.q = logSearch.value; writeState(logView, LOG_DEFAULTS); applyLogFilter(); });
  logDownload.addEventListener("click", async () => {
    const out = [];
    let after = 0;
    try {
      for (;;) {
        const { logs } = await get(`/trials/${trialId}/logs${query({ after_id: after, limit: 10000 })}`);
        const min = logView.level ? levelRank(logView.level) : -1;
        const q = logView.q.trim().toLowerCase();
        for (const l of logs) {
          const text = `${fmtTime(l.timestamp)} ${l.rank_id != null ? `[rank=${l.rank_id}] ` : ""}${l.log}`;
          if (levelRank(lineLevel(l)) >= min && (!q || text.toLowerCase().includes(q))) out.push(text);
        }
        if (logs.length < 10000) break;
        after = logs[logs.length - 1].id;
      }
    } catch (err) { toast(`Could not download the logs: ${err.message}`, "error"); return; }
    const url = URL.createObjectURL(new Blob([out.join("\n") + "\n"], { type: "text/plain" }));
    const a = h("a", { href: url, download: `trial-${trialId}-logs.txt`, dataset: { external: "1" } });
    document.body.append(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 10000);
  });

  async function loadCheckpointsAndRuns() {
    const [{ checkpoints }, { allocations }] = await Promise.all([
      get(`/trials/${trialId}/checkpoints`), get(`/allocations${query({ trial_id: trialId })}`)]);
    if (closed) return;
    setChildren(ckptBox, h("table.grid", { id: "trial-checkpoints-table" },
      h("thead", null, h("tr", null, h("th", null, "UUID"), h("th.num", null, "Batches"),
        h("th", null, "State"), h("th.num", null, "Size"), h("th", null, "Reported"))),
      h("tbody", null, checkpoints.length ? checkpoints.slice().reverse().map((c) => h("tr", null,
        h("td", null, h("code", { title: c.uuid }, c.uuid.slice(0, 8))),
        h("td.num", null, fmtNum(c.total_batches)), h("td", null, badge(c.state)),
        h("td.num", null, fmtBytes(Object.values(c.resources || {}).reduce((a, b) => a + b, 0))),
        h("td", null, fmtTime(c.report_time))))
        : h("tr", null, h("td.muted", { colSpan: 5 }, "No checkpoints yet.")))));
    setChildren(runsBox, h("table.grid", { id: "trial-runs-table" },
      h("thead", null, h("tr", null, h("th.num", null, "Run"), h("th", null, "Agent / slots"),
        h("th", null, "State"), h("th", null, "Started"), h("th.num", null, "Ran"), h("th", null, "Exit"))),
      h("tbody", null, allocations.length ? allocations.map((a) => h("tr", null,
        h("td.num", null, a.run_id),
        h("td", null, `${a.agent_id} / ${a.slot_ids.join(", ")}`),
        h("td", null, badge(a.state)),
        h("td", null, fmtTime(a.started_at ?? a.created_at)),
        h("td.num", null, fmtDuration(durationOf(a.started_at, a.ended_at))),
        h("td.wrap", null, a.exit_code == null ? (a.state === "TERMINATED" ? "unknown" : "–")
          : `${a.exit_code}${a.exit_message ? `: ${a.exit_message}` : ""}`)))
        : h("tr", null, h("td.muted", { colSpan: 6 }, "Not scheduled yet.")))));
  }

  const refresh = throttle(() => {
    Promise.all([loadMetrics(), loadCheckpointsAndRuns()]).catch((err) => {
      toast(`Could not load trial ${trialId}'s metrics or checkpoints: ${err.message}`, "error");
    });
  }, 2000);

  function appendLogs(batch) {
    const atBottom = logsPre.scrollTop + logsPre.clientHeight >= logsPre.scrollHeight - 4;
    const frag = document.createDocumentFragment();
    for (const line of batch) {
      frag.append(h("div", { class: line.stdtype === "stderr" ? "stderr" : null, dataset: { id: line.id, level: lineLevel(line) } },
        h("span.ln", null, `${fmtTime(line.timestamp)} `),
        line.rank_id != null ? h("span.ln", null, `[rank=${line.rank_id}] `) : null,
        line.log));
    }
    logsPre.append(frag);
    lines += batch.length;
    while (logsPre.childElementCount > MAX_LOG_LINES) logsPre.firstElementChild.remove();
    applyLogFilter();
    if (follow.checked && (atBottom || lines === batch.length)) logsPre.scrollTop = logsPre.scrollHeight;
  }

  get(`/trials/${trialId}`).then(({ trial: t }) => {
    if (closed) return;
    drawHeader(t, null);
    refresh();
    closers.push(stream(`/stream/experiments/${t.experiment_id}`, {
      experiment: (body) => {
        const next = body.trials.find((x) => x.id === trialId);
        if (!next) return;
        drawHeader(next, body.experiment);
        const sig = `${next.total_batches}:${next.latest_checkpoint}:${next.state}:${next.restarts}`;
        if (sig !== signature) refresh();
        signature = sig;
      },
    }));
    closers.push(stream(`/stream/trials/${trialId}/logs`, {
      logs: (body) => appendLogs(body.logs),
    }));
  }).catch((err) => {
    setChildren(root, h("div.card", null, h("div.error-box", null,
      err.status === 404 ? `Trial ${trialId} not found.` : `Could not load trial ${trialId}: ${err.message}`)));
  });

  return () => {
    closed = true;
    for (const c of closers) c();
    trainCharts.destroy();
    validCharts.destroy();
    batchCharts.destroy();
    profCharts.destroy();
  };
}
