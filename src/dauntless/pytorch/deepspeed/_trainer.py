"""``dauntless.pytorch.deepspeed.init()`` and ``Trainer``: the Trainer API for a
:class:`~.DeepSpeedTrial` (Determined's ``det.pytorch.deepspeed.init`` / ``Trainer``)."""

from __future__ import annotations

import contextlib
import logging
import os
import socket
from collections.abc import Iterator, Mapping
from typing import Any

import dauntless.pytorch._trainer as _pt_trainer
from dauntless.core import DistributedContext

from ._context import DeepSpeedTrialContext
from ._controller import _DeepSpeedController
from ._trial import DeepSpeedTrial

logger = logging.getLogger("dauntless.pytorch.deepspeed")

_LOCAL_ENV = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def init_deepspeed_comm() -> list[str]:
    """Set up ``deepspeed.comm`` over the process group (DeepSpeed's
    ``init_distributed``): it joins a torch.distributed group that is already up (the
    platform's launcher and harness start it), else starts one from the ``env://``
    variables. A single process without them gets a one-rank group on 127.0.0.1
    (gloo on the CPU), as DeepSpeed would otherwise look for MPI.

    Returns:
        The names of the ``env://`` variables it set for that one-rank group (the
        caller may remove them once training ends, so that processes started later do
        not take them for a launcher's).

    Raises:
        ImportError: if DeepSpeed is not installed (``pip install 'dauntless[deepspeed]'``).
    """
    try:
        import deepspeed
    except ImportError as exc:
        raise ImportError(
            f"DeepSpeed trials need the deepspeed package ({exc}): pip install "
            "'dauntless[deepspeed]'"
        ) from exc
    import torch

    added: list[str] = []
    if not (torch.distributed.is_available() and torch.distributed.is_initialized()):
        if not all(name in os.environ for name in _LOCAL_ENV):
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
            defaults = {
                "RANK": "0",
                "LOCAL_RANK": "0",
                "WORLD_SIZE": "1",
                "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": str(port),
            }
            for name, value in defaults.items():
                if name not in os.environ:
                    os.environ[name] = value
                    added.append(name)
    elif "LOCAL_RANK" not in os.environ and torch.distributed.get_world_size() == 1:
        # A group of one started earlier in this process: DeepSpeed's engine still
        # asks for the launcher's LOCAL_RANK.
        os.environ["LOCAL_RANK"] = "0"
        added.append("LOCAL_RANK")
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    _skip_shm_comm_build(deepspeed)
    deepspeed.init_distributed(dist_backend=backend, auto_mpi_discovery=False)
    return added


SHM_COMM_ENV = "DAUNTLESS_DEEPSPEED_SHM_COMM"
"""Set to ``1`` to let DeepSpeed build its shared-memory collective op on the CPU
accelerator (see :func:`_skip_shm_comm_build`)."""

_SHM_COMM_OP = "deepspeed_shm_comm"


def _skip_shm_comm_build(deepspeed: Any) -> bool:
    """Keep DeepSpeed from compiling its shared-memory collective op on first use.

    On its CPU accelerator, DeepSpeed's ``TorchBackend`` (every ``init_distributed``
    over gloo) builds the C++ op ``deepspeed_shm_comm`` with torch's JIT extension
    builder unless the op was compiled at install time (``DS_BUILD_SHM_COMM=1``): about
    6 minutes of two cores the first time on each machine (and in each fresh
    ``TORCH_EXTENSIONS_DIR``). The op serves only ``inference_all_reduce`` (DeepSpeed's
    tensor-parallel inference), which falls back to ``torch.distributed.all_reduce``
    without it; training's collectives never use it. So, on the CPU accelerator and
    unless the op is installed or ``DAUNTLESS_DEEPSPEED_SHM_COMM=1``, the op is marked
    unavailable in DeepSpeed's table of compatible ops (``deepspeed.ops.
    __compatible_ops__``, the table ``TorchBackend`` consults before building it).

    Args:
        deepspeed: the imported ``deepspeed`` module.

    Returns:
        Whether the op was marked unavailable.
    """
    if os.environ.get(SHM_COMM_ENV, "") == "1":
        return False
    from deepspeed.accelerator import get_accelerator
    from deepspeed.git_version_info import installed_ops

    if get_accelerator().device_name() != "cpu" or installed_ops.get(_SHM_COMM_OP, False):
        return False
    compatible = deepspeed.ops.__compatible_ops__
    if compatible.get(_SHM_COMM_OP, False):
        compatible[_SHM_COMM_OP] = False
        logger.info(
            "DeepSpeed's shared-memory collective op (%s) is not built: training on the "
            "CPU accelerator does not use it (set %s=1 to build it)",
            _SHM_COMM_OP,
            SHM_COMM_ENV,
        )
        return True
    return False


@contextlib.contextmanager
def init(
    *,
    hparams: Mapping[str, Any] | None = None,
    exp_conf: Mapping[str, Any] | None = None,
    distributed: DistributedContext | None = None,
    enable_tensorboard_logging: bool = True,
) -> Iterator[DeepSpeedTrialContext]:
    """Open a :class:`DeepSpeedTrialContext` for :class:`Trainer`, as
    :func:`dauntless.pytorch.init` does for a PyTorchTrial (same arguments and rules:
    the cluster's trial when run as one, local training otherwise), and set up
    DeepSpeed's communication (:func:`init_deepspeed_comm`)::

        with dauntless.pytorch.deepspeed.init() as context:
            trial = MyDeepSpeedTrial(context)
            Trainer(trial, context).fit(latest_checkpoint=info.latest_checkpoint)

    Yields:
        The trial context.

    Raises:
        ImportError: without the deepspeed package.
        ValueError, TypeError: as :func:`dauntless.pytorch.init`.
    """
    added: list[str] = []
    try:
        with _pt_trainer._open_context(
            lambda trial_info, core: DeepSpeedTrialContext(
                trial_info, core=core, enable_tensorboard_logging=enable_tensorboard_logging
            ),
            hparams=hparams,
            exp_conf=exp_conf,
            distributed=distributed,
            after_process_group=lambda: added.extend(init_deepspeed_comm()),
        ) as context:
            yield context
    finally:
        for name in added:
            os.environ.pop(name, None)


class Trainer(_pt_trainer.Trainer):
    """Train a :class:`DeepSpeedTrial` from a script; ``fit`` takes the arguments of
    :meth:`dauntless.pytorch.Trainer.fit` (Determined's DeepSpeed ``Trainer.fit``).

    Args:
        trial: the trial, built with ``context``.
        context: from :func:`init`.

    Raises:
        TypeError: if ``trial`` is not a DeepSpeedTrial or ``context`` not from :func:`init`.
    """

    _trial_class = DeepSpeedTrial
    _context_class = DeepSpeedTrialContext
    _controller_class = _DeepSpeedController
    _init_name = "dauntless.pytorch.deepspeed.init()"


__all__ = ["Trainer", "init", "init_deepspeed_comm"]
