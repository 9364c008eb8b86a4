"""REST routes for Determined's CLI habits that the core routes lack, under ``/api/v1``:

- ``PUT /experiments/{exp_id}/labels/{label}`` and ``DELETE ...`` (Determined's
  ``PutExperimentLabel``/``DeleteExperimentLabel``): add or remove one of the
  experiment's ``labels`` (kept in its config, as the config's ``labels`` field);
  answer ``{"labels": [...]}``.
- ``DELETE /checkpoints/{uuid}``: delete one checkpoint of a finished experiment from
  storage (``det checkpoint delete``; Determined's bulk ``DELETE /checkpoints`` takes a
  list, the CLI here calls this once per uuid so that ownership is checked per
  checkpoint by the path). The row is marked DELETING first and DELETED once the files
  are gone; when the storage fails the master's loop retries with backoff, as for
  checkpoint GC (:mod:`dauntless.master.checkpoint_gc`), and the answer says DELETING.

Only the experiment's owner or an admin may call them.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from . import responses as R
from .api_spec import DbId
from .models import checkpoints, experiments
from .routes import _ctx, _write

router = APIRouter(prefix="/api/v1")


@router.put("/experiments/{exp_id}/labels/{label}", response_model=R.LabelsOut)
def put_experiment_label(exp_id: DbId, label: str, request: Request) -> dict[str, Any]:
    """Add ``label`` to the experiment's labels (no change if it is there)."""
    return {"labels": _write(request, experiments.edit_labels, exp_id, label, True)}


@router.delete("/experiments/{exp_id}/labels/{label}", response_model=R.LabelsOut)
def delete_experiment_label(exp_id: DbId, label: str, request: Request) -> dict[str, Any]:
    """Remove ``label`` from the experiment's labels (no change if it is absent)."""
    return {"labels": _write(request, experiments.edit_labels, exp_id, label, False)}


@router.delete("/checkpoints/{uuid}", response_model=R.CheckpointDeleted)
def delete_checkpoint(uuid: str, request: Request) -> dict[str, Any]:
    """Delete a checkpoint's files: mark it DELETING, delete its files now, and mark it
    DELETED once they are gone; answer its state then (``DELETING`` when the storage
    failed: the master retries in the background, with backoff, until it succeeds).

    Refused (409) while its experiment is not finished: a running trial may resume from
    any of its checkpoints. Deleting a DELETED checkpoint again is a no-op.
    """
    ctx = _ctx(request)
    with ctx.db.write() as s:
        exp_id = checkpoints.mark_deleting(s, uuid)
    if exp_id is not None:
        ctx.deletions.process(experiment_id=exp_id)
    with ctx.db.read() as s:
        state = checkpoints.read_checkpoint(s, uuid).state
    return {"uuid": uuid, "state": state}
