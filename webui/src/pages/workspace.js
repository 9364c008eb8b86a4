// One workspace (issue 30): its projects, its members and their roles, its tasks. Create,
// archive and delete projects and assign roles only where the user may.

import { del, get, post } from "../api.js";
import { showWorkspace } from "../main.js";
import { P, can, canOn } from "../perms.js";
import { badge, confirmAction, fmtTime, h, setChildren, toast } from "../util.js";

/** Draw workspace `id`'s page into `root`; returns its cleanup. */
export function render(root, [id]) {
  showWorkspace(id);
  const header = h("div.toolbar", null, h("h1", null, `Workspace ${id}`));
  const projectsBox = h("div.table-wrap", { id: "projects" });
  const membersBox = h("div", { id: "members" });
  const tasksBox = h("div.table-wrap", { id: "workspace-tasks" });
  const modelsBox = h("div.table-wrap", { id: "workspace-models" });
  const newProject = h("div");
  setChildren(root, header,
    h("div.card", null, h("h2", null, "Projects"), newProject, projectsBox),
    h("div.card", null, h("h2", null, "Members"), membersBox),
    h("div.card", null, h("h2", null, "Tasks"), tasksBox),
    h("div.card", null, h("h2", null, "Model Registry"), modelsBox));
  let ws = null;

  async function load() {
    try {
      ({ workspace: ws } = await get(`/workspaces/${id}`));
    } catch (err) {
      setChildren(root, h("div.card", null, h("h1", null, "Workspace"), h("p.muted", null, err.message)));
      return;
    }
    setChildren(header, h("h1", null, ws.name), ws.archived ? h("span.badge.archived", null, "archived") : null,
      h("span.spacer"), h("span.muted.small", null, `created by ${ws.username || "–"}`));
    drawNewProject();
    await Promise.all([loadProjects(), loadMembers(), loadTasks(), loadModels()]);
  }

  function drawNewProject() {
    const owners = [[ws.user_id, "workspace"]];
    if (ws.archived || ws.immutable || !canOn(P.CREATE_PROJECT, "workspace", ws.id, owners)) {
      setChildren(newProject);
      return;
    }
    const name = h("input", { type: "text", id: "new-project-name", placeholder: "project name", maxLength: 80 });
    const desc = h("input", { type: "text", placeholder: "description" });
    setChildren(newProject, h("form.toolbar", {
      id: "new-project",
      onsubmit: async (ev) => {
        ev.preventDefault();
        try {
          await post(`/workspaces/${id}/projects`, { name: name.value, description: desc.value });
          name.value = desc.value = "";
          loadProjects();
        } catch (err) { toast(`Could not create the project: ${err.message}`, "error"); }
      },
    }, name, desc, h("button.primary", { type: "submit" }, "New project")));
  }

  async function loadProjects() {
    const { projects } = await get(`/workspaces/${id}/projects`);
    setChildren(projectsBox, h("table.grid", { dataset: { loaded: "1" } },
      h("thead", null, h("tr", null, h("th", null, "Name"), h("th", null, "Key"), h("th", null, "Description"),
        h("th.num", null, "Experiments"), h("th.num", null, "Active"), h("th", null, ""))),
      h("tbody", null, projects.length ? projects.map((p) => {
        const owners = [[p.user_id, "project"], [ws.user_id, "workspace"]];
        const mayUpdate = !p.immutable && canOn(P.UPDATE_PROJECT, "project", ws.id, owners);
        const mayDelete = !p.immutable && !p.num_experiments && canOn(P.DELETE_PROJECT, "project", ws.id, owners);
        return h("tr", { dataset: { project: p.id, name: p.name } },
          h("td", null, h("a", { href: `/projects/${p.id}` }, p.name),
            p.archived ? h("span.badge.archived", null, "archived") : null),
          h("td", null, p.key), h("td.wrap", null, p.description),
          h("td.num", null, p.num_experiments), h("td.num", null, p.num_active_experiments),
          h("td", null, h("span.actions", null,
            mayUpdate ? h("button.small", { type: "button", dataset: { action: p.archived ? "unarchive" : "archive" },
              onclick: async () => {
                try { await post(`/projects/${p.id}/${p.archived ? "unarchive" : "archive"}`); loadProjects(); } catch (err) { toast(err.message, "error"); }
              } }, p.archived ? "Unarchive" : "Archive") : null,
            mayDelete ? h("button.small.danger", { type: "button", dataset: { action: "delete" },
              onclick: async () => {
                if (!await confirmAction(`Delete project ${p.name}?`, "Delete")) return;
                try { await del(`/projects/${p.id}`); loadProjects(); } catch (err) { toast(err.message, "error"); }
              } }, "Delete") : null)));
      }) : h("tr", null, h("td.muted", { colSpan: 6 }, "No projects.")))));
  }

  async function loadMembers() {
    let members;
    try {
      members = await get(`/roles/workspace/${id}`);
    } catch (err) {
      setChildren(membersBox, h("p.muted", null, err.message));
      return;
    }
    const mayAssign = can(P.ASSIGN_ROLES, id);
    const { roles } = await post("/roles/search/by-assignability", { workspace_id: id });
    const roleName = Object.fromEntries(roles.map((r) => [r.role_id, r.name]));
    const users = Object.fromEntries(members.users_assigned_directly.map((u) => [u.id, u.username]));
    const groups = Object.fromEntries(members.groups.map((g) => [g.group_id, g.name]));
    const rows = members.assignments.map((a) => {
      const isUser = a.user_id != null;
      const who = isUser ? users[a.user_id] : groups[a.group_id];
      return h("tr", { dataset: { member: who, role: roleName[a.role.role_id] } },
        h("td", null, isUser ? "user" : "group"), h("td", null, who), h("td", null, roleName[a.role.role_id] || a.role.role_id),
        h("td", null, mayAssign ? h("button.small.danger", { type: "button", dataset: { action: "remove-member" },
          onclick: async () => {
            const item = { role_assignment: { role: { role_id: a.role.role_id }, scope_workspace_id: id } };
            const body = isUser ? { user_role_assignments: [{ user_id: a.user_id, ...item }] }
              : { group_role_assignments: [{ group_id: a.group_id, ...item }] };
            try { await post("/roles/remove-assignments", body); loadMembers(); } catch (err) { toast(err.message, "error"); }
          } }, "Remove") : null));
    });
    const table = h("table.grid", null, h("thead", null, h("tr", null, h("th", null, "Kind"), h("th", null, "Name"),
      h("th", null, "Role"), h("th", null, ""))), h("tbody", null, rows.length ? rows
      : h("tr", null, h("td.muted", { colSpan: 4 }, "No roles given on this workspace."))));
    setChildren(membersBox, table, mayAssign ? await addMemberForm(roles) : null);
  }

  async function addMemberForm(roles) {
    let users = [];
    let groupList = [];
    try { ({ users } = await get("/users")); } catch { /* users list hidden */ }
    try { ({ groups: groupList } = await post("/groups/search", {})); } catch { /* none */ }
    const who = h("select", { id: "member-who", "aria-label": "user or group" },
      users.map((u) => h("option", { value: `u${u.id}` }, `user ${u.username}`)),
      groupList.map((g) => h("option", { value: `g${g.group.group_id}` }, `group ${g.group.name}`)));
    const role = h("select", { id: "member-role", "aria-label": "role" },
      roles.map((r) => h("option", { value: r.role_id }, r.name)));
    return h("form.toolbar", {
      id: "add-member",
      onsubmit: async (ev) => {
        ev.preventDefault();
        const kind = who.value[0];
        const item = { role_assignment: { role: { role_id: Number(role.value) }, scope_workspace_id: id } };
        const target = Number(who.value.slice(1));
        const body = kind === "u" ? { user_role_assignments: [{ user_id: target, ...item }] }
          : { group_role_assignments: [{ group_id: target, ...item }] };
        try { await post("/roles/add-assignments", body); loadMembers(); } catch (err) { toast(err.message, "error"); }
      },
    }, who, role, h("button.primary", { type: "submit" }, "Add member"));
  }

  async function loadTasks() {
    const { tasks } = await get(`/tasks?workspace_id=${id}`);
    setChildren(tasksBox, h("table.grid", null,
      h("thead", null, h("tr", null, h("th", null, "ID"), h("th", null, "Type"), h("th", null, "Owner"),
        h("th", null, "State"), h("th", null, "Started"))),
      h("tbody", null, tasks.length ? tasks.map((t) => h("tr", { dataset: { task: t.id } },
        h("td", null, t.id), h("td", null, t.type), h("td", null, t.owner), h("td", null, badge(t.state)),
        h("td", null, fmtTime(t.start_time))))
        : h("tr", null, h("td.muted", { colSpan: 5 }, "No tasks.")))));
  }

  async function loadModels() {
    if (!can(P.VIEW_MODEL_REGISTRY, id)) { setChildren(modelsBox, h("p.muted", null, "You may not view its models.")); return; }
    const { models } = await get(`/models?workspace_ids=${id}&sort_by=SORT_BY_NAME`);
    setChildren(modelsBox, h("table.grid", null,
      h("thead", null, h("tr", null, h("th", null, "Name"), h("th.num", null, "Versions"),
        h("th", null, "Owner"), h("th", null, "Last updated"))),
      h("tbody", null, models.length ? models.map((m) => h("tr", { dataset: { model: m.name } },
        h("td", null, h("a", { href: `/models/${m.id}` }, m.name),
          m.archived ? h("span.badge.archived", null, "archived") : null),
        h("td.num", null, m.num_versions), h("td", null, m.username || ""),
        h("td", null, fmtTime(m.last_updated_time))))
        : h("tr", null, h("td.muted", { colSpan: 4 }, "No models.")))));
  }

  load();
  return null;
}
