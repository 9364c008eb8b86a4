"""PyTorchTrialContext: aggregation, LR step modes, AMP, scalers, reducers, TensorBoard,
position getters, data-loader options and the misuse errors."""

from __future__ import annotations

import importlib.util
from typing import Any

import numpy as np
import pytest
import torch
from api_trials import ResumeTrial, fit_local, local_conf, regression_data
from torch import nn

from dauntless.core import DistributedContext, TrialInfo
from dauntless.pytorch import (
    Batch,
    DataLoader,
    Epoch,
    LRScheduler,
    MetricReducer,
    PyTorchTrialContext,
)


def make_context(tmp_path, **kwargs: Any) -> PyTorchTrialContext:
    conf = local_conf(str(tmp_path))
    info = TrialInfo(
        trial_id=1,
        experiment_id=1,
        trial_seed=3,
        hparams={"global_batch_size": 8, "lr": 0.1},
        config=conf,
    )
    return PyTorchTrialContext(info, **kwargs)


# ---------------------------------------------------------------- gradient aggregation


@pytest.mark.parametrize("how", ["context", "optimizer"])
def test_gradient_aggregation_steps_every_n_batches_with_the_mean_gradient(tmp_path, how):
    ctx = make_context(tmp_path, aggregation_frequency=2 if how == "context" else None)
    model = ctx.wrap_model(nn.Linear(2, 1, bias=False))
    with torch.no_grad():
        model.weight.copy_(torch.tensor([[1.0, -1.0]]))
    opt = ctx.wrap_optimizer(
        torch.optim.SGD(model.parameters(), lr=0.5),
        backward_passes_per_step=2 if how == "optimizer" else 1,
    )
    inputs = [torch.tensor([[1.0, 2.0]]), torch.tensor([[3.0, 0.0]])]
    for batch_idx, x in enumerate(inputs):
        ctx._current_batch = batch_idx
        ctx.backward(model(x).sum())
        ctx.step_optimizer(opt)
        if batch_idx == 0:  # gradients accumulate, no step yet
            assert torch.equal(model.weight, torch.tensor([[1.0, -1.0]]))
            assert torch.equal(model.weight.grad, torch.tensor([[1.0, 2.0]]))
    # One step with the mean gradient (2, 1), then the gradients are zeroed.
    assert torch.allclose(model.weight, torch.tensor([[1.0 - 0.5 * 2.0, -1.0 - 0.5 * 1.0]]))
    assert model.weight.grad is None or not model.weight.grad.any()
    with pytest.raises(ValueError, match="auto_zero_grads must be True"):
        ctx.step_optimizer(opt, auto_zero_grads=False)


class WatchedTrial(ResumeTrial):
    def train_batch(self, batch, epoch_idx, batch_idx):
        before = self.model[0].weight.detach().clone()
        out = super().train_batch(batch, epoch_idx, batch_idx)
        self.changed = getattr(self, "changed", [])
        self.changed.append(not torch.equal(before, self.model[0].weight))
        return out


def test_aggregation_trains_through_the_loop(tmp_path):
    result, backend, trial = fit_local(
        WatchedTrial,
        str(tmp_path),
        max_length=Batch(12),
        reporting_period=Batch(6),
        init_kwargs={"aggregation_frequency": 3},
    )
    assert result.value == "completed"
    # The optimizer steps only on batches 2, 5, 8 and 11.
    assert trial.changed == [(b + 1) % 3 == 0 for b in range(12)]
    assert [r.steps_completed for r in backend.metrics("training")] == [6, 12]


# ---------------------------------------------------------------- LR schedulers


class CountingScheduler:
    def __init__(self) -> None:
        self.steps = 0

    def step(self) -> None:
        self.steps += 1

    def state_dict(self) -> dict[str, int]:
        return {"steps": self.steps}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.steps = state["steps"]


@pytest.mark.parametrize(
    "mode,frequency,agg,expected",
    [
        # 12 batches, 5 per epoch.
        (LRScheduler.StepMode.STEP_EVERY_BATCH, 1, 1, 12),
        (LRScheduler.StepMode.STEP_EVERY_BATCH, 4, 1, 3),
        (LRScheduler.StepMode.STEP_EVERY_BATCH, 1, 3, 12),  # 3 steps on each of 4 updates
        (LRScheduler.StepMode.STEP_EVERY_OPTIMIZER_STEP, 1, 3, 4),
        (LRScheduler.StepMode.STEP_EVERY_OPTIMIZER_STEP, 2, 1, 6),
        (LRScheduler.StepMode.STEP_EVERY_OPTIMIZER_STEP, 6, 3, 2),
        (LRScheduler.StepMode.STEP_EVERY_EPOCH, 1, 1, 2),  # after batches 4 and 9
        (LRScheduler.StepMode.STEP_EVERY_EPOCH, 2, 1, 1),
        (LRScheduler.StepMode.STEP_EVERY_EPOCH, 1, 3, 2),
        (LRScheduler.StepMode.MANUAL_STEP, 1, 1, 0),
    ],
)
def test_lr_scheduler_step_modes(mode, frequency, agg, expected):
    sched = CountingScheduler()
    wrapped = LRScheduler(sched, mode, frequency, aggregation_frequency=agg)
    for batch_idx in range(12):
        wrapped.after_batch(batch_idx, epoch_len=5)
    assert sched.steps == expected


def test_epoch_mode_steps_when_the_next_update_falls_in_a_new_epoch():
    sched = CountingScheduler()
    wrapped = LRScheduler(sched, LRScheduler.StepMode.STEP_EVERY_EPOCH, aggregation_frequency=3)
    stepped_after = []
    for batch_idx in range(12):
        before = sched.steps
        wrapped.after_batch(batch_idx, epoch_len=5)
        if sched.steps > before:
            stepped_after.append(batch_idx)
    # Updates at batches 2, 5, 8, 11: the update after 2 (at 5) is in epoch 1.
    assert stepped_after == [2, 8]


def test_reduce_lr_on_plateau_needs_manual_step(tmp_path):
    ctx = make_context(tmp_path)
    model = ctx.wrap_model(nn.Linear(1, 1))
    opt = ctx.wrap_optimizer(torch.optim.SGD(model.parameters(), lr=0.1))
    plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(opt)
    with pytest.raises(ValueError, match="MANUAL_STEP"):
        ctx.wrap_lr_scheduler(plateau, LRScheduler.StepMode.STEP_EVERY_EPOCH)
    assert ctx.wrap_lr_scheduler(plateau, LRScheduler.StepMode.MANUAL_STEP) is plateau


# ---------------------------------------------------------------- mixed precision


class AmpTrial(ResumeTrial):
    def __init__(self, context) -> None:
        context.experimental.use_amp()
        super().__init__(context)
        self.inner_dtypes: set[torch.dtype] = set()
        self.model[0].register_forward_hook(lambda mod, inp, out: self.inner_dtypes.add(out.dtype))

    def train_batch(self, batch, epoch_idx, batch_idx):
        out = super().train_batch(batch, epoch_idx, batch_idx)
        assert self.model(batch[0]).dtype == torch.float32
        return out


def test_use_amp_runs_forward_in_bfloat16_on_cpu_and_trains(tmp_path):
    _, backend, trial = fit_local(
        AmpTrial, str(tmp_path), max_length=Batch(24), reporting_period=Batch(12)
    )
    assert trial.inner_dtypes == {torch.bfloat16}
    losses = [r.metrics["loss"] for r in backend.metrics("training")]
    assert losses[1] < losses[0]
    assert trial.context._scaler is None  # bfloat16 needs no loss scaling


def test_use_amp_must_come_before_wrap_model_and_excludes_wrap_scaler(tmp_path):
    ctx = make_context(tmp_path)
    ctx.wrap_model(nn.Linear(1, 1))
    with pytest.raises(RuntimeError, match="before context.wrap_model"):
        ctx.experimental.use_amp()
    ctx = make_context(tmp_path)
    ctx.wrap_scaler(torch.amp.GradScaler("cpu"))
    with pytest.raises(RuntimeError, match="not both"):
        ctx.experimental.use_amp()
    with pytest.raises(TypeError, match="GradScaler"):
        make_context(tmp_path).wrap_scaler(object())


class ScalerTrial(ResumeTrial):
    def __init__(self, context) -> None:
        super().__init__(context)
        self.scaler = context.wrap_scaler(
            torch.amp.GradScaler("cpu", init_scale=2.0, growth_interval=1)
        )

    def train_batch(self, batch, epoch_idx, batch_idx):
        x, y = batch
        loss = nn.functional.mse_loss(self.model(x), y)
        self.context.backward(self.scaler.scale(loss))
        self.context.step_optimizer(self.opt, scaler=self.scaler)
        return {"loss": loss, "scale": self.scaler.get_scale()}


def test_wrapped_scaler_is_updated_once_per_batch_and_checkpointed(tmp_path):
    storage = str(tmp_path / "ckpt")
    _, backend, trial = fit_local(
        ScalerTrial, storage, max_length=Batch(5), reporting_period=Batch(5)
    )
    # growth_interval=1: each update after a finite step doubles the scale.
    assert trial.scaler.get_scale() == 2.0 * 2**5
    scales = [b["scale"] for b in backend.metrics("training")[0].batch_metrics]
    assert scales == [2.0 * 2**i for i in range(5)]
    uuid = backend.checkpoints[-1].uuid
    state = torch.load(f"{storage}/{uuid}/state-dict.pth", weights_only=True)
    assert state["scaler_state_dict"]["scale"] == 64.0
    _, _, resumed = fit_local(
        ScalerTrial, storage, max_length=Batch(6), reporting_period=Batch(5), latest_checkpoint=uuid
    )
    assert resumed.scaler.get_scale() == 128.0
    with pytest.raises(ValueError, match="wrap_scaler"):
        resumed.context.step_optimizer(resumed.opt, scaler=torch.amp.GradScaler("cpu"))


# ---------------------------------------------------------------- reducers


class MeanAbsError(MetricReducer):
    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.total, self.count = 0.0, 0

    def update(self, errors: torch.Tensor) -> None:
        self.total += errors.abs().sum().item()
        self.count += errors.numel()

    def per_slot_reduce(self) -> tuple[float, int]:
        return self.total, self.count

    def cross_slot_reduce(self, per_slot: list[tuple[float, int]]) -> Any:
        return sum(t for t, _ in per_slot) / sum(c for _, c in per_slot)


class Both(MetricReducer):
    """An unnamed reducer: returns a dict of metrics."""

    def __init__(self) -> None:
        self.seen = 0

    def reset(self) -> None:
        self.seen = 0

    def per_slot_reduce(self) -> int:
        return self.seen

    def cross_slot_reduce(self, per_slot: list[int]) -> dict[str, int]:
        return {"seen_a": sum(per_slot), "seen_b": 2 * sum(per_slot)}


class ReducerTrial(ResumeTrial):
    def __init__(self, context) -> None:
        super().__init__(context)
        self.mae = context.wrap_reducer(MeanAbsError(), name="val_mae", for_training=False)
        self.biggest = context.wrap_reducer(max, name="max_batch", for_validation=False)
        self.both = context.wrap_reducer(Both())

    def train_batch(self, batch, epoch_idx, batch_idx):
        self.biggest.update(batch_idx)
        self.both.seen += 1
        return super().train_batch(batch, epoch_idx, batch_idx)

    def evaluate_batch(self, batch):
        x, y = batch
        self.mae.update(self.model(x) - y)
        self.both.seen += 1
        return super().evaluate_batch(batch)


def test_metric_and_function_reducers_are_reset_and_reported(tmp_path):
    _, backend, trial = fit_local(
        ReducerTrial, str(tmp_path), max_length=Batch(10), reporting_period=Batch(4)
    )
    training = backend.metrics("training")
    assert [r.metrics["max_batch"] for r in training] == [3, 7, 9]
    assert [r.metrics["seen_a"] for r in training] == [4, 4, 2]
    assert all("val_mae" not in r.metrics for r in training)
    (validation,) = backend.metrics("validation")
    x, y = regression_data(1, 40).tensors
    trial.model.eval()
    with torch.no_grad():
        expected = (trial.model(x) - y).abs().mean().item()
    assert validation.metrics["val_mae"] == pytest.approx(expected, rel=1e-5)
    assert (validation.metrics["seen_a"], validation.metrics["seen_b"]) == (3, 6)
    assert "max_batch" not in validation.metrics


def test_reducer_misuse_is_refused(tmp_path):
    ctx = make_context(tmp_path)
    reducer = ctx.wrap_reducer(MeanAbsError(), name="mae")
    with pytest.raises(ValueError, match="already wrapped"):
        ctx.wrap_reducer(reducer, name="other")
    with pytest.raises(ValueError, match="named 'mae'"):
        ctx.wrap_reducer(sum, name="mae")
    with pytest.raises(TypeError, match="MetricReducer or a function"):
        ctx.wrap_reducer(3, name="x")
    with pytest.raises(ValueError, match="training, validation or both"):
        ctx.wrap_reducer(sum, name="s", for_training=False, for_validation=False)

    class Named(ReducerTrial):
        def __init__(self, context) -> None:
            super().__init__(context)
            context.wrap_reducer(Both(), name="oops")

    with pytest.raises(TypeError, match="not a dict"):
        fit_local(Named, str(tmp_path), max_length=Batch(2), reporting_period=Batch(1))


# ---------------------------------------------------------------- TensorBoard


def test_tensorboard_path_and_writer(tmp_path):
    storage = tmp_path / "ckpt"
    with __import__("dauntless").pytorch.init(exp_conf=local_conf(str(storage))) as ctx:
        path = ctx.get_tensorboard_path()
        assert path == storage / "tensorboard" / "experiment" / "0" / "trial" / "0"
        assert path.is_dir()
        if importlib.util.find_spec("tensorboard") is None:
            with pytest.raises(ImportError, match="pip install tensorboard"):
                ctx.get_tensorboard_writer()
        else:
            assert ctx.get_tensorboard_writer() is ctx.get_tensorboard_writer()


# ---------------------------------------------------------------- position and data


class PositionTrial(ResumeTrial):
    def build_training_data_loader(self) -> DataLoader:  # 4 batches an epoch
        return DataLoader(regression_data(0, 32), batch_size=8, shuffle=True)

    def train_batch(self, batch, epoch_idx, batch_idx):
        c = self.context
        self.seen = getattr(self, "seen", [])
        self.seen.append(
            (
                c.current_train_batch(),
                c.current_train_epoch(),
                c.is_epoch_start(),
                c.is_epoch_end(),
                epoch_idx,
                batch_idx,
            )
        )
        return super().train_batch(batch, epoch_idx, batch_idx)


def test_position_getters_inside_train_batch(tmp_path):
    _, _, trial = fit_local(
        PositionTrial,
        str(tmp_path),
        max_length=Epoch(2),
        reporting_period=Batch(4),
        validation_period=Epoch(1),
    )
    assert trial.seen == [(b, b // 4, b % 4 == 0, b % 4 == 3, b // 4, b) for b in range(8)]
    ctx = trial.context
    assert (
        ctx.distributed.get_rank(),
        ctx.distributed.get_size(),
        ctx.distributed.get_local_rank(),
        ctx.distributed.get_num_agents(),
    ) == (0, 1, 0, 1)


class TorchLoaderTrial(ResumeTrial):
    def __init__(self, context) -> None:
        super().__init__(context)
        if context.get_hparams().get("disable"):
            context.experimental.disable_dataset_reproducibility_checks()

    def build_training_data_loader(self):
        return torch.utils.data.DataLoader(regression_data(0), batch_size=8)


def test_plain_torch_loader_needs_the_reproducibility_checks_disabled(tmp_path):
    with pytest.raises(ValueError, match="disable_dataset_reproducibility_checks"):
        fit_local(TorchLoaderTrial, str(tmp_path), max_length=Batch(2))
    conf = local_conf(str(tmp_path))
    conf["hyperparameters"]["disable"] = True
    result, backend, _ = fit_local(
        TorchLoaderTrial, "", conf, max_length=Batch(30), reporting_period=Batch(10)
    )
    # 12 batches an epoch, repeated by the harness.
    assert result.value == "completed" and backend.metrics("training")[-1].steps_completed == 30


class RawBatchTrial(ResumeTrial):
    def __init__(self, context) -> None:
        super().__init__(context)
        context.experimental.disable_auto_to_device()

    def build_training_data_loader(self) -> DataLoader:
        return DataLoader(
            regression_data(0),
            batch_size=8,
            collate_fn=lambda items: np.stack([x.numpy() for x, _ in items]),
        )

    def train_batch(self, batch, epoch_idx, batch_idx):
        assert isinstance(batch, np.ndarray)
        x = self.context.to_device(batch)
        loss = self.model(x).pow(2).mean()
        self.context.backward(loss)
        self.context.step_optimizer(self.opt)
        return loss


def test_disable_auto_to_device_leaves_batches_as_loaded(tmp_path):
    result, backend, _ = fit_local(
        RawBatchTrial, str(tmp_path), max_length=Batch(3), reporting_period=Batch(3)
    )
    assert set(backend.metrics("training")[0].metrics) == {"loss", "batches", "epochs"}


def test_misuse_errors_say_what_to_do(tmp_path):
    ctx = make_context(tmp_path)
    model = ctx.wrap_model(nn.Linear(1, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(ValueError, match="wrap_optimizer"):
        ctx.step_optimizer(opt)
    with pytest.raises(ValueError, match="wrap the scheduler's optimizer"):
        ctx.wrap_lr_scheduler(
            torch.optim.lr_scheduler.StepLR(opt, 1), LRScheduler.StepMode.STEP_EVERY_BATCH
        )
    with pytest.raises(ValueError, match="backward_passes_per_step"):
        ctx.wrap_optimizer(opt, backward_passes_per_step=0)
    with pytest.raises(ValueError, match="Horovod"):
        ctx.wrap_optimizer(opt, fp16_compression=True)
    with pytest.raises(ValueError, match="aggregation_frequency"):
        make_context(tmp_path, aggregation_frequency=0)
    two = make_context(tmp_path, distributed=DistributedContext(rank=0, size=2))
    conf = local_conf(str(tmp_path))
    conf["hyperparameters"]["global_batch_size"] = 1
    info = TrialInfo(
        trial_id=1, experiment_id=1, trial_seed=0, hparams={"global_batch_size": 1}, config=conf
    )
    with pytest.raises(ValueError, match="at least slots_per_trial"):
        PyTorchTrialContext(
            info, distributed=DistributedContext(rank=0, size=2)
        ).get_per_slot_batch_size()
    assert two.get_per_slot_batch_size() == 4
    with pytest.raises(RuntimeError, match="before the harness has built|epoch length"):
        ctx.current_train_epoch()
