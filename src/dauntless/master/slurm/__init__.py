"""The ``slurm`` resource manager: trials run as Slurm jobs on an existing Slurm cluster.

``resource_manager: {type: slurm, ...}`` in the master config. Slurm stays the owner of
its nodes; the master sees them through ``sinfo`` and places work with its own
scheduler (priority, fair share, gang placement) as it does on agents:

* Pools are partitions. The pool ``default`` is Slurm's default partition; every other
  partition becomes a pool of its own name (declared pools of that name keep their
  scheduler settings). ``det resource-pool list`` shows them.
* Each node of a partition appears as an agent ``<node>.<partition>`` whose slots are
  its CPUs (``slot_type: cpu``) or its GPUs (``--gres`` of ``gres_type``), refreshed
  every ``poll_interval``; ``det slot list`` shows them. A node that is down, drained or
  failing is an agent LOST.
* An allocation part placed on a node is submitted with ``sbatch`` (job name
  ``dauntless-<allocation id>``: the master finds its jobs again by name after a
  restart, so it keeps no job ids): one task on that node with ``--cpus-per-task`` or
  ``--gres=<gres_type>:<slots>``, the partition, and ``--time`` from ``job_time_limit``.
  The job runs :mod:`dauntless.agent.slurm_task`, which runs the same launcher and
  harness as an agent, ships the logs and reports the exit over HTTP.
* Jobs are followed with ``squeue``. A kill (``det experiment kill``, or a pause whose
  trial did not stop in time) is ``scancel``; a pause first goes through the graceful
  preemption path (the trial checkpoints and exits), and a job still queued or running
  after its allocation ended is cancelled. A job that vanishes without reporting is
  treated as a lost task (the trial restarts from its checkpoint).

A job speaks for its own allocation part only: its spec file (mode 0600, under
``work_dir``) holds the part's credential (:mod:`dauntless.master.auth_agents`, never
the cluster secret) and session token. ``work_dir`` must be on a file system that the
master and the nodes share (as must checkpoint storage: shared_fs on that file system,
or object storage). Jobs run as the user ``sbatch`` submits them as (the master's):
``security.default_task`` and users' links do not apply to them.
"""

from __future__ import annotations

import json
import logging
import os
import shlex
import subprocess
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sqlalchemy import select

from dauntless.config import ResourcePoolConfig, SlurmResourceManagerConfig

from .. import loop
from ..auth import CLUSTER_SECRET_FILE, hash_token, load_cluster_secret, new_token
from ..auth_agents import AgentCredentials
from ..db import AgentRow, AllocationRow
from ..models import runs

if TYPE_CHECKING:
    from ..context import MasterContext

log = logging.getLogger("dauntless.master.slurm")

JOB_PREFIX = "dauntless-"
LOST_JOB_GRACE_SECONDS = 15.0
"""Seconds after submission during which a job may be missing from ``squeue``."""
CANCEL_AFTER_END_SECONDS = 5.0
"""Seconds a job may outlive its allocation (exit reported) before it is cancelled."""

_UP_STATES = {"idle", "mixed", "mix", "allocated", "alloc", "completing", "comp", "planned"}
_DRAIN_STATES = {"draining", "drng", "drained", "drain"}


class SlurmError(RuntimeError):
    """A Slurm command failed; the message holds its stderr."""


@dataclass(frozen=True)
class Node:
    """One node of one partition as ``sinfo`` reports it."""

    name: str
    partition: str
    cpus: int
    gpus: int
    state: str


def parse_gres(gres: str, gres_type: str) -> int:
    """The number of ``gres_type`` devices in a ``sinfo %G`` field
    (``gpu:2``, ``gpu:a100:4(S:0-1)``, ``(null)``; several comma-separated).

    Raises:
        ValueError: a count that is not a number.
    """
    total = 0
    for item in gres.split(","):
        item = item.split("(", 1)[0].strip()
        parts = item.split(":")
        if parts and parts[0] == gres_type and len(parts) >= 2:
            total += int(parts[-1])
    return total


def parse_sinfo(text: str, gres_type: str) -> tuple[str | None, list[Node]]:
    """Parse ``sinfo -h -N -o '%N|%P|%c|%G|%T'``: (default partition, nodes).

    Raises:
        SlurmError: a line that does not have five fields.
    """
    default = None
    nodes = []
    for line in text.splitlines():
        if not line.strip():
            continue
        fields = line.split("|")
        if len(fields) != 5:
            raise SlurmError(f"unexpected sinfo line: {line!r}")
        name, partition, cpus, gres, state = fields
        if partition.endswith("*"):
            partition = partition[:-1]
            default = partition
        nodes.append(
            Node(name, partition, int(cpus), parse_gres(gres, gres_type), state.strip().lower())
        )
    return default, nodes


def sbatch_args(
    cfg: SlurmResourceManagerConfig,
    alloc_id: str,
    partition: str,
    node: str,
    slots: int,
    output: str,
) -> list[str]:
    """The ``sbatch`` options of one allocation part (before the script path)."""
    args = [
        "--parsable",
        f"--job-name={JOB_PREFIX}{alloc_id}",
        f"--partition={partition}",
        f"--nodelist={node}",
        "--nodes=1",
        "--ntasks=1",
        f"--output={output}",
    ]
    if cfg.slot_type == "cpu":
        args.append(f"--cpus-per-task={max(slots, 1)}")
    elif slots > 0:
        args.append(f"--gres={cfg.gres_type}:{slots}")
    if cfg.job_time_limit is not None:
        args.append(f"--time={cfg.job_time_limit}")
    return args


class SlurmResourceManager:
    """Runs the master's allocations as Slurm jobs; :meth:`step` is a loop hook.

    Args:
        manager: the master's context; its ``config.resource_pools`` gain one pool per
            partition at :meth:`start`.
        cfg: the ``resource_manager`` section.
    """

    def __init__(self, manager: MasterContext, cfg: SlurmResourceManagerConfig) -> None:
        self.ctx = manager
        self.cfg = cfg
        self.work_dir = os.path.abspath(
            cfg.work_dir or os.path.join(manager.config.data_dir, "slurm")
        )
        self.env = dict(os.environ)
        if cfg.slurm_conf:
            self.env["SLURM_CONF"] = cfg.slurm_conf
        self.default_partition: str | None = None
        self._last_poll = float("-inf")
        self._cancelled: set[str] = set()
        self._agents: dict[str, Node] = {}
        self._drained: set[str] = set()
        self._parts: AgentCredentials | None = None

    # ------------------------------------------------------------------ commands

    def _run(self, argv: list[str]) -> str:
        try:
            out = subprocess.run(
                argv, env=self.env, capture_output=True, text=True, timeout=60, check=False
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise SlurmError(f"{argv[0]}: {exc}") from exc
        if out.returncode != 0:
            raise SlurmError(f"{shlex.join(argv)} exited {out.returncode}: {out.stderr.strip()}")
        return out.stdout

    def pool_partition(self, pool: str) -> str | None:
        """The partition behind a pool (``default``: Slurm's default partition)."""
        if pool == "default":
            return self.default_partition
        return pool

    # ------------------------------------------------------------------ start

    def start(self) -> None:
        """Read the partitions and add a pool for each (see the module docstring).

        Raises:
            SlurmError: ``sinfo`` failed (Slurm unreachable or misconfigured).
        """
        default, nodes = parse_sinfo(
            self._run([self.cfg.sinfo, "-h", "-N", "-o", "%N|%P|%c|%G|%T"]), self.cfg.gres_type
        )
        self.default_partition = default
        pools = list(self.ctx.config.resource_pools)
        names = {p.pool_name for p in pools}
        for partition in sorted({n.partition for n in nodes}):
            if partition != default and partition not in names:
                pools.append(
                    ResourcePoolConfig(
                        pool_name=partition, description=f"Slurm partition {partition}"
                    )
                )
        pools = [
            p.model_copy(update={"description": f"Slurm partition {default}"})
            if p.pool_name == "default" and not p.description and default
            else p
            for p in pools
        ]
        self.ctx.config = self.ctx.config.model_copy(update={"resource_pools": pools})
        os.makedirs(os.path.join(self.work_dir, "jobs"), mode=0o700, exist_ok=True)
        self._sync_nodes(nodes)
        log.info("slurm resource manager: default partition %s, %d node(s)", default, len(nodes))

    # ------------------------------------------------------------------ one pass

    def _sync_nodes(self, nodes: list[Node]) -> None:
        now = self.ctx.clock()
        wanted: dict[str, tuple[str, Node]] = {}
        for pool in self.ctx.config.resource_pools:
            partition = self.pool_partition(pool.pool_name)
            for n in nodes:
                if n.partition == partition:
                    wanted[f"{n.name}.{n.partition}"] = (pool.pool_name, n)
        with self.ctx.db.write() as s:
            for agent_id, (pool_name, n) in wanted.items():
                count = n.cpus if self.cfg.slot_type == "cpu" else n.gpus
                kind = "cpu" if self.cfg.slot_type == "cpu" else "cuda"
                base = n.state.rstrip("*~#!%$@^-+")
                up = base in _UP_STATES or base in _DRAIN_STATES
                agent = s.get(AgentRow, agent_id)
                if agent is None:
                    agent = AgentRow(
                        id=agent_id,
                        resource_pool=pool_name,
                        hostname=n.name,
                        state="ACTIVE",
                        enabled=True,
                        draining=False,
                        slots=[],
                        registered_at=now,
                        last_heartbeat=now,
                    )
                    s.add(agent)
                old = {sl["id"]: sl.get("enabled", True) for sl in agent.slots or []}
                slots = [
                    {
                        "id": str(i),
                        "type": kind,
                        "device": f"{n.name}",
                        "enabled": old.get(str(i), True),
                    }
                    for i in range(count)
                ]
                if agent.slots != slots:
                    agent.slots = slots
                agent.resource_pool = pool_name
                agent.state = "ACTIVE" if up and not n.state.endswith("*") else "LOST"
                # Slurm's drain is mirrored; an operator's `det agent disable --drain`
                # (agent disabled) is left alone.
                if base in _DRAIN_STATES:
                    agent.draining = True
                    self._drained.add(agent_id)
                elif agent_id in self._drained:
                    agent.draining = False
                    self._drained.discard(agent_id)
                agent.last_heartbeat = now
        self._agents = {k: n for k, (_p, n) in wanted.items()}

    def _submit(self) -> None:
        jobs = []
        now = self.ctx.clock()
        with self.ctx.db.write() as s:
            for alloc in s.scalars(
                select(AllocationRow).where(
                    AllocationRow.state == "ASSIGNED",
                    AllocationRow.agent_id.in_(list(self._agents)),
                )
            ).all():
                spec = runs.task_spec(s, self.ctx, alloc)
                token = new_token()
                alloc.token_hash = hash_token(token)
                spec["env"]["DET_SESSION_TOKEN"] = token
                # The clock at the hand-over, not before the transaction (see
                # handover.hand_over): a run placed meanwhile starts after the last one.
                alloc.state, alloc.started_at = "RUNNING", max(now, self.ctx.clock())
                node = self._agents[alloc.agent_id]
                jobs.append((alloc.id, node, len(alloc.slot_ids), spec))
        for alloc_id, node, slots, spec in jobs:
            spec_file = os.path.join(self.work_dir, "jobs", f"{alloc_id}.json")
            fd = os.open(spec_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as f:
                json.dump(
                    {
                        "task": spec,
                        "master_url": self.ctx.public_url(),
                        "agent_token": self._credentials().part_token(alloc_id),
                        "work_dir": os.path.join(self.work_dir, "tasks"),
                    },
                    f,
                )
            script = os.path.join(self.work_dir, "jobs", f"{alloc_id}.sh")
            python = self.cfg.python or sys.executable
            with open(script, "w") as f:
                f.write(
                    "#!/bin/bash\n"
                    f"exec {shlex.quote(python)} -m dauntless.agent.slurm_task "
                    f"{shlex.quote(spec_file)}\n"
                )
            output = os.path.join(self.work_dir, "jobs", f"{alloc_id}.out")
            argv = [
                self.cfg.sbatch,
                *sbatch_args(self.cfg, alloc_id, node.partition, node.name, slots, output),
                script,
            ]
            try:
                job_id = self._run(argv).strip().split(";")[0]
            except SlurmError as exc:
                log.error("sbatch of allocation %s failed: %s", alloc_id, exc)
                loop.allocation_exited(self.ctx, alloc_id, None, f"sbatch failed: {exc}")
                continue
            log.info("allocation %s submitted as Slurm job %s on %s", alloc_id, job_id, node.name)

    def _credentials(self) -> AgentCredentials:
        """The issuer of jobs' part credentials; a copy of the cluster secret that an
        older master left in ``work_dir`` (where jobs could read it) is removed."""
        if self._parts is None:
            self._parts = AgentCredentials(load_cluster_secret(self.ctx.config))
            old = os.path.join(self.work_dir, CLUSTER_SECRET_FILE)
            if os.path.exists(old):
                os.unlink(old)
        return self._parts

    def _poll_jobs(self) -> None:
        out = self._run([self.cfg.squeue, "-h", "-o", "%i|%j|%T"])
        jobs: dict[str, str] = {}
        for line in out.splitlines():
            fields = line.strip().split("|")
            if len(fields) == 3 and fields[1].startswith(JOB_PREFIX):
                jobs[fields[1][len(JOB_PREFIX) :]] = fields[0]
        now = self.ctx.clock()
        cancel: list[tuple[str, str]] = []
        with self.ctx.db.write() as s:
            for alloc in s.scalars(
                select(AllocationRow).where(
                    AllocationRow.state == "RUNNING",
                    AllocationRow.agent_id.in_(list(self._agents)),
                )
            ).all():
                job = jobs.get(alloc.id)
                if job is None:
                    started = alloc.started_at or now
                    if now - started > LOST_JOB_GRACE_SECONDS:
                        runs.terminate(
                            s,
                            self.ctx,
                            alloc,
                            None,
                            "its Slurm job ended without reporting an exit",
                        )
                        self.ctx.wake.set()
                elif alloc.kill_requested and job not in self._cancelled:
                    cancel.append((alloc.id, job))
            ids = list(jobs)
            if ids:
                for alloc in s.scalars(
                    select(AllocationRow).where(
                        AllocationRow.id.in_(ids), AllocationRow.state == "TERMINATED"
                    )
                ).all():
                    if now - (alloc.ended_at or now) >= CANCEL_AFTER_END_SECONDS:
                        cancel.append((alloc.id, jobs[alloc.id]))
                known = set(s.scalars(select(AllocationRow.id).where(AllocationRow.id.in_(ids))))
                cancel += [(a, jobs[a]) for a in ids if a not in known]
        for alloc_id, job in cancel:
            if job in self._cancelled:
                continue
            try:
                self._run([self.cfg.scancel, job])
                self._cancelled.add(job)
                log.info("cancelled Slurm job %s of allocation %s", job, alloc_id)
            except SlurmError as exc:
                log.error("scancel %s failed: %s", job, exc)

    def step(self) -> None:
        """Refresh nodes and jobs every ``poll_interval``; submit placed parts at once."""
        now = self.ctx.clock()
        if now - self._last_poll >= self.cfg.poll_interval:
            self._last_poll = now
            try:
                _default, nodes = parse_sinfo(
                    self._run([self.cfg.sinfo, "-h", "-N", "-o", "%N|%P|%c|%G|%T"]),
                    self.cfg.gres_type,
                )
                self._sync_nodes(nodes)
                self._poll_jobs()
            except SlurmError as exc:
                log.error("slurm: %s", exc)
        self._submit()
