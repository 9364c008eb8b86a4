// Page 1: the experiments table, live through /stream/experiments.

import { query, stream } from "../api.js";
import {
  EXPERIMENT_STATES, badge, durationOf, fmtDuration, fmtNum, fmtTime, h, setChildren,
} from "../util.js";
import { readState, writeState } from "../urlstate.js";
import { actionButtons } from "./actions.js";

const PAGE_SIZES = [10, 20, 50, 100];

const COLUMNS = [
  ["id", "ID", (e) => e.id, "num"],
  ["name", "Name", (e) => e.name.toLowerCase()],
  ["owner", "Owner", (e) => e.owner],
  ["state", "State", (e) => e.state],
  ["progress", "Progress", (e) => e.progress],
  ["num_trials", "Trials", (e) => e.num_trials, "num"],
  ["best", "Best metric", (e) => e.best_searcher_metric, "num"],
  ["start_time", "Started", (e) => e.start_time],
  ["duration", "Duration", (e) => durationOf(e.start_time, e.end_time), "num"],
];

/** Draw the experiments page into `root`; returns its cleanup. */
export function render(root) {
  const DEFAULTS = { name: "", state: "", owner: "", label: "", archived: false, sort: "id", desc: true, page: 0, pageSize: 20 };
  const view = { experiments: [], ...readState(DEFAULTS) };
  const save = () => writeState(view, DEFAULTS);
  let close = null;

  const nameInput = h("input", {
    type: "search", placeholder: "Filter by name", value: view.name, "aria-label": "name filter",
    id: "filter-name",
    oninput: () => { view.name = nameInput.value; view.page = 0; draw(); },
  });
  const stateSelect = h("select", {
    "aria-label": "state filter", id: "filter-state",
    onchange: () => { view.state = stateSelect.value; view.page = 0; draw(); },
  }, h("option", { value: "" }, "All states"),
  EXPERIMENT_STATES.map((s) => h("option", { value: s, selected: s === view.state }, s)));
  const ownerSelect = h("select", {
    "aria-label": "owner filter", id: "filter-owner",
    onchange: () => { view.owner = ownerSelect.value; view.page = 0; draw(); },
  });
  const labelSelect = h("select", {
    "aria-label": "label filter", id: "filter-label",
    onchange: () => { view.label = labelSelect.value; view.page = 0; draw(); },
  });
  const archivedBox = h("input", {
    type: "checkbox", id: "show-archived", checked: view.archived,
    onchange: () => { view.archived = archivedBox.checked; view.page = 0; follow(); },
  });
  const table = h("table.grid", { id: "experiments-table" });
  const pager = h("div.pager");
  const summary = h("span.muted.small");

  setChildren(root,
    h("div.toolbar", null, h("h1", null, "Experiments"), h("span.spacer"), summary),
    h("div.card", null,
      h("div.toolbar", null, nameInput, stateSelect, ownerSelect, labelSelect,
        h("label", null, archivedBox, " Show archived")),
      h("div.table-wrap", null, table), pager));

  function rows() {
    const name = view.name.trim().toLowerCase();
    let list = view.experiments.filter((e) =>
      (!name || e.name.toLowerCase().includes(name) || String(e.id) === name) &&
      (!view.state || e.state === view.state) &&
      (!view.owner || e.owner === view.owner) &&
      (!view.label || labelsOf(e).includes(view.label)));
    const col = COLUMNS.find((c) => c[0] === view.sort);
    list = list.slice().sort((a, b) => {
      const x = col[2](a), y = col[2](b);
      if (x == null && y == null) return 0;
      if (x == null) return 1;
      if (y == null) return -1;
      const c = x < y ? -1 : x > y ? 1 : 0;
      return view.desc ? -c : c;
    });
    return list;
  }

  function labelsOf(e) {
    return (e.labels || e.config?.labels || []).map(String);
  }

  function draw() {
    save();
    const owners = [...new Set(view.experiments.map((e) => e.owner))].sort();
    if (view.owner && !owners.includes(view.owner)) owners.push(view.owner);
    setChildren(ownerSelect, h("option", { value: "" }, "All owners"),
      owners.map((o) => h("option", { value: o, selected: o === view.owner }, o)));
    const labels = [...new Set(view.experiments.flatMap(labelsOf))].sort();
    if (view.label && !labels.includes(view.label)) labels.push(view.label);
    setChildren(labelSelect, h("option", { value: "" }, "All labels"),
      labels.map((l) => h("option", { value: l, selected: l === view.label }, l)));
    const list = rows();
    const pages = Math.max(1, Math.ceil(list.length / view.pageSize));
    view.page = Math.min(view.page, pages - 1);
    const shown = list.slice(view.page * view.pageSize, (view.page + 1) * view.pageSize);
    const head = h("tr", null, COLUMNS.map(([key, label, , cls]) => h("th", {
      class: ["sortable", cls, view.sort === key ? (view.desc ? "sorted-desc" : "sorted-asc") : null]
        .filter(Boolean).join(" "),
      dataset: { sort: key },
      onclick: () => {
        if (view.sort === key) view.desc = !view.desc;
        else { view.sort = key; view.desc = key === "id" || key === "start_time"; }
        draw();
      },
    }, label)), h("th", null, "Actions"));
    const body = shown.map((e) => h("tr", { dataset: { id: e.id, state: e.state } },
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
      h("td", null, actionButtons(e, { small: true })),
    ));
    if (!body.length) {
      body.push(h("tr", null, h("td.muted", { colSpan: COLUMNS.length + 1 },
        view.experiments.length ? "No experiment matches the filters." :
          "No experiments yet: create one with `det experiment create config.yaml context/`.")));
    }
    setChildren(table, h("thead", null, head), h("tbody", null, body));
    const from = list.length ? view.page * view.pageSize + 1 : 0;
    const to = Math.min(list.length, (view.page + 1) * view.pageSize);
    const sizeSelect = h("select", {
      "aria-label": "page size",
      onchange: () => { view.pageSize = Number(sizeSelect.value); view.page = 0; draw(); },
    }, PAGE_SIZES.map((n) => h("option", { value: n, selected: n === view.pageSize }, `${n} / page`)));
    setChildren(pager, sizeSelect,
      h("span.muted", { id: "page-range" }, `${from}–${to} of ${list.length}`),
      h("button", { disabled: view.page === 0, onclick: () => { view.page--; draw(); } }, "‹ Prev"),
      h("button", { disabled: view.page >= pages - 1, onclick: () => { view.page++; draw(); } }, "Next ›"));
    const active = view.experiments.filter((e) => e.state === "ACTIVE").length;
    summary.textContent = `${view.experiments.length} experiments, ${active} active`;
  }

  function follow() {
    if (close) close();
    const q = query({ archived: view.archived ? "all" : "false", limit: 1000 });
    close = stream(`/stream/experiments${q}`, {
      experiments: (body) => {
        view.experiments = body.experiments;
        table.dataset.loaded = "1";
        draw();
      },
    });
  }

  draw();
  follow();
  return () => { if (close) close(); };
}
