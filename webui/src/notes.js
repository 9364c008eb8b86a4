// Notes (issue 31 scope 4): Markdown rendered safely, and the cards that edit notes and
// an experiment's name, description and labels.
//
// Markdown goes through marked (to HTML) and then DOMPurify (a well-kept sanitiser) before
// it reaches the page: scripts, event handler attributes, javascript: URLs and the like
// are removed, so notes written by one user cannot run code in another user's browser.
// Links open in a new tab without an opener.

import DOMPurify from "dompurify";
import { marked } from "marked";
import { h, setChildren, toast } from "./util.js";

DOMPurify.addHook("afterSanitizeAttributes", (node) => {
  if (node.tagName === "A" && node.getAttribute("href")) {
    node.setAttribute("target", "_blank");
    node.setAttribute("rel", "noopener noreferrer");
  }
});

/** The sanitised HTML of Markdown `text` in a `div.markdown`. */
export function renderMarkdown(text) {
  const box = h("div.markdown");
  const html = marked.parse(String(text || ""), { async: false, gfm: true });
  box.innerHTML = DOMPurify.sanitize(html, { USE_PROFILES: { html: true } });
  return box;
}

/**
 * A card showing Markdown notes with an Edit button (when `canEdit()`): a textarea with
 * Save and Cancel. `update(text)` refreshes the shown notes unless they are being edited.
 * @param {{id: string, title: string, empty: string, canEdit: () => boolean,
 *   save: (text: string) => Promise<void>}} opts
 */
export function notesCard(opts) {
  let text = "";
  let editing = false;
  const body = h("div", { id: `${opts.id}-body` });
  const editBtn = h("button.small", { id: `${opts.id}-edit`, type: "button", hidden: true }, "Edit");
  const card = h("div.card", { id: opts.id },
    h("div.toolbar", null, h("h2", null, opts.title), h("span.spacer"), editBtn), body);

  function show() {
    editing = false;
    editBtn.hidden = !opts.canEdit();
    setChildren(body, text.trim() ? renderMarkdown(text) : h("p.muted", null, opts.empty));
  }

  editBtn.addEventListener("click", () => {
    editing = true;
    editBtn.hidden = true;
    const area = h("textarea.notes-editor", {
      id: `${opts.id}-text`, rows: 12, "aria-label": `${opts.title} (Markdown)`,
    });
    area.value = text;
    const saveBtn = h("button.primary", { id: `${opts.id}-save`, type: "button" }, "Save");
    saveBtn.addEventListener("click", async () => {
      saveBtn.disabled = true;
      try {
        await opts.save(area.value);
        text = area.value;
        toast(`${opts.title} saved`);
        show();
      } catch (err) {
        toast(`Saving failed: ${err.message}`, "error");
        saveBtn.disabled = false;
      }
    });
    setChildren(body, area, h("div.toolbar", null, saveBtn,
      h("button", { type: "button", onclick: show }, "Cancel"),
      h("span.muted.small", null, "Markdown")));
    area.focus();
  });

  return {
    card,
    update(newText) {
      if (editing) return;
      text = newText || "";
      show();
    },
  };
}

/**
 * A card that edits an experiment's name, description and labels (hidden until
 * `open(exp)`); `save(body)` sends `{name, description, labels}`.
 */
export function experimentEditor(save) {
  const name = h("input", { id: "edit-name", type: "text", maxLength: 512, "aria-label": "name" });
  const description = h("textarea", { id: "edit-description", rows: 3, "aria-label": "description" });
  const labels = h("input", {
    id: "edit-labels", type: "text", "aria-label": "labels", placeholder: "comma-separated labels",
  });
  const saveBtn = h("button.primary", { id: "edit-save", type: "button" }, "Save");
  const card = h("div.card", { id: "experiment-editor", hidden: true },
    h("h2", null, "Edit experiment"),
    h("label.field", null, "Name", name),
    h("label.field", null, "Description", description),
    h("label.field", null, "Labels", labels),
    h("div.toolbar", null, saveBtn, h("button", { type: "button", onclick: () => { card.hidden = true; } }, "Cancel")));
  saveBtn.addEventListener("click", async () => {
    const body = {
      name: name.value.trim(),
      description: description.value,
      labels: labels.value.split(",").map((s) => s.trim()).filter(Boolean),
    };
    if (!body.name) { toast("The name must not be empty.", "error"); return; }
    saveBtn.disabled = true;
    try {
      await save(body);
      toast("Experiment saved");
      card.hidden = true;
    } catch (err) {
      toast(`Saving failed: ${err.message}`, "error");
    } finally {
      saveBtn.disabled = false;
    }
  });
  return {
    card,
    open(exp) {
      name.value = exp.name || "";
      description.value = exp.description || "";
      labels.value = (exp.labels || []).join(", ");
      card.hidden = false;
      name.focus();
    },
  };
}
