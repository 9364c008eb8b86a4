// Lifecycle action buttons of an experiment, with a confirmation before each.

import { allowedActions, post } from "../api.js";
import { P, PERMISSIONS_EVENT, canExperiment, permissionsKnown } from "../perms.js";
import { confirmAction, h, toast } from "../util.js";

const LABELS = {
  pause: "Pause", activate: "Activate", cancel: "Cancel", kill: "Kill",
  archive: "Archive", unarchive: "Unarchive",
};

const WHAT = {
  pause: "Its trials checkpoint and stop; Activate resumes them.",
  activate: "Its trials resume from their latest checkpoints.",
  cancel: "Its trials checkpoint and stop for good.",
  kill: "Its trials are stopped at once, without a checkpoint.",
  archive: "It is hidden from the experiment list unless archived ones are shown.",
  unarchive: "It shows in the experiment list again.",
};

/**
 * Buttons for the actions allowed on an experiment now.
 * @param {object} exp  an Experiment (docs/protocol.md)
 * @param {object} opts  {small: boolean}: compact buttons for tables
 * @returns {HTMLElement}
 */
export function actionButtons(exp, { small = false } = {}) {
  const box = h("span.actions", { dataset: { experiment: exp.id } });
  if (!permissionsKnown()) {
    // Only the actions the user may take: filled in once the permissions are known.
    window.addEventListener(PERMISSIONS_EVENT, () => box.replaceWith(actionButtons(exp, { small })),
      { once: true });
    return box;
  }
  for (const action of allowedActions(exp.state, exp.archived)) {
    const perm = action.endsWith("archive") ? P.UPDATE_EXPERIMENT_METADATA : P.UPDATE_EXPERIMENT;
    if (!canExperiment(exp, perm)) continue;
    const danger = action === "kill" || action === "cancel";
    box.append(h("button", {
      class: [small ? "small" : null, danger ? "danger" : null].filter(Boolean).join(" ") || null,
      dataset: { action },
      title: WHAT[action],
      onclick: async (ev) => {
        ev.stopPropagation();
        const ok = await confirmAction(
          `${LABELS[action]} experiment ${exp.id} (${exp.name})? ${WHAT[action]}`, LABELS[action]);
        if (!ok) return;
        try {
          await post(`/experiments/${exp.id}/${action}`);
          toast(`${LABELS[action]}: experiment ${exp.id}`);
        } catch (err) {
          toast(`${LABELS[action]} experiment ${exp.id} failed: ${err.message}`, "error");
        }
      },
    }, LABELS[action]));
  }
  return box;
}
