"""Starting and stopping the ``torch.distributed`` process group of a multi-slot trial.

The launcher (:mod:`dauntless.launch.torch_distributed`) starts one process per slot with
torch.distributed's ``env://`` variables (``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``,
``LOCAL_WORLD_SIZE``, ``GROUP_RANK``, ``MASTER_ADDR``, ``MASTER_PORT``; docs/protocol.md).
:func:`init_process_group_from_env` turns them into a process group (NCCL when CUDA is
available, gloo otherwise) and a :class:`~dauntless.core.DistributedContext`.
"""

from __future__ import annotations

import datetime
import gc
import logging
import os
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from dauntless.core import DistributedContext

logger = logging.getLogger("dauntless.pytorch")

#: How long a collective may wait for the other ranks. Long, because workers wait in a
#: collective while the chief waits for the searcher's next operation (an adaptive search
#: can hold a trial back until other trials reach a rung). A rank that dies does not
#: make the others wait this long: the launcher stops them all.
PROCESS_GROUP_TIMEOUT = datetime.timedelta(hours=12)

_ENV = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def _int_env(env: Mapping[str, str], name: str, default: int | None = None) -> int:
    raw = env.get(name)
    if raw in (None, ""):
        if default is None:
            raise ValueError(f"{name} is not set")
        return default
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"{name} must be an integer, got {raw!r}") from None


def init_process_group_from_env(
    slots_per_trial: int | None = None,
    environ: Mapping[str, str] | None = None,
) -> tuple[DistributedContext, bool]:
    """Join the trial's process group, as the launcher described it in the environment.

    With ``WORLD_SIZE`` unset or 1 nothing is started and a one-process context is
    returned. Otherwise the process group is initialized at
    ``tcp://MASTER_ADDR:MASTER_PORT`` with ``RANK`` and ``WORLD_SIZE``, and the backend ``nccl`` when CUDA is available (after ``torch.cuda.set_device``
    to ``LOCAL_RANK``; the agent makes only the part's GPUs visible), ``gloo``
    otherwise. A process group that is already initialized is used as it is.

    Args:
        slots_per_trial: the experiment's ``resources.slots_per_trial``; when > 1 the
            environment must describe exactly that many ranks. None skips the check.
        environ: where to read the variables; ``os.environ`` when None.

    Returns:
        ``(distributed, started)``: the process layout, and whether this call started
        the process group (then :func:`destroy_process_group` should end it).

    Raises:
        ValueError: if ``slots_per_trial`` > 1 but the process was not started by the
            distributed launcher (no ``WORLD_SIZE`` > 1), the rank variables are missing
            or malformed, or ``WORLD_SIZE`` differs from ``slots_per_trial``.
        RuntimeError: from torch if the rendezvous fails.
    """
    env = os.environ if environ is None else environ
    world = _int_env(env, "WORLD_SIZE", 1)
    if world <= 1:
        if slots_per_trial is not None and slots_per_trial > 1:
            raise ValueError(
                f"resources.slots_per_trial is {slots_per_trial} but this process is not one "
                "of several ranks (WORLD_SIZE is unset or 1): a multi-slot trial must be "
                "started through python -m dauntless.launch.torch_distributed, as agents do"
            )
        return DistributedContext(), False
    if slots_per_trial is not None and slots_per_trial > 1 and world != slots_per_trial:
        raise ValueError(
            f"WORLD_SIZE is {world} but resources.slots_per_trial is {slots_per_trial}: "
            "each slot runs one rank"
        )
    import torch.distributed as dist

    if not dist.is_available():
        raise RuntimeError(
            "this torch build has no torch.distributed: cannot train on several slots"
        )
    if dist.is_initialized():
        return DistributedContext.from_torch_distributed(), False
    missing = [name for name in _ENV if env.get(name) in (None, "")]
    if missing:
        raise ValueError(
            f"WORLD_SIZE is {world} but {missing} are not set: start the ranks through "
            "python -m dauntless.launch.torch_distributed (or torchrun)"
        )
    rank = _int_env(env, "RANK")
    local_rank = _int_env(env, "LOCAL_RANK")
    if not 0 <= rank < world:
        raise ValueError(f"RANK must be in [0, WORLD_SIZE={world}), got {rank}")
    if torch.cuda.is_available():
        backend = "nccl"
        torch.cuda.set_device(local_rank % torch.cuda.device_count())
    else:
        backend = "gloo"
    logger.info(
        "rank %d of %d (local rank %d): joining the %s process group at %s:%s",
        rank,
        world,
        local_rank,
        backend,
        env.get("MASTER_ADDR"),
        env.get("MASTER_PORT"),
    )
    dist.init_process_group(
        backend,
        init_method=f"tcp://{env['MASTER_ADDR']}:{env['MASTER_PORT']}",
        rank=rank,
        world_size=world,
        timeout=PROCESS_GROUP_TIMEOUT,
    )
    return DistributedContext.from_torch_distributed(), True


def destroy_process_group(
    distributed: DistributedContext, started: bool, models: Sequence[torch.nn.Module] = ()
) -> None:
    """Release ``distributed``'s subgroups and, if ``started``, the process group.

    Each ``DistributedDataParallel`` in ``models`` first drops its reducer, logger and
    process group, so the group really ends here. A DDP model still alive (the trial
    holds it) keeps its process group alive past ``dist.destroy_process_group()``;
    torch 2.13's gloo then tears it down in the interpreter's exit, where it can abort
    the process ("terminate called without an active exception", exit code 134) after
    a trial completed: seen in 1 to 3 of 12 two-rank runs whose ranks end a moment
    apart, and in none of 30 with the models released first. The models must not
    be used for distributed training afterwards; their modules and parameters remain.

    Args:
        distributed: the process layout the harness or Trainer built.
        started: whether this process initialized the default process group.
        models: the models the trial wrapped (``PyTorchTrialContext.models``).
    """
    distributed.close()
    if not started:
        return
    import torch.distributed as dist

    for model in models:
        if isinstance(model, torch.nn.parallel.DistributedDataParallel):
            for name in ("reducer", "logger", "process_group"):
                if hasattr(model, name):
                    setattr(model, name, None)
    gc.collect()  # the reducer may sit in a reference cycle with the trial
    if dist.is_initialized():
        dist.destroy_process_group()


def any_rank(flag: bool, distributed: DistributedContext) -> bool:
    """True on every rank if ``flag`` is True on any rank (a collective).

    One ``all_reduce`` of a one-element tensor (on the current CUDA device under NCCL),
    cheap enough to call after every batch.
    """
    if distributed.size == 1:
        return bool(flag)
    import torch.distributed as dist

    device = (
        torch.device("cuda", torch.cuda.current_device())
        if dist.get_backend() == "nccl"
        else torch.device("cpu")
    )
    t = torch.tensor([1 if flag else 0], dtype=torch.int32, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return bool(t.item())


class AnyRankVote:
    """:func:`any_rank` with its wait put off: :meth:`start` launches the collective
    (``all_reduce(async_op=True)``) and returns at once; :meth:`finish`, called later,
    waits for it and gives every rank the same answer. The harness starts one after a
    batch and finishes it after the next, so the reduction overlaps a training step
    instead of adding its latency to it.

    At most one vote is in flight. Every rank must call ``start`` and ``finish`` at the
    same points: collectives are matched across ranks in the order they are issued
    (other collectives may be issued while a vote is in flight).

    Args:
        distributed: the process layout; with one process no collective is made.
    """

    def __init__(self, distributed: DistributedContext) -> None:
        self._dist = distributed
        self._work: Any = None
        self._buf: torch.Tensor | None = None
        self._flag: bool | None = None  # the vote in flight with one process

    @property
    def in_flight(self) -> bool:
        """Whether a vote was started and not finished yet."""
        return self._work is not None or self._flag is not None

    def start(self, flag: bool) -> None:
        """Launch the vote on this rank's ``flag`` (returns before the other ranks voted).

        Raises:
            RuntimeError: if a vote is already in flight (finish it first).
        """
        if self.in_flight:
            raise RuntimeError("internal error: a stop vote is already in flight")
        if self._dist.size == 1:
            self._flag = bool(flag)
            return
        import torch.distributed as dist

        buf = self._buf
        if buf is None:
            device = (
                torch.device("cuda", torch.cuda.current_device())
                if dist.get_backend() == "nccl"
                else torch.device("cpu")
            )
            buf = self._buf = torch.zeros(1, dtype=torch.int32, device=device)
        buf.fill_(1 if flag else 0)
        self._work = dist.all_reduce(buf, op=dist.ReduceOp.MAX, async_op=True)

    def finish(self) -> bool:
        """Wait for the vote in flight and return its answer: True on every rank if any
        rank's flag was True. False when no vote is in flight."""
        if self._flag is not None:
            flag, self._flag = self._flag, None
            return flag
        work, self._work = self._work, None
        if work is None:
            return False
        work.wait()
        assert self._buf is not None
        return bool(self._buf.item())
