// Page 1: the experiments table, live through /stream/experiments. Filters, sort and
// page are the master's (GET /experiments' search parameters, docs/protocol.md
// "Searching experiments"); the page asks only for the columns it shows. Hyperparameters
// can be added as columns; 2 to 10 ticked experiments open the compare view.

import { get, query, stream } from "../api.js";
import {
  EXPERIMENT_STATES, badge, durationOf, fmtDuration, fmtNum, fmtTime, h, setChildren, throttle,
} from "../util.js";
import { readState, writeState } from "../urlstate.js";
import { actionButtons } from "./actions.js";

const PAGE_SIZES = [10, 20, 50, 100];
/** The most experiments the compare view takes. */
export const MAX_COMPARE = 10;

// [key, label, server sort key or null]
const COLUMNS = [
  ["id", "ID", "id", "num"],
  ["name", "Name", "name"],
  ["owner", "Owner", "owner"],
  ["state", "State", "state"],
  ["progress", "Progress", "progress"],
  ["num_trials", "Trials", "num_trials", "num"],
  ["best", "Best metric", "best_searcher_metric", "num"],
  ["start_time", "Started", "start_time"],
  ["duration", "Duration", null, "num"],
];
/** Optional columns besides hyperparameters: [key, label, server sort key]. */
const EXTRA = [["searcher", "Searcher", "searcher"], ["project_name", "Project", "project_id"]];
const FIELDS = [
  "id", "name", "owner", "state", "archived", "progress", "num_trials", "best_searcher_metric",
  "searcher_metric", "start_time", "end_time", "labels", "hparams", "user_id", "workspace_id",
];

const splitConds = (text) => text.split(",").map((s) => s.trim()).filter(Boolean);

/** Draw the experiments page into `root`; returns its cleanup. */
export function render(root) {
  const DEFAULTS = {
    name: "", state: "", owner: "", label: "", hp: "", metric: "", archived: false,
    sort: "id", desc: true, page: 0, pageSize: 20, cols: "",
  };
  const view = { experiments: [], total: 0, error: "", ...readState(DEFAULTS) };
  const picked = new Set();
  const seenHparams = new Set();
  const save = () => writeState(view, DEFAULTS);
  let close = null;

  const refollow = () => { view.page = 0; follow(); };
  const typed = throttle(refollow, 300);
  const textInput = (key, id, placeholder, label) => {
    const el = h("input", {
      type: "search", placeholder, value: view[key], "aria-label": label, id,
      oninput: () => { view[key] = el.value; typed(); },
    });
    return el;
  };
  const nameInput = textInput("name", "filter-name", "Filter by name", "name filter");
  const ownerInput = textInput("owner", "filter-owner", "Owner", "owner filter");
  const labelInput = textInput("label", "filter-label", "Label", "label filter");
  const hpInput = textInput("hp", "filter-hp", "lr>=0.001, optimizer=adam", "hyperparameter filter");
  const metricInput = textInput("metric", "filter-metric", "validation_loss<0.3", "best metric filter");
  const stateSelect = h("select", {
    "aria-label": "state filter", id: "filter-state",
    onchange: () => { view.state = stateSelect.value; refollow(); },
  }, h("option", { value: "" }, "All states"),
  EXPERIMENT_STATES.map((s) => h("option", { value: s, selected: s === view.state }, s)));
  const archivedBox = h("input", {
    type: "checkbox", id: "show-archived", checked: view.archived,
    onchange: () => { view.archived = archivedBox.checked; refollow(); },
  });
  const columnsBox = h("div.column-choice", { id: "column-choice" });
  const columnsMenu = h("details.columns", { id: "columns-menu" }, h("summary", null, "Columns"), columnsBox);
  const compareButton = h("button", {
    id: "compare-experiments", disabled: true,
    onclick: () => {
      const ids = [...picked].sort((a, b) => a - b);
      window.history.pushState(null, "", `/compare?ids=${ids.join(",")}`);
      window.dispatchEvent(new PopStateEvent("popstate"));
    },
  }, "Compare");
  const table = h("table.grid", { id: "experiments-table" });
  const pager = h("div.pager");
  const summary = h("span.muted.small");
  const problem = h("div.error-box.small", { id: "search-error", hidden: true });

  setChildren(root,
    h("div.toolbar", null, h("h1", null, "Experiments"), h("span.spacer"), summary),
    h("div.card", null,
      h("div.toolbar", null, nameInput, stateSelect, ownerInput, labelInput,
        h("label", null, archivedBox, " Show archived")),
      h("div.toolbar", null, hpInput, metricInput, columnsMenu, h("span.spacer"), compareButton),
      problem,
      h("div.table-wrap", null, table), pager));

  const chosen = () => view.cols.split(",").filter(Boolean);

  function drawColumnChoice() {
    const names = [...seenHparams].sort();
    for (const c of chosen()) if (c.startsWith("hp.") && !names.includes(c.slice(3))) names.push(c.slice(3));
    const options = [...EXTRA.map(([k, label]) => [k, label]), ...names.map((n) => [`hp.${n}`, n])];
    setChildren(columnsBox, options.map(([key, label]) => h("label.small", null,
      h("input", {
        type: "checkbox", checked: chosen().includes(key), dataset: { column: key },
        onchange: (ev) => {
          const cols = chosen().filter((c) => c !== key);
          if (ev.target.checked) cols.push(key);
          view.cols = cols.join(",");
          follow();
        },
      }), ` ${label}`)));
  }

  function labelsOf(e) {
    return (e.labels || e.config?.labels || []).map(String);
  }

  function extraColumns() {
    return chosen().map((key) => {
      const extra = EXTRA.find((c) => c[0] === key);
      if (extra) return [key, extra[1], extra[2], null, (e) => e[key] ?? ""];
      const name = key.slice(3);
      return [key, name, key, "num", (e) => {
        const v = e.hparams?.[name];
        return v == null ? "" : typeof v === "number" ? fmtNum(v) : String(v);
      }];
    });
  }

  function header(key, label, sortKey, cls) {
    return h("th", {
      class: [sortKey ? "sortable" : null, cls, view.sort === sortKey && sortKey ? (view.desc ? "sorted-desc" : "sorted-asc") : null]
        .filter(Boolean).join(" ") || null,
      dataset: { sort: key, column: key },
      onclick: sortKey ? () => {
        if (view.sort === sortKey) view.desc = !view.desc;
        else { view.sort = sortKey; view.desc = sortKey === "id" || sortKey === "start_time"; }
        follow();
      } : null,
    }, label);
  }

  function draw() {
    save();
    for (const e of view.experiments) for (const k of Object.keys(e.hparams || {})) seenHparams.add(k);
    drawColumnChoice();
    const extras = extraColumns();
    const head = h("tr", null, h("th", null, ""),
      COLUMNS.map(([key, label, sortKey, cls]) => header(key, label, sortKey, cls)),
      extras.map(([key, label, sortKey, cls]) => header(key, label, sortKey, cls)),
      h("th", null, "Actions"));
    const body = view.experiments.map((e) => h("tr", { dataset: { id: e.id, state: e.state } },
      h("td", null, h("input", {
        type: "checkbox", "aria-label": `compare experiment ${e.id}`, dataset: { compare: e.id },
        checked: picked.has(e.id),
        onchange: (ev) => { if (ev.target.checked) picked.add(e.id); else picked.delete(e.id); drawCompare(); },
      })),
      h("td.num", null, h("a", { href: `/experiments/${e.id}` }, e.id)),
      h("td", null, h("a", { href: `/experiments/${e.id}` }, e.name),
        e.archived ? h("span.badge.archived", null, "archived") : null,
        labelsOf(e).map((l) => h("span.badge.label", null, l))),
      h("td", null, e.owner),
      h("td", null, badge(e.state)),
      h("td", null, h("span.progress", { title: `${Math.round(e.progress * 100)}%` },
        h("span", { style: { width: `${Math.round(e.progress * 100)}%` } })),
      h("span.small.muted", null, ` ${Math.round(e.progress * 100)}%`)),
      h("td.num", null, e.num_trials),
      h("td.num", { title: e.searcher_metric || "" }, fmtNum(e.best_searcher_metric),
        e.searcher_metric ? h("span.muted.small", null, ` ${e.searcher_metric}`) : null),
      h("td", null, fmtTime(e.start_time)),
      h("td.num", null, fmtDuration(durationOf(e.start_time, e.end_time))),
      extras.map(([key, , , cls, cell]) => h(cls ? "td.num" : "td", { dataset: { column: key } }, cell(e))),
      h("td", null, actionButtons(e, { small: true })),
    ));
    if (!body.length) {
      const filtered = view.name || view.state || view.owner || view.label || view.hp || view.metric;
      body.push(h("tr", null, h("td.muted", { colSpan: COLUMNS.length + extras.length + 2 },
        filtered ? "No experiment matches the filters." :
          "No experiments yet: create one with `det experiment create config.yaml context/`.")));
    }
    setChildren(table, h("thead", null, head), h("tbody", null, body));
    const pages = Math.max(1, Math.ceil(view.total / view.pageSize));
    const from = view.total ? view.page * view.pageSize + 1 : 0;
    const to = Math.min(view.total, (view.page + 1) * view.pageSize);
    const sizeSelect = h("select", {
      "aria-label": "page size",
      onchange: () => { view.pageSize = Number(sizeSelect.value); refollow(); },
    }, PAGE_SIZES.map((n) => h("option", { value: n, selected: n === view.pageSize }, `${n} / page`)));
    setChildren(pager, sizeSelect,
      h("span.muted", { id: "page-range" }, `${from}–${to} of ${view.total}`),
      h("button", { disabled: view.page === 0, onclick: () => { view.page--; follow(); } }, "‹ Prev"),
      h("button", { disabled: view.page >= pages - 1, onclick: () => { view.page++; follow(); } }, "Next ›"));
    summary.textContent = `${view.total} experiments`;
    problem.hidden = !view.error;
    problem.textContent = view.error;
    drawCompare();
  }

  function drawCompare() {
    const n = picked.size;
    compareButton.disabled = n < 2 || n > MAX_COMPARE;
    compareButton.textContent = n ? `Compare (${n})` : "Compare";
    compareButton.title = n > MAX_COMPARE ? `at most ${MAX_COMPARE} experiments` : "tick 2 to 10 experiments";
  }

  function params() {
    const sortKey = view.sort;
    const extraFields = chosen().filter((c) => !c.startsWith("hp."));
    return {
      archived: view.archived ? "all" : "false",
      limit: view.pageSize,
      offset: view.page * view.pageSize,
      sort_by: sortKey,
      order_by: view.desc ? "desc" : "asc",
      name: view.name.trim() || null,
      state: view.state || null,
      owner: view.owner.trim() || null,
      label: splitConds(view.label),
      hp: splitConds(view.hp),
      best_metric: splitConds(view.metric),
      fields: [...FIELDS, ...extraFields].join(","),
    };
  }

  let generation = 0;

  /** (Re)open the stream for the current filters; typed conditions are checked first
   * with one GET, so that a malformed one shows the master's 400 instead of a stream
   * that keeps failing. */
  async function follow() {
    save();
    if (close) { close(); close = null; }
    const p = params();
    const mine = ++generation;
    table.dataset.loaded = "";
    if (p.hp.length || p.best_metric.length) {
      try {
        await get(`/experiments${query({ ...p, limit: 1, offset: 0, fields: "id" })}`);
      } catch (err) {
        if (mine !== generation) return;
        Object.assign(view, { error: err.message, experiments: [], total: 0 });
        table.dataset.loaded = "1";
        draw();
        return;
      }
      if (mine !== generation) return;
    }
    close = stream(`/stream/experiments${query(p)}`, {
      experiments: (body) => {
        Object.assign(view, { experiments: body.experiments, total: body.total, error: "" });
        table.dataset.loaded = "1";
        draw();
      },
    });
  }

  draw();
  follow();
  return () => { if (close) close(); };
}
