// Administration (issue 30): users (create, activate, deactivate), user groups (create,
// members, delete) and the roles they hold on the whole cluster. Each control is shown
// only to who may use it: ADMINISTRATE_USER, UPDATE_GROUP, ASSIGN_ROLES on the cluster.

import { del, get, patch, post, put } from "../api.js";
import { P, can } from "../perms.js";
import { h, setChildren, toast } from "../util.js";

/** Draw the admin page into `root`; returns its cleanup. */
export function render(root) {
  const usersBox = h("div.table-wrap", { id: "admin-users" });
  const groupsBox = h("div.table-wrap", { id: "admin-groups" });
  setChildren(root, h("div.toolbar", null, h("h1", null, "Administration")),
    h("div.card", null, h("h2", null, "Users"), usersBox),
    h("div.card", null, h("h2", null, "Groups"), groupsBox));
  let roles = [];
  let users = [];

  async function rolesOf(kind, itemId) {
    if (!can(P.ASSIGN_ROLES)) return [];
    const { roles: held } = await get(`/roles/search/by-${kind}/${itemId}`);
    const key = kind === "user" ? "user_role_assignments" : "group_role_assignments";
    return held.flatMap((r) => r[key]
      .filter((a) => a.role_assignment.scope_cluster && !a.via_group)
      .map(() => r.role));
  }

  function roleControls(kind, itemId, held) {
    if (!can(P.ASSIGN_ROLES)) return null;
    const body = (roleId) => {
      const item = { role_assignment: { role: { role_id: roleId }, scope_cluster: true } };
      return kind === "user" ? { user_role_assignments: [{ user_id: itemId, ...item }] }
        : { group_role_assignments: [{ group_id: itemId, ...item }] };
    };
    const select = h("select.small", { "aria-label": `cluster role for ${kind} ${itemId}`, dataset: { assign: `${kind}-${itemId}` } },
      h("option", { value: "" }, "Give cluster role…"),
      roles.filter((r) => !held.some((x) => x.role_id === r.role_id))
        .map((r) => h("option", { value: r.role_id }, r.name)));
    select.addEventListener("change", async () => {
      if (!select.value) return;
      try { await post("/roles/add-assignments", body(Number(select.value))); load(); } catch (err) { toast(err.message, "error"); }
    });
    return h("span.actions", null, held.map((r) => h("button.small", {
      type: "button", title: "take this role back", dataset: { unassign: r.name },
      onclick: async () => {
        try { await post("/roles/remove-assignments", body(r.role_id)); load(); } catch (err) { toast(err.message, "error"); }
      },
    }, `${r.name} ✕`)), select);
  }

  async function drawUsers() {
    ({ users } = await get("/users"));
    const rows = await Promise.all(users.map(async (u) => {
      const held = await rolesOf("user", u.id);
      return h("tr", { dataset: { user: u.username } },
        h("td.num", null, u.id), h("td", null, u.username), h("td", null, u.admin ? "yes" : "no"),
        h("td", null, u.active ? "yes" : "no"),
        h("td", null, can(P.ADMINISTRATE_USER) ? h("button.small", {
          type: "button", dataset: { action: u.active ? "deactivate" : "activate" },
          onclick: async () => {
            try { await patch(`/users/${u.id}`, { active: !u.active }); load(); } catch (err) { toast(err.message, "error"); }
          },
        }, u.active ? "Deactivate" : "Activate") : null),
        h("td", null, roleControls("user", u.id, held)));
    }));
    const name = h("input", { type: "text", id: "new-user-name", placeholder: "username" });
    const password = h("input", { type: "password", id: "new-user-password", placeholder: "password" });
    setChildren(usersBox, h("table.grid", { dataset: { loaded: "1" } },
      h("thead", null, h("tr", null, h("th.num", null, "ID"), h("th", null, "Username"), h("th", null, "Admin"),
        h("th", null, "Active"), h("th", null, ""), h("th", null, can(P.ASSIGN_ROLES) ? "Cluster roles" : ""))),
      h("tbody", null, rows)),
    can(P.ADMINISTRATE_USER) ? h("form.toolbar", {
      id: "new-user",
      onsubmit: async (ev) => {
        ev.preventDefault();
        try { await post("/users", { username: name.value, password: password.value }); load(); } catch (err) { toast(err.message, "error"); }
      },
    }, name, password, h("button.primary", { type: "submit" }, "New user")) : null);
  }

  async function drawGroups() {
    const { groups } = await post("/groups/search", {});
    const rows = await Promise.all(groups.map(async ({ group: g }) => {
      const { group } = await get(`/groups/${g.group_id}`);
      const held = await rolesOf("group", g.group_id);
      const mayEdit = can(P.UPDATE_GROUP);
      const add = mayEdit ? h("select.small", { "aria-label": `add to ${g.name}`, dataset: { addMember: g.name } },
        h("option", { value: "" }, "Add member…"),
        users.filter((u) => !group.users.some((m) => m.id === u.id))
          .map((u) => h("option", { value: u.id }, u.username))) : null;
      add?.addEventListener("change", async () => {
        if (!add.value) return;
        try { await put(`/groups/${g.group_id}`, { add_users: [Number(add.value)] }); load(); } catch (err) { toast(err.message, "error"); }
      });
      return h("tr", { dataset: { group: g.name } },
        h("td", null, g.name),
        h("td", null, h("span.actions", null, group.users.map((m) => mayEdit ? h("button.small", {
          type: "button", title: "remove from the group", dataset: { removeMember: m.username },
          onclick: async () => {
            try { await put(`/groups/${g.group_id}`, { remove_users: [m.id] }); load(); } catch (err) { toast(err.message, "error"); }
          },
        }, `${m.username} ✕`) : h("span", null, m.username)), add)),
        h("td", null, roleControls("group", g.group_id, held)),
        h("td", null, mayEdit ? h("button.small.danger", {
          type: "button", dataset: { action: "delete-group" },
          onclick: async () => {
            try { await del(`/groups/${g.group_id}`); load(); } catch (err) { toast(err.message, "error"); }
          },
        }, "Delete") : null));
    }));
    const name = h("input", { type: "text", id: "new-group-name", placeholder: "group name" });
    setChildren(groupsBox, h("table.grid", { dataset: { loaded: "1" } },
      h("thead", null, h("tr", null, h("th", null, "Group"), h("th", null, "Members"),
        h("th", null, can(P.ASSIGN_ROLES) ? "Cluster roles" : ""), h("th", null, ""))),
      h("tbody", null, rows.length ? rows : h("tr", null, h("td.muted", { colSpan: 4 }, "No groups.")))),
    can(P.UPDATE_GROUP) ? h("form.toolbar", {
      id: "new-group",
      onsubmit: async (ev) => {
        ev.preventDefault();
        try { await post("/groups", { name: name.value }); load(); } catch (err) { toast(err.message, "error"); }
      },
    }, name, h("button.primary", { type: "submit" }, "New group")) : null);
  }

  async function load() {
    try {
      ({ roles } = await post("/roles/search", {}));
      await drawUsers();
      await drawGroups();
    } catch (err) {
      toast(`Could not load: ${err.message}`, "error");
    }
  }

  load();
  return null;
}

