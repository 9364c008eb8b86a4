// Page 4: the cluster: resource pools, agents, and every slot (busy / free / disabled)
// with the trial that holds it. Live through /stream/cluster.

import { get, stream } from "../api.js";
import { badge, fmtTime, h, setChildren } from "../util.js";

/** "busy" (an allocation holds it), "disabled" (it, or its agent, is off, draining or
 * lost) or "free": the master's own counting in GET /resource-pools. */
function slotState(agent, slot) {
  if (slot.allocation_id) return "busy";
  if (!slot.enabled || agent.enabled === false || agent.draining || agent.state !== "ACTIVE") {
    return "disabled";
  }
  return "free";
}

/** Pool summaries from the agents, for masters that send none. */
function poolsFromAgents(agents) {
  const pools = new Map();
  for (const a of agents) {
    const p = pools.get(a.resource_pool) || {
      name: a.resource_pool, agents: 0, agents_lost: 0, slots_total: 0, slots_used: 0,
      slots_free: 0, slots_disabled: 0,
    };
    if (a.state === "ACTIVE") p.agents++; else p.agents_lost++;
    for (const s of a.slots) {
      const st = slotState(a, s);
      p.slots_total++;
      p[st === "busy" ? "slots_used" : st === "free" ? "slots_free" : "slots_disabled"]++;
    }
    pools.set(a.resource_pool, p);
  }
  return [...pools.values()].sort((x, y) => x.name.localeCompare(y.name));
}

function count(agents, pred) {
  let n = 0;
  for (const a of agents) for (const s of a.slots) if (pred(a, s)) n++;
  return n;
}

/** Determined's VIEW_CLUSTER_USAGE permission id (src/dauntless/master/rbac.py). */
const VIEW_CLUSTER_USAGE = 8002;

const USAGE_GROUPS = [
  ["by_username", "User"], ["by_workspace", "Workspace"],
  ["by_resource_pool", "Resource pool"], ["by_experiment_label", "Label"],
];

/**
 * Slot-hours of the last 30 days by user, workspace, pool and label (GET
 * /resources/usage, issue 34), with a CSV download; users without the cluster-usage
 * permission are told so.
 */
async function drawUsage(box) {
  // Asked first, so that a user without the permission causes no refused request.
  const summary = await get("/permissions/summary").catch(() => null);
  if (summary && !summary.cluster_permissions.includes(VIEW_CLUSTER_USAGE)) {
    setChildren(box, h("p.muted", null, "Usage reports need the cluster-usage permission."));
    return;
  }
  let usage;
  try {
    usage = await get("/resources/usage?days=30");
  } catch (err) {
    setChildren(box, h("p.muted", null, err.status === 403
      ? "Usage reports need the cluster-usage permission." : `Usage unavailable: ${err.message}`));
    return;
  }
  const hours = (s) => (s / 3600).toFixed(2);
  const rows = [["group", "key", "slot_hours"]];
  for (const [key, label] of USAGE_GROUPS) {
    for (const [k, s] of Object.entries(usage[key])) rows.push([label, k, hours(s)]);
  }
  rows.push(["total", "total", hours(usage.total)]);
  const csv = rows.map((r) => r.map((x) => `"${String(x).replaceAll('"', '""')}"`).join(",")).join("\n");
  const href = URL.createObjectURL(new Blob([csv + "\n"], { type: "text/csv" }));
  setChildren(box,
    h("p.muted.small", null, `${hours(usage.total)} slot-hours from ${usage.since.slice(0, 10)} `
      + `to ${usage.until.slice(0, 10)} (allocated time, not utilisation). `,
      h("a", { href, download: "usage-30-days.csv", dataset: { external: "1" } }, "Download CSV")),
    h("div.usage-grid", null, USAGE_GROUPS.map(([key, label]) => {
      const entries = Object.entries(usage[key]).sort((a, b) => b[1] - a[1]);
      return h("table.grid", { dataset: { usage: key } },
        h("thead", null, h("tr", null, h("th", null, label), h("th.num", null, "Slot-hours"))),
        h("tbody", null, entries.length ? entries.map(([k, s]) => h("tr", null,
          h("td", null, k), h("td.num", null, hours(s))))
          : h("tr", null, h("td.muted", { colSpan: 2 }, "None."))));
    })));
}

/** Draw the cluster page into `root`; returns its cleanup. */
export function render(root) {
  const statsBox = h("div.stats", { id: "cluster-stats" });
  const poolsBox = h("div.table-wrap", { id: "resource-pools" });
  const agentsBox = h("div.table-wrap", { id: "agents" });
  const usageBox = h("div", { id: "cluster-usage" }, h("p.muted", null, "Loading…"));
  setChildren(root,
    h("div.toolbar", null, h("h1", null, "Cluster")),
    h("div.card", null, statsBox),
    h("div.card", null, h("h2", null, "Resource pools"), poolsBox),
    h("div.card", null, h("h2", null, "Agents and slots"), agentsBox),
    h("div.card", null, h("h2", null, "Usage, last 30 days"), usageBox));
  drawUsage(usageBox);

  function draw({ agents, allocations, resource_pools: resourcePools }) {
    const byAlloc = new Map(allocations.map((a) => [a.id, a]));
    const busy = count(agents, (a, s) => slotState(a, s) === "busy");
    const free = count(agents, (a, s) => slotState(a, s) === "free");
    const disabled = count(agents, (a, s) => slotState(a, s) === "disabled");
    setChildren(statsBox,
      [["agents", agents.length], ["slots", busy + free + disabled], ["busy", busy], ["free", free],
        ["disabled", disabled], ["running trials", new Set(allocations.map((a) => a.trial_id)).size]]
        .map(([label, n]) => h("div.stat", { dataset: { stat: label } }, h("b", null, n), h("span", null, label))));

    const pools = resourcePools || poolsFromAgents(agents);
    setChildren(poolsBox, h("table.grid", { id: "pools-table" },
      h("thead", null, h("tr", null, ["Pool", "Scheduler", "Agents", "Lost", "Slots", "Busy", "Free", "Disabled"]
        .map((t, i) => h("th", { class: i > 1 ? "num" : null }, t)))),
      h("tbody", null, pools.length ? pools.map((p) => h("tr", { dataset: { pool: p.name } },
        h("td", null, p.name, p.description ? h("div.muted.small", null, p.description) : null),
        h("td", null, p.scheduler ? `${p.scheduler}${p.preemption ? ", preemptive" : ""}` : "–"),
        h("td.num", null, p.agents), h("td.num", null, p.agents_lost), h("td.num", null, p.slots_total),
        h("td.num", null, p.slots_used), h("td.num", null, p.slots_free), h("td.num", null, p.slots_disabled)))
        : h("tr", null, h("td.muted", { colSpan: 8 }, "No resource pools.")))));

    setChildren(agentsBox, agents.length ? agents.map((a) => h("div.card", { dataset: { agent: a.id } },
      h("div.toolbar", null, h("b", null, a.id), badge(a.state),
        a.draining ? h("span.badge", null, "draining") : null,
        a.enabled === false ? h("span.badge", null, "disabled") : null,
        h("span.muted.small", null, `pool ${a.resource_pool} · host ${a.hostname || "?"} · registered ${fmtTime(a.registered_at)}`)),
      h("div.slots", null, a.slots.map((s) => {
        const st = slotState(a, s);
        const alloc = s.allocation_id ? byAlloc.get(s.allocation_id) : null;
        return h("div.slot", { class: st, dataset: { slot: s.id, state: st } },
          h("b", null, `${s.id} `, h("span.muted", null, `${s.type}${s.device ? ` ${s.device}` : ""}`)),
          st === "busy" && alloc
            ? h("span", null, h("a", { href: `/trials/${alloc.trial_id}` }, `trial ${alloc.trial_id}`),
              " of ", h("a", { href: `/experiments/${alloc.experiment_id}` }, `experiment ${alloc.experiment_id}`))
            : h("span.muted", null, st === "busy" ? `allocation ${s.allocation_id}` : st));
      })))) : h("p.muted", null, "No agents: start one with `python -m dauntless.agent --master-url …`."));
  }

  const close = stream("/stream/cluster", { cluster: draw });
  return close;
}
