// Page 2: one experiment: facts and actions, learning curves of all trials, a
// hyperparameter-against-metric chart for searches, trials, checkpoints and the config.
// Live through /stream/experiments/{id}; charts and checkpoints are read again (at most
// every 2 s) when a trial's batches or checkpoint change.

import { get, query, stream } from "../api.js";
import { MultiLineChart, ScatterChart } from "../charts.js";
import {
  badge, durationOf, fmtBytes, fmtDuration, fmtNum, fmtTime, h, setChildren, throttle, toYaml,
} from "../util.js";
import { actionButtons } from "./actions.js";

const MAX_POINTS = 400;

/** Hyperparameter values as short text. */
export function hparamText(v) {
  if (v !== null && typeof v === "object") return JSON.stringify(v);
  return typeof v === "number" ? fmtNum(v) : String(v);
}

/** Names of hyperparameters whose values differ between trials (all when one trial). */
function varyingHparams(trials) {
  const names = new Set();
  for (const t of trials) for (const k of Object.keys(t.hparams || {})) names.add(k);
  const varying = [...names].filter((k) =>
    new Set(trials.map((t) => JSON.stringify(t.hparams?.[k]))).size > 1);
  return varying.length ? varying : [...names];
}

function checkpointSize(c) {
  return Object.values(c.resources || {}).reduce((a, b) => a + (Number(b) || 0), 0);
}

/** Draw the experiment page into `root`; returns its cleanup. */
export function render(root, [expId]) {
  const state = { exp: null, trials: [], names: { training: [], validation: [] }, signature: "" };
  const header = h("div.card", { id: "experiment-header" }, h("div.muted", null, "Loading…"));
  const curveGroup = h("select", { id: "curve-group", "aria-label": "metric group" },
    h("option", { value: "validation" }, "validation"), h("option", { value: "training" }, "training"));
  const curveName = h("select", { id: "curve-metric", "aria-label": "metric" });
  const curveBox = h("div.chart", { id: "learning-curves" });
  const curveNote = h("span.muted.small");
  const scatterParam = h("select", { id: "scatter-hparam", "aria-label": "hyperparameter" });
  const scatterBox = h("div.chart", { id: "hparam-scatter" });
  const scatterCard = h("div.card", { id: "hparam-card", hidden: true },
    h("div.toolbar", null, h("h2", null, "Hyperparameter against metric"), h("span.spacer"), scatterParam),
    scatterBox);
  const trialsBox = h("div", { id: "trials" });
  const ckptBox = h("div", { id: "checkpoints" });
  const configBox = h("pre.config", { id: "config-yaml" });
  const descBox = h("p.muted", { id: "description" });

  setChildren(root,
    h("div.toolbar", null, h("a", { href: "/experiments" }, "‹ Experiments")),
    header,
    h("div.row", null,
      h("div.card.grow", null,
        h("div.toolbar", null, h("h2", null, "Learning curves"), h("span.spacer"), curveNote,
          curveGroup, curveName),
        curveBox),
    ),
    scatterCard,
    h("div.card", null, h("h2", null, "Trials"), trialsBox),
    h("div.card", null, h("h2", null, "Checkpoints"), ckptBox),
    h("div.card", null, h("h2", null, "Configuration"), descBox, configBox));

  const curves = new MultiLineChart(curveBox);
  const scatter = new ScatterChart(scatterBox);
  let closed = false;

  function drawHeader() {
    const e = state.exp;
    const s = e.config?.searcher || {};
    setChildren(header,
      h("div.toolbar", null,
        h("h1", null, `Experiment ${e.id}: ${e.name}`), badge(e.state),
        e.archived ? h("span.badge.archived", null, "archived") : null,
        h("span.spacer"), actionButtons(e)),
      h("div.row", null,
        h("table.kv", null, h("tbody", null,
          h("tr", null, h("td", null, "Owner"), h("td", null, e.owner)),
          h("tr", null, h("td", null, "Searcher"), h("td", null,
            `${s.name || "?"} on ${e.searcher_metric} (${e.smaller_is_better ? "smaller" : "larger"} is better)`)),
          h("tr", null, h("td", null, "Progress"), h("td", { id: "exp-progress" }, `${Math.round(e.progress * 100)}%`)),
          h("tr", null, h("td", null, "Trials"), h("td", null, e.num_trials)))),
        h("table.kv", null, h("tbody", null,
          h("tr", null, h("td", null, "Best " + (e.searcher_metric || "metric")),
            h("td", { id: "exp-best" }, fmtNum(e.best_searcher_metric))),
          h("tr", null, h("td", null, "Started"), h("td", null, fmtTime(e.start_time))),
          h("tr", null, h("td", null, "Duration"), h("td", null, fmtDuration(durationOf(e.start_time, e.end_time)))),
          h("tr", null, h("td", null, "Seed"), h("td", null, e.seed))))));
    descBox.textContent = e.description || "No description.";
    configBox.textContent = toYaml(e.config);
  }

  function drawTrials() {
    const hp = varyingHparams(state.trials);
    const metric = state.exp.searcher_metric;
    const rows = state.trials.map((t) => h("tr", { dataset: { trial: t.id, state: t.state } },
      h("td.num", null, h("a", { href: `/trials/${t.id}` }, t.id)),
      h("td", null, badge(t.state)),
      hp.map((k) => h("td", null, hparamText(t.hparams?.[k]))),
      h("td.num", null, fmtNum(t.total_batches)),
      h("td.num", null, fmtNum(t.best_validation)),
      h("td.num", null, fmtNum(t.latest_validation?.[metric])),
      h("td.num", null, t.restarts),
      h("td", null, fmtTime(t.start_time)),
      h("td.num", null, fmtDuration(durationOf(t.start_time, t.end_time)))));
    setChildren(trialsBox, h("table.grid", { id: "trials-table" },
      h("thead", null, h("tr", null, h("th.num", null, "ID"), h("th", null, "State"),
        hp.map((k) => h("th", null, k)), h("th.num", null, "Batches"),
        h("th.num", null, `Best ${metric}`), h("th.num", null, `Latest ${metric}`),
        h("th.num", null, "Restarts"), h("th", null, "Started"), h("th.num", null, "Duration"))),
      h("tbody", null, rows.length ? rows : h("tr", null, h("td.muted", { colSpan: 8 + hp.length }, "No trials yet.")))));
  }

  async function loadCheckpoints() {
    const { checkpoints } = await get(`/experiments/${expId}/checkpoints`);
    if (closed) return;
    const metric = state.exp.searcher_metric;
    const rows = checkpoints.slice().reverse().map((c) => h("tr", { dataset: { uuid: c.uuid } },
      h("td", null, h("code", { title: c.uuid }, c.uuid.slice(0, 8))),
      h("td.num", null, h("a", { href: `/trials/${c.trial_id}` }, c.trial_id)),
      h("td.num", null, fmtNum(c.total_batches)),
      h("td", null, badge(c.state)),
      h("td.num", null, fmtBytes(checkpointSize(c))),
      h("td.num", null, fmtNum(c.searcher_metric)),
      h("td", null, fmtTime(c.report_time))));
    setChildren(ckptBox, h("table.grid", { id: "checkpoints-table" },
      h("thead", null, h("tr", null, h("th", null, "UUID"), h("th.num", null, "Trial"),
        h("th.num", null, "Batches"), h("th", null, "State"), h("th.num", null, "Size"),
        h("th.num", null, metric), h("th", null, "Reported"))),
      h("tbody", null, rows.length ? rows : h("tr", null, h("td.muted", { colSpan: 7 }, "No checkpoints yet.")))));
  }

  async function loadNames() {
    state.names = await get(`/experiments/${expId}/metrics/names`);
    if (closed) return;
    const names = state.names[curveGroup.value] || [];
    const current = curveName.value;
    const preferred = names.includes(current) ? current
      : names.includes(state.exp.searcher_metric) ? state.exp.searcher_metric
        : names.find((n) => n !== "batches" && n !== "epochs") || names[0] || "";
    setChildren(curveName, names.map((n) => h("option", { value: n, selected: n === preferred }, n)));
    curveName.value = preferred;
  }

  async function loadCurves() {
    if (!curveName.value) {
      curves.draw({ series: [], emptyText: `No ${curveGroup.value} metrics yet.` });
      return;
    }
    const body = await get(`/experiments/${expId}/metrics` + query({
      group: curveGroup.value, name: curveName.value, max_points: MAX_POINTS,
    }));
    if (closed) return;
    curves.draw({
      series: body.series.map((s) => ({ label: `trial ${s.trial_id}`, x: s.batches, y: s.values })),
      xLabel: "batches", yLabel: `${body.group} ${body.name}`,
    });
    const sampled = body.series.filter((s) => s.downsampled).length;
    curveNote.textContent = sampled ? `${sampled} series downsampled (${body.downsampling})` : "";
  }

  function drawScatter() {
    const e = state.exp;
    const isSearch = (e.config?.searcher?.name || "single") !== "single";
    scatterCard.hidden = !isSearch;
    if (!isSearch) return;
    const hp = varyingHparams(state.trials);
    const chosen = hp.includes(scatterParam.value) ? scatterParam.value : hp[0];
    setChildren(scatterParam, hp.map((k) => h("option", { value: k, selected: k === chosen }, k)));
    if (chosen === undefined) return;
    const spec = e.config?.hyperparameters?.[chosen] || {};
    const done = state.trials.filter((t) => t.best_validation != null);
    const raw = done.map((t) => t.hparams?.[chosen]);
    const numeric = raw.every((v) => typeof v === "number");
    const cats = numeric ? [] : [...new Set(raw.map(hparamText))];
    scatter.draw({
      x: numeric ? raw : raw.map((v) => cats.indexOf(hparamText(v))),
      y: done.map((t) => t.best_validation),
      xLabel: numeric ? chosen : `${chosen} (${cats.map((c, i) => `${i}=${c}`).join(", ")})`,
      yLabel: `best ${e.searcher_metric}`,
      log: numeric && spec.type === "log",
    });
  }

  const refresh = throttle(async () => {
    try {
      await loadNames();
      await Promise.all([loadCurves(), loadCheckpoints()]);
    } catch (err) {
      curveNote.textContent = `could not load: ${err.message}`;
    }
  }, 2000);

  curveGroup.addEventListener("change", async () => { await loadNames(); await loadCurves(); });
  curveName.addEventListener("change", () => loadCurves());
  scatterParam.addEventListener("change", drawScatter);

  const close = stream(`/stream/experiments/${expId}`, {
    experiment: (body) => {
      const first = state.exp === null;
      state.exp = body.experiment;
      state.trials = body.trials;
      drawHeader();
      drawTrials();
      drawScatter();
      const signature = body.trials.map((t) => `${t.id}:${t.total_batches}:${t.latest_checkpoint}:${t.state}`).join(",");
      if (first || signature !== state.signature) refresh();
      state.signature = signature;
    },
    gone: () => {
      setChildren(header, h("div.error-box", null, `Experiment ${expId} was deleted.`));
    },
  });
  get(`/experiments/${expId}`).catch((err) => {
    if (err.status === 404) {
      setChildren(root, h("div.card", null, h("div.error-box", null, `Experiment ${expId} not found.`)));
    }
  });

  return () => {
    closed = true;
    close();
    curves.destroy();
    scatter.destroy();
  };
}
