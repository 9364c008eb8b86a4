// The Tasks page's launch form: one form for notebooks, shells, commands and
// TensorBoards (POST /api/v1/{notebooks,shells,commands,tensorboards}, docs/protocol.md
// "Generic tasks") with the resource pool, slots, a context directory (or none) and the
// task config as YAML. The libraries it needs are loaded when it is first drawn
// (launch_libs.js, a bundle of its own), so they stay off the first visit.

import { get } from "../api.js";
import { h, setChildren } from "../util.js";

/** Where the built launch_libs.js is served (scripts/build-webui.sh bundles it apart from
 * main.js; a URL in a variable, so that the main bundle leaves this import alone). */
const LIBS_URL = "/chunks/launch_libs.js";
let libs = null;
/** The form's libraries ({YAML, createTarGzip, ignore}), loaded once. */
export function loadLibs() {
  if (!libs) libs = import(LIBS_URL).catch((err) => { libs = null; throw err; });
  return libs;
}

/** Task types: REST family, label, default slots (the master's DEFAULT_SLOTS). */
export const KINDS = [
  { family: "notebooks", label: "Notebook (JupyterLab)", slots: 1 },
  { family: "shells", label: "Shell", slots: 1 },
  { family: "commands", label: "Command", slots: 1 },
  { family: "tensorboards", label: "TensorBoard", slots: 0 },
];

/** The largest context the master takes (bytes, gzipped): 95 MiB. */
export const MAX_CONTEXT_BYTES = 95 * 1024 * 1024;

/** What `det` leaves out of a context directory before .detignore's lines
 * (src/dauntless/client/_context.py's BUILTIN_IGNORES, gitignore rules). */
export const BUILTIN_IGNORES = [
  "__pycache__/", "*.py[co]", "*$py.class", "terraform*", ".git/", ".vscode/", ".idea/",
  ".mypy_cache/", "/shared_fs",
];

/** The longest archive path the tar writer (nanotar: ustar names, no prefix field) keeps. */
const MAX_NAME_BYTES = 100;

/** Ids typed as "1 2, 3" -> [1, 2, 3]; throws naming `field` for anything else. */
export function parseIds(text, field) {
  const parts = text.split(/[\s,]+/).filter(Boolean);
  const ids = parts.map(Number);
  const bad = parts.find((p, i) => !Number.isInteger(ids[i]) || ids[i] <= 0 || !/^\d+$/.test(p));
  if (bad !== undefined) throw new Error(`${field}: expected ids such as "1 2", got "${bad}"`);
  return ids;
}

/**
 * The task config to send: the YAML text parsed, then the form's fields over it.
 * A chosen config template is merged under it by the master (``template_name``).
 * @param {string} text  YAML (or JSON) of a task config; blank for none
 * @param {{pool: string, slots: string, description: string}} fields  "" = not given
 * @returns {Promise<object>} the config mapping
 * @throws {Error} naming `config` (or the field) when the text or a field is invalid
 */
export async function buildConfig(text, { pool, slots, description }) {
  let config = {};
  if (text.trim()) {
    const { YAML } = await loadLibs();
    let doc;
    try {
      doc = YAML.parse(text, { maxAliasCount: 1000, prettyErrors: true });
    } catch (err) {
      throw new Error(`config: ${err.message}`);
    }
    if (doc != null && (typeof doc !== "object" || Array.isArray(doc))) {
      throw new Error("config: expected a mapping (e.g. resources: {slots: 0})");
    }
    config = doc || {};
  }
  const resources = config.resources && typeof config.resources === "object" ? { ...config.resources } : {};
  if (pool) resources.resource_pool = pool;
  if (slots !== "") {
    const n = Number(slots);
    if (!Number.isInteger(n) || n < 0) throw new Error(`slots: expected a whole number >= 0, got "${slots}"`);
    resources.slots = n;
  }
  if (Object.keys(resources).length) config = { ...config, resources };
  if (description.trim()) config = { ...config, description: description.trim() };
  return config;
}

/**
 * Pack the files of a chosen directory (an <input webkitdirectory>'s files) into the
 * gzipped tar the master takes, leaving out what `det` leaves out (the built-in
 * patterns, then the directory's own .detignore).
 * @param {File[]} files  each with webkitRelativePath "DIR/sub/name"
 * @returns {Promise<{data: Uint8Array, count: number, skipped: number}>}
 * @throws {Error} naming `context`: a path too long for the archive, or over 95 MiB
 */
export async function packContext(files) {
  const { createTarGzip, ignore } = await loadLibs();
  const rel = (f) => f.webkitRelativePath.split("/").slice(1).join("/");
  const rules = ignore().add(BUILTIN_IGNORES);
  const detignore = files.find((f) => rel(f) === ".detignore");
  if (detignore) rules.add(await detignore.text());
  const kept = files.filter((f) => rel(f) && !rules.ignores(rel(f)));
  const encoder = new TextEncoder();
  const long = kept.find((f) => encoder.encode(rel(f)).length > MAX_NAME_BYTES);
  if (long) {
    throw new Error(`context: the path "${rel(long)}" is longer than ${MAX_NAME_BYTES} bytes, ` +
      "which this page cannot archive (leave it out in .detignore, or use the det CLI's --context)");
  }
  const raw = kept.reduce((n, f) => n + f.size, 0);
  if (raw > 4 * MAX_CONTEXT_BYTES) {
    throw new Error(`context: ${(raw / 2 ** 20).toFixed(1)} MiB of files; the master takes ` +
      "at most 95 MiB compressed (leave large files out in .detignore)");
  }
  const entries = await Promise.all(kept.map(async (f) => ({
    name: rel(f),
    data: new Uint8Array(await f.arrayBuffer()),
    attrs: { mode: "644", mtime: f.lastModified, uid: 0, gid: 0 },
  })));
  const data = await createTarGzip(entries);
  if (data.length > MAX_CONTEXT_BYTES) {
    throw new Error(`context: ${(data.length / 2 ** 20).toFixed(1)} MiB compressed; the master ` +
      "takes at most 95 MiB (leave large files out in .detignore)");
  }
  return { data, count: kept.length, skipped: files.length - kept.length };
}

/**
 * Draw the launch form.
 * @param {object} opts
 * @param {function(string, object): Promise<object>} opts.launch  POSTs the form (tasks.js)
 * @param {function(object): void} opts.onLaunched  called with the new (or reused) task
 * @param {{family?: string, experimentIds?: number[]}} [opts.initial]  prefilled values
 * @returns {HTMLElement}
 */
export function launchForm({ launch, onLaunched, initial = {} }) {
  const family = KINDS.some((k) => k.family === initial.family) ? initial.family : "notebooks";
  const kind = h("select", { id: "launch-type", name: "type" },
    KINDS.map((k) => h("option", { value: k.family, selected: k.family === family }, k.label)));
  // A config template (issue 31): the master merges the config below over it.
  const template = h("select", { id: "launch-template", name: "template",
    title: "a config template the master merges this config over" }, h("option", { value: "" }, "none"));
  const pool = h("select", { id: "launch-pool", name: "pool" }, h("option", { value: "" }, "default"));
  const slots = h("input", { id: "launch-slots", name: "slots", type: "number", min: 0, step: 1, style: { width: "96px" } });
  const description = h("input", { id: "launch-description", type: "text", size: 28, placeholder: "optional" });
  const command = h("input", { id: "launch-command", type: "text", size: 48,
    placeholder: "e.g. python3 train.py --epochs 2 (run by sh -c)" });
  const experiments = h("input", { id: "launch-experiments", type: "text", size: 16,
    placeholder: "e.g. 1 2", value: (initial.experimentIds || []).join(" ") });
  const trials = h("input", { id: "launch-trials", type: "text", size: 16, placeholder: "e.g. 7" });
  const context = h("input", { id: "launch-context", type: "file", webkitdirectory: true, multiple: true });
  const contextInfo = h("span.muted.small", { id: "launch-context-info" }, "none");
  const clearContext = h("button.small", { type: "button", id: "launch-context-clear",
    title: "launch without a context directory", onclick: () => { context.value = ""; showContext(); } }, "Clear");
  const config = h("textarea", { id: "launch-config", rows: 6, cols: 60, spellcheck: "false",
    placeholder: "task config (YAML), e.g.\nenvironment:\n  environment_variables: [DEBUG=1]\nidle_timeout: 30m" });
  const error = h("p.login-error", { id: "launch-error", role: "alert", hidden: true });
  const submit = h("button.primary", { id: "launch-submit", type: "submit" }, "Launch");

  const field = (label, control, extra) => h("label.launch-field", null, h("span", null, label), control, extra);
  const commandRow = field("Command", command);
  const experimentsLabel = h("span", null, "Experiments");
  const subjectsNote = h("span.muted.small", { id: "launch-subjects-note" });
  const subjects = h("div.launch-row", null,
    h("label.launch-field", null, experimentsLabel, experiments), field("Trials", trials), subjectsNote);

  function showContext() {
    const n = context.files ? context.files.length : 0;
    contextInfo.textContent = n ? `${n} file${n === 1 ? "" : "s"} in ${context.files[0].webkitRelativePath.split("/")[0]}/` : "none";
  }
  function showKind() {
    const k = KINDS.find((x) => x.family === kind.value);
    slots.placeholder = `default ${k.slots}`;
    commandRow.hidden = kind.value !== "commands";
    const tb = kind.value === "tensorboards";
    experimentsLabel.textContent = tb ? "Experiments (or trials)" : "Experiments";
    subjectsNote.textContent = tb ? "what it shows" : "optional: what the task is about (shown as links)";
  }
  loadLibs().catch(() => { /* loaded again (and its failure shown) on submit */ });
  context.addEventListener("change", showContext);
  kind.addEventListener("change", showKind);
  showKind();
  get("/templates").then(({ templates }) => {
    setChildren(template, h("option", { value: "" }, "none"),
      templates.map((x) => h("option", { value: x.name }, x.name)));
  }).catch(() => { /* no template to offer */ });
  get("/resource-pools").then(({ resource_pools: pools }) => {
    setChildren(pool, h("option", { value: "" }, "default"),
      pools.filter((p) => p.name !== "default").map((p) => h("option", { value: p.name }, p.name)));
  }).catch(() => { /* the default pool stays the only choice */ });

  const form = h("form.launch-form", {
    id: "launch-form",
    onsubmit: async (ev) => {
      ev.preventDefault();
      error.hidden = true;
      submit.disabled = true;
      try {
        const fields = {
          config: JSON.stringify(await buildConfig(config.value, {
            pool: pool.value, slots: slots.value.trim(), description: description.value,
          })),
        };
        if (template.value) fields.template_name = template.value;
        const exp = parseIds(experiments.value, "experiments");
        const tr = parseIds(trials.value, "trials");
        if (exp.length) fields.experiment_ids = exp;
        if (tr.length) fields.trial_ids = tr;
        if (kind.value === "tensorboards" && !exp.length && !tr.length) {
          throw new Error("experiments: a TensorBoard shows at least one experiment or trial");
        }
        if (kind.value === "commands") {
          if (!command.value.trim()) throw new Error("command: what to run, e.g. python3 train.py");
          fields.entrypoint = JSON.stringify(command.value.trim()); // JSON: a string for sh -c
        }
        if (context.files && context.files.length) {
          submit.textContent = "Packing the context…";
          const packed = await packContext([...context.files]);
          fields.context = new Blob([packed.data], { type: "application/gzip" });
        }
        submit.textContent = "Launching…";
        const answer = await launch(kind.value, fields);
        onLaunched(answer.task, answer.reused);
      } catch (err) {
        error.textContent = err.message;
        error.hidden = false;
      } finally {
        submit.disabled = false;
        submit.textContent = "Launch";
      }
    },
  },
  h("div.launch-row", null, field("Type", kind), field("Template", template),
    field("Resource pool", pool), field("Slots", slots), field("Description", description)),
  commandRow,
  subjects,
  h("div.launch-row", null, h("label.launch-field", null, h("span", null, "Context directory"), context),
    contextInfo, clearContext),
  field("Config (YAML)", config),
  error,
  h("div.launch-row", null, submit));
  return form;
}
