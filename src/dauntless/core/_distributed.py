"""The process layout of a task (ranks and sizes) and its collectives.

Collectives between processes go through ``torch.distributed`` object collectives
(``all_gather_object``, ``gather_object``, ``broadcast_object_list``), the way
ARCHITECTURE.md asks ("torch.distributed, nothing home-made"); a context built by hand
(no process group yet) starts one itself at ``chief_ip``. With one process they are
answered locally and torch is not imported.
"""

from __future__ import annotations

import atexit
import os
from typing import Any


class DistributedContext:
    """Where this process sits among a task's processes, and how they exchange objects.

    A trial with ``resources.slots_per_trial`` N > 1 runs as N processes started the
    torchrun way by the launcher (the PyTorchTrial harness builds this context with
    :meth:`from_torch_distributed`; Core API scripts do the same). Every collective
    (:meth:`allgather`, :meth:`gather`, :meth:`broadcast` and their ``_local``
    variants) must be called by all the processes involved, in the same order.

    Args:
        rank: this process's rank among all, 0 <= rank < size.
        size: number of processes.
        local_rank: rank among the processes on this machine, < local_size.
        local_size: processes on this machine.
        cross_rank: this machine's index among machines, < cross_size.
        cross_size: number of machines.
        chief_ip: the chief's address (Determined's ``ClusterInfo.container_addrs[0]``).
            When several processes have no ``torch.distributed`` process group yet (a
            context built by hand, as Determined's Core API tutorials do), the first
            collective starts the default process group (gloo) with its TCP rendezvous
            at ``chief_ip:pub_port+port_offset``; default ``DET_CHIEF_IP``, else
            ``MASTER_ADDR``, else ``127.0.0.1`` on one machine.
        pub_port: the rendezvous port before the offset (Determined's default 12360).
        pull_port, force_tcp: accepted for compatibility with Determined's signature
            (its ZMQ sockets); unused.
        port_offset: added to ``pub_port``; default ``DET_UNIQUE_PORT_OFFSET`` (the
            master gives each allocation on an agent its own), else 0.

    Raises:
        ValueError: if a rank is out of range or a size < 1.
    """

    def __init__(
        self,
        *,
        rank: int = 0,
        size: int = 1,
        local_rank: int = 0,
        local_size: int = 1,
        cross_rank: int = 0,
        cross_size: int = 1,
        chief_ip: str | None = None,
        pub_port: int = 12360,
        pull_port: int = 12376,
        port_offset: int | None = None,
        force_tcp: bool = False,
    ) -> None:
        for r, s, rn, sn in (
            (rank, size, "rank", "size"),
            (local_rank, local_size, "local_rank", "local_size"),
            (cross_rank, cross_size, "cross_rank", "cross_size"),
        ):
            if not isinstance(s, int) or isinstance(s, bool) or s < 1:
                raise ValueError(f"{sn} must be an int >= 1, got {s!r}")
            if not isinstance(r, int) or isinstance(r, bool) or not 0 <= r < s:
                raise ValueError(f"{rn} must be an int in [0, {sn}={s}), got {r!r}")
        self.rank = rank
        self.size = size
        self.local_rank = local_rank
        self.local_size = local_size
        self.cross_rank = cross_rank
        self.cross_size = cross_size
        self.chief_ip = chief_ip
        self.pub_port = pub_port
        self.pull_port = pull_port
        if port_offset is None:
            raw = os.environ.get("DET_UNIQUE_PORT_OFFSET", "").strip()
            port_offset = int(raw) if raw.isdigit() else 0
        self.port_offset = port_offset
        self.force_tcp = force_tcp
        self._local_group: tuple[Any, list[int]] | None = None
        self._started_group = False
        self._launcher_port: int | None = None

    def __repr__(self) -> str:
        return f"DistributedContext(rank={self.rank}, size={self.size})"

    @classmethod
    def from_torch_distributed(cls) -> DistributedContext:
        """The layout of a process started by a torch.distributed launcher.

        Rank and size come from the initialized process group when there is one, else
        from the launcher's environment (``RANK``, ``WORLD_SIZE``, as torchrun and
        :mod:`dauntless.launch.torch_distributed` set them); the local and cross
        numbers from ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``, ``GROUP_RANK``, defaulting
        to one machine. Without a process group, the first collective starts one
        (gloo) at ``MASTER_ADDR:MASTER_PORT``, as Determined's context works without
        the user initializing torch.distributed.

        Raises:
            RuntimeError: if there is neither a process group nor ``RANK``/``WORLD_SIZE``.
            ValueError: if the environment gives inconsistent numbers.
        """
        import torch.distributed as dist

        port: int | None = None
        if dist.is_available() and dist.is_initialized():
            size = dist.get_world_size()
            rank = dist.get_rank()
        elif "RANK" in os.environ and "WORLD_SIZE" in os.environ:
            size = int(os.environ["WORLD_SIZE"])
            rank = int(os.environ["RANK"])
            if os.environ.get("MASTER_PORT", "").isdigit():
                port = int(os.environ["MASTER_PORT"])
        else:
            raise RuntimeError(
                "torch.distributed is not initialized and RANK/WORLD_SIZE are not set: start "
                "the script through a launcher (python3 -m dauntless.launch.torch_distributed"
                " or torchrun)"
            )
        local_size = int(os.environ.get("LOCAL_WORLD_SIZE", size))
        local_rank = int(os.environ.get("LOCAL_RANK", rank % local_size))
        cross_size = max(size // local_size, 1)
        cross_rank = int(os.environ.get("GROUP_RANK", rank // local_size))
        ctx = cls(
            rank=rank,
            size=size,
            local_rank=local_rank,
            local_size=local_size,
            cross_rank=cross_rank,
            cross_size=cross_size,
            chief_ip=os.environ.get("MASTER_ADDR") or os.environ.get("DET_CHIEF_IP"),
        )
        ctx._launcher_port = port
        return ctx

    # ------------------------------------------------------------------ getters

    @property
    def is_chief(self) -> bool:
        """True on rank 0, the process that reports to the master."""
        return self.rank == 0

    @property
    def is_local_chief(self) -> bool:
        """True on local rank 0, the first process of each machine."""
        return self.local_rank == 0

    def get_rank(self) -> int:
        """This process's rank among all processes."""
        return self.rank

    def get_size(self) -> int:
        """The number of processes."""
        return self.size

    def get_local_rank(self) -> int:
        """This process's rank on its machine."""
        return self.local_rank

    def get_local_size(self) -> int:
        """The number of processes on this machine."""
        return self.local_size

    def get_cross_rank(self) -> int:
        """This machine's index among machines."""
        return self.cross_rank

    def get_cross_size(self) -> int:
        """The number of machines."""
        return self.cross_size

    def get_num_agents(self) -> int:
        """The number of machines (agents) the task runs on."""
        return self.cross_size

    # ------------------------------------------------------------------ collectives

    def _dist(self) -> Any:
        import torch.distributed as dist

        if not dist.is_available():
            raise RuntimeError(
                f"a collective over {self.size} processes needs torch.distributed, "
                "which this torch build lacks"
            )
        if not dist.is_initialized():
            self._start_process_group(dist)
        if dist.get_world_size() != self.size:
            raise RuntimeError(
                f"this DistributedContext has size {self.size} but the torch.distributed "
                f"process group has {dist.get_world_size()} processes"
            )
        return dist

    def _start_process_group(self, dist: Any) -> None:
        """Start the default process group (gloo) for a hand-built context."""
        import datetime

        host = self.chief_ip or os.environ.get("DET_CHIEF_IP") or os.environ.get("MASTER_ADDR")
        if not host:
            if self.cross_size > 1:
                raise RuntimeError(
                    "a DistributedContext over several machines needs chief_ip (e.g. "
                    "ClusterInfo.container_addrs[0]) to reach the chief"
                )
            host = "127.0.0.1"
        port = self._launcher_port or self.pub_port + self.port_offset
        dist.init_process_group(
            "gloo",
            init_method=f"tcp://{host}:{port}",
            rank=self.rank,
            world_size=self.size,
            timeout=datetime.timedelta(hours=1),
        )
        self._started_group = True
        atexit.register(self.close)  # a context left open: still end the group cleanly

    def allgather(self, stuff: Any) -> list[Any]:
        """Every process's ``stuff``, in rank order, on every process.

        Args:
            stuff: any picklable object.

        Returns:
            A list of ``size`` objects.

        Raises:
            RuntimeError: with several processes and no process group.
        """
        if self.size == 1:
            return [stuff]
        dist = self._dist()
        out: list[Any] = [None] * self.size
        dist.all_gather_object(out, stuff)
        return out

    def gather(self, stuff: Any) -> list[Any] | None:
        """Every process's ``stuff``, in rank order, on the chief; None elsewhere."""
        if self.size == 1:
            return [stuff]
        dist = self._dist()
        out: list[Any] | None = [None] * self.size if self.is_chief else None
        dist.gather_object(stuff, out, dst=0)
        return out

    def broadcast(self, stuff: Any) -> Any:
        """The chief's ``stuff`` on every process (others pass anything, e.g. None)."""
        if self.size == 1:
            return stuff
        dist = self._dist()
        box = [stuff if self.is_chief else None]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def _local(self) -> tuple[Any, list[int]]:
        """The process group of this machine's ranks, made on first use (collective)."""
        if self._local_group is None:
            dist = self._dist()
            machines = self.allgather(self.cross_rank)
            groups = [
                [r for r, m in enumerate(machines) if m == machine]
                for machine in sorted(set(machines))
            ]
            group, _ = dist.new_subgroups_by_enumeration(groups)
            self._local_group = (group, next(g for g in groups if self.rank in g))
        return self._local_group

    def allgather_local(self, stuff: Any) -> list[Any]:
        """Every process's ``stuff`` on this machine, in local-rank order."""
        if self.local_size == 1:
            return [stuff]
        if self.local_size == self.size:
            return self.allgather(stuff)
        group, ranks = self._local()
        out: list[Any] = [None] * len(ranks)
        self._dist().all_gather_object(out, stuff, group=group)
        return out

    def gather_local(self, stuff: Any) -> list[Any] | None:
        """This machine's ``stuff`` on its local chief; None elsewhere."""
        if self.local_size == 1:
            return [stuff]
        if self.local_size == self.size:
            return self.gather(stuff)
        group, ranks = self._local()
        out: list[Any] | None = [None] * len(ranks) if self.is_local_chief else None
        self._dist().gather_object(stuff, out, dst=ranks[0], group=group)
        return out

    def broadcast_local(self, stuff: Any) -> Any:
        """The local chief's ``stuff`` on every process of this machine."""
        if self.local_size == 1:
            return stuff
        if self.local_size == self.size:
            return self.broadcast(stuff)
        group, ranks = self._local()
        box = [stuff if self.is_local_chief else None]
        self._dist().broadcast_object_list(box, src=ranks[0], group=group)
        return box[0]

    def close(self) -> None:
        """Release the per-machine process group, if one was made."""
        if self._local_group is not None:
            import torch.distributed as dist

            if dist.is_initialized():
                dist.destroy_process_group(self._local_group[0])
            self._local_group = None
        if self._started_group:
            import torch.distributed as dist

            if dist.is_initialized():
                dist.destroy_process_group()
            self._started_group = False
