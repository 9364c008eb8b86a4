"""What a PyTorchTrial checkpoint directory says about itself, for every layout Determined
wrote from 0.13 on, and ours.

Layouts (reference §3.10 and Determined's own checkpoints):

- 0.13-0.16: ``state_dict.pth``, ``code/``, ``metadata.json`` holding ``experiment_config``
  (its ``entrypoint`` names the trial class), ``hparams``, ``determined_version``; no
  batch count.
- 0.17: the same plus ``workload_sequencer.pkl`` (a pickled dict or object with
  ``trial_id``, ``steps_completed`` = batches trained, ...); from 0.17.7 also
  ``load_data.json`` (``trial_type``, ``experiment_config``, ``hparams``,
  ``trial_cls_spec``).
- 0.18+: ``load_data.json`` (+ ``is_trainer``), ``trial_state.pkl`` (a pickled dict:
  ``trial_id``, ``batches_trained``, ``epochs_trained``, ...), ``metadata.json`` with the
  Core API's ``steps_completed``.
- Dauntless: ``state-dict.pth`` whose ``trial_state`` holds ``batches_trained``.

The pickles are read with :class:`RestrictedUnpickler`, which builds only plain data
(dicts, lists, numbers, strings, ...) and turns any class it names into an inert record
of its attributes: no code a checkpoint names ever runs. The standard library's
``pickle.Unpickler.find_class`` hook is the documented way to do this.
"""

from __future__ import annotations

import dataclasses
import io
import json
import logging
import pickle
from pathlib import Path
from typing import Any

logger = logging.getLogger("dauntless.pytorch")

METADATA_FILE = "metadata.json"
TRIAL_STATE_FILE = "trial_state.pkl"
WORKLOAD_SEQUENCER_FILE = "workload_sequencer.pkl"

#: Globals a plain-data pickle may name: the builtin containers and the helpers pickle
#: itself uses to rebuild objects. Everything else becomes a :class:`PickledRecord`.
_SAFE_GLOBALS = {
    ("builtins", "dict"): dict,
    ("builtins", "list"): list,
    ("builtins", "tuple"): tuple,
    ("builtins", "set"): set,
    ("builtins", "frozenset"): frozenset,
    ("builtins", "int"): int,
    ("builtins", "float"): float,
    ("builtins", "str"): str,
    ("builtins", "bytes"): bytes,
    ("builtins", "bool"): bool,
    ("builtins", "object"): object,
    ("__builtin__", "object"): object,
    ("collections", "OrderedDict"): dict,
}


class PickledRecord:
    """An instance of a class a checkpoint pickle named, reduced to its attributes.

    Attributes:
        pickled_class: ``module.QualName`` of the class the pickle named.
        fields: the attributes pickle restored (its ``__dict__`` state).
    """

    pickled_class = ""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.fields: dict[str, Any] = {}

    def __setstate__(self, state: Any) -> None:
        if isinstance(state, tuple) and len(state) == 2:  # (dict state, slots state)
            state = {**(state[0] or {}), **(state[1] or {})}
        fields = self.__dict__.setdefault("fields", {})  # pickle's NEWOBJ skips __init__
        if isinstance(state, dict):
            fields.update(state)

    def get(self, key: str, default: Any = None) -> Any:
        """A field, like ``dict.get``."""
        return self.__dict__.get("fields", {}).get(key, default)


def _reconstructor(cls: Any, base: Any, state: Any) -> Any:
    """Stand-in for ``copyreg._reconstructor``: only records are built."""
    if isinstance(cls, type) and issubclass(cls, PickledRecord):
        return cls()
    raise pickle.UnpicklingError(f"refusing to rebuild {cls!r}")


class RestrictedUnpickler(pickle.Unpickler):
    """An unpickler that runs no code named by the data.

    Builtin containers and scalars load as themselves; ``copyreg._reconstructor`` and
    ``__newobj__`` of any other class produce a :class:`PickledRecord` holding the
    attributes. Any other callable (``os.system``, ``builtins.eval``, a ``__reduce__``
    with arguments) raises ``pickle.UnpicklingError``.
    """

    def find_class(self, module: str, name: str) -> Any:  # noqa: D102
        if (module, name) in _SAFE_GLOBALS:
            return _SAFE_GLOBALS[(module, name)]
        if (module, name) == ("copyreg", "_reconstructor"):
            return _reconstructor
        if module.split(".")[0] in ("builtins", "__builtin__", "os", "subprocess", "sys"):
            raise pickle.UnpicklingError(f"refusing to load {module}.{name}")
        return type(name, (PickledRecord,), {"pickled_class": f"{module}.{name}"})


def read_pickled_state(path: Path) -> dict[str, Any]:
    """The fields of a checkpoint's ``trial_state.pkl`` / ``workload_sequencer.pkl``.

    Args:
        path: the pickle file.

    Returns:
        The pickled dict, or the attributes of the pickled object.

    Raises:
        pickle.UnpicklingError: the pickle names code (see :class:`RestrictedUnpickler`).
        ValueError: it holds neither a dict nor an object with attributes.
    """
    value = RestrictedUnpickler(io.BytesIO(path.read_bytes())).load()
    if isinstance(value, PickledRecord):
        return dict(value.__dict__.get("fields", {}))
    if isinstance(value, dict):
        return value
    raise ValueError(f"{path} holds a {type(value).__name__}, not a dict of trial state")


@dataclasses.dataclass(frozen=True)
class CheckpointFacts:
    """What a checkpoint directory records.

    Attributes:
        trial_cls_spec: ``module:Class`` of the trial, or None when nothing names it.
        hparams: the trial's hyperparameter values.
        experiment_config: the experiment config as written (may be another version's).
        batches_trained: batches the trial had trained at the checkpoint; None when the
            checkpoint does not record it (Determined < 0.17).
        determined_version: the writer's version when recorded.
        source: the file each fact came from, e.g. ``{"trial_cls_spec": "load_data.json"}``.
    """

    trial_cls_spec: str | None
    hparams: dict[str, Any]
    experiment_config: dict[str, Any] | None
    batches_trained: int | None
    determined_version: str | None
    source: dict[str, str]


def _read_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        logger.warning("ignoring unreadable %s: %s", path, exc)
        return {}
    return data if isinstance(data, dict) else {}


def _as_int(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return None
    return value


def read_checkpoint_facts(
    root: Path, state: dict[str, Any] | None = None, load_data_file: str = "load_data.json"
) -> CheckpointFacts:
    """Collect what ``root`` records: trial class, hyperparameters, config, batch count.

    ``load_data.json`` wins; without it ``metadata.json`` (``experiment_config.entrypoint``
    when it is ``module:Class``, and ``hparams``). The batch count comes from, in order:
    the state file's ``trial_state.batches_trained`` (``state``, Dauntless),
    ``trial_state.pkl`` (``batches_trained``), ``workload_sequencer.pkl``
    (``steps_completed``), ``metadata.json`` (``steps_completed``, then ``latest_batch``).

    Args:
        root: the checkpoint directory.
        state: the already loaded state file, when the caller has it.
        load_data_file: the name of the load data file.

    Returns:
        The facts (fields None where the checkpoint is silent).
    """
    source: dict[str, str] = {}
    load_data = _read_json(root / load_data_file)
    metadata = _read_json(root / METADATA_FILE)
    spec = (
        load_data.get("trial_cls_spec")
        if isinstance(load_data.get("trial_cls_spec"), str)
        else None
    )
    if spec:
        source["trial_cls_spec"] = load_data_file
    config = load_data.get("experiment_config")
    if isinstance(config, dict):
        source["experiment_config"] = load_data_file
    else:
        config = metadata.get("experiment_config")
        if isinstance(config, dict):
            source["experiment_config"] = METADATA_FILE
        else:
            config = None
    if not spec and config is not None:
        from dauntless.config._experiment import ENTRYPOINT_CLASS_RE

        entry = config.get("entrypoint")
        if isinstance(entry, str) and ENTRYPOINT_CLASS_RE.match(entry):
            spec = entry
            source["trial_cls_spec"] = source["experiment_config"]
    hparams = load_data.get("hparams")
    if isinstance(hparams, dict):
        source["hparams"] = load_data_file
    else:
        hparams = metadata.get("hparams")
        if isinstance(hparams, dict):
            source["hparams"] = METADATA_FILE
        else:
            hparams = {}
    batches: int | None = None
    trial_state = (state or {}).get("trial_state")
    if isinstance(trial_state, dict) and _as_int(trial_state.get("batches_trained")) is not None:
        batches = trial_state["batches_trained"]
        source["batches_trained"] = "state-dict.pth"
    for name, key in (
        (TRIAL_STATE_FILE, "batches_trained"),
        (WORKLOAD_SEQUENCER_FILE, "steps_completed"),
    ):
        if batches is not None or not (root / name).is_file():
            continue
        try:
            fields = read_pickled_state(root / name)
        except (pickle.UnpicklingError, ValueError, EOFError, OSError) as exc:
            logger.warning("ignoring %s: %s", root / name, exc)
            continue
        if _as_int(fields.get(key)) is not None:
            batches = fields[key]
            source["batches_trained"] = name
    for key in ("steps_completed", "latest_batch"):
        if batches is None and _as_int(metadata.get(key)) is not None:
            batches = metadata[key]
            source["batches_trained"] = METADATA_FILE
    version = metadata.get("determined_version")
    return CheckpointFacts(
        trial_cls_spec=spec,
        hparams=dict(hparams),
        experiment_config=config,
        batches_trained=batches,
        determined_version=version if isinstance(version, str) else None,
        source=source,
    )
