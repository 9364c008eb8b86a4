"""The PyTorch API (the drop-in for ``determined.pytorch``).

A user subclasses :class:`PyTorchTrial`, builds models and optimizers in ``__init__``
with a :class:`PyTorchTrialContext`, returns :class:`DataLoader` objects, and either names
the class as the experiment's ``entrypoint`` (``module:Class``; the harness
:mod:`dauntless.exec.harness` runs it) or trains it from a script with the Trainer API
(``with init() as context: Trainer(MyTrial(context), context).fit(...)``).
"""

from . import samplers
from ._callback import PyTorchCallback
from ._checkpoint import CheckpointLoadContext, load_trial_from_checkpoint_path
from ._compat_helpers import data_length, to_device
from ._context import PyTorchTrialContext
from ._controller import RunResult
from ._data import DataLoader
from ._experimental import PyTorchExperimentalContext
from ._lr_scheduler import LRScheduler
from ._reducer import FunctionReducer, MetricReducer, Reducer
from ._settings import Batch, Epoch, TrainUnit
from ._trainer import Trainer, init
from ._trial import PyTorchTrial, TorchData

__all__ = [
    "Batch",
    "CheckpointLoadContext",
    "DataLoader",
    "Epoch",
    "FunctionReducer",
    "LRScheduler",
    "MetricReducer",
    "PyTorchCallback",
    "PyTorchExperimentalContext",
    "PyTorchTrial",
    "PyTorchTrialContext",
    "Reducer",
    "RunResult",
    "TorchData",
    "TrainUnit",
    "Trainer",
    "data_length",
    "init",
    "load_trial_from_checkpoint_path",
    "samplers",
    "to_device",
]
