"""Every batch format of the PyTorch API trains and reports; every callback hook fires in
order and the callbacks' state is checkpointed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from api_trials import Recorder, ResumeTrial, fit_local, local_conf, regression_data
from torch import nn

from dauntless.pytorch import Batch, DataLoader, PyTorchTrial, Reducer

N = 20  # records per set


def _pair(i: int) -> tuple[np.ndarray, np.ndarray]:
    x = np.linspace(-1, 1, 6, dtype=np.float32) * (i + 1) / N
    return x, np.array([x.sum()], dtype=np.float32)


class _Records(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return N

    def __getitem__(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        return _pair(i)


def _collate(fmt: str):
    """A collate function producing the batch format ``fmt`` of seed 003's list."""

    def collate(items: list[tuple[np.ndarray, np.ndarray]]) -> Any:
        x = np.stack([a for a, _ in items])
        y = np.stack([b for _, b in items])
        tx, ty = torch.from_numpy(x), torch.from_numpy(y)
        return {
            "ndarray": lambda: np.concatenate([x, y], axis=1),
            "tensor": lambda: torch.cat([tx, ty], dim=1),
            "tuple_arrays": lambda: (x, y),
            "tuple_tensors": lambda: (tx, ty),
            "list_arrays": lambda: [x, y],
            "list_tensors": lambda: [tx, ty],
            "dict_arrays": lambda: {"data": x, "label": y},
            "dict_tensors": lambda: {"data": tx, "label": ty},
            "nested": lambda: {
                "data": [{"sub_data1": tx[:, :3]}, {"sub_data2": tx[:, 3:]}],
                "label": (ty, ty.clone()),
            },
        }[fmt]()

    return collate


def _unpack(fmt: str, batch: Any) -> tuple[torch.Tensor, torch.Tensor]:
    if fmt in ("ndarray", "tensor"):
        return batch[:, :6], batch[:, 6:]
    if fmt.startswith(("tuple", "list")):
        assert isinstance(batch, tuple if fmt.startswith("tuple") else list)
        return batch[0], batch[1]
    if fmt.startswith("dict"):
        return batch["data"], batch["label"]
    data, label = batch["data"], batch["label"]
    assert isinstance(label, tuple) and torch.equal(label[0], label[1])
    return torch.cat([data[0]["sub_data1"], data[1]["sub_data2"]], dim=1), label[0]


def _tensors(batch: Any) -> list[Any]:
    if isinstance(batch, dict):
        return [t for v in batch.values() for t in _tensors(v)]
    if isinstance(batch, (list, tuple)):
        return [t for v in batch for t in _tensors(v)]
    return [batch]


class FormatTrial(PyTorchTrial):
    def __init__(self, context) -> None:
        self.context = context
        self.fmt = context.get_hparam("fmt")
        self.model = context.wrap_model(nn.Linear(6, 1))
        self.opt = context.wrap_optimizer(torch.optim.SGD(self.model.parameters(), lr=0.1))

    def _loader(self) -> DataLoader:
        return DataLoader(_Records(), batch_size=4, collate_fn=_collate(self.fmt))

    build_training_data_loader = _loader
    build_validation_data_loader = _loader

    def train_batch(self, batch, epoch_idx, batch_idx):
        # Arrays arrive as tensors on the device, in the structure the loader made.
        assert all(isinstance(t, torch.Tensor) for t in _tensors(batch)), batch
        x, y = _unpack(self.fmt, batch)
        loss = nn.functional.mse_loss(self.model(x), y)
        self.context.backward(loss)
        self.context.step_optimizer(self.opt)
        return {"loss": loss}

    def evaluate_batch(self, batch, batch_idx):
        x, y = _unpack(self.fmt, batch)
        return {
            "validation_loss": nn.functional.mse_loss(self.model(x), y).item(),
            "records": len(x),
            "first": batch_idx,
        }

    def evaluation_reducer(self):
        return {"validation_loss": Reducer.AVG, "records": Reducer.SUM, "first": Reducer.MIN}


FORMATS = [
    "ndarray",
    "tensor",
    "tuple_arrays",
    "tuple_tensors",
    "list_arrays",
    "list_tensors",
    "dict_arrays",
    "dict_tensors",
    "nested",
]


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_batch_format_trains_and_reports(tmp_path, fmt):
    conf = local_conf(str(tmp_path / "ckpt"))
    conf["hyperparameters"] = {"fmt": fmt}
    result, backend, _ = fit_local(
        FormatTrial, "", conf, max_length=Batch(10), reporting_period=Batch(5)
    )
    assert result.value == "completed"
    training = backend.metrics("training")
    assert [r.steps_completed for r in training] == [5, 10]
    assert all(isinstance(r.metrics["loss"], float) for r in training)
    assert training[-1].metrics["loss"] < training[0].metrics["loss"]
    (validation,) = backend.metrics("validation")
    # get_batch_length found the record count of every format (5 batches of 4).
    assert validation.metrics["records"] == N and validation.metrics["first"] == 0
    assert validation.metrics["batches"] == 10 and validation.metrics["epochs"] == 2.0


class CallbackTrial(ResumeTrial):
    calls: list = []

    def build_training_data_loader(self) -> DataLoader:  # 32 records: 4 batches an epoch
        return DataLoader(regression_data(0, 32), batch_size=8, shuffle=True)

    def build_callbacks(self):
        self.recorder = Recorder(CallbackTrial.calls)
        return {"recorder": self.recorder}


def _hooks(calls):
    return [
        (h, a)
        if h in ("on_training_epoch_start", "on_training_epoch_end", "on_trial_startup")
        else h
        for h, a in calls
    ]


def test_every_callback_hook_fires_in_order_and_its_state_is_checkpointed(tmp_path):
    calls: list = []
    CallbackTrial.calls = calls
    storage = str(tmp_path / "ckpt")
    _, backend, trial = fit_local(
        CallbackTrial,
        storage,
        max_length=Batch(10),
        reporting_period=Batch(5),
        validation_period=Batch(4),
    )
    val = [
        "on_validation_start",
        "on_validation_epoch_start",
        "on_validation_epoch_end",
        "on_validation_end",
    ]
    ckpt = ["on_checkpoint_save_start", "on_checkpoint_write_end", "on_checkpoint_upload_end"]
    assert _hooks(calls) == [
        ("on_trial_startup", (0, None)),
        "on_training_start",
        ("on_training_epoch_start", (0,)),
        ("on_training_epoch_end", (0,)),
        # Determined's boundaries: validation (4), report (5), validation (8), end (10);
        # each ends a training workload first.
        "on_training_workload_end",
        *val,
        *ckpt,
        ("on_training_epoch_start", (1,)),
        "on_training_workload_end",
        ("on_training_epoch_end", (1,)),
        "on_training_workload_end",
        *val,
        *ckpt,
        ("on_training_epoch_start", (2,)),
        "on_training_workload_end",
        *val,
        *ckpt,
        "on_trial_shutdown",
    ]
    by_hook = {}
    for hook, args in calls:
        by_hook.setdefault(hook, []).append(args)
    # Arguments: the report's metrics, the validation's outputs and metrics, checkpoints.
    avg, per_batch = by_hook["on_training_workload_end"][0]
    assert avg == backend.metrics("training")[0].metrics and len(per_batch) == 4
    assert by_hook["on_validation_epoch_end"][0] == (3,)  # 40 records in batches of 16
    assert [m[0]["batches"] for m in by_hook["on_validation_end"]] == [4, 8, 10]
    assert "models_state_dict" in by_hook["on_checkpoint_save_start"][0][0]
    uuids = [a[0] for a in by_hook["on_checkpoint_upload_end"]]
    assert uuids == [c.uuid for c in backend.checkpoints]
    # Files written in on_checkpoint_write_end go into the checkpoint being written.
    assert Path(by_hook["on_checkpoint_write_end"][0][0]).name.startswith(uuids[0])

    # The state_dict is saved under "callbacks" and comes back on resume.
    at_8 = backend.checkpoints[1]
    state = torch.load(f"{storage}/{at_8.uuid}/state-dict.pth", weights_only=True)
    saved = state["callbacks"]["recorder"]
    assert saved["count"] > 0
    calls.clear()
    fit_local(
        CallbackTrial,
        storage,
        max_length=Batch(12),
        reporting_period=Batch(5),
        validation_period=Batch(4),
        latest_checkpoint=at_8.uuid,
    )
    assert _hooks(calls)[:5] == [
        ("on_trial_startup", (8, at_8.uuid)),
        "on_checkpoint_load_start",
        "load_state_dict",
        "on_training_start",
        ("on_training_epoch_start", (2,)),
    ]
    assert calls[2][1] == (saved,)
