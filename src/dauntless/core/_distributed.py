"""The process layout of a task (ranks and sizes) and its collectives.

Collectives between processes go through ``torch.distributed`` object collectives
(``all_gather_object``, ``gather_object``, ``broadcast_object_list``), the way
ARCHITECTURE.md asks ("torch.distributed, nothing home-made"). With one process they
are answered locally and torch is not imported.
"""

from __future__ import annotations

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
        chief_ip, pub_port, pull_port, port_offset, force_tcp: accepted for
            compatibility with Determined's signature; collectives use the
            ``torch.distributed`` process group instead of sockets of their own.

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
        port_offset: int = 0,
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
        self.port_offset = port_offset
        self.force_tcp = force_tcp
        self._local_group: tuple[Any, list[int]] | None = None

    def __repr__(self) -> str:
        return f"DistributedContext(rank={self.rank}, size={self.size})"

    @classmethod
    def from_torch_distributed(cls) -> DistributedContext:
        """The layout of an initialized ``torch.distributed`` process group.

        Rank and size come from the process group; the local and cross numbers from the
        torchrun environment (``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``, ``GROUP_RANK``),
        defaulting to one machine.

        Raises:
            RuntimeError: if no default process group is initialized.
            ValueError: if the environment gives inconsistent numbers.
        """
        import torch.distributed as dist

        if not dist.is_available() or not dist.is_initialized():
            raise RuntimeError(
                "torch.distributed is not initialized: call "
                "torch.distributed.init_process_group() first (torchrun sets the env)"
            )
        size = dist.get_world_size()
        rank = dist.get_rank()
        local_size = int(os.environ.get("LOCAL_WORLD_SIZE", size))
        local_rank = int(os.environ.get("LOCAL_RANK", rank % local_size))
        cross_size = max(size // local_size, 1)
        cross_rank = int(os.environ.get("GROUP_RANK", rank // local_size))
        return cls(
            rank=rank,
            size=size,
            local_rank=local_rank,
            local_size=local_size,
            cross_rank=cross_rank,
            cross_size=cross_size,
        )

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

        if not dist.is_available() or not dist.is_initialized():
            raise RuntimeError(
                f"a collective over {self.size} processes needs an initialized "
                "torch.distributed process group (torch.distributed.init_process_group)"
            )
        if dist.get_world_size() != self.size:
            raise RuntimeError(
                f"this DistributedContext has size {self.size} but the torch.distributed "
                f"process group has {dist.get_world_size()} processes"
            )
        return dist

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
