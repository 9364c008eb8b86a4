"""The master's control loop: a scheduling pass (reap lost agents, enforce preemption
and idle timeouts, place pending work) every ``scheduler_interval`` seconds or when woken,
checkpoint GC, and the start-up catch-up. It calls the model functions of
:mod:`dauntless.master.models`; each pass is one write transaction.
"""

from __future__ import annotations

import ctypes
import logging
import threading
import time
from collections.abc import Callable

from sqlalchemy.orm import Session

from . import scheduling
from .context import MasterContext
from .db import ExperimentRow
from .models import agents, checkpoints, runs, task_runs
from .task_policies import enforce_preemption_timeouts

log = logging.getLogger("dauntless.master")

MAINTENANCE_SECONDS = 1.0
"""How often the loop reaps lost agents, enforces timeouts and deletes checkpoint files."""
TRIM_SECONDS = 60.0
"""How often the loop hands the C heap's free memory back to the system (see
:func:`release_free_heap`)."""
PLACEMENT_FALLBACK_SECONDS = 5.0
"""A scheduling pass places pending work only when rows it depends on changed, or when
this long has passed since it last did (changes the ORM cannot see)."""


def schedule_pass(ctx: MasterContext, maintenance: bool = True, lazy: bool = False) -> int:
    """Reap lost agents, enforce timeouts and place pending trials on free slots.

    Args:
        maintenance: reap agents whose heartbeats stopped, enforce preemption
            timeouts and idle timeouts of tasks (time-driven work the loop does
            every :data:`MAINTENANCE_SECONDS`).
        lazy: place only when rows a placement reads changed since the last one
            (:attr:`MasterContext.placement_changes`), or :data:`PLACEMENT_FALLBACK_SECONDS`
            passed; the loop's passes are lazy, other callers' are not.

    Returns:
        The number of allocations created.
    """
    started = time.perf_counter()
    try:
        return _schedule_pass(ctx, maintenance, lazy)
    finally:
        if ctx.prom is not None:
            ctx.prom.scheduler_pass.observe(time.perf_counter() - started)


def _schedule_pass(ctx: MasterContext, maintenance: bool, lazy: bool) -> int:
    now = ctx.clock()
    with ctx.db.write() as s:
        return _pass_in(s, ctx, now, maintenance, lazy)


def _pass_in(s: Session, ctx: MasterContext, now: float, maintenance: bool, lazy: bool) -> int:
    """The body of :func:`schedule_pass` in the write session ``s`` (which holds the
    write lock), at ``now`` (epoch s)."""
    if maintenance:
        agents.reap_lost_agents(s, ctx, now)
        enforce_preemption_timeouts(s, ctx, now)
        task_runs.kill_idle_tensorboards(s, ctx, now)
    # Under the write lock: no commit comes between take() and the reads.
    changed = ctx.placement_changes.take()
    if lazy and not changed and now - ctx.placed_at < PLACEMENT_FALLBACK_SECONDS:
        return 0
    ctx.placed_at = now
    created = scheduling.place_pending(s, ctx, now)
    # The placement read every change flushed before it; what it wrote itself
    # (new allocations, preemption flags) needs no second placement, so its
    # commit does not set the flag (a change committed later still does).
    ctx.placement_changes.forget(s)
    return created


def place_in(s: Session, ctx: MasterContext) -> int:
    """Place pending work now, in the caller's write session ``s``, after exits it
    recorded (flushed to ``s`` before the placement reads): what
    :func:`place_after_exits` does in a transaction of its own, for a caller that
    records exits, places and answers a heartbeat in one transaction (issue 37).
    Unlike :func:`place_after_exits` it raises: the caller decides what a failed
    placement undoes.

    Returns:
        The number of allocations created.
    """
    started = time.perf_counter()
    try:
        return _pass_in(s, ctx, ctx.clock(), maintenance=False, lazy=False)
    finally:
        if ctx.prom is not None:
            ctx.prom.scheduler_pass.observe(time.perf_counter() - started)


def allocation_exited(
    ctx: MasterContext,
    allocation_id: str,
    exit_code: int | None,
    message: str | None,
    fatal: bool = False,
) -> None:
    """Handle a task's exit as reported by its agent (idempotent).

    Its own transaction (:func:`~dauntless.master.models.runs.record_exit`), then a
    scheduling pass.

    ``fatal``: the agent found the task cannot run in its environment (a Python
    environment that does not build); the trial ends in ERROR without a restart.

    Raises:
        NotFound: no such allocation.
    """
    if record_exit(ctx, allocation_id, exit_code, message, fatal):
        place_after_exits(ctx)


def record_exit(
    ctx: MasterContext,
    allocation_id: str,
    exit_code: int | None,
    message: str | None,
    fatal: bool = False,
) -> bool:
    """Record a task's exit in a write transaction of its own, without placing work
    on the slots it freed (:func:`place_after_exits` does, once for every exit a
    heartbeat carries: issue 37, a pass per exit was 38% of the heartbeat path's CPU
    samples in a 600-trial search).

    Returns:
        Whether anything changed (False: the exit was recorded before).

    Raises:
        NotFound: no such allocation.
        IllegalTransition: the trial cannot move as the exit says (a master bug).
    """
    with ctx.db.write() as s:
        return runs.record_exit(s, ctx, allocation_id, exit_code, message, fatal)


def place_after_exits(ctx: MasterContext) -> None:
    """Place what waits on slots that recorded exits freed, now, before answering:
    the agent heartbeats right after a task exits and so gets the next task without
    waiting for the loop (the slot gap of issue 19). The loop's own pass follows as
    before; a failed placement is logged and left to it (the exits are recorded)."""
    try:
        schedule_pass(ctx, maintenance=False)
    except Exception:
        log.exception("scheduling pass after an exit failed")
    ctx.wake.set()


def run_gc(ctx: MasterContext, deletions: bool = True) -> bool:
    """Apply the GC policy of every experiment one of whose trials ended since the
    last call (marking checkpoints DELETING), then delete the files of DELETING
    checkpoints whose retry time has come (checkpoint_gc); storage is touched after
    the decision commits.

    Returns:
        Whether the policy marked any checkpoint DELETING.
    """
    marked = False
    while ctx.gc_due:
        exp_id = ctx.gc_due.pop()
        with ctx.db.read() as s:  # nothing to collect: no write lock, no experiment read
            if not checkpoints.collectable(s, exp_id):
                continue
        with ctx.db.write() as s:
            exp = s.get(ExperimentRow, exp_id)
            doomed = checkpoints.collect(s, ctx, exp) if exp is not None else []
        if doomed:
            marked = True
            log.info("checkpoint GC of experiment %s deletes %d checkpoint(s)", exp_id, len(doomed))
    if deletions:
        ctx.deletions.process()
    return marked


def on_start(ctx: MasterContext) -> None:
    """At master start: give agents a fresh heartbeat deadline (they were not lost,
    the master was away) and collect checkpoints of experiments that ended."""
    now = ctx.clock()
    with ctx.db.write() as s:
        agents.refresh_heartbeats(s, now)
    with ctx.db.read() as s:
        checkpoints.schedule_gc_after_start(s, ctx)


def _find_malloc_trim() -> Callable[[int], int] | None:
    try:
        trim = ctypes.CDLL(None).malloc_trim  # glibc's; musl and others lack it
    except (OSError, AttributeError):
        return None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return trim  # type: ignore[no-any-return]


_MALLOC_TRIM = _find_malloc_trim()


def release_free_heap() -> bool:
    """Hand the free pages of the C heap back to the system: glibc's ``malloc_trim(0)``
    (malloc_trim(3)), where the C library has it.

    glibc keeps memory that C code freed (SQLite's page caches and statements, the
    buffers of the drivers and of Python's small-object allocator) mapped in its
    arenas, one per thread that allocated, and the master runs dozens of threads; that
    memory counts in the master's resident size though nothing uses it (issue 37: 9 MB
    of 181 MB after 1,450 trials, measured by calling it from a debugger). It takes a
    few milliseconds, so the loop calls it every :data:`TRIM_SECONDS`.

    Returns:
        Whether memory was released (False also where the C library has no
        ``malloc_trim``).
    """
    return _MALLOC_TRIM is not None and _MALLOC_TRIM(0) == 1


HEAP_ARENAS = 2
"""C heap arenas the master process uses (see :func:`limit_heap_arenas`)."""
_M_ARENA_MAX = -8  # glibc's <malloc.h>


def limit_heap_arenas(arenas: int = HEAP_ARENAS) -> bool:
    """Make glibc's malloc share ``arenas`` heaps among all threads (``mallopt(M_ARENA_MAX,
    arenas)``, mallopt(3)); call it before the threads start.

    By default glibc gives threads up to 8 arenas per core, each keeping the memory its
    threads freed; the master's request threads spread over 16 arenas, which after 3,243
    trials held 92 MB of which 50 MB was in use (``malloc_stats()`` called from a
    debugger, issue 37). Python holds the interpreter lock around most allocations, so
    the threads contend little for fewer arenas.

    Returns:
        Whether the limit was set (False where the C library has no ``mallopt`` or
        refused it).

    Raises:
        ValueError: ``arenas`` < 1.
    """
    if arenas < 1:
        raise ValueError(f"arenas must be >= 1, got {arenas}")
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(_M_ARENA_MAX, arenas) == 1)


def run_loop(ctx: MasterContext, stop: threading.Event) -> None:
    """The background loop: a scheduling pass every ``scheduler_interval`` seconds, or
    sooner when an event sets ``ctx.wake``. Returns when ``stop`` is set."""
    maintained_at = -MAINTENANCE_SECONDS
    trimmed_at = time.monotonic()
    while not stop.is_set():
        try:
            now = time.monotonic()
            # Time-driven work (lost agents, timeouts, file deletions) once a second;
            # placement whenever something it reads changed (issue 19: an idle
            # master with many running trials costs little CPU).
            maintenance = now - maintained_at >= MAINTENANCE_SECONDS
            # A deletion pass when GC just marked checkpoints (their files go at
            # once) and with the time-driven work (retries); not after every trial
            # end that marked nothing (a thread start and a query per trial).
            marked = run_gc(ctx, deletions=False)
            if maintenance or marked:
                # Deleting files may wait on a slow store: off the scheduling path.
                ctx.deletions.start(wait=2.0)
            schedule_pass(ctx, maintenance=maintenance, lazy=True)
            if maintenance:
                maintained_at = now
            for hook in ctx.loop_hooks:
                hook()
            if now - trimmed_at >= TRIM_SECONDS:
                trimmed_at = now
                release_free_heap()
        except Exception:  # keep the master alive; the next pass retries
            log.exception("scheduling pass failed")
        ctx.wake.wait(ctx.config.scheduler_interval)
        ctx.wake.clear()
