"""``load_trial_from_checkpoint_path`` over checkpoint directories laid out as
Determined wrote them from 0.13 to 0.21 (built here from the layouts of the reference,
§3.10, and Determined's checkpoint files: no file of Determined's is copied).

The model code in each checkpoint's ``code/`` imports ``determined``, as Determined
users' code does; the compatibility package answers it.
"""

from __future__ import annotations

import json
import pickle
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import dauntless.compat
from dauntless.pytorch import CheckpointLoadContext, load_trial_from_checkpoint_path
from dauntless.pytorch._ckpt_facts import RestrictedUnpickler, read_checkpoint_facts

MODEL_DEF = textwrap.dedent(
    """
    import torch
    from determined import pytorch

    VERSION = {version}


    class OneVarTrial(pytorch.PyTorchTrial):
        def __init__(self, context):
            self.context = context
            self.model = context.wrap_model(torch.nn.Linear({width}, 1, bias=False))
            self.opt = context.wrap_optimizer(torch.optim.SGD(self.model.parameters(), lr=0.1))

        def build_training_data_loader(self):
            raise NotImplementedError

        build_validation_data_loader = build_training_data_loader

        def train_batch(self, batch, epoch_idx, batch_idx):
            raise NotImplementedError

        def evaluate_batch(self, batch):
            raise NotImplementedError
    """
)

CONFIG = {
    "description": "onevar",
    "entrypoint": "model_def:OneVarTrial",
    "hyperparameters": {"global_batch_size": {"type": "const", "val": 32}},
    "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 3}},
    # fields of old releases that this version no longer knows
    "data_layer": {"type": "shared_fs", "container_storage_path": None},
    "resources": {"slots_per_trial": 1, "agent_label": "", "native_parallel": False},
}


@pytest.fixture(autouse=True)
def determined_compat():
    """``import determined`` answered by Dauntless for this test only."""
    before = list(sys.path)
    dauntless.compat.install()
    yield
    sys.path[:] = before
    for name in [m for m in sys.modules if m == "determined" or m.startswith("determined.")]:
        del sys.modules[name]


def _checkpoint(root: Path, *, weight: float, width: int = 1, version: int = 1) -> Path:
    (root / "code").mkdir(parents=True)
    (root / "code" / "model_def.py").write_text(MODEL_DEF.format(version=version, width=width))
    torch.save(
        {
            "models_state_dict": [{"weight": torch.full((1, width), weight)}],
            "optimizers_state_dict": [{"state": {}, "param_groups": []}],
            "lr_schedulers_state_dict": [],
            "callbacks": {},
        },
        root / "state_dict.pth",
    )
    return root


def _metadata(root: Path, version: str, **extra) -> None:
    body = {
        "determined_version": version,
        "framework": "torch-1.9.0",
        "format": "pickle",
        "experiment_id": 4,
        "trial_id": 9,
        "hparams": {"global_batch_size": 32},
        "experiment_config": CONFIG,
        "metadata": {},
        **extra,
    }
    (root / "metadata.json").write_text(json.dumps(body))


def _load_data(root: Path, is_trainer: bool | None = None) -> None:
    body = {
        "trial_type": "PyTorchTrial",
        "experiment_config": CONFIG,
        "hparams": {"global_batch_size": 32},
        "trial_cls_spec": "model_def:OneVarTrial",
    }
    if is_trainer is not None:
        body["is_trainer"] = is_trainer
    (root / "load_data.json").write_text(json.dumps(body))


def _weight(trial) -> float:
    return float(trial.context.models[0].weight.detach().flatten()[0])


def test_0_13_metadata_only_old_state_keys(tmp_path):
    # 0.13: no load_data.json (the class comes from metadata.json's entrypoint), the
    # single-model keys of the oldest PyTorch API, format cloudpickle, no batch count.
    root = _checkpoint(tmp_path / "0.13.13", weight=0.5)
    state = torch.load(root / "state_dict.pth", weights_only=True)
    torch.save(
        {
            "model_state_dict": state["models_state_dict"][0],
            "optimizer_state_dict": state["optimizers_state_dict"][0],
        },
        root / "state_dict.pth",
    )
    _metadata(root, "0.13.13", format="cloudpickle")
    trial = load_trial_from_checkpoint_path(root)
    assert type(trial).__name__ == "OneVarTrial" and _weight(trial) == 0.5
    assert isinstance(trial.context, CheckpointLoadContext)
    assert trial.context.get_hparams() == {"global_batch_size": 32}
    assert trial.context.get_initial_batch() == 0
    facts = read_checkpoint_facts(root)
    assert facts.source["trial_cls_spec"] == "metadata.json"
    assert facts.determined_version == "0.13.13" and facts.batches_trained is None


def test_0_17_workload_sequencer_dict(tmp_path):
    root = _checkpoint(tmp_path / "0.17.6", weight=1.5)
    _metadata(root, "0.17.6-dev0")
    state = {"trial_id": 9, "last_ckpt": 3, "step_id": 3, "last_val": 0, "steps_completed": 3}
    (root / "workload_sequencer.pkl").write_bytes(pickle.dumps(state))
    trial = load_trial_from_checkpoint_path(root)
    assert _weight(trial) == 1.5 and trial.context.get_initial_batch() == 3


class SavableState:
    """An object-shaped sequencer state, as a pickle names a class of Determined's."""

    def __init__(self, steps: int) -> None:
        self.trial_id = 9
        self.steps_completed = steps


def test_object_pickles_read_as_records_without_importing_their_class(tmp_path):
    root = _checkpoint(tmp_path / "obj", weight=1.0)
    _load_data(root)
    data = pickle.dumps(SavableState(7), protocol=2)
    # Point the pickle at a module that does not exist here, as Determined's would.
    data = data.replace(__name__.encode(), b"determined.layers._workload_sequencer")
    (root / "workload_sequencer.pkl").write_bytes(data)
    trial = load_trial_from_checkpoint_path(root)
    assert trial.context.get_initial_batch() == 7
    with pytest.raises(pickle.UnpicklingError):
        import io

        RestrictedUnpickler(io.BytesIO(pickle.dumps(print))).load()


class _Boom:
    def __reduce__(self):
        return (Path.touch, (Path(self.path),))


def test_a_pickle_that_names_code_runs_nothing(tmp_path):
    root = _checkpoint(tmp_path / "evil", weight=2.0)
    _load_data(root)
    boom = _Boom()
    boom.path = str(tmp_path / "pwned")
    (root / "trial_state.pkl").write_bytes(pickle.dumps(boom))
    _metadata(root, "0.21.0", steps_completed=12)
    trial = load_trial_from_checkpoint_path(root)
    assert not (tmp_path / "pwned").exists()
    # The pickle gave no usable count, so metadata.json's steps_completed is taken.
    assert trial.context.get_initial_batch() == 12 and _weight(trial) == 2.0


def test_0_20_load_data_and_0_21_trial_state(tmp_path):
    old = _checkpoint(tmp_path / "0.20.0", weight=0.25)
    _load_data(old)
    (old / "workload_sequencer.pkl").write_bytes(
        pickle.dumps({"trial_id": 9, "steps_completed": 1})
    )
    assert load_trial_from_checkpoint_path(old).context.get_initial_batch() == 1

    new = _checkpoint(tmp_path / "0.21.0", weight=0.75)
    _load_data(new, is_trainer=True)
    _metadata(new, "0.21.0", steps_completed=99)
    trial_state = {"trial_id": 9, "last_ckpt": 5, "step_id": 0, "last_val": 5}
    trial_state.update(batches_trained=5, epochs_trained=0)
    (new / "trial_state.pkl").write_bytes(pickle.dumps(trial_state))
    trial = load_trial_from_checkpoint_path(new)
    assert trial.context.get_initial_batch() == 5 and _weight(trial) == 0.75
    assert read_checkpoint_facts(new).source["batches_trained"] == "trial_state.pkl"


def test_dauntless_state_file_name_and_missing_class(tmp_path):
    root = _checkpoint(tmp_path / "ours", weight=3.0)
    (root / "state_dict.pth").rename(root / "state-dict.pth")
    _load_data(root)
    assert _weight(load_trial_from_checkpoint_path(root)) == 3.0
    bare = tmp_path / "bare"
    bare.mkdir()
    torch.save({"models_state_dict": []}, bare / "state_dict.pth")
    with pytest.raises(ValueError, match="names no trial class"):
        load_trial_from_checkpoint_path(bare)


def test_two_checkpoints_of_different_code_load_their_own_classes(tmp_path):
    a = _checkpoint(tmp_path / "a", weight=1.0, width=1, version=1)
    b = _checkpoint(tmp_path / "b", weight=2.0, width=3, version=2)
    _load_data(a)
    _metadata(b, "0.16.0")  # b: the class from metadata.json
    first = load_trial_from_checkpoint_path(a)
    second = load_trial_from_checkpoint_path(b)
    again = load_trial_from_checkpoint_path(a)
    versions = [type(t).__init__.__globals__["VERSION"] for t in (first, second, again)]
    assert versions == [1, 2, 1]
    assert first.context.models[0].weight.shape == (1, 1)
    assert second.context.models[0].weight.shape == (1, 3)
    assert type(first) is not type(again)  # fresh code each time, no stale module
    assert "model_def" not in sys.modules


BUILD_MODEL_DEF = textwrap.dedent(
    """
    import torch
    from determined import pytorch


    class OldApiTrial(pytorch.PyTorchTrial):
        # Determined 0.13's PyTorchTrial API: the model comes from build_model(), the
        # trial wraps nothing, train_batch receives the model.
        def __init__(self, context):
            self.context = context

        def build_model(self):
            return torch.nn.Linear(2, 1, bias=False)

        def optimizer(self, model):
            return torch.optim.SGD(model.parameters(), lr=0.1)

        def build_training_data_loader(self):
            raise NotImplementedError

        build_validation_data_loader = build_training_data_loader

        def train_batch(self, batch, model, epoch_idx, batch_idx):
            raise NotImplementedError

        def evaluate_batch(self, batch, model):
            raise NotImplementedError
    """
)


@pytest.mark.parametrize("key", ["model_state_dict", "models_state_dict"])
def test_0_13_build_model_checkpoint_loads_the_bare_model(tmp_path, key):
    # As Determined's loader does for a checkpoint without load_data.json whose trial
    # has build_model(): the model is built, its weights loaded, and it is returned.
    root = tmp_path / "0.13.13-old"
    (root / "code").mkdir(parents=True)
    (root / "code" / "model_def.py").write_text(BUILD_MODEL_DEF)
    weights = {"weight": torch.tensor([[0.25, -2.0]])}
    torch.save(
        {key: weights if key == "model_state_dict" else [weights], "optimizer_state_dict": {}},
        root / "state_dict.pth",
    )
    config = {**CONFIG, "entrypoint": "model_def:OldApiTrial"}
    _metadata(root, "0.13.13", format="cloudpickle", experiment_config=config)
    model = load_trial_from_checkpoint_path(root)
    assert isinstance(model, torch.nn.Linear), type(model)
    assert model.weight.detach().tolist() == [[0.25, -2.0]]
    with torch.no_grad():
        assert model(torch.tensor([[4.0, 1.0]])).item() == pytest.approx(-1.0)
