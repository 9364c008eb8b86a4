"""The provisioner of one resource pool: reads the database, asks the pure decision
function (:func:`dauntless.scheduler.provision`) and carries the decision out through
its provider, recording every instance in the ``instances`` table.

Crash safety: an instance's row is committed (state LAUNCHING) *before* the provider is
asked to start it, and its provider id is recorded after. A master that restarts finds
LAUNCHING rows and asks the provider (:meth:`Provider.find`) whether the instance exists:
if so it is STARTING, else the launch never happened and the row is closed. Either way
the instances counted by the next decision are those that exist, so a restart in the
middle of a scale-up launches no duplicates. Terminations are recorded (TERMINATING,
the agent disabled so the scheduler places nothing there) before the provider call and
retried until it succeeds.
"""

from __future__ import annotations

import logging
import re
import threading
import uuid
from typing import TYPE_CHECKING

from sqlalchemy import select

from dauntless.scheduler import InstanceInfo, ProvisionerSpec, provision

from ..db import AgentRow, AllocationRow, ExperimentRow, InstanceRow, TrialRow
from ..models import task_runs
from ..states import State
from ._base import Provider, ProviderError

if TYPE_CHECKING:
    from dauntless.config import ResourcePoolConfig

    from ..context import MasterContext

log = logging.getLogger("dauntless.master.provisioner")


def instance_name(cluster_name: str, pool: str) -> str:
    """A new instance (and agent) name: ``<cluster>-<pool>-<8 hex>``, in the characters
    every provider accepts (lowercase letters, digits, ``-``; a letter first; at most 63
    characters, as Compute Engine requires)."""
    stem = re.sub(r"[^a-z0-9-]+", "-", f"{cluster_name}-{pool}".lower()).strip("-")
    if not stem or not stem[0].isalpha():
        stem = "d-" + stem
    return f"{stem[:54].rstrip('-')}-{uuid.uuid4().hex[:8]}"


class PoolProvisioner:
    """Provisioning of one pool.

    Args:
        manager: the master's context (database, config, clock).
        pool: the pool's config; ``pool.provider`` must be set.
        provider: the provider that starts and stops its instances.
        interval: least seconds between two decisions (provider calls are slow).
    """

    def __init__(
        self,
        manager: MasterContext,
        pool: ResourcePoolConfig,
        provider: Provider,
        interval: float = 1.0,
    ) -> None:
        assert pool.provider is not None
        self.ctx = manager
        self.pool = pool
        self.provider = provider
        self.cfg = pool.provider
        self.spec = ProvisionerSpec(
            slots_per_instance=self.cfg.slots_per_instance(),
            min_instances=self.cfg.min_instances,
            max_instances=self.cfg.max_instances,
            max_idle_agent_period=self.cfg.max_idle_agent_period,
            max_agent_starting_period=self.cfg.max_agent_starting_period,
        )
        self.interval = interval
        self._last = float("-inf")
        self._reconciled = False

    # ------------------------------------------------------------------ reconciliation

    def reconcile(self) -> None:
        """Settle launches and terminations a previous master left unfinished."""
        with self.ctx.db.read() as s:
            rows = s.scalars(
                select(InstanceRow).where(
                    InstanceRow.resource_pool == self.pool.pool_name,
                    InstanceRow.state.in_(("LAUNCHING", "TERMINATING")),
                )
            ).all()
        for row in rows:
            if row.state == "LAUNCHING":
                found = self.provider.find(row.id)
                with self.ctx.db.write() as s:
                    r = s.get_one(InstanceRow, row.id)
                    if found is not None:
                        r.state, r.provider_id = "STARTING", found
                        log.info("instance %s was launched before a restart: %s", r.id, found)
                    else:
                        r.state, r.terminated_at = "TERMINATED", self.ctx.clock()
                        r.reason = "its launch was not confirmed before a master restart"
        self._reconciled = True

    # ------------------------------------------------------------------ one pass

    def _pending_slots(self, s) -> list[int]:
        live = set(
            s.scalars(
                select(AllocationRow.trial_id).where(AllocationRow.state != "TERMINATED")
            ).all()
        )
        out = []
        for trial, exp in s.execute(
            select(TrialRow, ExperimentRow)
            .join(ExperimentRow, TrialRow.experiment_id == ExperimentRow.id)
            .where(TrialRow.state == State.ACTIVE.value, ExperimentRow.state == State.ACTIVE.value)
        ).all():
            if trial.id in live:
                continue
            cfg = self.ctx.experiment_config(exp)
            if (cfg.resources.resource_pool or "default") == self.pool.pool_name:
                out.append(cfg.resources.slots_per_trial)
        # Queued commands, notebooks, shells and TensorBoards are demand too.
        out.extend(
            r.slots_needed
            for r in task_runs.task_requests(task_runs.pending_tasks(s), self.pool.pool_name)
        )
        return out

    def step(self, force: bool = False) -> None:
        """One decision, at most every ``interval`` seconds (always with ``force``)."""
        now = self.ctx.clock()
        if not force and now - self._last < self.interval:
            return
        self._last = now
        if not self._reconciled:
            self.reconcile()
        to_launch: list[str] = []
        to_stop: list[tuple[str, str | None]] = []
        with self.ctx.db.write() as s:
            rows = s.scalars(
                select(InstanceRow).where(
                    InstanceRow.resource_pool == self.pool.pool_name,
                    InstanceRow.state.in_(("STARTING", "RUNNING", "TERMINATING")),
                )
            ).all()
            busy: dict[str, set[str]] = {}
            for alloc in s.scalars(
                select(AllocationRow).where(AllocationRow.state != "TERMINATED")
            ):
                busy.setdefault(alloc.agent_id, set()).update(str(x) for x in alloc.slot_ids)
            infos = []
            lost: dict[str, str] = {}
            for row in rows:
                if row.state == "TERMINATING":
                    to_stop.append((row.id, row.provider_id))
                    continue
                agent = s.get(AgentRow, row.id)
                if row.state == "STARTING" and agent is not None and agent.state == "ACTIVE":
                    row.state, row.registered_at = "RUNNING", now
                    log.info("instance %s registered its agent", row.id)
                if row.state == "RUNNING":
                    if agent is None or agent.state != "ACTIVE":
                        lost[row.id] = "its agent was lost"
                        continue
                    held = busy.get(row.id, set())
                    if held:
                        row.idle_since = None
                    elif row.idle_since is None:
                        row.idle_since = now
                    usable = [
                        sl
                        for sl in agent.slots
                        if sl.get("enabled", True) and str(sl["id"]) not in held
                    ]
                    free = len(usable) if agent.enabled and not agent.draining else 0
                    infos.append(
                        InstanceInfo(
                            row.id,
                            "RUNNING",
                            row.launched_at,
                            free_slots=free,
                            idle_since=row.idle_since,
                        )
                    )
                else:
                    infos.append(InstanceInfo(row.id, "STARTING", row.launched_at))
            decision = provision(self.spec, infos, self._pending_slots(s), now)
            for name, why in {**lost, **decision.terminate}.items():
                row = s.get_one(InstanceRow, name)
                row.state, row.reason = "TERMINATING", why
                agent = s.get(AgentRow, name)
                if agent is not None:
                    agent.enabled = False
                to_stop.append((name, row.provider_id))
                log.info("terminating instance %s: %s", name, why)
            for _ in range(decision.launch):
                name = (
                    f"{self.ctx.config.cluster_name}-{self.pool.pool_name}-{uuid.uuid4().hex[:8]}"
                )
                s.add(
                    InstanceRow(
                        id=name,
                        resource_pool=self.pool.pool_name,
                        provider=self.provider.kind,
                        provider_id=None,
                        state="LAUNCHING",
                        launched_at=now,
                        info={},
                    )
                )
                to_launch.append(name)
        for name in to_launch:
            try:
                provider_id = self.provider.launch(name)
            except ProviderError as exc:
                log.error("launching instance %s failed: %s", name, exc)
                with self.ctx.db.write() as s:
                    row = s.get_one(InstanceRow, name)
                    row.state, row.terminated_at = "TERMINATED", self.ctx.clock()
                    row.reason = f"launch failed: {exc}"
                continue
            with self.ctx.db.write() as s:
                row = s.get_one(InstanceRow, name)
                row.state, row.provider_id = "STARTING", provider_id
            log.info("launched instance %s (%s)", name, provider_id)
        for name, stop_id in to_stop:
            try:
                self.provider.terminate(name, stop_id)
            except ProviderError as exc:
                log.error("terminating instance %s failed (retried later): %s", name, exc)
                continue
            with self.ctx.db.write() as s:
                row = s.get_one(InstanceRow, name)
                row.state, row.terminated_at = "TERMINATED", self.ctx.clock()
                agent = s.get(AgentRow, name)
                held = s.scalar(
                    select(AllocationRow.id).where(
                        AllocationRow.agent_id == name, AllocationRow.state != "TERMINATED"
                    )
                )
                if agent is not None and held is None:
                    s.delete(agent)


class Provisioners:
    """The provisioners of every pool with a ``provider``; :meth:`step` is called by
    the master's background loop after each scheduling pass."""

    def __init__(self, pools: list[PoolProvisioner]) -> None:
        self.pools = pools
        self._lock = threading.Lock()

    def step(self) -> None:
        """One decision per pool (errors of one pool are logged; others go on)."""
        with self._lock:
            for p in self.pools:
                try:
                    p.step()
                except Exception:
                    log.exception("provisioner of pool %s failed", p.pool.pool_name)
