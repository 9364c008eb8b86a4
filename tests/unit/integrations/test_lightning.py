"""``dauntless.integrations.lightning`` in process over the in-memory backend: preemption
mid-epoch and an exact resume (with torchdata's ``StatefulDataLoader``), warm start from
another trial, argument checks, and Determined's ``DetLogger``."""

from __future__ import annotations

import pytest
import torch

pl = pytest.importorskip("lightning.pytorch", reason="the lightning extra is not installed")
stateful = pytest.importorskip("torchdata.stateful_dataloader", reason="torchdata is not installed")

from dauntless.integrations.lightning import SKIPPED_HOOKS, DeterminedCallback, DetLogger  # noqa: E402

pytestmark = [
    pytest.mark.filterwarnings("ignore::UserWarning"),  # Lightning's set-up advice
    # Lightning's data fetcher still uses torch's deprecated pytree LeafSpec.
    pytest.mark.filterwarnings("ignore:.*LeafSpec.* is deprecated:FutureWarning"),
]


class Module(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Linear(4, 2)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.cross_entropy(self.net(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", torch.nn.functional.cross_entropy(self.net(x), y))

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), 0.05)


def _loaders():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 4, generator=g)
    data = torch.utils.data.TensorDataset(x, (x[:, 0] > 0).long())
    return (
        stateful.StatefulDataLoader(data, batch_size=8, shuffle=True),
        torch.utils.data.DataLoader(data, batch_size=32),
    )


def _fit(ctx, steps: int, checkpoint: str | None = None, continue_id: int = 1, **kw):
    pl.seed_everything(0, verbose=False)
    model = Module()
    cb = DeterminedCallback(ctx, checkpoint=checkpoint, continue_id=continue_id, **kw)
    trainer = pl.Trainer(
        accelerator="cpu",
        max_steps=steps,
        val_check_interval=10,
        check_val_every_n_epoch=None,
        callbacks=[cb],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
    )
    train, val = _loaders()
    trainer.fit(model, train, val, ckpt_path=cb.ckpt_path)
    return model


def test_preempted_mid_epoch_resumes_exactly(make_context):
    ctx, backend = make_context()
    full = _fit(ctx, 20, train_metrics_report_period=5)
    assert [r.steps_completed for r in backend.metrics("validation")] == [10, 20]
    assert "val_loss" in backend.metrics("validation")[0].metrics
    assert [r.steps_completed for r in backend.metrics("training")] == [5, 10, 15, 20]
    assert [c.steps_completed for c in backend.checkpoints] == [10, 20]

    ctx2, backend2 = make_context()
    backend2.request_preemption()
    _fit(ctx2, 20, preemption_check_period=3)  # batch 3 of an 8-batch epoch
    assert [c.steps_completed for c in backend2.checkpoints] == [3]

    ctx3, backend3 = make_context()
    resumed = _fit(ctx3, 20, checkpoint=backend2.checkpoints[-1].uuid)
    assert [c.steps_completed for c in backend3.checkpoints] == [10, 20]
    for a, b in zip(full.state_dict().values(), resumed.state_dict().values(), strict=True):
        assert torch.equal(a, b)


def test_another_continue_id_warm_starts_the_weights(make_context):
    ctx, backend = make_context()
    _fit(ctx, 10)
    ctx2, backend2 = make_context()
    _fit(ctx2, 10, checkpoint=backend.checkpoints[-1].uuid, continue_id=2)
    assert [c.steps_completed for c in backend2.checkpoints] == [10]  # from batch 0 again


def test_bad_arguments_are_refused(make_context):
    ctx, _ = make_context()
    with pytest.raises(ValueError, match="train_metrics_report_period"):
        DeterminedCallback(ctx, train_metrics_report_period=0)
    with pytest.raises(TypeError, match="core_context"):
        DeterminedCallback(object())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="unmanaged"):
        DetLogger(defaults={"name": "x"})


def test_det_logger_reports_training_metrics(make_context):
    ctx, backend = make_context()
    pl.seed_everything(0, verbose=False)
    trainer = pl.Trainer(
        accelerator="cpu",
        max_steps=6,
        logger=DetLogger(ctx),
        log_every_n_steps=2,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(Module(), _loaders()[0])
    reports = backend.metrics("training")
    assert reports and all("train_loss" in r.metrics for r in reports)


class _Recording(Module):
    """The test module, remembering each training step's loss."""

    def __init__(self) -> None:
        super().__init__()
        self.losses: list[float] = []

    def training_step(self, batch, batch_idx):
        loss = super().training_step(batch, batch_idx)
        self.losses.append(loss.item())
        return loss


class _BackwardCounting(DeterminedCallback):
    """A subclass that uses one of the hooks the callback itself skips."""

    backward_calls = 0

    def on_before_backward(self, trainer, pl_module, loss):
        self.backward_calls += 1


def test_unused_batch_hooks_are_skipped_and_the_loss_is_the_mean(make_context, tmp_path):
    ctx, backend = make_context()
    pl.seed_everything(0, verbose=False)
    model = _Recording()
    cb = _BackwardCounting(ctx, train_metrics_report_period=4)
    profiler = pl.profilers.SimpleProfiler()
    trainer = pl.Trainer(
        accelerator="cpu",
        max_steps=8,
        callbacks=[cb],
        profiler=profiler,
        default_root_dir=tmp_path,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(model, _loaders()[0])
    called = {
        name.split(".")[-1] for name in profiler.recorded_durations if "_BackwardCounting" in name
    }
    # Lightning dispatched the hooks the callback uses (and the subclass's override) ...
    assert {"on_train_batch_end", "on_before_backward", "on_train_end"} <= called
    assert cb.backward_calls == 8
    # ... and none of the per-batch hooks it leaves unused.
    assert not called & (set(SKIPPED_HOOKS) - {"on_before_backward"})
    reports = backend.metrics("training")
    assert [r.steps_completed for r in reports] == [4, 8]
    for report, losses in zip(reports, (model.losses[:4], model.losses[4:]), strict=True):
        assert report.metrics["loss"] == pytest.approx(sum(losses) / 4, rel=1e-6)
