"""PyTorchTrialContext: facts about the trial, wrapping, optimizer steps, LR schedules."""

from __future__ import annotations

from collections import namedtuple

import numpy as np
import pytest
import torch
from harness_toy_trial import toy_config, toy_info

from dauntless.core import DistributedContext
from dauntless.pytorch import LRScheduler, PyTorchTrialContext
from dauntless.pytorch import _context as _context_module


@pytest.fixture
def context(tmp_path):
    config = toy_config(str(tmp_path), data={"path": "/data"})
    return PyTorchTrialContext(toy_info(config, steps_completed=0))


def test_trial_facts(context):
    assert context.get_hparam("lr") == 0.01
    assert context.get_hparams() == {"global_batch_size": 8, "lr": 0.01}
    with pytest.raises(
        KeyError, match=r"'momentum' is not defined; this trial has \['global_batch_size', 'lr'\]"
    ):
        context.get_hparam("momentum")
    assert context.get_data_config() == {"path": "/data"}
    assert context.get_experiment_config()["name"] == "toy"
    assert (context.get_experiment_id(), context.get_trial_id()) == (2, 3)
    assert context.get_trial_seed() == 1234
    assert context.get_per_slot_batch_size() == context.get_global_batch_size() == 8
    assert context.device == torch.device("cpu")
    assert context.distributed.get_rank() == 0 and context.distributed.get_size() == 1
    assert context.get_initial_batch() == 0 and context.current_train_batch() == 0
    with pytest.raises(RuntimeError, match="epoch length"):
        context.current_train_epoch()
    context._epoch_len, context._current_batch = 8, 17
    assert context.current_train_epoch() == 2
    assert not context.is_epoch_start() and not context.is_epoch_end()
    context._current_batch = 23
    assert context.is_epoch_end()


def test_per_slot_batch_size_divides_the_global_one(tmp_path):
    config = toy_config(str(tmp_path))
    ctx = PyTorchTrialContext(toy_info(config), distributed=DistributedContext(rank=1, size=2))
    assert (ctx.get_per_slot_batch_size(), ctx.get_global_batch_size()) == (4, 8)
    config["hyperparameters"]["global_batch_size"] = 1
    ctx = PyTorchTrialContext(toy_info(config), distributed=DistributedContext(rank=1, size=2))
    with pytest.raises(ValueError, match="global_batch_size .1. is smaller than the number of"):
        ctx.get_per_slot_batch_size()
    config["hyperparameters"]["global_batch_size"] = 9
    ctx = PyTorchTrialContext(toy_info(config), distributed=DistributedContext(rank=0, size=2))
    with pytest.raises(ValueError, match="global_batch_size .9. is not divisible by the number"):
        ctx.get_per_slot_batch_size()


def test_wrapping_and_optimizer_steps(context):
    model = context.wrap_model(torch.nn.Linear(2, 1, bias=False))
    with pytest.raises(ValueError, match="already wrapped"):
        context.wrap_model(model)
    with pytest.raises(TypeError, match="torch.nn.Module"):
        context.wrap_model(object())
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    with pytest.raises(ValueError, match="wrapped with context.wrap_optimizer"):
        context.step_optimizer(opt)
    context.wrap_optimizer(opt)
    with torch.no_grad():
        model.weight.fill_(1.0)
    clipped = []

    def clip(params):
        params = list(params)
        clipped.extend(params)
        torch.nn.utils.clip_grad_norm_(params, max_norm=0.1)

    loss = model(torch.tensor([[3.0, 4.0]])).sum()  # gradient (3, 4), norm 5
    context.backward(loss)
    context.step_optimizer(opt, clip_grads=clip)
    assert clipped == [model.weight]
    # Clipped to norm 0.1: (0.06, 0.08), times lr 0.5.
    assert torch.allclose(model.weight, torch.tensor([[1 - 0.03, 1 - 0.04]]))
    assert model.weight.grad is None or not model.weight.grad.any()
    with pytest.raises(TypeError, match="torch.Tensor"):
        context.backward(1.0)


def _stepped(context, optimizer_cls=torch.optim.SGD):
    """A wrapped model and optimizer with one gradient computed."""
    model = context.wrap_model(torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 1)))
    opt = context.wrap_optimizer(optimizer_cls(model.parameters(), lr=0.1))
    context.backward(model(torch.ones(2, 3)).sum())
    assert all(p.grad is not None for p in model.parameters())
    return model, opt


def test_step_optimizer_drops_gradients_without_calling_zero_grad(context, monkeypatch):
    calls = []
    torch_zero_grad = torch.optim.Optimizer.zero_grad

    def counting_zero_grad(self, set_to_none=True):
        calls.append(self)
        torch_zero_grad(self, set_to_none)

    # torch's zero_grad, counted: the harness's own loop replaces it (same effect).
    monkeypatch.setattr(torch.optim.Optimizer, "zero_grad", counting_zero_grad)
    monkeypatch.setattr(_context_module, "_TORCH_ZERO_GRAD", counting_zero_grad)
    model, opt = _stepped(context)
    context.step_optimizer(opt)
    assert calls == []
    assert all(p.grad is None for p in model.parameters())
    # auto_zero_grads=False keeps them.
    context.backward(model(torch.ones(2, 3)).sum())
    context.step_optimizer(opt, auto_zero_grads=False)
    assert all(p.grad is not None for p in model.parameters())


def test_step_optimizer_calls_a_replaced_zero_grad(context):
    class Zeroing(torch.optim.SGD):
        def zero_grad(self, set_to_none=True):  # zeros instead of None
            super().zero_grad(set_to_none=False)

    model, opt = _stepped(context, Zeroing)
    context.step_optimizer(opt)
    assert all(p.grad is not None and not p.grad.any() for p in model.parameters())

    calls = []
    context2 = PyTorchTrialContext(context._trial)
    model2, opt2 = _stepped(context2)
    opt2.zero_grad = lambda set_to_none=True: calls.append(set_to_none)  # on the instance
    context2.step_optimizer(opt2)
    assert calls == [True]
    assert all(p.grad is not None for p in model2.parameters())


def test_step_optimizer_zero_grad_shows_in_a_profile(context):
    model, opt = _stepped(context)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        context.step_optimizer(opt)
    names = {event.name for event in prof.events()}
    assert "Optimizer.zero_grad#SGD.zero_grad" in names
    assert all(p.grad is None for p in model.parameters())


def test_lr_scheduler_step_modes(context):
    model = context.wrap_model(torch.nn.Linear(1, 1))
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    with pytest.raises(ValueError, match="wrap_optimizer"):
        context.wrap_lr_scheduler(
            torch.optim.lr_scheduler.StepLR(opt, 1), LRScheduler.StepMode.STEP_EVERY_BATCH
        )
    context.wrap_optimizer(opt)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    opt.step()  # torch warns about a scheduler stepped before its optimizer
    assert context.wrap_lr_scheduler(sched, LRScheduler.StepMode.STEP_EVERY_BATCH, 2) is sched
    (wrapped,) = context.lr_schedulers
    for batch in range(4):
        wrapped.after_batch(batch, epoch_len=10)
    assert sched.last_epoch == 2  # after batches 1 and 3
    epoch = LRScheduler(sched, LRScheduler.StepMode.STEP_EVERY_EPOCH)
    for batch in range(9):
        epoch.after_batch(batch, epoch_len=3)
    assert sched.last_epoch == 5  # after batches 2, 5, 8
    with pytest.raises(TypeError, match="StepMode"):
        LRScheduler(sched, "every batch")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="frequency"):
        LRScheduler(sched, LRScheduler.StepMode.MANUAL_STEP, 0)


def test_to_device_moves_nested_batches(context):
    Pair = namedtuple("Pair", "a b")
    out = context.to_device(
        {
            "x": np.arange(3),
            "y": [torch.ones(1), (np.zeros(2, dtype=np.float32), "tag")],
            "p": Pair(np.ones(1), 5),
        }
    )
    assert isinstance(out["x"], torch.Tensor) and out["x"].tolist() == [0, 1, 2]
    assert isinstance(out["y"][1], tuple) and isinstance(out["y"][1][0], torch.Tensor)
    assert out["y"][1][1] == "tag"
    assert isinstance(out["p"], Pair) and isinstance(out["p"].a, torch.Tensor) and out["p"].b == 5
    strings = np.array(["a"])
    assert context.to_device(strings) is strings


def test_to_device_warns_once_per_type_as_determined(context, caplog):
    """Determined's warning for an item that cannot be moved: once per type for the
    trial (issue 33); the module-level ``to_device`` dedups through ``warned_types``."""
    from dauntless.pytorch._compat_helpers import to_device

    with caplog.at_level("WARNING", logger="dauntless.pytorch"):
        context.to_device({"s": "a", "n": np.array(["a"]), "t": torch.ones(1), "i": 3})
        context.to_device(["b", 4])
    texts = [r.getMessage() for r in caplog.records]
    assert texts.count("Was not able to move data item of type 'str' to device.") == 1
    assert texts.count("Was not able to move data item of type 'ndarray' to device.") == 1
    assert texts.count("Was not able to move data item of type 'int' to device.") == 1
    caplog.clear()
    warned: set = set()
    with caplog.at_level("WARNING", logger="dauntless.pytorch"):
        to_device(["x"], "cpu", warned)
        to_device(["y"], "cpu", warned)
        to_device(["z"], "cpu")  # a new set each call when None
    assert len(caplog.records) == 2 and warned == {str}


def test_stop_request_flag(context):
    assert context.get_stop_requested() is False
    context.set_stop_requested(True)
    assert context.get_stop_requested() is True
    with pytest.raises(TypeError):
        context.set_stop_requested(1)  # type: ignore[arg-type]
