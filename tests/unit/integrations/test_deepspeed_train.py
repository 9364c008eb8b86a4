"""DeepSpeedTrial trained for real by DeepSpeed on the CPU (``DS_ACCELERATOR=cpu``,
gloo, one process) through the Trainer API in local mode: for ZeRO stages 1, 2 and 3 a
run stopped at batch 4 and resumed from its checkpoint (DeepSpeed's own
``save_checkpoint``/``load_checkpoint`` in the platform's checkpoint directory) ends with
the weights of an uninterrupted run; gradient accumulation calls ``train_batch`` once
per micro batch.

Skipped, naming the reason, where the deepspeed package is not installed or cannot set
up its CPU accelerator here; ``tests/gpu/test_deepspeed_gpu.py`` runs the same checks on a
GPU machine."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

os.environ.setdefault("DS_ACCELERATOR", "cpu")
deepspeed = pytest.importorskip(
    "deepspeed", reason="the deepspeed extra is not installed (pip install 'dauntless[deepspeed]')"
)

from dauntless.core import LocalBackend  # noqa: E402
from dauntless.pytorch import Batch, DataLoader, load_trial_from_checkpoint_path  # noqa: E402
from dauntless.pytorch.deepspeed import (  # noqa: E402
    DeepSpeedTrial,
    DeepSpeedTrialContext,
    Trainer,
    init,
)

pytestmark = [
    pytest.mark.filterwarnings("ignore::UserWarning"),
    # DeepSpeed 0.19's ZeRO-3 calls torch.distributed's deprecated *_tensor collectives.
    pytest.mark.filterwarnings("ignore:`torch.distributed.*` is deprecated:FutureWarning"),
]


class TinyTrial(DeepSpeedTrial):
    """A linear classifier of synthetic data, trained by a DeepSpeed engine with SGD."""

    def __init__(self, context: DeepSpeedTrialContext) -> None:
        self.context = context
        hp = context.get_hparams()
        g = torch.Generator().manual_seed(0)
        x = torch.randn(96, 6, generator=g)
        self.data = torch.utils.data.TensorDataset(x, (x[:, 0] + x[:, 1] > 0).long())
        model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
        config = {
            "train_micro_batch_size_per_gpu": 4,
            "gradient_accumulation_steps": int(hp.get("accumulation", 1)),
            "zero_optimization": {"stage": int(hp["zero_stage"])},
            "zero_allow_untested_optimizer": True,
            "steps_per_print": 10**6,
        }
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        engine, _, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, config=config)
        self.engine = context.wrap_model_engine(engine)
        self.calls: list[int] = []

    def build_training_data_loader(self) -> DataLoader:
        return DataLoader(self.data, batch_size=4, shuffle=True)

    def build_validation_data_loader(self) -> DataLoader:
        return DataLoader(self.data, batch_size=32)

    def train_batch(
        self, dataloader_iter: Iterator[Any] | None, epoch_idx: int, batch_idx: int
    ) -> dict[str, Any]:
        assert dataloader_iter is not None
        self.calls.append(batch_idx)
        x, y = self.context.to_device(next(dataloader_iter))
        loss = torch.nn.functional.cross_entropy(self.engine(x), y)
        self.engine.backward(loss)
        self.engine.step()
        stop_at = self.context.get_hparam("stop_at")
        if stop_at is not None and batch_idx + 1 == stop_at:
            self.context.set_stop_requested(True)
        return {"loss": loss}

    def evaluate_batch(
        self, dataloader_iter: Iterator[Any] | None, batch_idx: int
    ) -> dict[str, Any]:
        assert dataloader_iter is not None
        x, y = self.context.to_device(next(dataloader_iter))
        return {"validation_loss": torch.nn.functional.cross_entropy(self.engine(x), y)}


def _weights(engine: Any) -> dict[str, torch.Tensor]:
    params = list(engine.module.parameters())
    with deepspeed.zero.GatheredParameters(params):
        return {k: v.detach().clone() for k, v in engine.module.state_dict().items()}


def _fit(storage: str, steps: int, checkpoint: str | None = None, **hp: Any):
    conf = {
        "checkpoint_storage": {"type": "shared_fs", "host_path": storage},
        "reproducibility": {"experiment_seed": 3},
        "searcher": {"name": "single", "metric": "validation_loss", "max_length": {"batches": 1}},
    }
    with init(hparams={"global_batch_size": 4, "stop_at": None, **hp}, exp_conf=conf) as ctx:
        trial = TinyTrial(ctx)
        result = Trainer(trial, ctx).fit(
            max_length=Batch(steps),
            reporting_period=Batch(2),
            latest_checkpoint=checkpoint,
            checkpoint_policy="none",
        )
        backend = ctx._core.backend if ctx._core is not None else None
        assert isinstance(backend, LocalBackend)
        return result, trial, backend


try:  # whether DeepSpeed can set up an engine on this machine at all
    from deepspeed.accelerator import get_accelerator

    _ACCELERATOR = get_accelerator().device_name()
    _CANNOT_RUN = None if _ACCELERATOR == "cpu" or torch.cuda.is_available() else _ACCELERATOR
except Exception as exc:  # DeepSpeed's accelerator probe failed
    _CANNOT_RUN = f"{type(exc).__name__}: {exc}"


@pytest.fixture(scope="module", autouse=True)
def _no_process_group_left():
    """DeepSpeed's init_distributed leaves a one-rank gloo group (and deepspeed.comm's
    backend) up in this process: end both, so later tests in the session start without."""
    yield
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()
    import deepspeed.comm.comm as ds_comm

    ds_comm.cdb = None


@pytest.fixture(autouse=True)
def _runnable():
    if _CANNOT_RUN is not None:
        pytest.skip(f"DeepSpeed cannot set up its CPU accelerator here: {_CANNOT_RUN}")


@pytest.mark.parametrize("stage", [1, 2, 3])
def test_pause_and_resume_matches_an_uninterrupted_run(tmp_path, stage):
    storage = str(tmp_path / "ckpt")
    result, _, first = _fit(storage, 8, zero_stage=stage, stop_at=4)
    assert result.value == "preempted"
    assert [c.steps_completed for c in first.checkpoints] == [4]
    ckpt = first.checkpoints[-1]
    assert ckpt.metadata["format"] == "deepspeed"
    assert any(name.startswith("model0/") for name in ckpt.resources), ckpt.resources
    assert "state-dict.pth" in ckpt.resources
    load_data = Path(storage, ckpt.uuid, "load_data.json")
    assert json.loads(load_data.read_text())["trial_type"] == "DeepSpeedTrial"
    with pytest.raises(ValueError, match="DeepSpeedTrial checkpoint"):
        load_trial_from_checkpoint_path(load_data.parent, trial_class=TinyTrial)
    if stage == 1:  # a checkpoint of an earlier release, whose load_data named PyTorchTrial
        data = json.loads(load_data.read_text())
        load_data.write_text(json.dumps({**data, "trial_type": "PyTorchTrial"}))
    result, resumed, second = _fit(storage, 8, checkpoint=ckpt.uuid, zero_stage=stage)
    assert result.value == "completed"
    assert resumed.calls == [4, 5, 6, 7]  # no batch trained twice
    assert [r.steps_completed for r in second.metrics("training")] == [6, 8]
    _, straight, reference = _fit(str(tmp_path / "other"), 8, zero_stage=stage)
    assert [r.metrics for r in reference.metrics("training")][2:] == [
        r.metrics for r in second.metrics("training")
    ]
    ours, theirs = _weights(resumed.engine), _weights(straight.engine)
    assert ours.keys() == theirs.keys()
    for name, value in theirs.items():
        assert torch.equal(ours[name], value), f"{name} differs after the resume (stage {stage})"


def test_gradient_accumulation_calls_train_batch_per_micro_batch(tmp_path):
    _, trial, backend = _fit(str(tmp_path / "ckpt"), 3, zero_stage=1, accumulation=2)
    assert trial.calls == [0, 0, 1, 1, 2, 2]
    assert trial.engine.global_steps == 3  # one optimizer step per batch
    assert [r.steps_completed for r in backend.metrics("validation")] == [3]


def test_first_use_compiles_no_op(tmp_path):
    """A fresh process that trains on the CPU accelerator leaves DeepSpeed's JIT extension
    directory without the shared-memory collective op (whose build takes minutes)."""
    import subprocess
    import sys

    extensions = tmp_path / "torch_extensions"
    script = (
        "import sys; sys.path.insert(0, {here!r})\n"
        "import test_deepspeed_train as t\n"
        "result, _, _ = t._fit({storage!r}, 2, zero_stage=2)\n"
        "import deepspeed\n"
        "print(result.value, deepspeed.ops.__compatible_ops__['deepspeed_shm_comm'])\n"
    ).format(here=str(Path(__file__).parent), storage=str(tmp_path / "ckpt"))
    env = {**os.environ, "TORCH_EXTENSIONS_DIR": str(extensions), "DS_ACCELERATOR": "cpu"}
    env.pop("DAUNTLESS_DEEPSPEED_SHM_COMM", None)
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)
    out = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split()[-2:] == ["completed", "False"], out.stdout
    assert not (extensions / "deepspeed_shm_comm").exists()


def test_shm_comm_build_is_left_to_deepspeed_when_asked(monkeypatch):
    from dauntless.pytorch.deepspeed._trainer import SHM_COMM_ENV, _skip_shm_comm_build

    monkeypatch.setenv(SHM_COMM_ENV, "1")
    assert _skip_shm_comm_build(deepspeed) is False
