"""DeepSpeed on the platform (the drop-in for ``determined.pytorch.deepspeed``).

A user subclasses :class:`DeepSpeedTrial`, builds engines with ``deepspeed.initialize``
in ``__init__`` and wraps them with ``context.wrap_model_engine``; the experiment names
the class as its entrypoint (``module:Class``, run by the harness; several slots:
``python3 -m dauntless.launch.deepspeed --trial module:Class``) or a script trains it
with ``with init() as context: Trainer(MyTrial(context), context).fit(...)``.

Importing this package does not import ``deepspeed``; :func:`init` and the harness do,
and the engines the trial builds are DeepSpeed's. Install it with
``pip install 'dauntless[deepspeed]'``.
"""

from ._context import (
    DeepSpeedTrialContext,
    ModelParallelUnit,
    make_data_parallel_mpu,
    make_deepspeed_mpu,
    overwrite_deepspeed_config,
)
from ._trainer import Trainer, init
from ._trial import DeepSpeedTrial

__all__ = [
    "DeepSpeedTrial",
    "DeepSpeedTrialContext",
    "ModelParallelUnit",
    "Trainer",
    "init",
    "make_data_parallel_mpu",
    "make_deepspeed_mpu",
    "overwrite_deepspeed_config",
]
