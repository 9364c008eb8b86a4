// Compare 2 to 10 experiments (issue 31 scope 7): their learning curves (each
// experiment's representative trial: its best by the searcher metric, else its first)
// on one chart, and their hyperparameters and results side by side, rows that differ
// marked. Opened from the experiments list as /compare?ids=1,2,3.

import { get, query } from "../api.js";
import { MultiLineChart } from "../charts.js";
import { badge, fmtNum, h, setChildren } from "../util.js";
import { MAX_COMPARE } from "./experiments.js";

const FIELDS = "id,name,state,num_trials,searcher,searcher_metric,smaller_is_better,best_searcher_metric,best_trial_id,hparams";
const MAX_POINTS = 400;

const text = (v) => (v == null ? "" : typeof v === "number" ? fmtNum(v) : String(v));

/** Draw the compare view into `root`; returns its cleanup. */
export function render(root) {
  const ids = [...new Set((new URLSearchParams(window.location.search).get("ids") || "")
    .split(",").map(Number).filter((n) => Number.isInteger(n) && n > 0))];
  const title = h("h1", null, `Comparing experiments ${ids.join(", ")}`);
  const groupSelect = h("select", { id: "compare-group", "aria-label": "metric group" },
    h("option", { value: "validation" }, "validation"), h("option", { value: "training" }, "training"));
  const metricInput = h("input", { id: "compare-metric", "aria-label": "metric name", placeholder: "metric" });
  const chartBox = h("div.chart", { id: "compare-experiment-curves" });
  const tableBox = h("div.table-wrap");
  const note = h("div.muted.small", { id: "compare-note" });
  setChildren(root,
    h("div.toolbar", null, h("a", { href: "/experiments" }, "‹ Experiments"), title),
    h("div.card", null,
      h("div.toolbar", null, h("h2", null, "Learning curves"), h("span.spacer"), groupSelect, metricInput),
      chartBox, note),
    h("div.card", null, h("h2", null, "Hyperparameters and results"), tableBox));
  let closed = false;
  const chart = new MultiLineChart(chartBox, { height: 320 });
  let exps = [];

  if (ids.length < 2 || ids.length > MAX_COMPARE) {
    chart.draw({ series: [], emptyText: `Pick 2 to ${MAX_COMPARE} experiments to compare.` });
    return () => { closed = true; chart.destroy(); };
  }

  async function drawCurves() {
    const name = metricInput.value.trim();
    if (!name) { chart.draw({ series: [], emptyText: "No metric to draw." }); return; }
    const bodies = await Promise.all(exps.map((e) => (e.best_trial_id == null ? null
      : get(`/experiments/${e.id}/metrics` + query({
        group: groupSelect.value, name, max_points: MAX_POINTS, trial_id: e.best_trial_id,
      })).catch(() => null))));
    if (closed) return;
    const series = [];
    exps.forEach((e, i) => {
      const s = bodies[i]?.series?.[0];
      if (s) series.push({ id: e.id, label: `${e.id}: ${e.name} (trial ${s.trial_id})`, x: s.batches, y: s.values });
    });
    const missing = exps.length - series.length;
    note.textContent = missing ? `${missing} of ${exps.length} experiments have no ${groupSelect.value} ${name}.` : "";
    chart.draw({ series, yLabel: `${groupSelect.value} ${name}`, emptyText: `No ${groupSelect.value} ${name} yet.` });
  }

  function drawTable() {
    const names = [...new Set(exps.flatMap((e) => Object.keys(e.hparams || {})))].sort();
    const differs = (f) => new Set(exps.map((e) => JSON.stringify(f(e) ?? null))).size > 1;
    const row = (label, f, data) => h("tr", { class: differs(f) ? "diff" : null, dataset: data },
      h("td", null, label), exps.map((e) => h("td.num", null, f(e))));
    setChildren(tableBox, h("table.grid", { id: "compare-experiments-table" },
      h("thead", null, h("tr", null, h("th", null, ""),
        exps.map((e) => h("th.num", { dataset: { id: e.id } }, h("a", { href: `/experiments/${e.id}` }, `${e.id}: ${e.name}`))))),
      h("tbody", null,
        h("tr", null, h("td.muted", null, "state"), exps.map((e) => h("td.num", null, badge(e.state)))),
        row("searcher", (e) => e.searcher, { field: "searcher" }),
        row("trials", (e) => e.num_trials, { field: "num_trials" }),
        row("best metric", (e) => (e.best_searcher_metric == null ? "" : `${e.searcher_metric}=${fmtNum(e.best_searcher_metric)}`),
          { field: "best_searcher_metric" }),
        row("representative trial", (e) => e.best_trial_id, { field: "best_trial_id" }),
        names.map((k) => row(k, (e) => text(e.hparams?.[k]), { hparam: k })))));
  }

  (async () => {
    const body = await get(`/experiments` + query({ id: ids, fields: FIELDS, archived: "all", limit: ids.length }));
    if (closed) return;
    const byId = new Map(body.experiments.map((e) => [e.id, e]));
    exps = ids.map((i) => byId.get(i)).filter(Boolean);
    const gone = ids.filter((i) => !byId.has(i));
    if (gone.length) note.textContent = `Not found or not visible: ${gone.join(", ")}`;
    metricInput.value = exps.find((e) => e.searcher_metric)?.searcher_metric || "";
    drawTable();
    await drawCurves();
    root.dataset.loaded = "1";
  })().catch((err) => { note.textContent = `Loading failed: ${err.message}`; });

  groupSelect.onchange = () => { drawCurves(); };
  metricInput.onchange = () => { drawCurves(); };
  return () => { closed = true; chart.destroy(); };
}
