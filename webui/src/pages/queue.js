// Page: the job queue (GET /job-queues): experiments and tasks waiting for or holding
// slots, per resource pool in scheduling order, with their priority or weight, which
// the owner can change (PATCH /jobs/{id}). Read again every 3 s.

import { get, patch } from "../api.js";
import { P, canOn } from "../perms.js";
import { fmtTime, h, setChildren, toast } from "../util.js";
import { readState, writeState } from "../urlstate.js";

const DEFAULTS = { pool: "" };

function link(job) {
  if (job.type === "EXPERIMENT") return h("a", { href: `/experiments/${job.entity_id}` }, job.name);
  return h("a", { href: "/tasks" }, job.name);
}

/** Draw the queue page into `root`; returns its cleanup. */
export function render(root) {
  const view = readState(DEFAULTS);
  const poolSelect = h("select", { id: "queue-pool", "aria-label": "resource pool" });
  const box = h("div.table-wrap", { id: "queue" });
  const summary = h("span.muted.small", { id: "queue-summary" });
  setChildren(root,
    h("div.toolbar", null, h("h1", null, "Job queue"), h("span.spacer"), summary, poolSelect),
    h("div.card", null, box));
  let closed = false;
  let editing = false;

  function editor(job) {
    // Only who may change the job's experiment or task (its owner, or the permission).
    const allowed = job.type === "EXPERIMENT"
      ? canOn(P.UPDATE_EXPERIMENT, "experiment", job.workspace_id, job.owner_id)
      : canOn(P.UPDATE_NSC, "task", job.workspace_id, job.owner_id);
    if (!allowed) return null;
    const field = job.scheduler === "priority" ? "priority" : "weight";
    const input = h("input", {
      type: "number", class: "narrow", "aria-label": `${field} of ${job.job_id}`,
      min: field === "priority" ? 1 : 0.01, max: field === "priority" ? 99 : undefined,
      step: field === "priority" ? 1 : 0.1,
      value: field === "priority" ? job.effective_priority : job.weight,
      // No redraw while a value is being typed; a click on Set blurs the input first, so
      // the redraw waits a moment longer.
      onfocus: () => { editing = true; }, onblur: () => { setTimeout(() => { editing = false; }, 1000); },
      onkeydown: (ev) => { if (ev.key === "Enter") set.click(); },
    });
    const set = h("button.small", {
      dataset: { action: `set-${field}` },
      onclick: async () => {
        const value = Number(input.value);
        editing = false;
        try {
          const { job: j } = await patch(`/jobs/${job.job_id}`, { [field]: value });
          toast(`${job.job_id}: ${field} ${value}, position ${j.queue_position}`);
          load();
        } catch (err) { toast(`Could not set ${field}: ${err.message}`, "error"); }
      },
    }, "Set");
    return h("span.actions", null, input, set);
  }

  async function load() {
    if (editing) return;
    let jobs;
    try {
      ({ jobs } = await get("/job-queues"));
    } catch (err) {
      setChildren(box, h("div.error-box", null, `Could not read the queue: ${err.message}`));
      return;
    }
    if (closed) return;
    const pools = [...new Set(jobs.map((j) => j.resource_pool))].sort();
    setChildren(poolSelect, h("option", { value: "" }, "All pools"),
      pools.map((p) => h("option", { value: p, selected: p === view.pool }, p)));
    const shown = jobs.filter((j) => !view.pool || j.resource_pool === view.pool);
    const queued = shown.filter((j) => j.state === "QUEUED").length;
    summary.textContent = `${shown.length} jobs, ${queued} queued`;
    setChildren(box, h("table.grid", { id: "queue-table" },
      h("thead", null, h("tr", null, ["#", "Job", "Type", "Name", "Owner", "Pool", "State",
        "Priority", "Weight", "Slots", "Submitted", "Change"].map((c) => h("th", null, c)))),
      h("tbody", null, shown.length ? shown.map((j) => h("tr", { dataset: { job: j.job_id, state: j.state } },
        h("td.num", null, j.queue_position),
        h("td", null, h("code", null, j.job_id)),
        h("td", null, j.type),
        h("td", null, link(j)),
        h("td", null, j.owner),
        h("td", null, j.resource_pool),
        h("td", null, h("span.badge", { class: j.state === "QUEUED" ? "PAUSED" : "RUNNING" }, j.state)),
        h("td.num", null, j.priority ?? `${j.effective_priority} (default)`),
        h("td.num", null, j.weight),
        h("td.num", null, `${j.allocated_slots}/${j.requested_slots}`),
        h("td", null, fmtTime(j.submission_time)),
        h("td", null, editor(j))))
        : h("tr", null, h("td.muted", { colSpan: 12 }, "No job is queued or running.")))));
    box.dataset.loaded = "1";
  }

  poolSelect.addEventListener("change", () => { view.pool = poolSelect.value; writeState(view, DEFAULTS); load(); });
  load();
  const timer = setInterval(load, 3000);
  return () => { closed = true; clearInterval(timer); };
}
