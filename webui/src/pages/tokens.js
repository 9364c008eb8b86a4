// Page: access tokens and login sessions (GET/POST /tokens, PATCH /tokens/{id}). Lists
// your own (an admin: everyone's), creates an access token (shown once, here), and
// revokes either kind. Issue 30.

import { get, patch, post, query } from "../api.js";
import { confirmAction, h, setChildren, toast } from "../util.js";

function when(stamp) {
  if (!stamp) return "";
  const d = new Date(stamp);
  return Number.isNaN(d.getTime()) ? stamp : d.toLocaleString();
}

/** Draw the tokens page into `root`; returns its cleanup. */
export function render(root) {
  const tokensBox = h("div.table-wrap", { id: "tokens" });
  const sessionsBox = h("div.table-wrap", { id: "sessions" });
  const inactive = h("input", { type: "checkbox", id: "tokens-inactive" });
  const description = h("input", {
    id: "token-description", name: "description", maxlength: 1024,
    placeholder: "what it is for (e.g. nightly CI)", "aria-label": "description",
  });
  const days = h("input", {
    id: "token-days", name: "days", type: "number", min: 1, step: 1, class: "narrow",
    placeholder: "default", "aria-label": "lifespan in days",
  });
  const created = h("div.token-created", { id: "token-created", hidden: true });
  let closed = false;

  async function create(ev) {
    ev.preventDefault();
    const body = {};
    if (description.value.trim()) body.description = description.value.trim();
    if (days.value) body.lifespan = `${24 * Number(days.value)}h`;
    try {
      const made = await post("/tokens", body);
      const value = h("code", { id: "token-value" }, made.token);
      setChildren(created,
        h("p", null, `Access token ${made.token_id} was created. Copy it now: it is not shown again.`),
        value,
        h("p.muted.small", null, "Use it as DET_USER_TOKEN, an Authorization: Bearer header, or with det token login."));
      created.hidden = false;
      description.value = "";
      load();
    } catch (err) {
      toast(`Could not create a token: ${err.message}`, "error");
    }
  }

  async function revoke(t, kind) {
    if (!(await confirmAction(`Revoke ${kind} ${t.id} of ${t.username}? This cannot be undone.`, "Revoke"))) return;
    try {
      await patch(`/tokens/${t.id}`, { set_revoked: true });
      toast(`Revoked ${kind} ${t.id}`);
      load();
    } catch (err) {
      toast(`Could not revoke: ${err.message}`, "error");
    }
  }

  function table(id, rows, kind) {
    return h("table.grid", { id },
      h("thead", null, h("tr", null, ["ID", "User", "Description", "Created", "Expires", "State", ""]
        .map((c) => h("th", null, c)))),
      h("tbody", null, rows.length ? rows.map((t) => h("tr", { dataset: { token: t.id } },
        h("td.num", null, t.id),
        h("td", null, t.username),
        h("td", null, t.description || ""),
        h("td", null, when(t.created_at)),
        h("td", null, when(t.expiry)),
        h("td", null, t.revoked ? "revoked" : new Date(t.expiry) < new Date() ? "expired" : "active"),
        h("td", null, t.revoked ? null : h("button.small", {
          dataset: { action: "revoke" }, onclick: () => revoke(t, kind),
        }, "Revoke")))) : h("tr", null, h("td.muted", { colspan: 7 }, `No ${kind}s.`))));
  }

  async function load() {
    const common = { show_inactive: inactive.checked ? "true" : null };
    let tokens;
    let sessions;
    try {
      [tokens, sessions] = await Promise.all([
        get(`/tokens${query(common)}`),
        get(`/tokens${query({ ...common, token_type: "TOKEN_TYPE_USER_SESSION" })}`),
      ]);
    } catch (err) {
      setChildren(tokensBox, h("div.error-box", null, `Could not read the tokens: ${err.message}`));
      return;
    }
    if (closed) return;
    setChildren(tokensBox, table("tokens-table", tokens.token_info, "access token"));
    setChildren(sessionsBox, table("sessions-table", sessions.token_info, "login session"));
  }

  inactive.addEventListener("change", load);
  setChildren(root,
    h("div.toolbar", null, h("h1", null, "Access tokens"), h("span.spacer"),
      h("label.small", null, inactive, " show revoked and expired")),
    h("div.card", null,
      h("form", { id: "token-form", onsubmit: create, class: "inline-form" },
        h("label", null, "Description ", description),
        h("label", null, "Days ", days),
        h("button.primary", { id: "token-create", type: "submit" }, "Create token")),
      created),
    h("div.card", null, tokensBox),
    h("h2", null, "Login sessions"),
    h("div.card", null, sessionsBox));
  load();
  return () => { closed = true; };
}
