"""One rank of the DeepSpeed restore-onto-another-slot-count test (run by
test_deepspeed_universal.py; not a test module).

:func:`run` trains :class:`AdamTrial` (a DeepSpeedTrial with Adam under ZeRO) through the
Trainer API in local mode, over a gloo group of ``size`` ranks on 127.0.0.1 (alone with
``size`` 1), and writes what the rank saw to ``<out>/<label>-rank<r>.pt``: the full
(gathered) fp32 weights and Adam state of every parameter when training starts after the
restore (``first``) and when it ends (``last``), the batches it trained and the log lines
of the universal conversion.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

os.environ.setdefault("DS_ACCELERATOR", "cpu")

import deepspeed  # noqa: E402
from deepspeed.utils import safe_get_full_fp32_param, safe_get_full_optimizer_state  # noqa: E402

from dauntless.core import DistributedContext  # noqa: E402
from dauntless.pytorch import Batch, DataLoader  # noqa: E402
from dauntless.pytorch.deepspeed import (  # noqa: E402
    DeepSpeedTrial,
    DeepSpeedTrialContext,
    Trainer,
    init,
)

MICRO_BATCH = 4


def full_state(engine: Any) -> dict[str, tuple[torch.Tensor, ...]]:
    """Every parameter's full fp32 value, Adam ``exp_avg`` and ``exp_avg_sq`` (gathered
    from the ZeRO partitions: a collective, every rank calls it)."""
    return {
        name: (
            safe_get_full_fp32_param(p).clone(),
            safe_get_full_optimizer_state(p, "exp_avg").clone(),
            safe_get_full_optimizer_state(p, "exp_avg_sq").clone(),
        )
        for name, p in engine.module.named_parameters()
    }


class AdamTrial(DeepSpeedTrial):
    """A small classifier of synthetic data trained by a DeepSpeed engine with Adam."""

    def __init__(self, context: DeepSpeedTrialContext) -> None:
        self.context = context
        torch.manual_seed(0)
        g = torch.Generator().manual_seed(0)
        x = torch.randn(128, 6, generator=g)
        self.data = torch.utils.data.TensorDataset(x, (x[:, 0] + x[:, 1] > 0).long())
        model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
        config = {
            "train_micro_batch_size_per_gpu": MICRO_BATCH,
            "gradient_accumulation_steps": 1,
            "zero_optimization": {"stage": int(context.get_hparam("zero_stage"))},
            "zero_allow_untested_optimizer": True,
            "steps_per_print": 10**6,
        }
        optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
        engine, _, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, config=config)
        self.engine = context.wrap_model_engine(engine)
        self.calls: list[int] = []
        # Recorded before the first step of a restored run (a fresh one has no Adam state).
        self.first: dict[str, tuple[torch.Tensor, ...]] | None = None
        self.record_first = False

    def build_training_data_loader(self) -> DataLoader:
        return DataLoader(self.data, batch_size=MICRO_BATCH, shuffle=True)

    def build_validation_data_loader(self) -> DataLoader:
        return DataLoader(self.data, batch_size=32)

    def train_batch(
        self, dataloader_iter: Iterator[Any] | None, epoch_idx: int, batch_idx: int
    ) -> dict[str, Any]:
        assert dataloader_iter is not None
        if self.record_first and self.first is None:
            self.first = full_state(self.engine)
        self.calls.append(batch_idx)
        x, y = self.context.to_device(next(dataloader_iter))
        loss = torch.nn.functional.cross_entropy(self.engine(x), y)
        self.engine.backward(loss)
        self.engine.step()
        return {"loss": loss}

    def evaluate_batch(
        self, dataloader_iter: Iterator[Any] | None, batch_idx: int
    ) -> dict[str, Any]:
        assert dataloader_iter is not None
        x, y = self.context.to_device(next(dataloader_iter))
        return {"validation_loss": torch.nn.functional.cross_entropy(self.engine(x), y)}


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def run(rank: int, size: int, port: int, out: str, options: dict[str, Any]) -> None:
    """Train rank ``rank`` of ``size``; ``options``: ``label`` (file name), ``batches``
    (train up to this many), ``latest`` (checkpoint uuid to restore, or None),
    ``zero_stage``, ``storage`` (the checkpoint directory), ``tmpdir`` (TMPDIR)."""
    torch.set_num_threads(1)
    os.environ["TMPDIR"] = options["tmpdir"]
    import tempfile

    tempfile.tempdir = None  # read TMPDIR again
    lines = _Lines()
    logging.getLogger("dauntless.pytorch.deepspeed").addHandler(lines)
    logging.getLogger("dauntless.pytorch.deepspeed").setLevel(logging.INFO)
    if size > 1:
        os.environ.update({"LOCAL_RANK": str(rank), "LOCAL_WORLD_SIZE": str(size)})
        dist.init_process_group(
            "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=size
        )
        distributed: DistributedContext | None = DistributedContext.from_torch_distributed()
    else:
        distributed = None
    conf = {
        "checkpoint_storage": {"type": "shared_fs", "host_path": options["storage"]},
        "reproducibility": {"experiment_seed": 3},
        "searcher": {"name": "single", "metric": "validation_loss", "max_length": {"batches": 1}},
    }
    hparams = {"global_batch_size": MICRO_BATCH * size, "zero_stage": options["zero_stage"]}
    try:
        with init(hparams=hparams, exp_conf=conf, distributed=distributed) as ctx:
            trial = AdamTrial(ctx)
            trial.record_first = options.get("latest") is not None
            error = None
            try:
                Trainer(trial, ctx).fit(
                    max_length=Batch(options["batches"]),
                    reporting_period=Batch(2),
                    latest_checkpoint=options.get("latest"),
                    checkpoint_policy="none",
                )
            except RuntimeError as exc:
                error = str(exc)
            backend: Any = ctx._core.backend if ctx._core is not None else None
            seen = {
                "error": error,
                "calls": trial.calls,
                "first": trial.first,
                "last": None if error else full_state(trial.engine),
                "global_steps": trial.engine.global_steps,
                "checkpoints": [c.uuid for c in backend.checkpoints],
                "log": lines.lines,
            }
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    torch.save(seen, Path(out) / f"{options['label']}-rank{rank}.pt")
