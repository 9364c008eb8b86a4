// Page 5: tasks (commands, notebooks, shells, TensorBoards): one launch form for every
// type (pages/launch.js), each task with links to the
// experiments and trials it covers, Open (a notebook or TensorBoard through the
// master's proxy, a shell's browser terminal), Logs and Kill.
// Polls GET /api/v1/tasks every 2 s; each running task's CPU and memory (its agent's
// samples of the process tree, GET /tasks/{id}/resource_metrics) every 10 s, flagged
// when above the task's resources.memory. `/tasks?launch=FAMILY&experiment_ids=1,2` opens the
// form for that type with those experiments (the experiment page's Notebook button).

import { csrfHeaders, get, post } from "../api.js";
import { P, can, canOn } from "../perms.js";
import { badge, fmtBytes, fmtTime, h, setChildren, toast } from "../util.js";
import { launchForm } from "./launch.js";

const ENDED = new Set(["COMPLETED", "ERROR", "CANCELED"]);

/**
 * Start a task: POST /api/v1/{family} with the multipart form of docs/protocol.md.
 * @param {string} family  "notebooks", "shells", "commands" or "tensorboards"
 * @param {object} fields  form fields: strings as they are, a Blob as the file
 *   (`context`: a gzipped tar), anything else as JSON
 * @returns {Promise<object>} the master's answer ({task, warnings, reused})
 * @throws {Error} with the master's detail when it refuses
 */
export async function launch(family, fields) {
  const form = new FormData();
  for (const [k, v] of Object.entries(fields)) {
    if (v instanceof Blob) form.append(k, v, `${k}.tar.gz`);
    else form.append(k, typeof v === "string" ? v : JSON.stringify(v));
  }
  const resp = await fetch(`/api/v1/${family}`, {
    method: "POST", body: form, credentials: "same-origin", headers: await csrfHeaders(),
  });
  const data = await resp.json().catch(() => null);
  if (!resp.ok) {
    let detail = (data && data.detail) || `${resp.status} ${resp.statusText}`;
    // The fields the master names, where its one line does not say them already.
    const errors = ((data && Array.isArray(data.errors)) ? data.errors : []).filter((e) => !detail.includes(e.message));
    if (errors.length) detail += ": " + errors.map((e) => (e.field ? `${e.field}: ${e.message}` : e.message)).join("; ");
    throw new Error(detail);
  }
  return data;
}

/** The URL a service opens at (JupyterLab's /lab, TensorBoard's root, a shell's terminal). */
export function openUrl(task) {
  return task.type === "NOTEBOOK" ? `/proxy/${task.id}/lab` : `/proxy/${task.id}/`;
}

const FAMILY = { COMMAND: "commands", NOTEBOOK: "notebooks", SHELL: "shells", TENSORBOARD: "tensorboards" };

/** Links to the experiments and trials a task covers (null when none). */
function covers(task) {
  const links = [
    ...(task.experiment_ids || []).map((id) => h("a", { href: `/experiments/${id}`, dataset: { experiment: id } }, `Experiment ${id}`)),
    ...(task.trial_ids || []).map((id) => h("a", { href: `/trials/${id}`, dataset: { trial: id } }, `Trial ${id}`)),
  ];
  if (!links.length) return h("span.muted", null, "–");
  return links.flatMap((a, i) => (i ? [", ", a] : [a]));
}

/** Draw the tasks page into `root`; returns its cleanup. */
export function render(root) {
  const params = new URLSearchParams(window.location.search);
  const table = h("div.table-wrap", { id: "tasks" });
  const logsBox = h("pre.logs", { id: "task-logs", hidden: true });
  const formCard = h("div.card", { id: "launch-card", hidden: true });
  const toggle = h("button.primary", { id: "launch-open", type: "button", "aria-expanded": "false", onclick: () => showForm() },
    "Launch a task");
  setChildren(root,
    h("div.toolbar", null, h("h1", null, "Tasks"), h("span.spacer"),
      // Launched into the Uncategorized workspace (1): only who may create tasks there.
      can(P.CREATE_NSC, 1) ? toggle : null),
    can(P.CREATE_NSC, 1) ? formCard : null,
    h("div.card", null, table),
    h("div.card", null, h("h2", null, "Logs"), logsBox));

  let formDrawn = false;
  function showForm(initial = {}) {
    if (formDrawn && !formCard.hidden && !initial.family) {
      formCard.hidden = true;
      toggle.setAttribute("aria-expanded", "false");
      return;
    }
    formCard.hidden = false;
    toggle.setAttribute("aria-expanded", "true");
    if (formDrawn) return;
    formDrawn = true;
    setChildren(formCard, h("h2", null, "Launch a task"), launchForm({
      launch,
      initial,
      onLaunched: (task, reused) => {
        toast(reused ? `TensorBoard ${task.id} over the same trials is open already`
          : `Launched ${task.type.toLowerCase()} ${task.id}${task.type === "COMMAND" ? "" : ": Open appears when it is ready"}`);
        refresh();
      },
    }));
  }
  if (params.get("launch")) {
    const ids = (params.get("experiment_ids") || "").split(/[\s,]+/).filter(Boolean).map(Number)
      .filter((n) => Number.isInteger(n) && n > 0);
    showForm({ family: params.get("launch"), experimentIds: ids });
  }

  async function showLogs(task) {
    logsBox.hidden = false;
    const { logs } = await get(`/tasks/${task.id}/logs?limit=10000`);
    logsBox.dataset.task = task.id;
    logsBox.textContent = logs.map((l) => l.log).join("\n") || "(no lines yet)";
  }

  // task id -> its GET /tasks/{id}/resource_metrics answer (latest sample, request, flag)
  const usage = new Map();
  let usageAt = 0;
  async function loadUsage(tasks) {
    if (Date.now() - usageAt < 10000) return;
    usageAt = Date.now();
    const live = tasks.filter((t) => !ENDED.has(t.state));
    await Promise.all(live.map(async (t) => {
      try { usage.set(t.id, await get(`/tasks/${t.id}/resource_metrics?limit=1`)); } catch { /* next time */ }
    }));
  }

  function usageCell(t) {
    const u = usage.get(t.id);
    const s = u?.latest;
    if (!s) return h("td.muted", { dataset: { usage: t.id } }, "–");
    const cpu = s.cpu_percent == null ? "–" : `${Math.round(s.cpu_percent)}%`;
    const gpu = s.gpu_memory_bytes ? ` · GPU ${fmtBytes(s.gpu_memory_bytes)}` : "";
    const title = `CPU (100% = one core), resident memory${u.memory_request_bytes != null
      ? ` (requested ${fmtBytes(u.memory_request_bytes)})` : ""}; peak ${fmtBytes(u.peak_rss_bytes || 0)}`;
    return h("td", { title, dataset: { usage: t.id, over: u.over_request ? "1" : "0" } },
      `CPU ${cpu} · ${fmtBytes(s.rss_bytes)}${gpu}`,
      u.over_request ? h("span.badge.ERROR", { dataset: { overRequest: t.id } }, "over its memory request") : null);
  }

  function draw(tasks) {
    setChildren(table, h("table.grid", { id: "tasks-table" },
      h("thead", null, h("tr", null, ["ID", "Type", "Description", "Covers", "Owner", "State", "Resources", "Usage", "Started", ""]
        .map((t) => h("th", null, t)))),
      h("tbody", null, tasks.length ? tasks.slice().reverse().map((t) => h("tr", { dataset: { task: t.id, state: t.state, family: FAMILY[t.type] } },
        h("td", null, t.id), h("td", null, t.type), h("td.wrap.task-desc", null, t.description),
        h("td.wrap", { dataset: { covers: t.id } }, covers(t)),
        h("td", null, t.owner), h("td", null, badge(t.state), t.exit_message ? h("div.muted.small", null, t.exit_message) : null),
        h("td", { title: "resource pool, slots" }, `${t.resource_pool}, ${t.slots} slot${t.slots === 1 ? "" : "s"}`),
        usageCell(t),
        h("td", null, fmtTime(t.start_time)),
        h("td", null,
          t.service_url && t.ready && canOn(P.UPDATE_NSC, "task", t.workspace_id, t.user_id) ? h("a.button.small", {
            href: openUrl(t), target: "_blank", rel: "noopener", dataset: { open: t.id },
            title: t.type === "SHELL" ? "a terminal in a new tab" : "in a new tab",
          }, t.type === "SHELL" ? "Open terminal" : "Open") : null, " ",
          h("button.small", { type: "button", dataset: { logs: t.id }, onclick: () => showLogs(t) }, "Logs"), " ",
          ENDED.has(t.state) || !canOn(P.UPDATE_NSC, "task", t.workspace_id, t.user_id) ? null : h("button.small.danger", {
            type: "button", dataset: { kill: t.id },
            onclick: async () => {
              try { await post(`/tasks/${t.id}/kill`); toast(`Killed task ${t.id}`); refresh(); } catch (err) {
                toast(`Kill failed: ${err.message}`, "error");
              }
            },
          }, "Kill"))))
        : h("tr", null, h("td.muted", { colSpan: 10 }, "No tasks yet.")))));
  }

  let stopped = false;
  async function refresh() {
    try {
      const { tasks } = await get("/tasks");
      await loadUsage(tasks);
      draw(tasks);
    } catch { /* shown on the next poll */ }
  }
  refresh();
  const timer = setInterval(() => { if (!stopped) refresh(); }, 2000);
  return () => { stopped = true; clearInterval(timer); };
}
