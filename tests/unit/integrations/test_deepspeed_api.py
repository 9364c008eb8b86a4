"""``dauntless.pytorch.deepspeed`` without DeepSpeed running: the config merge, the
model-parallel units, the context's refusals, the launcher's command line, the
``determined`` names, and that importing the package does not import ``deepspeed``."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from dauntless import core
from dauntless.core import DistributedContext
from dauntless.launch.deepspeed import parse_args
from dauntless.pytorch.deepspeed import (
    DeepSpeedTrialContext,
    ModelParallelUnit,
    Trainer,
    make_data_parallel_mpu,
    make_deepspeed_mpu,
    overwrite_deepspeed_config,
)


def _context() -> DeepSpeedTrialContext:
    info = core.TrialInfo(
        trial_id=1,
        experiment_id=1,
        trial_seed=0,
        hparams={"global_batch_size": 8},
        config={
            "searcher": {"name": "single", "metric": "val_loss", "max_length": {"batches": 4}},
            "hyperparameters": {"global_batch_size": 8},
        },
    )
    return DeepSpeedTrialContext(info, device="cpu")


def test_overwrite_deepspeed_config_merges_recursively(tmp_path):
    base = {"train_batch_size": 8, "optimizer": {"type": "Adam", "params": {"lr": 1e-3}}}
    merged = overwrite_deepspeed_config(base, {"optimizer": {"params": {"lr": 0.1}}, "fp16": {}})
    assert merged == {
        "train_batch_size": 8,
        "optimizer": {"type": "Adam", "params": {"lr": 0.1}},
        "fp16": {},
    }
    assert base["optimizer"]["params"]["lr"] == 1e-3  # not modified
    path = tmp_path / "ds_config.json"
    path.write_text(json.dumps(base))
    assert overwrite_deepspeed_config(path, {"train_batch_size": 16})["train_batch_size"] == 16
    assert overwrite_deepspeed_config(str(path), {})["optimizer"]["type"] == "Adam"
    with pytest.raises(TypeError, match="source_ds_dict must be a dict"):
        overwrite_deepspeed_config(base, [1])  # type: ignore[arg-type]
    path.write_text("[1, 2]")
    with pytest.raises(TypeError, match="base_ds_config must be a dict"):
        overwrite_deepspeed_config(path, {})


def test_model_parallel_units():
    dp = make_data_parallel_mpu(DistributedContext(rank=1, size=2))
    assert dp == ModelParallelUnit(1, 2, True, True)

    class Grid:  # DeepSpeed's PipelineParallelGrid's methods, a 2-stage pipeline
        def __init__(self, stage: int) -> None:
            self.stage = stage

        def get_data_parallel_rank(self) -> int:
            return 0

        def get_data_parallel_world_size(self) -> int:
            return 2

        def get_pipe_parallel_world_size(self) -> int:
            return 2

        def get_stage_id(self) -> int:
            return self.stage

    assert make_deepspeed_mpu(Grid(0)) == ModelParallelUnit(0, 2, False, True)
    assert make_deepspeed_mpu(Grid(1)) == ModelParallelUnit(0, 2, True, True)
    with pytest.raises(TypeError, match="get_data_parallel_rank"):
        make_deepspeed_mpu(object())


def test_context_refuses_what_the_engine_owns():
    ctx = _context()
    model = torch.nn.Linear(2, 1)
    with pytest.raises(TypeError, match="wrap_model_engine"):
        ctx.wrap_model(model)
    with pytest.raises(TypeError, match="deepspeed.initialize"):
        ctx.wrap_optimizer(torch.optim.SGD(model.parameters(), 0.1))
    with pytest.raises(TypeError, match="lr_scheduler"):
        ctx.wrap_lr_scheduler(None)
    with pytest.raises(TypeError, match="the engine deepspeed.initialize"):
        ctx.wrap_model_engine(model)
    with pytest.raises(RuntimeError, match="no model engine"):
        ctx.get_train_micro_batch_size_per_gpu()
    with pytest.raises(TypeError, match="ModelParallelUnit"):
        ctx.set_mpu("grid")  # type: ignore[arg-type]
    assert ctx.mpu == ModelParallelUnit(0, 1, True, True)
    assert ctx.get_hparam("global_batch_size") == 8


def test_trainer_refuses_other_trials_and_contexts():
    class NotDeepSpeed(torch.nn.Module):
        pass

    with pytest.raises(TypeError, match="trial must be a DeepSpeedTrial"):
        Trainer(NotDeepSpeed(), _context())  # type: ignore[arg-type]


def test_launcher_command_lines():
    assert parse_args(["python3", "train.py"]) == (None, ["python3", "train.py"])
    nproc, cmd = parse_args(["--trial", "model_def:Trial"])
    assert nproc is None and cmd[-3:] == ["dauntless.exec.harness", "--trial", "model_def:Trial"]
    assert parse_args(["--num_gpus", "1", "--", "x"]) == (1, ["x"])
    assert parse_args(["--num-gpus=2", "--", "x"]) == (2, ["x"])
    with pytest.raises(SystemExit, match="'--hostfile' is not supported"):
        parse_args(["--hostfile", "h", "--", "x"])
    with pytest.raises(SystemExit, match="needs a value"):
        parse_args(["--num_gpus", "--", "x"])
    with pytest.raises(SystemExit, match="empty command"):
        parse_args(["--num_gpus=1", "--"])


def test_import_is_lean_and_determined_names_resolve():
    code = (
        "import sys, dauntless.pytorch.deepspeed, dauntless.launch.deepspeed;"
        "assert 'deepspeed' not in sys.modules, 'deepspeed imported';"
        "import dauntless.compat, runpy;"
        "print(dauntless.compat.SHIM_PATH)"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    shim = r.stdout.strip()
    code = (
        "import determined.pytorch.deepspeed as d, determined.launch.deepspeed as l;"
        "import dauntless.pytorch.deepspeed as ours, dauntless.launch.deepspeed as ol;"
        "assert d.DeepSpeedTrial is ours.DeepSpeedTrial and d.Trainer is ours.Trainer;"
        "assert l.main is ol.main"
    )
    r = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONPATH": shim, "PATH": "/usr/bin:/bin"},
    )
    assert r.returncode == 0, r.stderr


def test_the_loop_counts_only_the_trials_own_evaluation_method():
    from dauntless.pytorch._trial import overrides
    from dauntless.pytorch.deepspeed import DeepSpeedTrial

    class Base(DeepSpeedTrial):
        def __init__(self, context):  # type: ignore[no-untyped-def]
            self.context = context

        def build_training_data_loader(self):  # type: ignore[no-untyped-def]
            return None

        def build_validation_data_loader(self):  # type: ignore[no-untyped-def]
            return None

        def train_batch(self, dataloader_iter, epoch_idx, batch_idx):  # type: ignore[no-untyped-def]
            return {}

    class Full(Base):
        def evaluate_full_dataset(self, data_loader):  # type: ignore[no-untyped-def]
            return {"x": 1.0}

    class ByBatch(Base):
        def evaluate_batch(self, dataloader_iter, batch_idx):  # type: ignore[no-untyped-def]
            return {"x": 1.0}

    full, by_batch = Full(None), ByBatch(None)
    assert (overrides(full, "evaluate_batch"), overrides(full, "evaluate_full_dataset")) == (
        False,
        True,
    )
    assert overrides(by_batch, "evaluate_batch") and not overrides(
        by_batch, "evaluate_full_dataset"
    )
    with pytest.raises(NotImplementedError, match="must implement evaluate_batch"):
        full.evaluate_batch(None, 0)
