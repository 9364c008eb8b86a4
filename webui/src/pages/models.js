// The model registry (issue 31): the models the user may see, a "New model" form, and one
// model's page (its versions, labels, metadata and notes; archive, move, delete), each
// action shown only to who may do it. Versions are registered from a checkpoint, on the
// experiment page ("Register"; see registerForm below).

import { del, get, patch, post } from "../api.js";
import { navigate } from "../main.js";
import { P, can, canOn } from "../perms.js";
import { confirmAction, fmtTime, h, setChildren, toast } from "../util.js";

const enc = encodeURIComponent;

/** Draw the models page into `root`; returns its cleanup. */
export function render(root, params) {
  if (params && params.length && params[0]) return renderModel(root, params[0]);
  const table = h("div.table-wrap", { id: "models" });
  const archived = h("input", { type: "checkbox", id: "show-archived-models", onchange: load });
  const name = h("input", { type: "text", id: "new-model-name", placeholder: "name", maxLength: 256 });
  const description = h("input", { type: "text", id: "new-model-description", placeholder: "description" });
  const labels = h("input", { type: "text", id: "new-model-labels", placeholder: "labels, comma-separated" });
  const workspace = h("select", { id: "new-model-workspace", "aria-label": "workspace" });
  const create = h("form.toolbar", {
    id: "new-model",
    onsubmit: async (ev) => {
      ev.preventDefault();
      try {
        const { model } = await post("/models", {
          name: name.value, description: description.value,
          labels: splitLabels(labels.value), workspace_id: Number(workspace.value) || 1,
        });
        toast(`Created model ${model.name}`);
        name.value = description.value = labels.value = "";
        load();
      } catch (err) { toast(`Could not create it: ${err.message}`, "error"); }
    },
  }, name, description, labels, workspace, h("button.primary", { type: "submit" }, "New model"));
  setChildren(root,
    h("div.toolbar", null, h("h1", null, "Models"), h("span.spacer"),
      h("label", null, archived, " Show archived")),
    create,
    h("div.card", null, table));

  get("/workspaces?archived=false").then(({ workspaces }) => {
    const mine = workspaces.filter((w) => can(P.CREATE_MODEL_REGISTRY, w.id));
    if (!mine.length) { create.hidden = true; return; }
    setChildren(workspace, mine.map((w) => h("option", { value: w.id }, w.name)));
  }).catch(() => { create.hidden = true; });

  async function load() {
    let models;
    try {
      ({ models } = await get(`/models?sort_by=SORT_BY_NAME${archived.checked ? "" : "&archived=false"}`));
    } catch (err) {
      setChildren(table, h("p.muted", null, `Could not load models: ${err.message}`));
      return;
    }
    setChildren(table, h("table.grid", { dataset: { loaded: "1" } },
      h("thead", null, h("tr", null, h("th.num", null, "ID"), h("th", null, "Name"),
        h("th", null, "Description"), h("th", null, "Labels"), h("th.num", null, "Versions"),
        h("th", null, "Owner"), h("th", null, "Last updated"))),
      h("tbody", null, models.length ? models.map((m) => h("tr", { dataset: { model: m.name } },
        h("td.num", null, m.id),
        h("td", null, h("a", { href: `/models/${m.id}` }, m.name),
          m.archived ? h("span.badge.archived", null, "archived") : null),
        h("td", null, m.description),
        h("td", null, m.labels.map((l) => h("span.badge.label", null, l))),
        h("td.num", null, m.num_versions),
        h("td", null, m.username || ""),
        h("td", null, fmtTime(m.last_updated_time)))) : h("tr", null,
        h("td.muted", { colSpan: 7 }, "No model you may see.")))));
  }

  load();
  return null;
}

function splitLabels(text) {
  return text.split(",").map((s) => s.trim()).filter(Boolean);
}

/** One model's page: its fields, versions, and what the user may do to it. */
function renderModel(root, id) {
  const box = h("div", { id: "model-page" });
  setChildren(root, box);
  let closed = false;

  async function load() {
    let model, versions;
    try {
      ({ model, model_versions: versions } = await get(`/models/${id}/versions?order_by=ORDER_BY_DESC`));
    } catch (err) {
      setChildren(box, h("div.card", null, h("p.muted", null, `Could not load model ${id}: ${err.message}`)));
      return;
    }
    if (!closed) draw(model, versions);
  }

  function draw(m, versions) {
    const owner = [[m.user_id, "model"]];
    const mayEdit = !m.archived && canOn(P.EDIT_MODEL_REGISTRY, "model", m.workspace_id, owner);
    const mayArchive = canOn(P.EDIT_MODEL_REGISTRY, "model", m.workspace_id, owner);
    const mayDelete = canOn(P.DELETE_MODEL_REGISTRY, "model", m.workspace_id, owner);
    const labels = h("input", { type: "text", id: "model-labels", value: m.labels.join(", "), disabled: !mayEdit });
    const description = h("input", { type: "text", id: "model-description", value: m.description, disabled: !mayEdit });
    const notes = h("textarea", { id: "model-notes", rows: 5, disabled: !mayEdit }, m.notes);
    const save = mayEdit ? h("button.primary", {
      type: "button", dataset: { action: "save-model" },
      onclick: async () => {
        try {
          await patch(`/models/${m.id}`, { model: {
            description: description.value, labels: splitLabels(labels.value), notes: notes.value,
          } });
          toast(`Saved model ${m.name}`);
          load();
        } catch (err) { toast(`Could not save it: ${err.message}`, "error"); }
      },
    }, "Save") : null;
    const actions = h("span.actions", null,
      mayArchive ? h("button.small", { type: "button", dataset: { action: m.archived ? "unarchive" : "archive" },
        onclick: () => act(m.archived ? "unarchive" : "archive") }, m.archived ? "Unarchive" : "Archive") : null,
      mayDelete ? h("button.small.danger", { type: "button", dataset: { action: "delete-model" },
        onclick: async () => {
          if (!await confirmAction(`Delete model ${m.name} and its ${versions.length} version(s)? Their checkpoints stay.`, "Delete")) return;
          try {
            await del(`/models/${m.id}`);
            toast(`Deleted model ${m.name}`);
            navigate("/models");
          } catch (err) { toast(`Could not delete it: ${err.message}`, "error"); }
        } }, "Delete") : null);

    async function act(verb) {
      try { await post(`/models/${m.id}/${verb}`); load(); } catch (err) { toast(`${verb} failed: ${err.message}`, "error"); }
    }

    const mayDeleteVersion = (v) => canOn(P.DELETE_MODEL_VERSION, "model", m.workspace_id, [[m.user_id, "model"], [v.user_id, "model"]]);
    setChildren(box,
      h("div.toolbar", null, h("h1", null, "Model ", h("span", { id: "model-name" }, m.name)),
        m.archived ? h("span.badge.archived", null, "archived") : null, h("span.spacer"), actions),
      h("div.card", null,
        h("dl.fields", null,
          h("dt", null, "Workspace"), h("dd", null, h("a", { href: `/workspaces/${m.workspace_id}` }, m.workspace_id)),
          h("dt", null, "Owner"), h("dd", null, m.username || ""),
          h("dt", null, "Created"), h("dd", null, fmtTime(m.creation_time)),
          h("dt", null, "Metadata"), h("dd", null, h("code", { id: "model-metadata" }, JSON.stringify(m.metadata)))),
        h("label", null, "Description ", description),
        h("label", null, "Labels ", labels),
        h("label", null, "Notes (Markdown)"), notes, save),
      h("div.card", null, h("h2", null, "Versions"),
        h("table.grid", { id: "model-versions", dataset: { loaded: "1" } },
          h("thead", null, h("tr", null, h("th.num", null, "Version"), h("th", null, "Name"),
            h("th", null, "Checkpoint"), h("th.num", null, "Experiment"), h("th.num", null, "Batches"),
            h("th", null, "Metadata"), h("th", null, "Registered"), h("th", null, ""))),
          h("tbody", null, versions.length ? versions.map((v) => h("tr", { dataset: { version: v.model_version } },
            h("td.num", null, v.model_version),
            h("td", null, v.name),
            h("td", null, h("code", { title: v.checkpoint.uuid }, v.checkpoint.uuid.slice(0, 8)), " ",
              h("a.button.small", { href: `/api/v1/checkpoints/${v.checkpoint.uuid}/download`, download: `${v.checkpoint.uuid}.tar.gz` }, "Download")),
            h("td.num", null, h("a", { href: `/experiments/${v.checkpoint.experiment_id}` }, v.checkpoint.experiment_id)),
            h("td.num", null, v.checkpoint.total_batches),
            h("td", null, h("code", null, JSON.stringify(v.metadata))),
            h("td", null, fmtTime(v.creation_time)),
            h("td", null, mayDeleteVersion(v) ? h("button.small.danger", { type: "button", dataset: { action: "delete-version" },
              onclick: async () => {
                if (!await confirmAction(`Delete version ${v.model_version} of ${m.name}? Its checkpoint is released to its experiment's GC.`, "Delete")) return;
                try { await del(`/models/${m.id}/versions/${v.model_version}`); load(); } catch (err) { toast(`Could not delete it: ${err.message}`, "error"); }
              } }, "Delete") : null))) : h("tr", null, h("td.muted", { colSpan: 8 },
            "No versions yet: register one from a checkpoint on its experiment's page."))))));
  }

  load();
  return () => { closed = true; };
}

/**
 * The "Register" form of a checkpoint (the experiment page): register it as the next
 * version of a model the user may edit, or of a new model made here.
 * @param {object} ckpt  the checkpoint ({uuid, ...})
 * @returns {HTMLElement}
 */
export function registerForm(ckpt) {
  const select = h("select.small", { "aria-label": "model", dataset: { registerModel: ckpt.uuid } },
    h("option", { value: "" }, "New model…"));
  const newName = h("input.small", { type: "text", placeholder: "new model's name", dataset: { registerNew: ckpt.uuid } });
  const versionName = h("input.small", { type: "text", placeholder: "version name (optional)" });
  get("/models?archived=false&sort_by=SORT_BY_NAME").then(({ models }) => {
    for (const m of models) {
      if (canOn(P.EDIT_MODEL_REGISTRY, "model", m.workspace_id, [[m.user_id, "model"]])) {
        select.append(h("option", { value: m.name }, m.name));
      }
    }
  }).catch(() => {});
  select.addEventListener("change", () => { newName.hidden = !!select.value; });
  return h("form.toolbar", {
    dataset: { registerForm: ckpt.uuid },
    onsubmit: async (ev) => {
      ev.preventDefault();
      try {
        let name = select.value;
        if (!name) name = (await post("/models", { name: newName.value.trim() })).model.name;
        const { model_version: v } = await post(`/models/${enc(name)}/versions`, {
          checkpoint_uuid: ckpt.uuid, name: versionName.value,
        });
        toast(`Registered as version ${v.model_version} of ${v.model_name}`);
        ev.target.replaceChildren(h("span", { dataset: { registered: v.model_version } },
          "Registered: ", h("a", { href: `/models/${v.model_id}` }, `${v.model_name} v${v.model_version}`)));
      } catch (err) { toast(`Could not register it: ${err.message}`, "error"); }
    },
  }, select, newName, versionName, h("button.small.primary", { type: "submit" }, "Register"));
}
