"""REST routes of the cluster under ``/api/v1``: the master's identity, agents and
their slots, resource pools, agent heartbeats, allocations (exits, the preemption
signal, rendezvous) and task log shipping (docs/protocol.md).

Split out of :mod:`dauntless.master.routes`, which keeps the error handlers and the
JSON view helpers the route modules share."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from typing import Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

import dauntless

from . import det_shapes, loop
from . import responses as R
from . import routes_det_experiments as det_views
from .auth import forbidden, principal
from .context import MasterContext
from .det_dialect import speaks_determined
from .errors import Forbidden, NotFound
from .heartbeats import MAX_HOLD_SECONDS, Stamp
from .models import agents, allocations, logs, runs, task_resources
from .routes import _ctx, _read, _write
from .schemas import (
    AgentSwitch,
    AllocationExited,
    Heartbeat,
    LogBatch,
    RegisterAgent,
    RendezvousIn,
    agent_view,
)
from .states import IllegalTransition

log = logging.getLogger("dauntless.master")

router = APIRouter(prefix="/api/v1")
heartbeat_router = APIRouter(prefix="/api/v1")
"""The agents' heartbeat alone: the app matches it before its other routes (issue 37:
matching it after ~100 others was a sixth of a beat answered from memory)."""
info_router = APIRouter()
"""Determined's ``GET /info``, outside ``/api/v1`` (before the WebUI's catch-all)."""

PREEMPTION_CHECK_SECONDS = 0.25
"""How often a waiting preemption long poll checks, in memory, whether its allocation's
rows changed (and whether its caller left): the signal's latency."""
PREEMPTION_REREAD_SECONDS = 5.0
"""How often a waiting preemption long poll reads its allocation from the database even
though no change was seen (changes the ORM does not report, such as a cascade delete)."""


@router.get("/master", response_model=R.MasterInfo)
def get_master(request: Request) -> dict[str, Any]:
    """Version and identity of this master, and its single sign-on providers; with
    Determined's ``GetMasterResponse`` fields beside them (also ``GET /info``)."""
    return master_info(request)


def master_info(request: Request) -> dict[str, Any]:
    """The body of ``GET /api/v1/master`` and Determined's ``GET /info``: ``version`` is
    Dauntless's, or to Determined's client the Determined release whose API this
    master serves (:data:`det_shapes.DETERMINED_API_VERSION`); ``dauntless_version``
    is always Dauntless's."""
    ctx = _ctx(request)
    sso = getattr(request.app.state, "sso", None)
    providers = [sso.provider_info()] if sso is not None else []
    cluster_id = _read(request, agents.cluster_id)
    ours = {
        "version": dauntless.__version__,
        "dauntless_version": dauntless.__version__,
        "cluster_name": ctx.config.cluster_name,
        "cluster_id": cluster_id,
        "sso_providers": providers,
        "cluster_message": request.app.state.cluster_message.current(time.time()),
    }
    # Determined's CLI warns at every command when the master's version differs from
    # its own: to it, this master is the Determined release whose API it serves.
    det_version = det_shapes.DETERMINED_API_VERSION
    return ours | det_shapes.master_info(
        version=det_version if speaks_determined(request) else dauntless.__version__,
        cluster_id=cluster_id or "",
        cluster_name=ctx.config.cluster_name or "",
        master_id=MASTER_ID,
        sso_providers=providers,
        rbac_enabled=ctx.config.security.authz.type == "rbac",
    )


MASTER_ID = str(uuid.uuid4())
"""This master process's id (Determined's ``masterId``: new at each start)."""


@info_router.get("/info", response_model=R.MasterInfo)
def get_info(request: Request) -> dict[str, Any]:
    """Determined's ``GET /info`` (its CLI's first call): as ``GET /api/v1/master``."""
    return master_info(request)


@router.get("/agents", response_model=R.AgentsOut)
def list_agents(request: Request) -> dict[str, Any]:
    """Every agent with its slots and which allocation holds each (Determined's shape
    to its client)."""
    if speaks_determined(request):
        return det_views.agents_list(request)  # type: ignore[return-value]
    ctx = _ctx(request)
    with ctx.db.read() as s:
        used = agents.slot_holders(s)
        rows = agents.all_agents(s)
        beat = ctx.heartbeats.latest
        return {"agents": [agent_view(a, used.get(a.id, {}), beat(a.id)) for a in rows]}


@router.post("/agents", response_model=R.AgentRegistered)
def register_agent(body: RegisterAgent, request: Request) -> dict[str, Any]:
    """An agent announces itself and its slots (with the cluster secret); the answer
    holds the credential it presents from now on (``X-Dauntless-Agent-Token``)."""
    agent, token = _write(
        request,
        agents.register_agent,
        body.id,
        body.resource_pool,
        body.hostname,
        [sl.model_dump() for sl in body.slots],
        running=body.running,
        runtime=body.runtime.model_dump(exclude_none=True) if body.runtime else None,
    )
    assert agent.token_hash is not None  # set by register_agent
    request.app.state.auth.agents.remember(agent.id, agent.token_hash)
    timeout = _ctx(request).config.agent_timeout
    return {"agent": agent_view(agent, {}), "token": token, "agent_timeout": timeout}


def _reporter(request: Request) -> tuple[str, str | None] | None:
    """The agent (and Slurm part) a report comes from; None for an admin, who may
    report for any agent."""
    who = principal(request)
    if who.kind != "agent":
        return None
    assert who.agent_id is not None  # the cluster secret is refused by the rule
    return who.agent_id, who.part_id


def _check_reports(request: Request, reporter: tuple[str, str | None], ids: list[str]) -> None:
    """Refuse (403) a report of ``reporter`` about parts placed on another agent; where
    each part was placed is read once and then remembered."""
    ctx = _ctx(request)
    missing = [i for i in dict.fromkeys(ids) if i not in ctx.alloc_agent]
    if missing:
        ctx.alloc_agent.update(_read(request, agents.placements, missing))
    agents.check_reports(ctx.alloc_agent, reporter[0], reporter[1], ids)


@router.post("/agents/{agent_id}/enable", response_model=R.AgentBody)
def enable_agent(agent_id: str, request: Request) -> dict[str, Any]:
    """Let the scheduler use this agent again."""
    return _agent_json(request, _write(request, agents.set_agent_enabled, agent_id, True).id)


@router.post("/agents/{agent_id}/disable", response_model=R.AgentBody)
def disable_agent(agent_id: str, request: Request, body: AgentSwitch | None = None) -> dict:
    """No new work on this agent; without ``drain`` its trials are preempted now."""
    drain = body.drain if body else False
    return _agent_json(
        request, _write(request, agents.set_agent_enabled, agent_id, False, drain).id
    )


@router.post("/agents/{agent_id}/slots/{slot_id}/{action}", response_model=R.AgentBody)
def switch_slot(agent_id: str, slot_id: str, action: str, request: Request) -> dict[str, Any]:
    """``enable`` or ``disable`` one slot of an agent."""
    if action not in ("enable", "disable"):
        raise NotFound(f"no slot action {action!r}; use enable or disable")
    _write(request, agents.set_slot_enabled, agent_id, slot_id, action == "enable")
    return _agent_json(request, agent_id)


@router.get("/resource-pools", response_model=R.ResourcePoolsOut)
def list_resource_pools(request: Request) -> dict[str, Any]:
    """Declared pools with their schedulers and slots used and free; Determined's
    ``resourcePools`` and ``pagination`` beside them (its ``det rp list``)."""
    ctx = _ctx(request)
    pools = _read(request, agents.resource_pools, ctx)
    name = ctx.config.cluster_name or ""
    det = [det_shapes.resource_pool(p, "default", name) for p in pools]
    page = {"offset": 0, "limit": 0, "startIndex": 0, "endIndex": len(det), "total": len(det)}
    return {"resource_pools": pools, "resourcePools": det, "pagination": page}


def _agent_json(request: Request, agent_id: str) -> dict[str, Any]:
    ctx = _ctx(request)
    with ctx.db.read() as s:
        agent = agents.read_agent(s, agent_id)
        used = agents.slot_holders(s, agent_id).get(agent_id, {})
        return {"agent": agent_view(agent, used, ctx.heartbeats.latest(agent_id))}


@heartbeat_router.post("/agents/{agent_id}/heartbeat", response_model=R.HeartbeatOut)
async def agent_heartbeat(
    agent_id: str,
    body: Heartbeat,
    request: Request,
    wait_seconds: float = Query(0, ge=0, le=MAX_HOLD_SECONDS),
) -> dict[str, Any] | JSONResponse:
    """Liveness plus work: returns tasks to start and allocations to kill.

    Task exits the heartbeat carries are recorded first, each as ``POST
    /allocations/{id}/exited`` would (an unknown allocation is skipped, as that route's
    404 is by the agent), so the work their slots freed is in this answer (issue 19).

    A beat that lists the same parts as the agent's last quiet one, while nothing
    changed for the agent since, and carries no exit and no resource sample the master
    would store, is answered on the event loop from memory (issue 37,
    :mod:`dauntless.master.heartbeats`); every other beat is a write transaction on a
    worker thread.

    With ``wait_seconds`` above 0 (an agent with no task running asks for its
    heartbeat interval), a beat answered from memory is held as a long poll until
    something changes for the agent (work placed on it: it then takes the full path and
    its answer carries the work) or the seconds pass (:meth:`Heartbeats.hold`).
    """
    ctx = _ctx(request)
    reporter = _reporter(request)
    if reporter is not None and (reporter[0] != agent_id or reporter[1] is not None):
        raise forbidden(
            f"agent {reporter[0]} may heartbeat only for itself, not for agent {agent_id}"
        )
    if not body.exited:
        sampled = [x.allocation_id for x in body.resources]
        stamp = ctx.heartbeats.stamp(agent_id)
        kept = ctx.heartbeats.answer(agent_id, body.running, sampled, ctx.clock())
        if kept is not None and not await ctx.heartbeats.hold(agent_id, stamp, wait_seconds):
            # Built as HeartbeatOut would be (its only shapes: no spec to start, ids to
            # kill), without the response model's validation of every answer.
            answer = {**kept, "agent_timeout": float(ctx.config.agent_timeout)}
            return JSONResponse(answer)
    # Alive from now, however long the worker threads take to get to this beat, and
    # not declared lost while it is in flight (issue 37: a beat that waited longer than
    # agent_timeout for the threads and the database cost its agent's trials).
    arrived = ctx.clock()
    ctx.heartbeats.arrived(agent_id, arrived)
    try:
        return await run_in_threadpool(_heartbeat, request, reporter, agent_id, body, arrived)
    finally:
        ctx.heartbeats.answered(agent_id, ctx.clock())


def _heartbeat(
    request: Request,
    reporter: tuple[str, str | None] | None,
    agent_id: str,
    body: Heartbeat,
    arrived: float,
) -> dict[str, Any]:
    """The full path of :func:`agent_heartbeat` (on a worker thread) of a beat that
    arrived at ``arrived`` (the master's clock, epoch s).

    The beat's exits, the placement on the slots they freed, its resource samples and
    the beat itself are written in one transaction (:func:`_beat_at_once`; issue 37: an
    exit's beat took three write transactions, and its hand-over read again the rows
    the exit and the placement had read). When any of them raises, that transaction is
    rolled back whole and the beat is taken again in parts (:func:`_beat_in_parts`,
    each in a transaction of its own, as before), so one part's failure never undoes
    another's: an exit the master refuses (a bug) is logged and skipped, a failed
    placement is logged and left to the loop, and the exits stay recorded when the beat
    itself fails (its agent is not registered, say)."""
    ctx = _ctx(request)
    exits = []
    for ex in body.exited:
        if reporter is not None:
            try:
                _check_reports(request, reporter, [ex.allocation_id])
            except Forbidden as exc:  # skipped, as an unknown allocation is
                log.warning("agent %s: %s", agent_id, exc)
                continue
        exits.append(ex)
    try:
        answer, trials, now, stamp = _beat_at_once(ctx, agent_id, body, exits, arrived)
    except Exception:
        if not exits and not body.resources:
            raise  # the beat alone: nothing to keep apart, as before
        log.info("agent %s: the heartbeat is taken again in parts", agent_id, exc_info=True)
        answer, trials, now, stamp = _beat_in_parts(ctx, agent_id, body, exits, arrived)
    # Each part handed over is placed on this agent (the beat hands over only its own
    # parts, and a part never moves), committed: its exit's report check then reads no
    # placement (issue 37: a read session and statement per trial).
    for spec in answer["start"]:
        ctx.alloc_agent[spec["allocation_id"]] = agent_id
    beats = ctx.heartbeats
    beats.beat(agent_id, now)
    if trials is not None:  # a quiet beat: the same one gets the same answer
        beats.keep(agent_id, stamp, body.running, answer, now, trials)
    else:
        beats.forget(agent_id)
    return {**answer, "agent_timeout": ctx.config.agent_timeout}


_Beat = tuple[dict[str, Any], frozenset[str] | None, float, Stamp]
"""A full-path beat's answer, its trials when quiet (:func:`agents.beat`), its time (the
master's clock, epoch s) and the change counts its answer holds under."""


def _beat_at_once(
    ctx: MasterContext, agent_id: str, body: Heartbeat, exits: list[Any], arrived: float
) -> _Beat:
    """Record ``exits`` (unknown allocations skipped), place work on the slots they
    freed, store the beat's resource samples and answer the beat, in one write
    transaction; raises whatever any of them raises (nothing is then written).

    The change counts (:meth:`Heartbeats.stamp`) are read after the commit, while
    the write lock is still held: they then include this transaction's own changes
    (the exits), and no other commit can come in between."""
    with ctx.db.write_lock:
        # Rows held: the hand-over's task spec reads the trial, its experiment, the
        # agent and the owner the exit and the placement loaded (issue 37: statements).
        with ctx.db.write(hold=True) as s:
            recorded = False
            for ex in exits:
                try:  # NotFound is raised before anything is written
                    if runs.record_exit(
                        s, ctx, ex.allocation_id, ex.exit_code, ex.message, ex.fatal
                    ):
                        recorded = True
                except NotFound:
                    continue
            if recorded:  # one placement for every exit of the beat, before its answer
                loop.place_in(s, ctx)
            if body.resources:  # issue 34: the agent's samples of its tasks' process trees
                task_resources.record_samples(s, ctx.clock(), agent_id, body.resources)
            now = ctx.clock()
            answer, trials = agents.beat(s, ctx, agent_id, body.running, now, arrived)
        stamp = ctx.heartbeats.stamp(agent_id)
    if recorded:
        ctx.wake.set()  # the loop's own pass follows, as after place_after_exits
    return answer, trials, now, stamp


def _beat_in_parts(
    ctx: MasterContext, agent_id: str, body: Heartbeat, exits: list[Any], arrived: float
) -> _Beat:
    """:func:`_beat_at_once` with each exit, the placement, the samples and the beat in
    a write transaction of its own (see :func:`_heartbeat`)."""
    recorded = False
    for ex in exits:
        try:
            if loop.record_exit(ctx, ex.allocation_id, ex.exit_code, ex.message, ex.fatal):
                recorded = True
        except NotFound:
            continue
        except IllegalTransition:
            # A master bug must not stop the agent's heartbeats (the agent would retry
            # this answer forever and look dead): say so loudly and go on; the
            # allocation, still RUNNING here, is then missing from the agent's
            # ``running`` list and is handled as lost.
            log.exception("recording the exit of allocation %s failed", ex.allocation_id)
    if recorded:  # one placement for every exit of the beat, before its answer
        loop.place_after_exits(ctx)
    if body.resources:  # issue 34: the agent's samples of its tasks' process trees
        samples = body.resources
        ctx.write(lambda s, c: task_resources.record_samples(s, c.clock(), agent_id, samples))
    stamp = ctx.heartbeats.stamp(agent_id)  # before the transaction: a commit meanwhile shows
    now = ctx.clock()
    answer, trials = ctx.write(agents.beat, agent_id, body.running, now, arrived)
    return answer, trials, now, stamp


@router.post("/allocations/{allocation_id}/exited", response_model=R.Empty)
def allocation_exited(allocation_id: str, body: AllocationExited, request: Request) -> dict:
    """The agent reports that a task's process ended (only of a task placed on it)."""
    reporter = _reporter(request)
    if reporter is not None:
        _check_reports(request, reporter, [allocation_id])
    loop.allocation_exited(_ctx(request), allocation_id, body.exit_code, body.message, body.fatal)
    return {}


@router.get("/allocations/{allocation_id}/signals/preemption", response_model=R.PreemptionSignal)
async def preemption_signal(
    allocation_id: str, request: Request, timeout_seconds: float = Query(0, ge=0, le=60)
) -> dict[str, bool]:
    """Whether the allocation should checkpoint and exit now.

    A long poll: answers as soon as the signal is set, or ``false`` after
    ``timeout_seconds`` (0: at once).
    """
    ctx = _ctx(request)
    versions = ctx.allocation_versions
    deadline = time.monotonic() + timeout_seconds
    while True:
        seen = versions.version(allocation_id)
        preempt = await run_in_threadpool(
            _read, request, allocations.preemption_signal, allocation_id
        )
        read_at = time.monotonic()
        # Until the allocation's rows change (an in-memory check), the deadline, or
        # PREEMPTION_REREAD_SECONDS for changes the ORM does not see (a cascade delete).
        while True:
            now = time.monotonic()
            if preempt or now >= deadline or await request.is_disconnected():
                return {"preempt": preempt}
            if (
                versions.version(allocation_id) != seen
                or now - read_at >= PREEMPTION_REREAD_SECONDS
            ):
                break
            await asyncio.sleep(min(PREEMPTION_CHECK_SECONDS, deadline - now))


@router.post("/allocations/{allocation_id}/rendezvous", response_model=R.Empty)
def post_rendezvous(allocation_id: str, body: RendezvousIn, request: Request) -> dict:
    """The chief launcher of a distributed allocation says where its ranks meet."""
    with _ctx(request).db.write() as s:
        allocations.set_rendezvous(s, allocation_id, body.addr, body.port)
    return {}


@router.get("/allocations/{allocation_id}/rendezvous", response_model=R.RendezvousOut)
async def get_rendezvous(
    allocation_id: str, request: Request, timeout_seconds: float = Query(0, ge=0, le=60)
) -> dict[str, Any]:
    """The chief's address (long poll until it is known, up to ``timeout_seconds``);
    ``{"rendezvous": null}`` if it is not known yet."""
    deadline = time.monotonic() + timeout_seconds
    while True:
        info = await run_in_threadpool(_read, request, allocations.rendezvous, allocation_id)
        if info is not None or time.monotonic() >= deadline or await request.is_disconnected():
            return {"rendezvous": info}
        await asyncio.sleep(min(0.2, max(0.0, deadline - time.monotonic())))


@router.post("/task/logs", response_model=R.StoredCount)
def post_logs(body: LogBatch, request: Request) -> dict[str, int]:
    """Agents ship task output here in batches (only of the tasks placed on them)."""
    reporter = _reporter(request)
    if reporter is not None:
        _check_reports(request, reporter, [line.allocation_id for line in body.logs])
    n = _write(request, logs.ingest_logs, [line.model_dump() for line in body.logs])
    return {"stored": n}
