"""``load_trial_from_checkpoint_path``: our checkpoints (class from ``code/``) and the
``state_dict.pth`` checkpoints Determined wrote."""

from __future__ import annotations

import json
import random
import sys
import textwrap

import numpy as np
import pytest
import torch

from dauntless.pytorch import Batch, load_trial_from_checkpoint_path

MODEL_SOURCE = textwrap.dedent(
    """
    import torch
    from torch import nn
    from torch.utils.data import TensorDataset

    from dauntless.pytorch import DataLoader, PyTorchTrial


    class TinyTrial(PyTorchTrial):
        def __init__(self, context, width=3):
            self.context = context
            self.model = context.wrap_model(nn.Sequential(nn.Linear(2, width), nn.Linear(width, 1)))
            self.opt = context.wrap_optimizer(torch.optim.SGD(self.model.parameters(), lr=0.1))

        def _data(self):
            x = torch.linspace(-1, 1, 32).reshape(16, 2)
            return DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=4)

        build_training_data_loader = _data
        build_validation_data_loader = _data

        def train_batch(self, batch, epoch_idx, batch_idx):
            x, y = batch
            loss = nn.functional.mse_loss(self.model(x), y)
            self.context.backward(loss)
            self.context.step_optimizer(self.opt)
            return loss

        def evaluate_batch(self, batch):
            x, y = batch
            return {"validation_loss": nn.functional.mse_loss(self.model(x), y).item()}
    """
)


@pytest.fixture
def tiny_module(tmp_path):
    """``tiny_model.py`` in the working directory (the model definition)."""
    (tmp_path / "tiny_model.py").write_text(MODEL_SOURCE)
    sys.path.insert(0, str(tmp_path))
    yield tmp_path / "tiny_model.py"
    sys.modules.pop("tiny_model", None)


def test_loads_our_checkpoint_with_the_class_from_its_code_copy(tmp_path, tiny_module):
    import tiny_model
    from api_trials import fit_local, local_conf

    conf = local_conf(str(tmp_path / "ckpt"))
    conf["hyperparameters"] = {"global_batch_size": 4}
    _, backend, trained = fit_local(tiny_model.TinyTrial, "", conf, max_length=Batch(8))
    path = tmp_path / "ckpt" / backend.checkpoints[-1].uuid
    assert (path / "code" / "tiny_model.py").read_text() == MODEL_SOURCE
    # The class must come from the checkpoint's code/, not from the working directory.
    tiny_module.unlink()
    sys.modules.pop("tiny_model", None)
    sys.path.remove(str(tmp_path))
    loaded = load_trial_from_checkpoint_path(path)
    assert type(loaded).__name__ == "TinyTrial"
    # Imported from code/ and not left in the module cache (a later checkpoint of other
    # code must get its own module).
    assert type(loaded).__init__.__globals__["__file__"] == str(path / "code" / "tiny_model.py")
    assert "tiny_model" not in sys.modules
    assert loaded.context.get_hparams() == {"global_batch_size": 4}
    for key, value in trained.model.state_dict().items():
        assert torch.equal(loaded.model.state_dict()[key], value)
    # trial_kwargs reach the constructor; a model that does not fit is refused loudly.
    with pytest.raises(RuntimeError, match="size mismatch"):
        load_trial_from_checkpoint_path(path, trial_kwargs={"width": 5})


def _determined_checkpoint(directory, model_sd, name="state_dict.pth", legacy=False):
    """A checkpoint laid out as Determined's PyTorchTrial wrote it."""
    directory.mkdir(parents=True)
    if legacy:
        state = {"model_state_dict": model_sd, "optimizer_state_dict": {}}
    else:
        state = {
            "models_state_dict": [{f"module.{k}": v for k, v in model_sd.items()}],
            "optimizers_state_dict": [{"state": {}, "param_groups": []}],
            "lr_schedulers_state_dict": [],
            "callbacks": {},
            "rng_state": {
                "cpu_rng_state": torch.get_rng_state(),
                "np_rng_state": np.random.get_state(),
                "random_rng_state": random.getstate(),
            },
        }
    target = directory / name
    target.parent.mkdir(parents=True, exist_ok=True)
    torch.save(state, target)
    (directory / "code").mkdir()
    (directory / "code" / "tiny_model.py").write_text(MODEL_SOURCE)
    load_data = {
        "trial_type": "PyTorchTrial",
        "experiment_config": {
            "searcher": {
                "name": "single",
                "metric": "validation_loss",
                "max_length": {"batches": 8},
            },
            "hyperparameters": {"global_batch_size": {"type": "const", "val": 4}},
            "environment": {"image": {"cpu": "determinedai/pytorch-ngc:0.38.1"}},
            "bind_mounts": [{"host_path": "/data", "container_path": "/data"}],
            "entrypoint": "tiny_model:TinyTrial",
            "min_validation_period": {"batches": 4},
            "profiling": {"enabled": False},
            "workspace": "Uncategorized",
            "internal": {"native": None},
        },
        "hparams": {"global_batch_size": 4},
        "trial_cls_spec": "tiny_model:TinyTrial",
        "is_trainer": True,
    }
    (directory / "load_data.json").write_text(json.dumps(load_data))


@pytest.mark.parametrize(
    "name,legacy",
    [
        ("state_dict.pth", False),
        ("determined/state_dict.pth", False),
        ("state_dict.pth", True),
    ],
)
def test_loads_checkpoints_determined_wrote(tmp_path, tiny_module, name, legacy):
    import tiny_model

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(2, 3), torch.nn.Linear(3, 1))
    reference = {k: v.clone() for k, v in model.state_dict().items()}
    path = tmp_path / "det-ckpt"
    _determined_checkpoint(path, reference, name=name, legacy=legacy)
    # Determined's config has keys we do not know: the hparams still reach the context.
    loaded = load_trial_from_checkpoint_path(path)
    assert loaded.context.get_per_slot_batch_size() == 4
    for key, value in reference.items():
        assert torch.equal(loaded.model.state_dict()[key], value)
    explicit = load_trial_from_checkpoint_path(path, trial_class=tiny_model.TinyTrial)
    assert torch.equal(explicit.model[0].weight, reference["0.weight"])


def test_errors_name_what_is_missing(tmp_path, tiny_module):
    with pytest.raises(FileNotFoundError, match="state-dict.pth"):
        load_trial_from_checkpoint_path(tmp_path)
    (tmp_path / "bare").mkdir()
    torch.save({"models_state_dict": []}, tmp_path / "bare" / "state-dict.pth")
    with pytest.raises(ValueError, match="trial_class"):
        load_trial_from_checkpoint_path(tmp_path / "bare")
