// The workspaces the user may see (issue 30): pin, archive, delete and create, each
// shown only to who may do it.

import { del, get, post } from "../api.js";
import { P, can, canOn } from "../perms.js";
import { confirmAction, h, setChildren, toast } from "../util.js";

/** Draw the workspaces page into `root`; returns its cleanup. */
export function render(root) {
  const table = h("div.table-wrap", { id: "workspaces" });
  const archived = h("input", { type: "checkbox", id: "show-archived-workspaces", onchange: load });
  const name = h("input", { type: "text", id: "new-workspace-name", placeholder: "name", maxLength: 80 });
  const create = can(P.CREATE_WORKSPACE) ? h("form.toolbar", {
    id: "new-workspace",
    onsubmit: async (ev) => {
      ev.preventDefault();
      try {
        const { workspace } = await post("/workspaces", { name: name.value });
        toast(`Created workspace ${workspace.name}`);
        name.value = "";
        load();
      } catch (err) { toast(`Could not create it: ${err.message}`, "error"); }
    },
  }, name, h("button.primary", { type: "submit" }, "New workspace")) : null;
  setChildren(root,
    h("div.toolbar", null, h("h1", null, "Workspaces"), h("span.spacer"),
      h("label", null, archived, " Show archived")),
    create,
    h("div.card", null, table));

  async function act(w, verb, method = post, path = `/workspaces/${w.id}/${verb}`) {
    try {
      await method(path);
      load();
    } catch (err) { toast(`${verb} ${w.name} failed: ${err.message}`, "error"); }
  }

  function row(w) {
    const owner = [[w.user_id, "workspace"]];
    const mayUpdate = !w.immutable && canOn(P.UPDATE_WORKSPACE, "workspace", w.id, owner);
    const mayDelete = !w.immutable && canOn(P.DELETE_WORKSPACE, "workspace", w.id, owner);
    return h("tr", { dataset: { workspace: w.id, name: w.name } },
      h("td.num", null, w.id),
      h("td", null, h("a", { href: `/workspaces/${w.id}` }, w.name),
        w.archived ? h("span.badge.archived", null, "archived") : null,
        w.pinned ? h("span.badge.label", null, "pinned") : null),
      h("td.num", null, w.num_projects), h("td.num", null, w.num_experiments),
      h("td", null, w.username || ""),
      h("td", null, h("span.actions", null,
        h("button.small", { type: "button", dataset: { action: w.pinned ? "unpin" : "pin" },
          onclick: () => act(w, w.pinned ? "unpin" : "pin") }, w.pinned ? "Unpin" : "Pin"),
        mayUpdate ? h("button.small", { type: "button", dataset: { action: w.archived ? "unarchive" : "archive" },
          onclick: () => act(w, w.archived ? "unarchive" : "archive") }, w.archived ? "Unarchive" : "Archive") : null,
        mayDelete ? h("button.small.danger", { type: "button", dataset: { action: "delete" },
          onclick: async () => {
            if (await confirmAction(`Delete workspace ${w.name}? Only an empty one can be deleted.`, "Delete")) {
              act(w, "delete", del, `/workspaces/${w.id}`);
            }
          } }, "Delete") : null)));
  }

  async function load() {
    let list;
    try {
      ({ workspaces: list } = await get(`/workspaces${archived.checked ? "" : "?archived=false"}`));
    } catch (err) {
      setChildren(table, h("p.muted", null, `Could not load workspaces: ${err.message}`));
      return;
    }
    list.sort((a, b) => (b.pinned - a.pinned) || (a.id - b.id));
    setChildren(table, h("table.grid", { dataset: { loaded: "1" } },
      h("thead", null, h("tr", null, h("th.num", null, "ID"), h("th", null, "Name"),
        h("th.num", null, "Projects"), h("th.num", null, "Experiments"), h("th", null, "Owner"),
        h("th", null, ""))),
      h("tbody", null, list.length ? list.map(row) : h("tr", null,
        h("td.muted", { colSpan: 6 }, "No workspace you may see.")))));
  }

  load();
  return null;
}
