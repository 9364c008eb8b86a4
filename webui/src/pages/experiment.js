// Page 2: one experiment: facts and actions; learning curves (top N by the searcher
// metric above 40 trials, hover, highlight, log axis, training or validation); for
// searches the hyperparameter views (parallel coordinates brushing the table, scatter,
// heat map); the trials table (paged, sorted, filtered; view state in the URL); trial
// comparison; checkpoints (metadata, download, delete); config and model definition.
// Live through /stream/experiments/{id}; charts and checkpoints are read again (at most
// every 2 s) when a trial's batches or checkpoint change. The stream's first event is a
// small summary (the experiment and the first chart's series, issue 22): header and chart
// are drawn from it before the trials (about 600 KB at 1,000 trials) arrive.

import { del, get, getText, patch, post, query, stream } from "../api.js";
import { MultiLineChart, ParetoChart, ScatterChart } from "../charts.js";
import { HeatMap, ParallelCoords } from "../hpviews.js";
import { navigate } from "../main.js";
import { experimentEditor, notesCard } from "../notes.js";
import { P, can, canExperiment } from "../perms.js";
import { compareValues, parseFilter, readState, writeState } from "../urlstate.js";
import {
  TERMINAL, badge, confirmAction, durationOf, fmtBytes, fmtDuration, fmtNum, fmtTime, h, rankColor,
  setChildren, throttle, toast, toYaml,
} from "../util.js";
import { actionButtons } from "./actions.js";
import { registerForm } from "./models.js";
import { launch } from "./tasks.js";

const MAX_POINTS = 400;
const TOP_N_ABOVE = 40;
const AXIS_KEYS = new Set(["batches", "epochs", "epoch"]);
const PAGE_SIZES = [10, 20, 50, 100];
/** Metric names the stream's summary may be asked for (the master refuses the rest). */
const SUMMARY_NAME = /^[^"\u0000-\u001f]{1,200}$/;
const CKPT_PAGE = 10;

/** Above this many curves each is coloured by its trial's rank, not a colour of its own. */
const RANK_COLORS_ABOVE = 20;
const X_AXES = [["batches", "batches"], ["epochs", "epochs"], ["time", "wall time"]];

const DEFAULTS = {
  g: "validation", m: "", log: false, show: "", x: "batches", sm: 0, hpv: "pcoords", hp: "", hx: "", hy: "",
  ts: "id", td: false, tp: 0, tn: 20, tstate: "", tf: "", tv: "", cmp: "", cp: 0,
};

/** Hyperparameter values as short text. */
export function hparamText(v) {
  if (v !== null && typeof v === "object") return JSON.stringify(v);
  return typeof v === "number" ? fmtNum(v) : String(v);
}

/** Every hyperparameter name of the trials, those whose values differ first. */
function hparamNames(trials) {
  const names = new Set();
  for (const t of trials) for (const k of Object.keys(t.hparams || {})) names.add(k);
  const varies = (k) => new Set(trials.map((t) => JSON.stringify(t.hparams?.[k]))).size > 1;
  const all = [...names];
  return { varying: all.filter(varies), all: [...all.filter(varies), ...all.filter((k) => !varies(k))] };
}

function checkpointSize(c) {
  return Object.values(c.resources || {}).reduce((a, b) => a + (Number(b) || 0), 0);
}

/** Trials best first by the searcher metric (trials without a value last). */
function rankTrials(trials, smallerIsBetter) {
  return trials.slice().sort((a, b) => {
    if (a.best_validation == null) return b.best_validation == null ? a.id - b.id : 1;
    if (b.best_validation == null) return -1;
    return smallerIsBetter ? a.best_validation - b.best_validation : b.best_validation - a.best_validation;
  });
}

/** Draw the experiment page into `root`; returns its cleanup. */
export function render(root, [expId]) {
  const view = readState(DEFAULTS);
  const state = {
    exp: null, trials: [], names: { training: [], validation: [] }, signature: "", brushed: null, checkpoints: [],
    // The curves drawn from the stream's summary (curveKey), not fetched again once.
    summaryKey: null,
    loaded: false, // the first full body (with the trials) arrived
  };
  const compareIds = () => view.cmp.split(",").map(Number).filter((n) => n > 0);
  const save = () => writeState(view, DEFAULTS);

  const header = h("div.card", { id: "experiment-header" }, h("div.muted", null, "Loading…"));
  const curveGroup = h("select", { id: "curve-group", "aria-label": "metric group" },
    h("option", { value: "validation" }, "validation"), h("option", { value: "training" }, "training"));
  curveGroup.value = view.g;
  const curveName = h("select", { id: "curve-metric", "aria-label": "metric" });
  const curveShow = h("select", { id: "curve-show", "aria-label": "trials shown" });
  const curveLog = h("input", { type: "checkbox", id: "curve-log", checked: view.log });
  const curveX = h("select", { id: "curve-x", "aria-label": "x axis" },
    X_AXES.map(([v, label]) => h("option", { value: v, selected: v === view.x }, label)));
  const curveSmooth = h("input", {
    type: "range", id: "curve-smoothing", min: "0", max: "0.99", step: "0.01", value: String(view.sm),
    "aria-label": "smoothing", title: "smoothing: exponential moving average of each curve",
  });
  const curveSmoothValue = h("output", { id: "curve-smoothing-value", for: "curve-smoothing" }, String(view.sm));
  const curveBox = h("div.chart", { id: "learning-curves" });
  const curveNote = h("span.muted.small", { id: "curve-note" });
  const hpView = h("select", { id: "hp-view", "aria-label": "hyperparameter view" },
    h("option", { value: "pcoords" }, "Parallel coordinates"), h("option", { value: "scatter" }, "Scatter"),
    h("option", { value: "heatmap" }, "Heat map"));
  hpView.value = view.hpv;
  const hpControls = h("span.toolbar-inline");
  const pcBox = h("div.pcoords-box", { id: "hp-pcoords" });
  const scatterBox = h("div.chart", { id: "hparam-scatter" });
  const heatBox = h("div", { id: "hp-heatmap" });
  const brushNote = h("span.muted.small", { id: "brush-note" });
  const brushClear = h("button.small", { id: "brush-clear", type: "button", hidden: true, onclick: () => pcoords.clear() }, "Clear brush");
  const hpCard = h("div.card", { id: "hparam-card", hidden: true },
    h("div.toolbar", null, h("h2", null, "Hyperparameters"), h("span.spacer"), brushNote, hpControls, hpView),
    pcBox, scatterBox, heatBox);
  // Issue 35: the search summary (Pareto front, lineage, a custom method's error).
  const paretoBox = h("div.chart", { id: "pareto-front" });
  const lineageBox = h("div", { id: "trial-lineage" });
  const searchErrorBox = h("pre.error-box", { id: "searcher-error", hidden: true });
  const searchCard = h("div.card", { id: "search-card", hidden: true },
    h("h2", null, "Search"), searchErrorBox, paretoBox, lineageBox);
  const trialsBox = h("div.table-wrap", { id: "trials" });
  const trialsPager = h("div.pager", { id: "trials-pager" });
  const trialFilterCol = h("select", { id: "trial-filter-col", "aria-label": "filter column" });
  const trialFilter = h("input", {
    type: "search", id: "trial-filter", placeholder: "filter: > 0.5, 0.1..0.3, text", value: view.tv,
    "aria-label": "trial filter",
  });
  const trialState = h("select", { id: "trial-state", "aria-label": "trial state filter" });
  const compareBtn = h("button", { id: "compare-open", type: "button" }, "Compare");
  const compareCard = h("div.card", { id: "compare", hidden: true });
  const ckptBox = h("div.table-wrap", { id: "checkpoints" });
  const ckptPager = h("div.pager", { id: "checkpoints-pager" });
  const configBox = h("pre.config", { id: "config-yaml" });
  const descBox = h("p.muted", { id: "description" });
  const filesList = h("div.file-list", { id: "model-def-files" });
  const filePre = h("pre.config", { id: "model-def-file", hidden: true });
  // Issue 31: Markdown notes, and editing the name, description and labels.
  const mayEdit = () => state.exp !== null && canExperiment(state.exp, P.UPDATE_EXPERIMENT);
  const notes = notesCard({
    id: "experiment-notes", title: "Notes", empty: "No notes.", canEdit: mayEdit,
    save: (text) => patch(`/experiments/${expId}`, { notes: text }),
  });
  const editor = experimentEditor(async (body) => {
    const { experiment } = await patch(`/experiments/${expId}`, body);
    state.exp = { ...state.exp, ...experiment };
    drawHeader();
  });

  setChildren(root,
    h("div.toolbar", null, h("a", { href: "/experiments" }, "‹ Experiments")),
    header,
    editor.card,
    h("div.card", null,
      h("div.toolbar", null, h("h2", null, "Learning curves"), h("span.spacer"), curveNote,
        curveGroup, curveName, curveShow, curveX,
        h("label.smoothing", null, "smoothing ", curveSmooth, curveSmoothValue),
        h("label", null, curveLog, " log")),
      curveBox),
    hpCard,
    searchCard,
    compareCard,
    h("div.card", null,
      h("div.toolbar", null, h("h2", null, "Trials"), h("span.spacer"), trialState, trialFilterCol, trialFilter, compareBtn),
      trialsBox, trialsPager),
    h("div.card", null, h("h2", null, "Checkpoints"), ckptBox, ckptPager),
    h("div.row", null,
      h("div.card.grow", null, h("h2", null, "Configuration"), descBox, configBox),
      h("div.card.grow", null,
        h("div.toolbar", null, h("h2", null, "Model definition"), h("span.spacer"),
          h("a", { href: `/api/v1/experiments/${expId}/model_def`, download: `experiment-${expId}-model_def.tar.gz`, id: "model-def-download" }, "Download")),
        filesList, filePre)),
    notes.card);

  const curves = new MultiLineChart(curveBox, {
    onSelect: (id) => { for (const tr of trialsBox.querySelectorAll("tr[data-trial]")) tr.classList.toggle("highlight", Number(tr.dataset.trial) === id); },
  });
  const compareCurves = { chart: null };
  const scatter = new ScatterChart(scatterBox);
  const pcoords = new ParallelCoords(pcBox, {
    onBrush: (ids) => {
      state.brushed = ids ? new Set(ids) : null;
      view.tp = 0;
      brushNote.textContent = ids ? `${ids.length} trials brushed` : "";
      brushClear.hidden = !ids;
      drawTrials();
    },
  });
  const heat = new HeatMap(heatBox);
  const pareto = new ParetoChart(paretoBox);
  let closed = false;

  // ------------------------------------------------------------------ search summary

  const SUMMARY_SEARCHERS = new Set(["tpe", "cmaes", "gp", "nsgaii", "pbt", "custom"]);

  async function loadSearch() {
    if (!SUMMARY_SEARCHERS.has(state.exp?.config?.searcher?.name)) return;
    let body;
    try {
      body = await get(`/experiments/${expId}/searcher`);
    } catch {
      return;
    }
    if (closed) return;
    const front = body.pareto_front;
    const parents = (body.lineage || []).filter((r) => r.parent_id != null);
    searchCard.hidden = !front && !parents.length && !body.error;
    searchErrorBox.hidden = !body.error;
    searchErrorBox.textContent = body.error ? `The custom search method failed:\n${body.error}` : "";
    paretoBox.hidden = !front;
    if (front) {
      const [a, b] = body.objectives;
      const dir = (o) => `${o.name} (${o.smaller_is_better ? "smaller" : "larger"} is better)`;
      pareto.draw({ points: front.points, front: front.front, xLabel: dir(a), yLabel: dir(b) });
    }
    setChildren(lineageBox, parents.length
      ? h("div", null, h("h3", null, "Lineage"),
        h("ul", null, parents.map((r) => h("li", { dataset: { trial: r.trial_id } },
          h("a", { href: `/trials/${r.trial_id}` }, `Trial ${r.trial_id}`), " warm-started from ",
          h("a", { href: `/trials/${r.parent_id}` }, `trial ${r.parent_id}`)))))
      : null);
  }

  // ------------------------------------------------------------------ header

  function drawHeader() {
    const e = state.exp;
    const s = e.config?.searcher || {};
    const canDelete = TERMINAL.has(e.state) && e.state !== "DELETED" && canExperiment(e, P.DELETE_EXPERIMENT);
    setChildren(header,
      h("div.toolbar", null,
        h("h1", null, `Experiment ${e.id}: ${e.name}`), badge(e.state),
        e.archived ? h("span.badge.archived", null, "archived") : null,
        (e.labels || []).map((l) => h("span.badge.label", { dataset: { label: l } }, l)),
        h("span.spacer"), actionButtons(e),
        mayEdit() ? h("button", {
          id: "edit-experiment", type: "button", title: "edit the name, description and labels",
          onclick: () => editor.open(state.exp),
        }, "Edit") : null,
        canDelete ? h("button.danger", {
          id: "delete-experiment", type: "button", title: "delete the experiment, its checkpoints and its rows",
          onclick: async () => {
            if (!await confirmAction(`Delete experiment ${e.id} (${e.name})? Its checkpoints are deleted from storage.`, "Delete")) return;
            try {
              await del(`/experiments/${e.id}`);
              toast(`Experiment ${e.id} deleted`);
              navigate("/experiments");
            } catch (err) { toast(`Delete failed: ${err.message}`, "error"); }
          },
        }, "Delete") : null,
        !can(P.CREATE_NSC, e.workspace_id ?? 1) ? null : h("button", {
          id: "open-tensorboard", type: "button", title: "TensorBoard over this experiment's trials",
          onclick: async () => {
            try {
              const { task } = await launch("tensorboards", {
                experiment_ids: [e.id], workspace_id: String(e.workspace_id ?? 1),
              });
              toast(`TensorBoard ${task.id}: open it from the Tasks page when it is ready`);
              window.location.assign("/tasks");
            } catch (err) { toast(`TensorBoard failed: ${err.message}`, "error"); }
          },
        }, "TensorBoard"),
        h("a.button", {
          id: "open-notebook", href: `/tasks?launch=notebooks&experiment_ids=${e.id}`,
          title: "the Tasks page's launch form, for a notebook about this experiment",
        }, "Notebook…")),
      h("div.row", null,
        h("table.kv", null, h("tbody", null,
          h("tr", null, h("td", null, "Owner"), h("td", null, e.owner)),
          h("tr", null, h("td", null, "Searcher"), h("td.wrap", null,
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
    notes.update(e.notes);
    configBox.textContent = toYaml(e.config);
  }

  // ------------------------------------------------------------------ trials table

  /** Latest validation metrics other than the searcher metric (at most 8, for columns). */
  function metricNames() {
    const names = new Set();
    for (const t of state.trials) for (const k of Object.keys(t.latest_validation || {})) names.add(k);
    return [...names].filter((k) => k !== state.exp.searcher_metric && !AXIS_KEYS.has(k)).sort().slice(0, 8);
  }

  function columns() {
    const metric = state.exp.searcher_metric;
    const { varying, all } = hparamNames(state.trials);
    const shown = varying.length ? varying : all;
    const cols = [
      { key: "id", label: "ID", num: true, get: (t) => t.id },
      { key: "state", label: "State", get: (t) => t.state },
      ...all.map((k) => ({ key: `hp.${k}`, label: k, hp: true, hidden: !shown.includes(k), get: (t) => t.hparams?.[k] })),
      { key: "batches", label: "Batches", num: true, get: (t) => t.total_batches },
      { key: "best", label: `Best ${metric}`, num: true, get: (t) => t.best_validation },
      { key: "latest", label: `Latest ${metric}`, num: true, get: (t) => t.latest_validation?.[metric] },
      ...metricNames().map((k) => ({ key: `m.${k}`, label: `Latest ${k}`, num: true, get: (t) => t.latest_validation?.[k] })),
      { key: "restarts", label: "Restarts", num: true, get: (t) => t.restarts },
      { key: "start", label: "Started", get: (t) => t.start_time },
      { key: "duration", label: "Duration", num: true, get: (t) => durationOf(t.start_time, t.end_time) },
    ];
    return cols;
  }

  function filteredTrials(cols) {
    const col = cols.find((c) => c.key === view.tf) || null;
    const pass = parseFilter(view.tv);
    let list = state.trials.filter((t) =>
      (!view.tstate || t.state === view.tstate) &&
      (!state.brushed || state.brushed.has(t.id)) &&
      (!view.tv || (col ? pass(col.get(t)) : cols.some((c) => pass(c.get(t))))));
    const sortCol = cols.find((c) => c.key === view.ts) || cols[0];
    list = list.slice().sort((a, b) => {
      const x = sortCol.get(a), y = sortCol.get(b);
      if (x == null || y == null) return compareValues(x, y); // nulls last either way
      return view.td ? -compareValues(x, y) : compareValues(x, y);
    });
    return list;
  }

  function drawTrials() {
    const cols = columns();
    const visible = cols.filter((c) => !c.hidden);
    const states = [...new Set(state.trials.map((t) => t.state))].sort();
    setChildren(trialState, h("option", { value: "" }, "All states"),
      states.map((s) => h("option", { value: s, selected: s === view.tstate }, s)));
    setChildren(trialFilterCol, h("option", { value: "" }, "any column"),
      cols.map((c) => h("option", { value: c.key, selected: c.key === view.tf }, c.label)));
    const list = filteredTrials(cols);
    const pages = Math.max(1, Math.ceil(list.length / view.tn));
    view.tp = Math.min(view.tp, pages - 1);
    const shown = list.slice(view.tp * view.tn, (view.tp + 1) * view.tn);
    const selected = new Set(compareIds());
    const head = h("tr", null, h("th", null, ""), visible.map((c) => h("th", {
      class: ["sortable", c.num ? "num" : null, view.ts === c.key ? (view.td ? "sorted-desc" : "sorted-asc") : null].filter(Boolean).join(" "),
      dataset: { sort: c.key },
      onclick: () => {
        if (view.ts === c.key) view.td = !view.td; else { view.ts = c.key; view.td = false; }
        save(); drawTrials();
      },
    }, c.label)), h("th", null, ""));
    const rows = shown.map((t) => h("tr", { dataset: { trial: t.id, state: t.state }, class: curves.highlighted === t.id ? "highlight" : null },
      h("td", null, h("input", {
        type: "checkbox", class: "compare-pick", checked: selected.has(t.id), "aria-label": `compare trial ${t.id}`,
        onchange: (ev) => {
          const ids = new Set(compareIds());
          if (ev.target.checked) ids.add(t.id); else ids.delete(t.id);
          view.cmp = [...ids].sort((a, b) => a - b).join(",");
          save();
          compareBtn.textContent = ids.size ? `Compare (${ids.size})` : "Compare";
          if (view.show === "sel") loadCurves();
        },
      })),
      visible.map((c) => {
        const v = c.get(t);
        if (c.key === "id") return h("td.num", null, h("a", { href: `/trials/${t.id}` }, t.id));
        if (c.key === "state") return h("td", null, badge(t.state));
        if (c.key === "start") return h("td", null, fmtTime(v));
        if (c.key === "duration") return h("td.num", null, fmtDuration(v));
        if (c.hp) return h("td", null, v === undefined ? "–" : hparamText(v));
        return h("td.num", null, fmtNum(v));
      }),
      h("td", null, TERMINAL.has(t.state) || !canExperiment(state.exp, P.UPDATE_EXPERIMENT) ? null : h("button.small.danger", {
        dataset: { action: "kill-trial" }, type: "button",
        onclick: async () => {
          if (!await confirmAction(`Kill trial ${t.id}? It stops at once, without a checkpoint, and ends CANCELED.`, "Kill")) return;
          try { await post(`/trials/${t.id}/kill`); toast(`Killed trial ${t.id}`); } catch (err) { toast(`Kill failed: ${err.message}`, "error"); }
        },
      }, "Kill"))));
    setChildren(trialsBox, h("table.grid", { id: "trials-table", dataset: { rows: list.length } },
      h("thead", null, head),
      h("tbody", null, rows.length ? rows : h("tr", null, h("td.muted", { colSpan: visible.length + 2 },
        state.trials.length ? "No trial matches the filters." : "No trials yet.")))));
    const from = list.length ? view.tp * view.tn + 1 : 0;
    const to = Math.min(list.length, (view.tp + 1) * view.tn);
    const size = h("select", {
      "aria-label": "trials per page",
      onchange: () => { view.tn = Number(size.value); view.tp = 0; save(); drawTrials(); },
    }, PAGE_SIZES.map((n) => h("option", { value: n, selected: n === view.tn }, `${n} / page`)));
    setChildren(trialsPager, size,
      h("span.muted", { id: "trials-range" }, `${from}–${to} of ${list.length}`),
      h("button", { id: "trials-prev", disabled: view.tp === 0, onclick: () => { view.tp--; save(); drawTrials(); } }, "‹ Prev"),
      h("button", { id: "trials-next", disabled: view.tp >= pages - 1, onclick: () => { view.tp++; save(); drawTrials(); } }, "Next ›"));
    compareBtn.textContent = selected.size ? `Compare (${selected.size})` : "Compare";
  }

  trialState.addEventListener("change", () => { view.tstate = trialState.value; view.tp = 0; save(); drawTrials(); });
  trialFilterCol.addEventListener("change", () => { view.tf = trialFilterCol.value; view.tp = 0; save(); drawTrials(); });
  trialFilter.addEventListener("input", () => { view.tv = trialFilter.value; view.tp = 0; save(); drawTrials(); });
  compareBtn.addEventListener("click", () => {
    if (compareIds().length < 1) { toast("Tick the trials to compare in the table first."); return; }
    drawCompare(true);
  });

  // ------------------------------------------------------------------ learning curves

  /** How many trials the experiment has (from the summary until the trials arrive). */
  const trialCount = () => state.trials.length || state.exp?.num_trials || 0;

  /** Which trials the chart shows ("top10", "top40", "all", "sel"); fills its picker. */
  function showChoice() {
    const n = trialCount();
    const options = [["top10", "top 10"], ["top40", "top 40"], ["all", `all ${n}`], ["sel", "ticked trials"]];
    const show = view.show || (n > TOP_N_ABOVE ? "top10" : "all");
    setChildren(curveShow, options.map(([v, label]) => h("option", { value: v, selected: v === show }, label)));
    return show;
  }

  function shownTrialIds() {
    const show = showChoice();
    if (show === "all") return null;
    if (show === "sel") return compareIds();
    const top = Number(show.slice(3));
    return rankTrials(state.trials, state.exp.smaller_is_better).slice(0, top).map((t) => t.id);
  }

  /** What a chart shows: group, metric and trials (null: all), trials in id order. */
  function curveKey(group, name, ids) {
    return `${group}|${name}|${ids ? ids.slice().sort((a, b) => a - b).join(",") : "all"}`;
  }

  /** The stream's summary request for the chart the view shows first ("" for none). */
  function summaryQuery() {
    // Training curves default to the first training metric, known only from the names.
    if (view.g !== "validation" && !(view.g === "training" && view.m)) return "";
    if (view.x !== "batches") return ""; // the summary's series count batches only
    const q = { chart_group: view.g, chart_max_points: MAX_POINTS };
    if (view.m) {
      if (!SUMMARY_NAME.test(view.m)) return "";
      q.chart_name = view.m;
    }
    if (view.show === "sel") {
      const ids = compareIds();
      if (!ids.length) return "";
      q.chart_trial_id = ids;
    } else if (view.show === "top10" || view.show === "top40") {
      q.chart_top = Number(view.show.slice(3));
    } else if (view.show !== "all") {
      Object.assign(q, { chart_top: 10, chart_all_up_to: TOP_N_ABOVE });
    }
    return query(q);
  }

  async function loadNames() {
    state.names = await get(`/experiments/${expId}/metrics/names`);
    if (closed) return;
    const names = (state.names[curveGroup.value] || []).filter((n) => !AXIS_KEYS.has(n));
    const current = curveName.value || view.m;
    const preferred = names.includes(current) ? current
      : names.includes(state.exp.searcher_metric) ? state.exp.searcher_metric : names[0] || "";
    setChildren(curveName, names.map((n) => h("option", { value: n, selected: n === preferred }, n)));
    curveName.value = preferred;
  }

  async function seriesOf(ids) {
    const body = await get(`/experiments/${expId}/metrics` + query({
      group: curveGroup.value, name: curveName.value, max_points: MAX_POINTS, trial_id: ids || undefined,
      x_axis: curveX.value === "batches" ? undefined : curveX.value,
    }));
    return body;
  }

  async function loadCurves() {
    if (!curveName.value) {
      curves.draw({ series: [], emptyText: `No ${curveGroup.value} metrics yet.` });
      return;
    }
    const ids = shownTrialIds();
    if (ids && !ids.length) {
      curves.draw({ series: [], emptyText: "Tick trials in the table to show them here." });
      return;
    }
    const key = curveKey(curveGroup.value, curveName.value, ids);
    if (key === state.summaryKey) {
      state.summaryKey = null; // drawn from the stream's summary: fetched next time
      return;
    }
    state.summaryKey = null;
    const body = await seriesOf(ids);
    if (closed) return;
    drawCurves(body, ids);
  }

  /**
   * The series of a body of GET /experiments/{id}/metrics for the chart: x by the chosen
   * axis (series without it are left out and counted), colours by trial rank above
   * RANK_COLORS_ABOVE curves (drawn worst first, so the best lie on top).
   */
  function chartSeries(body) {
    const axis = body.x_axis || "batches";
    let missing = 0;
    const out = [];
    for (const s of body.series) {
      const x = axis === "epochs" ? s.epochs : axis === "time" ? s.timestamps : s.batches;
      if (!x) { missing++; continue; }
      out.push({ id: s.trial_id, label: `trial ${s.trial_id}`, x, y: s.values });
    }
    if (out.length > RANK_COLORS_ABOVE && state.trials.length) {
      const ranked = rankTrials(state.trials, state.exp.smaller_is_better);
      const rank = new Map(ranked.map((t, i) => [t.id, ranked.length > 1 ? 1 - i / (ranked.length - 1) : 1]));
      for (const s of out) s.color = rankColor(rank.get(s.id) ?? 0);
      out.sort((a, b) => (rank.get(a.id) ?? 0) - (rank.get(b.id) ?? 0));
    }
    return { series: out, missing, axis };
  }

  /** Draw the learning curves from a body of GET /experiments/{id}/metrics. */
  function drawCurves(body, ids) {
    state.curves = { body, ids };
    const { series, missing, axis } = chartSeries(body);
    curves.draw({
      series, xLabel: axis === "time" ? "time" : axis, time: axis === "time",
      yLabel: `${body.group} ${body.name}`, log: curveLog.checked, smoothing: Number(curveSmooth.value),
    });
    const sampled = body.series.filter((s) => s.downsampled).length;
    const notes = [];
    if (ids) notes.push(`${body.series.length} of ${trialCount()} trials`);
    if (series.length > RANK_COLORS_ABOVE) notes.push("colour: rank by best metric (red best)");
    if (missing) notes.push(`${missing} without ${axis === "time" ? "report times" : "epochs"}`);
    if (sampled) notes.push(`${sampled} downsampled (peaks kept)`);
    if (curveLog.checked && curveBox.dataset.log === "0") notes.push("log scale needs values > 0");
    curveNote.textContent = notes.join("; ");
  }

  // ------------------------------------------------------------------ hyperparameter views

  function dims() {
    const e = state.exp;
    const { varying } = hparamNames(state.trials);
    const specs = e.config?.hyperparameters || {};
    const out = varying.map((k) => ({
      key: k, label: k, log: specs[k]?.type === "log",
      values: state.trials.map((t) => {
        const v = t.hparams?.[k];
        return v != null && typeof v === "object" ? JSON.stringify(v) : v;
      }),
    }));
    return out;
  }

  function drawHparams() {
    const e = state.exp;
    const isSearch = (e.config?.searcher?.name || "single") !== "single" && state.trials.length > 1;
    hpCard.hidden = !isSearch;
    if (!isSearch) return;
    const hp = dims();
    const metricDim = { key: "__metric", label: `best ${e.searcher_metric}`, log: false, values: state.trials.map((t) => t.best_validation) };
    view.hpv = hpView.value;
    pcBox.hidden = view.hpv !== "pcoords";
    scatterBox.hidden = view.hpv !== "scatter";
    heatBox.hidden = view.hpv !== "heatmap";
    const pick = (id, value, label) => {
      const sel = h("select", { id, "aria-label": label }, hp.map((d) => h("option", { value: d.key, selected: d.key === value }, d.key)));
      sel.addEventListener("change", () => { view[id === "hp-x" ? "hx" : id === "hp-y" ? "hy" : "hp"] = sel.value; save(); drawHparams(); });
      return sel;
    };
    if (!hp.length) {
      setChildren(hpControls);
      setChildren(pcBox, h("div.muted", null, "The trials share every hyperparameter value."));
      return;
    }
    if (view.hpv === "pcoords") {
      brushClear.hidden = !state.brushed;
      setChildren(hpControls, brushClear);
      pcoords.draw(state.trials.map((t) => t.id), [...hp, metricDim], { smallerIsBetter: e.smaller_is_better });
    } else if (view.hpv === "scatter") {
      const chosen = hp.find((d) => d.key === view.hp) || hp[0];
      setChildren(hpControls, pick("hp-one", chosen.key, "hyperparameter"));
      const pairs = chosen.values.map((v, i) => [v, state.trials[i].best_validation]).filter(([, m]) => m != null);
      const numeric = pairs.every(([v]) => typeof v === "number");
      const cats = numeric ? [] : [...new Set(pairs.map(([v]) => String(v)))];
      scatter.draw({
        x: pairs.map(([v]) => (numeric ? v : cats.indexOf(String(v)))), y: pairs.map(([, m]) => m),
        xLabel: numeric ? chosen.key : `${chosen.key} (${cats.map((c, i) => `${i}=${c}`).join(", ")})`,
        yLabel: `best ${e.searcher_metric}`, log: numeric && chosen.log,
      });
    } else {
      const x = hp.find((d) => d.key === view.hx) || hp[0];
      const y = hp.find((d) => d.key === view.hy) || hp[1] || hp[0];
      setChildren(hpControls, pick("hp-x", x.key, "columns"), pick("hp-y", y.key, "rows"));
      heat.draw(x, y, metricDim.values, { smallerIsBetter: e.smaller_is_better });
    }
  }
  hpView.addEventListener("change", () => { view.hpv = hpView.value; save(); drawHparams(); });

  // ------------------------------------------------------------------ comparison

  async function drawCompare(scroll) {
    const ids = compareIds();
    const trials = ids.map((id) => state.trials.find((t) => t.id === id)).filter(Boolean);
    compareCard.hidden = !trials.length;
    if (!trials.length) return;
    const names = hparamNames(trials).all;
    const metricNames = [...new Set(trials.flatMap((t) => Object.keys(t.latest_validation || {})))]
      .filter((n) => !AXIS_KEYS.has(n)).sort();
    const box = h("div.chart", { id: "compare-curves" });
    const differs = (f) => new Set(trials.map((t) => JSON.stringify(f(t)))).size > 1;
    setChildren(compareCard,
      h("div.toolbar", null, h("h2", null, `Comparing trials ${trials.map((t) => t.id).join(", ")}`), h("span.spacer"),
        h("button.small", { id: "compare-close", onclick: () => { compareCard.hidden = true; } }, "Close")),
      box,
      h("div.table-wrap", null, h("table.grid", { id: "compare-table" },
        h("thead", null, h("tr", null, h("th", null, ""), trials.map((t) => h("th.num", null, h("a", { href: `/trials/${t.id}` }, `trial ${t.id}`))))),
        h("tbody", null,
          h("tr", null, h("td.muted", null, "state"), trials.map((t) => h("td.num", null, badge(t.state)))),
          h("tr", null, h("td.muted", null, "batches"), trials.map((t) => h("td.num", null, fmtNum(t.total_batches)))),
          names.map((k) => h("tr", { class: differs((t) => t.hparams?.[k]) ? "diff" : null, dataset: { hparam: k } },
            h("td", null, k), trials.map((t) => h("td.num", null, hparamText(t.hparams?.[k]))))),
          metricNames.map((k) => h("tr", { dataset: { metric: k } }, h("td", null, `latest ${k}`),
            trials.map((t) => h("td.num", null, fmtNum(t.latest_validation?.[k])))))))));
    compareCurves.chart?.destroy();
    compareCurves.chart = new MultiLineChart(box, { height: 240 });
    if (scroll) compareCard.scrollIntoView({ block: "start" });
    if (!curveName.value) { compareCurves.chart.draw({ series: [], emptyText: "No metrics yet." }); return; }
    const body = await seriesOf(ids);
    if (closed) return;
    compareCurves.chart.draw({
      series: body.series.map((s) => ({ id: s.trial_id, label: `trial ${s.trial_id}`, x: s.batches, y: s.values })),
      yLabel: `${body.group} ${body.name}`, log: curveLog.checked,
    });
  }

  // ------------------------------------------------------------------ checkpoints

  function drawCheckpoints() {
    const list = state.checkpoints.slice().reverse();
    const metric = state.exp.searcher_metric;
    const pages = Math.max(1, Math.ceil(list.length / CKPT_PAGE));
    view.cp = Math.min(view.cp, pages - 1);
    const finished = TERMINAL.has(state.exp.state);
    const rows = [];
    for (const c of list.slice(view.cp * CKPT_PAGE, (view.cp + 1) * CKPT_PAGE)) {
      const meta = h("tr.meta-row", { hidden: true, dataset: { meta: c.uuid } }, h("td", { colSpan: 8 },
        h("pre.config", null, toYaml({ uuid: c.uuid, state: c.state, total_batches: c.total_batches,
          metadata: c.metadata || {}, resources: c.resources || {}, storage: c.storage_path || c.storage_dir || undefined }))));
      const register = h("tr.meta-row", { hidden: true, dataset: { register: c.uuid } }, h("td", { colSpan: 8 }));
      rows.push(h("tr", { dataset: { uuid: c.uuid, state: c.state } },
        h("td", null, h("code", { title: c.uuid }, c.uuid.slice(0, 8))),
        h("td.num", null, h("a", { href: `/trials/${c.trial_id}` }, c.trial_id)),
        h("td.num", null, fmtNum(c.total_batches)),
        h("td", null, badge(c.state)),
        h("td.num", null, fmtBytes(checkpointSize(c))),
        h("td.num", null, fmtNum(c.searcher_metric)),
        h("td", null, fmtTime(c.report_time)),
        h("td", null, h("span.actions", null,
          h("button.small", { dataset: { action: "metadata" }, onclick: () => { meta.hidden = !meta.hidden; } }, "Metadata"),
          c.state === "COMPLETED" ? h("a.button.small", { href: `/api/v1/checkpoints/${c.uuid}/download`, download: `${c.uuid}.tar.gz`, dataset: { action: "download" } }, "Download") : null,
          c.state === "COMPLETED" ? h("button.small", { dataset: { action: "register" }, title: "register it as a version of a model",
            onclick: () => { register.hidden = !register.hidden; if (!register.firstChild.firstChild) register.firstChild.append(registerForm(c)); } }, "Register") : null,
          finished && c.state !== "DELETED" && canExperiment(state.exp, P.UPDATE_EXPERIMENT) ? h("button.small.danger", {
            dataset: { action: "delete-checkpoint" },
            onclick: async () => {
              if (!await confirmAction(`Delete checkpoint ${c.uuid.slice(0, 8)} of trial ${c.trial_id} from storage?`, "Delete")) return;
              try {
                const answer = await del(`/checkpoints/${c.uuid}`);
                toast(answer?.state === "DELETING"
                  ? `Checkpoint ${c.uuid.slice(0, 8)}: its storage failed; the master deletes its files when the storage answers`
                  : `Checkpoint ${c.uuid.slice(0, 8)} deleted`);
                await loadCheckpoints();
              } catch (err) { toast(`Delete failed: ${err.message}`, "error"); }
            },
          }, "Delete") : null))));
      rows.push(meta, register);
    }
    setChildren(ckptBox, h("table.grid", { id: "checkpoints-table" },
      h("thead", null, h("tr", null, h("th", null, "UUID"), h("th.num", null, "Trial"),
        h("th.num", null, "Batches"), h("th", null, "State"), h("th.num", null, "Size"),
        h("th.num", null, metric), h("th", null, "Reported"), h("th", null, ""))),
      h("tbody", null, rows.length ? rows : h("tr", null, h("td.muted", { colSpan: 8 }, "No checkpoints yet.")))));
    setChildren(ckptPager, list.length > CKPT_PAGE ? [
      h("span.muted", null, `${view.cp * CKPT_PAGE + 1}–${Math.min(list.length, (view.cp + 1) * CKPT_PAGE)} of ${list.length}`),
      h("button", { disabled: view.cp === 0, onclick: () => { view.cp--; save(); drawCheckpoints(); } }, "‹ Prev"),
      h("button", { disabled: view.cp >= pages - 1, onclick: () => { view.cp++; save(); drawCheckpoints(); } }, "Next ›")] : null);
  }

  async function loadCheckpoints() {
    const { checkpoints } = await get(`/experiments/${expId}/checkpoints`);
    if (closed) return;
    state.checkpoints = checkpoints;
    drawCheckpoints();
  }

  // ------------------------------------------------------------------ model definition

  async function loadFiles() {
    try {
      const { files } = await get(`/experiments/${expId}/model_def/tree`);
      if (closed) return;
      const shown = files.filter((f) => f.type === "file");
      setChildren(filesList, shown.length ? shown.slice(0, 500).map((f) => h("button.link-file", {
        type: "button", dataset: { path: f.path },
        onclick: async () => {
          for (const b of filesList.querySelectorAll("button")) b.classList.toggle("on", b.dataset.path === f.path);
          try {
            filePre.textContent = f.size > 1_000_000 ? `${f.path}: ${fmtBytes(f.size)}, too large to show; download the model definition.`
              : await getText(`/experiments/${expId}/model_def/file${query({ path: f.path })}`);
          } catch (err) { filePre.textContent = `Could not read ${f.path}: ${err.message}`; }
          filePre.hidden = false;
          filePre.dataset.path = f.path;
        },
      }, f.path, h("span.muted.small", null, ` ${fmtBytes(f.size)}`))) : h("div.muted", null, "No files."));
    } catch (err) {
      setChildren(filesList, h("div.muted", null, err.status === 404 ? "Created without a context directory." : `Could not list files: ${err.message}`));
    }
  }

  // ------------------------------------------------------------------ wiring

  const refresh = throttle(async () => {
    try {
      // The first chart first: on the first load of a validation chart the searcher
      // metric is drawn while the metric names are still being read; checkpoints and
      // the comparison follow.
      const names = loadNames();
      if (!curveName.value && curveGroup.value === "validation" && state.exp.searcher_metric) {
        const m = view.m || state.exp.searcher_metric;
        setChildren(curveName, h("option", { value: m, selected: true }, m));
        curveName.value = m;
        const before = curveName.value;
        await Promise.all([names, loadCurves()]);
        if (curveName.value !== before) await loadCurves();
      } else {
        await names;
        await loadCurves();
      }
      await loadCheckpoints();
      if (!compareCard.hidden) await drawCompare(false);
    } catch (err) {
      curveNote.textContent = `could not load: ${err.message}`;
    }
  }, 2000);

  curveGroup.addEventListener("change", async () => { view.g = curveGroup.value; save(); await loadNames(); await loadCurves(); });
  curveName.addEventListener("change", () => { view.m = curveName.value; save(); loadCurves(); });
  curveShow.addEventListener("change", () => { view.show = curveShow.value; save(); loadCurves(); });
  curveLog.addEventListener("change", () => { view.log = curveLog.checked; save(); loadCurves(); });
  curveX.addEventListener("change", () => { view.x = curveX.value; save(); state.summaryKey = null; loadCurves(); });
  let smoothFrame = 0;
  curveSmooth.addEventListener("input", () => {
    view.sm = Number(curveSmooth.value);
    curveSmoothValue.textContent = curveSmooth.value;
    if (smoothFrame) return;
    smoothFrame = requestAnimationFrame(() => {
      smoothFrame = 0;
      save();
      if (state.curves) drawCurves(state.curves.body, state.curves.ids); // no new request
    });
  });

  let hpSignature = "";
  const close = stream(`/stream/experiments/${expId}${summaryQuery()}`, {
    summary: (body) => {
      if (state.exp !== null || closed) return; // a reconnection's: the page is drawn
      state.exp = body.experiment;
      drawHeader();
      const chart = body.chart;
      if (!curveName.value) {
        setChildren(curveName, h("option", { value: chart.name, selected: true }, chart.name));
        curveName.value = chart.name;
      }
      if (curveGroup.value !== chart.group || curveName.value !== chart.name) return;
      showChoice();
      const ids = body.chart_trial_ids;
      drawCurves(chart, ids);
      state.summaryKey = curveKey(chart.group, chart.name, ids);
    },
    experiment: (body) => {
      const first = !state.loaded;
      state.loaded = true;
      state.exp = body.experiment;
      state.trials = body.trials;
      drawHeader();
      drawTrials();
      const hpSig = body.trials.map((t) => `${t.id}:${t.best_validation}`).join(",");
      if (hpSig !== hpSignature) drawHparams();
      hpSignature = hpSig;
      const signature = body.trials.map((t) => `${t.id}:${t.total_batches}:${t.latest_checkpoint}:${t.state}`).join(",");
      if (first || signature !== state.signature) {
        refresh();
        loadSearch();
      }
      state.signature = signature;
      // Drawn from the summary before the trials came: colour the curves by rank now.
      if (first && state.curves && state.curves.body.series.length > RANK_COLORS_ABOVE) {
        drawCurves(state.curves.body, state.curves.ids);
      }
      if (first) {
        loadFiles();
        if (compareIds().length) drawCompare(false);
      }
    },
    gone: () => {
      setChildren(header, h("div.error-box", null, `Experiment ${expId} was deleted.`));
    },
  });
  // A missing experiment sends no event: ask after a while whether it exists (not at
  // once: that read costs as much as the stream's first event on a big experiment).
  const probe = setTimeout(() => {
    if (state.exp || closed) return;
    get(`/experiments/${expId}`).catch((err) => {
      if (err.status === 404 && !closed) {
        setChildren(root, h("div.card", null, h("div.error-box", null, `Experiment ${expId} not found.`)));
      }
    });
  }, 1500);

  return () => {
    closed = true;
    clearTimeout(probe);
    close();
    curves.destroy();
    scatter.destroy();
    pareto.destroy();
    compareCurves.chart?.destroy();
  };
}
