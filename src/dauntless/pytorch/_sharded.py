"""Sharded checkpoints of FSDP models through ``torch.distributed.checkpoint`` (DCP).

A model the trial wrapped with FSDP (FSDP2's ``fully_shard``, or FSDP1's
``FullyShardedDataParallel``) holds only its rank's shard of each parameter, and its
optimizer's state is sharded the same way, so neither fits in the chief's
``state-dict.pth``. Such checkpoints store every model's and optimizer's state with DCP
(every rank writes its shards into ``sharded/`` of the checkpoint directory, a
collective) and keep the rest (counters, RNG states, callbacks) in ``state-dict.pth``,
whose ``sharded`` entry says so. DCP reshards on load, so a checkpoint saved on N
ranks restores on any number of ranks, a plain (unsharded) model of one process
included: the state dicts are those of ``torch.distributed.checkpoint.state_dict``
(fully qualified parameter names, the same for a sharded and a plain model).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

SHARDED_DIR = "sharded"
"""The checkpoint's subdirectory that DCP writes into."""


def is_sharded(model: torch.nn.Module) -> bool:
    """Whether ``model`` (or a submodule) is wrapped by FSDP (FSDP2 or FSDP1).

    Without ``torch.distributed.fsdp`` imported no module can be an FSDP one (wrapping
    imports that package), so the answer is False without importing it: the import
    pulls in DTensor and sympy, 0.6-0.7 CPU-s in each rank of every multi-slot trial
    (``wrap_model`` asks), and checkpoints ask too.
    """
    fsdp = sys.modules.get("torch.distributed.fsdp")
    if fsdp is None:
        return False
    kinds = (fsdp.FSDPModule, fsdp.FullyShardedDataParallel)
    return any(isinstance(m, kinds) for m in model.modules())


def _owner(optimizer: torch.optim.Optimizer, models: Sequence[torch.nn.Module]) -> torch.nn.Module:
    """The model whose parameters the optimizer updates.

    Raises:
        ValueError: if no wrapped model owns the optimizer's first parameter.
    """
    first = next((p for g in optimizer.param_groups for p in g["params"]), None)
    for model in models:
        if any(p is first for p in model.parameters()):
            return model
    raise ValueError(
        "an optimizer of a sharded checkpoint updates no wrapped model's parameters: create "
        "each optimizer on the parameters of a model passed to wrap_model"
    )


def _state(
    models: Sequence[torch.nn.Module], optimizers: Sequence[torch.optim.Optimizer]
) -> dict[str, Any]:
    from torch.distributed.checkpoint.state_dict import (
        get_model_state_dict,
        get_optimizer_state_dict,
    )

    state: dict[str, Any] = {f"model_{i}": get_model_state_dict(m) for i, m in enumerate(models)}
    for i, opt in enumerate(optimizers):
        state[f"optimizer_{i}"] = get_optimizer_state_dict(_owner(opt, models), opt)
    return state


def save_sharded(
    path: Path, models: Sequence[torch.nn.Module], optimizers: Sequence[torch.optim.Optimizer]
) -> dict[str, Any]:
    """Write the models' and optimizers' state into ``path / SHARDED_DIR`` with DCP.

    Every rank must call it (a collective), with ``path`` the same shared directory.

    Returns:
        The ``sharded`` entry of ``state-dict.pth``: format and counts.
    """
    import torch.distributed.checkpoint as dcp

    dcp.save(_state(models, optimizers), checkpoint_id=str(path / SHARDED_DIR))
    return {
        "format": "torch.distributed.checkpoint",
        "dir": SHARDED_DIR,
        "models": len(models),
        "optimizers": len(optimizers),
    }


def load_sharded(
    path: Path,
    models: Sequence[torch.nn.Module],
    optimizers: Sequence[torch.optim.Optimizer],
    *,
    with_optimizers: bool = True,
) -> None:
    """Load a checkpoint written by :func:`save_sharded` into ``models`` and
    ``optimizers``, resharding to this process layout (every rank calls; one process
    without a process group loads alone).

    Args:
        path: the checkpoint directory.
        models: the trial's models, sharded or plain, in the saved order.
        optimizers: their optimizers, in the saved order.
        with_optimizers: False loads only the models' weights.

    Raises:
        FileNotFoundError: if ``path`` holds no sharded state.
    """
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import (
        set_model_state_dict,
        set_optimizer_state_dict,
    )

    where = path / SHARDED_DIR
    if not where.is_dir():
        raise FileNotFoundError(f"the checkpoint at {path} holds no {SHARDED_DIR}/ directory")
    state = _state(models, optimizers if with_optimizers else ())
    dcp.load(state, checkpoint_id=str(where))
    for i, model in enumerate(models):
        set_model_state_dict(model, state[f"model_{i}"])
    if with_optimizers:
        for i, opt in enumerate(optimizers):
            set_optimizer_state_dict(_owner(opt, models), opt, state[f"optimizer_{i}"])
