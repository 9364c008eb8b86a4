"""REST routes for Determined's CLI habits that the core routes lack, under ``/api/v1``:

- ``PUT /experiments/{exp_id}/labels/{label}`` and ``DELETE ...`` (Determined's
  ``PutExperimentLabel``/``DeleteExperimentLabel``): add or remove one of the
  experiment's ``labels`` (kept in its config, as the config's ``labels`` field);
  answer ``{"labels": [...]}``.
- ``DELETE /checkpoints/{uuid}``: delete one checkpoint of a finished experiment from
  storage and mark it DELETED (``det checkpoint delete``; Determined's bulk
  ``DELETE /checkpoints`` takes a list, the CLI here calls this once per uuid so that
  ownership is checked per checkpoint by the path).

Only the experiment's owner or an admin may call them.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from dauntless.config import parse_experiment_config

from . import responses as R
from .api_spec import DbId
from .auth import access
from .context import MasterContext
from .db import CheckpointRow, ExperimentRow
from .errors import BadRequest, Conflict, NotFound
from .models import checkpoints
from .states import is_terminal

router = APIRouter(prefix="/api/v1")

MAX_LABEL_LENGTH = 255
"""The longest label accepted, in characters."""


def _mgr(request: Request) -> MasterContext:
    return request.app.state.manager


def _edit_labels(mgr: MasterContext, exp_id: int, label: str, add: bool) -> list[str]:
    if not label.strip() or len(label) > MAX_LABEL_LENGTH:
        raise BadRequest(
            "invalid label", [("label", f"a non-empty string of at most {MAX_LABEL_LENGTH} chars")]
        )
    with mgr.db.write() as s:
        exp = s.get(ExperimentRow, exp_id)
        if exp is None or exp.state == "DELETED":
            raise NotFound(f"experiment {exp_id} not found")
        config = dict(exp.config)
        labels = [str(x) for x in config.get("labels") or []]
        if add and label not in labels:
            labels.append(label)
        elif not add:
            labels = [x for x in labels if x != label]
        config["labels"] = labels
        mgr.configs[exp.id] = parse_experiment_config(config)
        exp.config = config
        return labels


@router.put("/experiments/{exp_id}/labels/{label}", response_model=R.LabelsOut)
@access(users="owner", what="label it")
def put_experiment_label(exp_id: DbId, label: str, request: Request) -> dict[str, Any]:
    """Add ``label`` to the experiment's labels (no change if it is there)."""
    return {"labels": _edit_labels(_mgr(request), exp_id, label, add=True)}


@router.delete("/experiments/{exp_id}/labels/{label}", response_model=R.LabelsOut)
@access(users="owner", what="label it")
def delete_experiment_label(exp_id: DbId, label: str, request: Request) -> dict[str, Any]:
    """Remove ``label`` from the experiment's labels (no change if it is absent)."""
    return {"labels": _edit_labels(_mgr(request), exp_id, label, add=False)}


@router.delete("/checkpoints/{uuid}", response_model=R.CheckpointDeleted)
@access(users="owner", what="delete its checkpoint {uuid}")
def delete_checkpoint(uuid: str, request: Request) -> dict[str, Any]:
    """Delete a checkpoint's files and mark it DELETED.

    Refused (409) while its experiment is not finished: a running trial may resume from
    any of its checkpoints. Deleting a DELETED checkpoint again is a no-op.
    """
    mgr = _mgr(request)
    with mgr.db.write() as s:
        ckpt = s.get(CheckpointRow, uuid)
        if ckpt is None:
            raise NotFound(f"checkpoint {uuid} not found")
        exp = s.get(ExperimentRow, ckpt.experiment_id)
        if exp is None:
            raise NotFound(f"checkpoint {uuid} not found")
        if not is_terminal(exp.state):
            raise Conflict(
                f"checkpoint {uuid} belongs to experiment {exp.id}, which is {exp.state}; "
                "checkpoints can be deleted once the experiment has finished"
            )
        already = ckpt.state == "DELETED"
        ckpt.state = "DELETED"
        config = dict(exp.config)
    if not already:
        checkpoints.remove_checkpoints(config, [uuid])
    return {"uuid": uuid, "state": "DELETED"}
