"""The Trainer API in local mode (no master): the digits example, test mode, resume,
argument checks, InvalidHP."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import pytest
import torch
import yaml
from api_trials import ResumeTrial, fit_local, local_conf

import dauntless
from dauntless.core import TrialInfo
from dauntless.pytorch import Batch, Epoch, PyTorchTrialContext, Trainer, init
from dauntless.pytorch._import import load_trial_class

DIGITS = Path(__file__).resolve().parents[3] / "examples" / "digits"


def test_digits_example_trains_in_local_mode_through_the_trainer(tmp_path):
    conf = yaml.safe_load((DIGITS / "legacy-const.yaml").read_text())
    conf["checkpoint_storage"] = {"type": "directory", "container_path": str(tmp_path / "ckpt")}
    conf["reproducibility"] = {"experiment_seed": 20240601}
    try:
        trial_cls = load_trial_class(conf["entrypoint"], str(DIGITS))
        result, backend, trial = fit_local(
            trial_cls,
            "",
            conf,
            max_length=Epoch(6),
            validation_period=Epoch(1),
            reporting_period=Batch(20),
        )
    finally:
        sys.modules.pop("model_def", None)
    assert result.value == "completed"
    validation = backend.metrics("validation")
    # 1438 records in batches of 32, drop_last: 44 batches an epoch.
    assert [r.steps_completed for r in validation] == [44 * e for e in range(1, 7)]
    assert validation[-1].metrics["accuracy"] >= 0.93, validation[-1].metrics
    assert validation[-1].metrics["validation_loss"] < validation[0].metrics["validation_loss"]
    # Local training checkpoints after every validation (policy best acts as all).
    assert [c.steps_completed for c in backend.checkpoints] == [44 * e for e in range(1, 7)]
    last = tmp_path / "ckpt" / backend.checkpoints[-1].uuid
    load_data = json.loads((last / "load_data.json").read_text())
    assert (
        load_data["is_trainer"] is True and load_data["trial_cls_spec"] == "model_def:DigitsTrial"
    )
    assert load_data["hparams"]["hidden_size"] == 128


def test_test_mode_trains_one_batch_validates_one_and_checkpoints(tmp_path):
    result, backend, _ = fit_local(
        ResumeTrial, str(tmp_path), max_length=Batch(1000), test_mode=True
    )
    assert result.value == "completed"
    assert [r.steps_completed for r in backend.metrics("training")] == [1]
    (validation,) = backend.metrics("validation")
    assert validation.steps_completed == 1
    assert [c.steps_completed for c in backend.checkpoints] == [1]


def test_local_resume_continues_from_a_checkpoint(tmp_path):
    # The first run validates (and checkpoints) at batch 10, the straight one does not:
    # validation leaves the random streams alone, so the runs still agree.
    storage = str(tmp_path / "ckpt")
    _, first, _ = fit_local(ResumeTrial, storage, max_length=Batch(10), reporting_period=Batch(5))
    uuid = first.checkpoints[-1].uuid
    _, second, trial = fit_local(
        ResumeTrial,
        storage,
        max_length=Batch(20),
        reporting_period=Batch(5),
        latest_checkpoint=uuid,
    )
    assert trial.context.get_initial_batch() == 10
    assert [r.steps_completed for r in second.metrics("training")] == [15, 20]
    _, straight, ref = fit_local(
        ResumeTrial, str(tmp_path / "b"), max_length=Batch(20), reporting_period=Batch(5)
    )
    assert [r.metrics for r in straight.metrics("training")][2:] == [
        r.metrics for r in second.metrics("training")
    ]
    for key, value in ref.model.state_dict().items():
        assert torch.equal(trial.model.state_dict()[key], value)


def test_profiling_in_local_training_warns_and_trains(tmp_path, caplog):
    # Determined: no profiling in local mode; fit() trains on and says so.
    with caplog.at_level(logging.WARNING, logger="dauntless.pytorch"):
        result, backend, _ = fit_local(
            ResumeTrial, str(tmp_path), max_length=Batch(2), profiling_enabled=True
        )
    assert result.value == "completed"
    assert "profiling_enabled=True has no effect in local training" in caplog.text


def test_fit_checks_its_arguments(tmp_path):
    with pytest.raises(ValueError, match="needs max_length"):
        fit_local(ResumeTrial, str(tmp_path))
    with pytest.raises(TypeError, match="Batch\\(n\\) or Epoch\\(n\\)"):
        fit_local(ResumeTrial, str(tmp_path), max_length=10)
    with pytest.raises(ValueError, match="checkpoint_policy"):
        fit_local(ResumeTrial, str(tmp_path), max_length=Batch(1), checkpoint_policy="some")
    info = TrialInfo(
        trial_id=1,
        experiment_id=1,
        trial_seed=0,
        hparams={"global_batch_size": 8, "lr": 0.1},
        config=local_conf(str(tmp_path)),
    )
    bare = PyTorchTrialContext(info)  # not from init(): no Core API context
    with pytest.raises(TypeError, match="dauntless.pytorch.init"):
        Trainer(ResumeTrial(bare), bare)


def test_local_hparams_and_seed(tmp_path):
    conf = local_conf(str(tmp_path))
    with init(hparams={"global_batch_size": 4, "lr": 0.3}, exp_conf=conf) as ctx:
        assert ctx.get_hparams() == {"global_batch_size": 4, "lr": 0.3}
        assert ctx.get_trial_seed() == 7 and ctx.get_trial_id() == 0
        first = torch.rand(3)
    with init(exp_conf=conf) as ctx:
        assert ctx.get_hparam("lr") == 0.05
        assert torch.equal(torch.rand(3), first)  # seeded from experiment_seed


def test_invalid_hp_in_the_init_block_exits_zero_after_an_early_exit_report(tmp_path):
    seen = {}
    with pytest.raises(SystemExit) as exit_info:
        with init(exp_conf=local_conf(str(tmp_path))) as ctx:
            seen["backend"] = ctx._core.backend
            raise dauntless.InvalidHP("lr out of range")
    assert exit_info.value.code == 0
    assert seen["backend"].early_exits == ["INVALID_HP"]

    class Picky(ResumeTrial):
        def train_batch(self, batch, epoch_idx, batch_idx):
            if batch_idx == 2:
                raise dauntless.InvalidHP("diverged")
            return super().train_batch(batch, epoch_idx, batch_idx)

    result, backend, _ = fit_local(
        Picky, str(tmp_path), max_length=Batch(10), reporting_period=Batch(5)
    )
    assert result.value == "invalid_hp" and backend.early_exits == ["INVALID_HP"]
    assert [c.steps_completed for c in backend.checkpoints] == [2]


def test_periods_in_batches_and_epochs_resolve_to_batches():
    from dauntless.pytorch._settings import NEVER, LoopSettings

    settings = LoopSettings(
        reporting_period=Batch(10),
        validation_period=Epoch(2),
        checkpoint_period=Batch(0),
        max_length=Epoch(3),
    )
    resolved = settings.resolve(epoch_len=44)
    assert (resolved.reporting_period, resolved.validation_period) == (10, 88)
    assert (resolved.checkpoint_period, resolved.max_length) == (1, 132)  # Batch(0): every batch
    never = LoopSettings(validation_period=NEVER).resolve(44)
    assert never.validation_period == 0
    with pytest.raises(ValueError, match=">= 0"):
        Batch(-1)
    with pytest.raises(TypeError, match="needs an int"):
        Epoch(1.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_length must be >= 1"):
        LoopSettings(max_length=Batch(0))
    assert Batch(3) == Batch(3) and Batch(3) != Epoch(3)
