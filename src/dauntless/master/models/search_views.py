"""An experiment's search as the searcher routes show and drive it (issue 35): the
remote search runner's events and operations, and the search summary (objectives, the
Pareto front of a multi-objective search, trial lineage, a custom method's error).

``searcher_events`` and ``search_summary`` read (the caller's read session);
``post_searcher_operations`` changes rows in the caller's write session.
"""

from __future__ import annotations

import math
from typing import Any

from sqlalchemy.orm import Session

from dauntless.searcher import CustomSearch, pareto_front

from ..context import MasterContext
from ..errors import BadRequest, Conflict
from ..states import State, is_terminal
from . import search, trials

MAX_OPERATIONS = 10_000
"""The most operations one post of a remote runner may carry."""


def _remote(ctx: MasterContext, exp: Any) -> CustomSearch:
    searcher = search.searcher_for(ctx, exp, read_only=True)
    if not isinstance(searcher, CustomSearch) or not searcher.remote:
        raise BadRequest(
            f"experiment {exp.id} is not a custom search answered by a remote runner "
            f"(searcher.name: {exp.config['searcher']['name']}, without searcher.method)"
        )
    return searcher


def searcher_events(s: Session, ctx: MasterContext, exp_id: int) -> dict[str, Any]:
    """The events a remote runner has yet to answer, and the experiment's state.

    Returns:
        ``{"searcherEvents": [{"id", <kind>: {...}}], "experimentState": str}``; the
        event kinds and their fields are those of docs/protocol.md.

    Raises:
        NotFound: no such experiment. BadRequest: not a remote custom search.
    """
    exp = search.read_experiment(s, exp_id)
    searcher = _remote(ctx, exp)
    return {"searcherEvents": searcher.pending_events(), "experimentState": exp.state}


def post_searcher_operations(
    s: Session, ctx: MasterContext, exp_id: int, operations: list[Any], event_id: int
) -> dict[str, Any]:
    """Apply what a remote runner answered to event ``event_id`` (and acknowledge it
    and every earlier event). A repeated post for an acknowledged event changes nothing.

    Raises:
        NotFound: no such experiment. BadRequest: not a remote custom search, too many
            operations, or one that is malformed or does not fit the search (named).
        Conflict: the experiment has ended or is stopping.
    """
    exp = search.read_experiment(s, exp_id)
    if is_terminal(exp.state) or State(exp.state) not in (State.ACTIVE, State.PAUSED):
        raise Conflict(f"experiment {exp_id} is {exp.state}: its search takes no operations")
    if len(operations) > MAX_OPERATIONS:
        raise BadRequest(
            f"at most {MAX_OPERATIONS} operations per post, got {len(operations)}",
            [("searcherOperations", f"at most {MAX_OPERATIONS}")],
        )
    _remote(ctx, exp)
    searcher = search.searcher_for(ctx, exp)
    try:
        ops = searcher.apply_remote_operations(operations, event_id)
    except ValueError as exc:
        raise BadRequest(str(exc), [("searcherOperations", str(exc))]) from None
    search.apply(s, ctx, exp, searcher, ops)
    return {}


def search_summary(s: Session, ctx: MasterContext, exp_id: int) -> dict[str, Any]:
    """What the experiment's searcher adds to its description.

    Returns:
        ``{"searcher": name, "objectives": [{"name", "smaller_is_better"}], "error":
        str | None, "pareto_front": {"points": [{"trial_id", "values"}], "front":
        [trial ids]} | None, "lineage": [{"trial_id", "parent_id"}]}``. The Pareto front
        (two or more objectives) is over each trial's latest validation that holds every
        objective; ``error`` is a custom search method's traceback.

    Raises:
        NotFound: no such experiment.
    """
    exp = search.read_experiment(s, exp_id)
    cfg = ctx.experiment_config(exp)
    objectives_of = getattr(cfg.searcher, "objectives", None)
    objectives: list[dict[str, Any]] = (
        [{"name": o.name, "smaller_is_better": o.smaller_is_better} for o in objectives_of()]
        if objectives_of is not None
        else [{"name": cfg.searcher.metric, "smaller_is_better": cfg.searcher.smaller_is_better}]
    )
    rows = trials.experiment_trials(s, exp_id)
    error = ((exp.searcher_state or {}).get("method") or {}).get("error")
    front = None
    if len(objectives) > 1:
        latest = trials.latest_validations(s, [t.id for t in rows])
        points: list[dict[str, Any]] = []
        for t in rows:
            m = latest.get(t.id)
            got: dict[str, Any] = dict(m.values) if m else {}
            values: list[Any] = [got.get(str(o["name"])) for o in objectives]
            if all(_real(v) for v in values):
                points.append({"trial_id": t.id, "values": [float(v) for v in values]})
        idx = pareto_front(
            [p["values"] for p in points], [bool(o["smaller_is_better"]) for o in objectives]
        )
        front = {"points": points, "front": [points[i]["trial_id"] for i in idx]}
    return {
        "searcher": cfg.searcher.name,
        "objectives": objectives,
        "error": error if isinstance(error, str) else None,
        "pareto_front": front,
        "lineage": [{"trial_id": t.id, "parent_id": t.parent_id} for t in rows],
    }


def _real(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
