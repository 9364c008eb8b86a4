"""``GET /api/v1/allocations``: which trial or task holds which slots of which agent, and
how each earlier run ended; also the live allocations of the ``cluster`` stream
(:mod:`dauntless.master.routes_stream`). The answer's shape is in that module's
docstring.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, HTTPException, Query, Request

from . import authz
from . import responses as R
from .api_spec import INT32_MAX
from .auth import principal
from .models import allocations
from .rbac import Perm

router = APIRouter(prefix="/api/v1")


def _allocations(
    request: Request, trial_id: int | None, active: bool | None, owner_id: int | None = None
) -> list[dict]:
    # Trials' allocations and tasks' (commands, notebooks, shells, TensorBoards), whose
    # trial_id and experiment_id are None; only those of what the caller may view.
    who = principal(request)
    exp_ws = task_ws = None
    if who.kind == "user":
        exp_ws = authz.visible(request, Perm.VIEW_EXPERIMENT_METADATA)
        task_ws = authz.visible(request, Perm.VIEW_NSC)
    with request.app.state.ctx.db.read() as s:
        rows = allocations.listing(s, trial_id, active, owner_id, exp_ws, task_ws)
        return [
            {
                "id": a.id,
                "trial_id": a.trial_id,
                "experiment_id": exp_id,
                "task_id": a.task_id,
                "agent_id": a.agent_id,
                "slot_ids": [str(x) for x in a.slot_ids],
                "state": a.state,
                "run_id": a.run_id,
                "exit_code": a.exit_code,
                "exit_message": a.exit_message,
                "created_at": a.created_at,
                "started_at": a.started_at,
                "ended_at": a.ended_at,
            }
            for a, exp_id in rows
        ]


@router.get("/allocations", response_model=R.AllocationsOut)
def list_allocations(
    request: Request,
    trial_id: int | None = Query(
        None, ge=0, le=INT32_MAX, description="only this trial's allocations"
    ),
    active: bool | None = Query(
        None, description="true: not yet terminated; false: terminated; omit: all"
    ),
) -> dict[str, Any]:
    """Allocations (one per run of a trial on slots of an agent), oldest first: which
    trial holds which slots, and how each earlier run ended (its restarts).

    Admins see every allocation; other users those of the experiments and tasks they
    own and may view; a trial's token only its own trial's (it may leave ``trial_id``
    out)."""
    who = principal(request)
    owner_id = None
    if who.kind == "trial":
        if who.trial_id is None:  # a command's, notebook's, shell's or TensorBoard's token
            raise HTTPException(
                403, f"a task's session token (task {who.task_id}) may not list allocations"
            )
        if trial_id is not None and trial_id != who.trial_id:
            raise HTTPException(
                403, f"a trial's session token may read only its own trial ({who.trial_id})"
            )
        trial_id = who.trial_id
    elif not request.app.state.authz.is_admin(who):
        owner_id = who.user_id
    return {"allocations": _allocations(request, trial_id, active, owner_id)}
