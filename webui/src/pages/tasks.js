// Page 5: tasks (commands, notebooks, shells, TensorBoards): launch a notebook or a
// TensorBoard, open a service through the master's proxy, kill, and read logs.
// Polls GET /api/v1/tasks every 2 s.

import { csrfHeaders, get, post } from "../api.js";
import { P, can, canOn } from "../perms.js";
import { badge, fmtTime, h, setChildren, toast } from "../util.js";

const ENDED = new Set(["COMPLETED", "ERROR", "CANCELED"]);

/**
 * Start a task: POST /api/v1/{family} with the multipart form of docs/protocol.md.
 * @param {string} family  "notebooks" or "tensorboards"
 * @param {object} fields  form fields (objects are sent as JSON)
 * @returns {Promise<object>} the master's answer
 */
export async function launch(family, fields) {
  const form = new FormData();
  for (const [k, v] of Object.entries(fields)) {
    form.append(k, typeof v === "string" ? v : JSON.stringify(v));
  }
  const resp = await fetch(`/api/v1/${family}`, {
    method: "POST", body: form, credentials: "same-origin", headers: await csrfHeaders(),
  });
  const data = await resp.json().catch(() => null);
  if (!resp.ok) throw new Error((data && data.detail) || `${resp.status} ${resp.statusText}`);
  return data;
}

/** The URL a service opens at (JupyterLab's /lab, TensorBoard's root). */
export function openUrl(task) {
  return task.type === "NOTEBOOK" ? `/proxy/${task.id}/lab` : `/proxy/${task.id}/`;
}

/** Draw the tasks page into `root`; returns its cleanup. */
export function render(root) {
  const table = h("div.table-wrap", { id: "tasks" });
  const logsBox = h("pre.logs", { id: "task-logs", hidden: true });
  const expInput = h("input", { id: "tb-experiments", placeholder: "experiment ids, e.g. 1 2", size: 18 });
  setChildren(root,
    h("div.toolbar", null, h("h1", null, "Tasks"), h("span.spacer"),
      // Launched into the Uncategorized workspace (1): only who may create tasks there.
      !can(P.CREATE_NSC, 1) ? null : h("button.primary", {
        id: "launch-notebook", type: "button",
        onclick: async () => {
          try {
            const { task } = await launch("notebooks", { config: "resources:\n  slots: 0\n" });
            toast(`Launched notebook ${task.id}`);
            refresh();
          } catch (err) { toast(`Launching a notebook failed: ${err.message}`, "error"); }
        },
      }, "Launch notebook"),
      !can(P.CREATE_NSC, 1) ? null : expInput,
      !can(P.CREATE_NSC, 1) ? null : h("button", {
        id: "launch-tensorboard", type: "button",
        onclick: async () => {
          const ids = expInput.value.split(/[\s,]+/).filter(Boolean).map(Number);
          try {
            const { task } = await launch("tensorboards", { experiment_ids: ids });
            toast(`TensorBoard ${task.id}`);
            refresh();
          } catch (err) { toast(`Launching a TensorBoard failed: ${err.message}`, "error"); }
        },
      }, "Launch TensorBoard")),
    h("div.card", null, table),
    h("div.card", null, h("h2", null, "Logs"), logsBox));

  async function showLogs(task) {
    logsBox.hidden = false;
    const { logs } = await get(`/tasks/${task.id}/logs?limit=10000`);
    logsBox.dataset.task = task.id;
    logsBox.textContent = logs.map((l) => l.log).join("\n") || "(no lines yet)";
  }

  function draw(tasks) {
    setChildren(table, h("table.grid", { id: "tasks-table" },
      h("thead", null, h("tr", null, ["ID", "Type", "Description", "Owner", "State", "Slots", "Started", ""]
        .map((t) => h("th", null, t)))),
      h("tbody", null, tasks.length ? tasks.slice().reverse().map((t) => h("tr", { dataset: { task: t.id, state: t.state } },
        h("td", null, t.id), h("td", null, t.type), h("td", null, t.description),
        h("td", null, t.owner), h("td", null, badge(t.state), t.exit_message ? h("div.muted.small", null, t.exit_message) : null),
        h("td.num", null, t.slots), h("td", null, fmtTime(t.start_time)),
        h("td", null,
          t.service_url && t.ready && canOn(P.UPDATE_NSC, "task", t.workspace_id, t.user_id) ? h("a", { href: openUrl(t), target: "_blank", dataset: { open: t.id } }, "Open") : null, " ",
          h("button.small", { type: "button", dataset: { logs: t.id }, onclick: () => showLogs(t) }, "Logs"), " ",
          ENDED.has(t.state) || !canOn(P.UPDATE_NSC, "task", t.workspace_id, t.user_id) ? null : h("button.small.danger", {
            type: "button", dataset: { kill: t.id },
            onclick: async () => {
              try { await post(`/tasks/${t.id}/kill`); toast(`Killed task ${t.id}`); refresh(); } catch (err) {
                toast(`Kill failed: ${err.message}`, "error");
              }
            },
          }, "Kill"))))
        : h("tr", null, h("td.muted", { colSpan: 8 }, "No tasks yet.")))));
  }

  let stopped = false;
  async function refresh() {
    try { draw((await get("/tasks")).tasks); } catch { /* shown on the next poll */ }
  }
  refresh();
  const timer = setInterval(() => { if (!stopped) refresh(); }, 2000);
  return () => { stopped = true; clearInterval(timer); };
}
