"""Reading and writing PyTorchTrial checkpoints, and ``load_trial_from_checkpoint_path``.

Layout (docs/protocol.md "Checkpoint layout"; reference §3.10): ``state-dict.pth``
(Determined wrote ``state_dict.pth``; older releases other names, all read here),
``metadata.json``, ``load_data.json`` (what rebuilds the trial: ``trial_type``,
``experiment_config``, ``hparams``, ``trial_cls_spec``, ``is_trainer``) and ``code/``
(the model definition).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import pickle
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from dauntless.config import ConfigError, parse_experiment_config
from dauntless.core import TrialInfo

from ._context import PyTorchTrialContext
from ._import import load_trial_class
from ._trial import PyTorchTrial

logger = logging.getLogger("dauntless.pytorch")

STATE_FILE = "state-dict.pth"
#: Names earlier releases (Determined's included) gave the state file, in search order.
LEGACY_STATE_FILES = (
    "state_dict.pth",
    "determined/state_dict.pth",
    "pedl/state_dict.pth",
    "checkpoint.pt",
)
LOAD_DATA_FILE = "load_data.json"
CODE_DIR = "code"


def find_state_file(path: str | os.PathLike[str]) -> Path:
    """The state file of a checkpoint directory: ``state-dict.pth`` or a legacy name.

    Raises:
        FileNotFoundError: if the directory holds none of them.
    """
    root = Path(path)
    for name in (STATE_FILE, *LEGACY_STATE_FILES):
        if (root / name).is_file():
            return root / name
    raise FileNotFoundError(
        f"{root} holds no PyTorch checkpoint: looked for {[STATE_FILE, *LEGACY_STATE_FILES]}"
    )


def load_state(file: Path, **torch_load_kwargs: Any) -> dict[str, Any]:
    """``torch.load`` a state file, safely when possible.

    Without an explicit ``weights_only`` it first loads with ``weights_only=True`` (our
    checkpoints hold only tensors and plain data); a file that needs arbitrary objects
    (Determined's numpy RNG states, a callback's custom state) is then loaded with
    ``weights_only=False``, and a warning says so: load only checkpoints you trust.

    Raises:
        ValueError: if the file does not hold a dict.
    """
    kwargs = dict(torch_load_kwargs)
    if "weights_only" in kwargs:
        state = torch.load(file, **kwargs)
    else:
        try:
            state = torch.load(file, weights_only=True, **kwargs)
        except pickle.UnpicklingError as exc:
            logger.warning(
                "%s holds objects beyond tensors and plain data; loading it with "
                "weights_only=False (%s)",
                file,
                str(exc).splitlines()[0],
            )
            state = torch.load(file, weights_only=False, **kwargs)
    if not isinstance(state, dict):
        raise ValueError(f"{file} must hold a dict, got {type(state).__name__}")
    return state


def model_states(state: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The models' state dicts of a checkpoint (``models_state_dict``, or the legacy
    single ``model_state_dict``).

    Raises:
        ValueError: if neither key is there.
    """
    if "models_state_dict" in state:
        return list(state["models_state_dict"])
    if "model_state_dict" in state:
        return [state["model_state_dict"]]
    raise ValueError(
        f"the checkpoint has no models_state_dict (nor model_state_dict); keys: {sorted(state)}"
    )


def optimizer_states(state: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The optimizers' state dicts (``optimizers_state_dict`` or legacy
    ``optimizer_state_dict``); empty when none."""
    if "optimizers_state_dict" in state:
        return list(state["optimizers_state_dict"])
    if "optimizer_state_dict" in state:
        return [state["optimizer_state_dict"]]
    return []


def scheduler_states(state: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The LR schedulers' state dicts (``lr_schedulers_state_dict`` or legacy
    ``lr_scheduler``); empty when none."""
    if "lr_schedulers_state_dict" in state:
        return list(state["lr_schedulers_state_dict"])
    if "lr_scheduler" in state:
        return [state["lr_scheduler"]]
    return []


def unwrap(model: torch.nn.Module) -> torch.nn.Module:
    """The module inside a DistributedDataParallel wrapper (the model itself otherwise)."""
    if isinstance(model, torch.nn.parallel.DistributedDataParallel):
        return model.module
    return model


def load_model_weights(model: torch.nn.Module, state_dict: Mapping[str, Any]) -> None:
    """Load weights into a model, dropping the ``module.`` prefix DDP adds when the
    checkpoint has it and the model does not.

    Raises:
        RuntimeError: from ``load_state_dict`` when the keys or shapes do not match.
    """
    target = unwrap(model)
    keys = list(state_dict)
    own = list(target.state_dict())
    if (
        keys
        and all(k.startswith("module.") for k in keys)
        and not any(k.startswith("module.") for k in own)
    ):
        state_dict = {k[len("module.") :]: v for k, v in state_dict.items()}
    target.load_state_dict(state_dict)


def trial_class_spec(cls: type) -> str:
    """``module:QualName`` of a trial class, importable from the model definition.

    A class defined in the script being run (module ``__main__``, the Trainer API's
    ``python3 train.py``) is named by the script's file name (``train:MyTrial``), so that
    it imports from the checkpoint's ``code/`` copy.
    """
    module = cls.__module__
    if module == "__main__":
        main_file = getattr(sys.modules.get("__main__"), "__file__", None)
        if main_file:
            module = Path(main_file).stem
    return f"{module}:{cls.__qualname__}"


def write_load_data(
    path: Path,
    context: PyTorchTrialContext,
    trial: PyTorchTrial,
    is_trainer: bool,
    trial_type: str = "PyTorchTrial",
) -> None:
    """Write ``load_data.json``: what :func:`load_trial_from_checkpoint_path` needs.

    ``trial_type`` names the trial API that wrote the checkpoint, as Determined's
    harness does: ``"PyTorchTrial"``, or ``"DeepSpeedTrial"`` for a DeepSpeed trial's
    sharded checkpoint (which :func:`load_trial_from_checkpoint_path` refuses)."""
    data = {
        "trial_type": trial_type,
        "experiment_config": context.get_experiment_config(),
        "hparams": context.get_hparams(),
        "trial_cls_spec": trial_class_spec(type(trial)),
        "is_trainer": is_trainer,
    }
    (path / LOAD_DATA_FILE).write_text(json.dumps(data, indent=2, sort_keys=True, default=str))


def _loadable_config(config: Any, hparams: dict[str, Any]) -> dict[str, Any]:
    """The checkpoint's experiment config if it is valid here, else a minimal one."""
    if isinstance(config, dict):
        try:
            parse_experiment_config(config)
            return config
        except (ConfigError, ValueError, TypeError) as exc:
            logger.info("the checkpoint's experiment config does not parse here (%s)", exc)
    minimal: dict[str, Any] = {
        "searcher": {"name": "single", "metric": "validation_loss", "max_length": {"batches": 1}},
        "hyperparameters": hparams,
    }
    if isinstance(config, dict) and isinstance(config.get("data"), dict):
        minimal["data"] = config["data"]
    return minimal


class CheckpointLoadContext(PyTorchTrialContext):
    """The context a trial gets when :func:`load_trial_from_checkpoint_path` rebuilds it
    (Determined's ``pytorch.CheckpointLoadContext``): the checkpoint's hyperparameters
    and experiment config, one process, no master; ``get_initial_batch()`` is the batch
    count the checkpoint records (0 when it records none).

    Args:
        hparams: the checkpoint's hyperparameter values.
        exp_conf: its experiment config (one that parses here, see
            :func:`load_trial_from_checkpoint_path`).
        batches_trained: batches trained at the checkpoint.
    """

    def __init__(
        self, hparams: dict[str, Any], exp_conf: dict[str, Any], batches_trained: int = 0
    ) -> None:
        info = TrialInfo(
            trial_id=0, experiment_id=0, trial_seed=0, hparams=hparams, config=exp_conf
        )
        super().__init__(info)
        self._current_batch = batches_trained
        self._initial_batch = batches_trained


def load_trial_from_checkpoint_path(
    path: str | os.PathLike[str],
    trial_class: type[PyTorchTrial] | None = None,
    trial_kwargs: Mapping[str, Any] | None = None,
    torch_load_kwargs: Mapping[str, Any] | None = None,
) -> PyTorchTrial:
    """Rebuild a trial from a checkpoint directory, with its models' weights loaded.

    Reads every layout Determined wrote from 0.13 on, and ours (see
    :mod:`dauntless.pytorch._ckpt_facts`): the trial class from ``load_data.json``'s
    ``trial_cls_spec``, else from ``metadata.json``'s ``experiment_config.entrypoint``;
    the hyperparameters and config from the same files; the weights from
    ``state-dict.pth`` / ``state_dict.pth`` (or older names; legacy keys and DDP
    ``module.`` prefixes handled); the batch count from the state file,
    ``trial_state.pkl``, ``workload_sequencer.pkl`` or ``metadata.json`` (pickles read
    without running any code they name). The trial class is imported from the
    checkpoint's ``code/`` with :func:`dauntless.import_from_path`, so checkpoints of
    different code load side by side in one process, each with its own classes.
    Optimizers and schedulers are not restored (resume training through the harness).

    Args:
        path: the checkpoint directory (e.g. from ``det checkpoint download``).
        trial_class: the trial class; imported from the checkpoint when None.
        trial_kwargs: extra keyword arguments for the trial's constructor.
        torch_load_kwargs: extra arguments for ``torch.load`` (default
            ``map_location`` is the context's device; see :func:`load_state`).

    A checkpoint of Determined's pre-0.14 ``build_model`` API (no ``load_data.json``,
    a trial class that builds its model in ``build_model()`` and wraps none) loads as
    Determined loads it: ``build_model()`` is called, the single model's weights
    (``model_state_dict``, or the first of ``models_state_dict``) are loaded, and the
    bare ``torch.nn.Module`` is returned, not the trial.

    Returns:
        The trial; its context is a :class:`CheckpointLoadContext` (models in
        ``context.models``, ``context.get_initial_batch()`` the recorded batch count).
        For a ``build_model`` checkpoint, the model.

    Raises:
        FileNotFoundError: if ``path`` holds no state file.
        ValueError: if no trial class is given and the checkpoint names none, the
            checkpoint holds a different number of models than the trial wraps, or it
            is a DeepSpeedTrial's (``trial_type`` in ``load_data.json``).
        TypeError: if ``trial_class`` is not a PyTorchTrial subclass.
    """
    from dauntless._import_path import import_from_path

    from ._ckpt_facts import read_checkpoint_facts

    root = Path(path)
    if _trial_type(root / LOAD_DATA_FILE) == "DeepSpeedTrial":
        raise ValueError(
            f"{root} is a DeepSpeedTrial checkpoint (its engines' weights are DeepSpeed "
            "checkpoints tagged model0, model1, ...): load them with the engine's "
            "load_checkpoint, or DeepSpeed's zero_to_fp32 for a plain state dict"
        )
    state_file = find_state_file(root)
    facts = read_checkpoint_facts(root, load_data_file=LOAD_DATA_FILE)
    code = root / CODE_DIR
    with contextlib.ExitStack() as stack:
        if trial_class is None:
            if not facts.trial_cls_spec:
                raise ValueError(
                    f"{root} names no trial class (no {LOAD_DATA_FILE} trial_cls_spec, no "
                    "module:Class entrypoint in metadata.json): pass trial_class=YourTrial"
                )
            if code.is_dir():
                stack.enter_context(import_from_path(code))
            trial_class = load_trial_class(
                facts.trial_cls_spec, str(code) if code.is_dir() else None
            )
        if not isinstance(trial_class, type) or not issubclass(trial_class, PyTorchTrial):
            raise TypeError(f"trial_class must be a PyTorchTrial subclass, got {trial_class!r}")
        hparams = dict(facts.hparams)
        config = _loadable_config(facts.experiment_config, hparams)
        context = CheckpointLoadContext(hparams, config)
        trial = trial_class(context, **dict(trial_kwargs or {}))  # type: ignore[call-arg]
    kwargs = {"map_location": context.device, **dict(torch_load_kwargs or {})}
    state = load_state(state_file, **kwargs)
    batches = read_checkpoint_facts(root, state, LOAD_DATA_FILE).batches_trained
    context._current_batch = context._initial_batch = batches or 0
    saved = model_states(state)
    build_model = getattr(trial, "build_model", None)
    if not (root / LOAD_DATA_FILE).is_file() and callable(build_model) and not context.models:
        return _load_built_model(build_model, saved, trial_class.__name__)  # type: ignore[return-value]
    if len(saved) != len(context.models):
        raise ValueError(
            f"the checkpoint holds {len(saved)} models but {trial_class.__name__} wraps "
            f"{len(context.models)}"
        )
    for model, sd in zip(context.models, saved, strict=True):
        load_model_weights(model, sd)
    return trial


def _trial_type(load_data: Path) -> str | None:
    """``trial_type`` of a ``load_data.json`` (None without the file or the field)."""
    try:
        data = json.loads(load_data.read_text())
    except (OSError, ValueError):
        return None
    value = data.get("trial_type") if isinstance(data, dict) else None
    return value if isinstance(value, str) else None


def _load_built_model(
    build_model: Any, saved: list[dict[str, Any]], trial_name: str
) -> torch.nn.Module:
    """The model of a pre-0.14 ``build_model`` trial with its checkpoint's weights.

    Raises:
        ValueError: ``build_model()`` returned no ``torch.nn.Module``, or the checkpoint
            holds more than one model (that API had one).
    """
    model = build_model()
    if not isinstance(model, torch.nn.Module):
        raise ValueError(
            f"{trial_name}.build_model() must return a torch.nn.Module, got {type(model).__name__}"
        )
    if len(saved) != 1:
        raise ValueError(
            f"{trial_name} builds one model (build_model) but the checkpoint holds {len(saved)}"
        )
    load_model_weights(model, saved[0])
    return model
