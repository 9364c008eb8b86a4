// One project (issue 30): its experiments, live through /stream/experiments, each movable
// to another project where the user may both change it and create experiments.

import { get, post, put, query, stream } from "../api.js";
import { showWorkspace } from "../main.js";
import { notesCard } from "../notes.js";
import { P, can, canExperiment, canOn } from "../perms.js";
import { badge, fmtTime, h, setChildren, toast } from "../util.js";
import { actionButtons } from "./actions.js";

/** Draw project `id`'s page into `root`; returns its cleanup. */
export function render(root, [id]) {
  const header = h("div.toolbar", null, h("h1", null, `Project ${id}`));
  const table = h("div.table-wrap", { id: "project-experiments" });
  const notesBox = h("div", { id: "project-notes" });
  setChildren(root, header, h("div.card", null, table), notesBox);
  let close = null;
  let destinations = null;  // [{id, label, workspace_id}] where the user may create
  let experiments = [];

  async function loadDestinations() {
    const out = [];
    const { workspaces } = await get("/workspaces?archived=false");
    for (const w of workspaces) {
      if (!can(P.CREATE_EXPERIMENT, w.id)) continue;
      const { projects } = await get(`/workspaces/${w.id}/projects?archived=false`);
      for (const p of projects) {
        if (p.id !== id) out.push({ id: p.id, label: `${w.name} / ${p.name}`, workspace_id: w.id });
      }
    }
    destinations = out;
    draw();
  }

  function mover(e) {
    if (!destinations || !destinations.length || !canExperiment(e, P.UPDATE_EXPERIMENT)) return null;
    const select = h("select.small", { "aria-label": `move experiment ${e.id}`, dataset: { move: e.id } },
      h("option", { value: "" }, "Move to…"),
      destinations.map((d) => h("option", { value: d.id }, d.label)));
    select.addEventListener("change", async () => {
      if (!select.value) return;
      try {
        await post(`/experiments/${e.id}/move`, { destination_project_id: Number(select.value) });
        toast(`Moved experiment ${e.id}`);
      } catch (err) {
        toast(`Move failed: ${err.message}`, "error");
        select.value = "";
      }
    });
    return select;
  }

  function draw() {
    setChildren(table, h("table.grid", { id: "experiments-table", dataset: { loaded: "1" } },
      h("thead", null, h("tr", null, h("th.num", null, "ID"), h("th", null, "Name"), h("th", null, "Owner"),
        h("th", null, "State"), h("th", null, "Started"), h("th", null, "Actions"), h("th", null, ""))),
      h("tbody", null, experiments.length ? experiments.map((e) => h("tr", { dataset: { id: e.id } },
        h("td.num", null, h("a", { href: `/experiments/${e.id}` }, e.id)),
        h("td", null, h("a", { href: `/experiments/${e.id}` }, e.name)),
        h("td", null, e.owner), h("td", null, badge(e.state)), h("td", null, fmtTime(e.start_time)),
        h("td", null, actionButtons(e, { small: true })), h("td", null, mover(e))))
        : h("tr", null, h("td.muted", { colSpan: 7 }, "No experiments in this project.")))));
  }

  (async () => {
    let project;
    try {
      ({ project } = await get(`/projects/${id}`));
    } catch (err) {
      setChildren(root, h("div.card", null, h("h1", null, "Project"), h("p.muted", null, err.message)));
      return;
    }
    showWorkspace(project.workspace_id);
    setChildren(header,
      h("a", { href: `/workspaces/${project.workspace_id}` }, project.workspace_name), " / ",
      h("h1", null, project.name), project.archived ? h("span.badge.archived", null, "archived") : null,
      h("span.spacer"), h("span.muted.small", null, project.description || ""));
    close = stream(`/stream/experiments${query({ project_id: id, archived: "all", limit: 1000 })}`, {
      experiments: (body) => { experiments = body.experiments; draw(); },
    });
    loadDestinations().catch(() => { destinations = []; });
    drawNotes(project);
  })();

  // Issue 31: the project's notes ({name, contents}, Markdown), each editable by who may
  // update the project; "Add note" appends one.
  function drawNotes(project) {
    const mayEdit = () => canOn(P.UPDATE_PROJECT, "project", project.workspace_id,
      [[project.user_id, "project"]]);
    let notes = project.notes || [];
    const saveAll = async (next) => { notes = (await put(`/projects/${id}/notes`, { notes: next })).notes; };
    const cards = notes.map((n, i) => {
      const c = notesCard({
        id: `project-note-${i}`, title: n.name || `Note ${i + 1}`, empty: "Empty note.", canEdit: mayEdit,
        save: (text) => saveAll(notes.map((m, j) => (j === i ? { name: m.name, contents: text } : m))),
      });
      c.update(n.contents);
      return c.card;
    });
    const name = h("input", { id: "new-note-name", type: "text", placeholder: "note name", "aria-label": "note name" });
    const add = h("button", { id: "add-note", type: "button" }, "Add note");
    add.addEventListener("click", async () => {
      if (!name.value.trim()) { toast("Give the note a name.", "error"); return; }
      try {
        await saveAll([...notes, { name: name.value.trim(), contents: "" }]);
        drawNotes({ ...project, notes });
      } catch (err) { toast(`Adding the note failed: ${err.message}`, "error"); }
    });
    setChildren(notesBox, cards, mayEdit()
      ? h("div.card", null, h("div.toolbar", null, h("h2", null, "Notes"), h("span.spacer"), name, add))
      : (cards.length ? null : h("div.card", null, h("h2", null, "Notes"), h("p.muted", null, "No notes."))));
  }
  return () => { if (close) close(); };
}
