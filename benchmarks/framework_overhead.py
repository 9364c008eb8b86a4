"""Samples per second of each framework integration vs the same framework's own loop.

For each framework (Lightning, Hugging Face Transformers, Keras 3 on torch, DeepSpeed on
its CPU accelerator), the same
model, data, batch size and number of batches are trained in alternating rounds, in one
process:

* baseline: the framework's own loop (``Trainer.fit`` / ``Trainer.train`` /
  ``model.fit``) with no Dauntless code;
* integration: the same call with the integration's callback (``DeterminedCallback`` /
  ``DetCallback``) over a Core API context: training metrics every 10 batches, the
  preemption check every batch, and one checkpoint into a checkpoint directory at the
  end of training (Keras: at the end of each epoch, its default).

The timed span is from the framework's train-begin event to its train-end event (a
timing callback, first in the list, in both), so import and set-up are not timed; the
integration's final checkpoint is inside the span. The Core API context reports to the
in-memory backend (``core.LocalBackend``): what is measured is the integration's own cost
in the training loop (on a cluster the metrics go to the master through the Core API's
background sender, whose cost ``harness_overhead.py`` measures).

Baseline and integration rounds are interleaved (A B, then B A, ...), and each round's
span is timed on two clocks: wall time and the process's CPU time (all its threads, the
integration's background threads included). CPU time per sample is what the integration
adds to the loop's own work and does not count time spent waiting for a core; it still
moves with the machine's load (torch's threads spin while they wait, caches are shared),
so at load 20 on 2 cores its interval was no narrower than wall time's (0.3-1.1 wide).

Printed per framework and clock (wall, CPU): samples/s of each side (median over rounds),
the ratio integration/baseline per round (baseline seconds / integration seconds), its
median and a 95% bootstrap interval of the median ratio, and whether that interval
decides the target (ratio >= 0.98: "met" when the interval lies above it, "missed" when
below, else "undecided"); then the CPU seconds of the whole run beside its wall time.

Usage::

    python benchmarks/framework_overhead.py [--rounds 11] [--batches 200] [--only NAME]
        [--threads 1]

Both sides train with the same number of torch threads (``--threads``, default 1, as
``torchrun`` sets per rank): with two threads on a shared 2-core machine one side's
threads spin while waiting for a core, and single rounds swung 0.2-3.9x at load 3.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

os.environ.setdefault("KERAS_BACKEND", "torch")

import numpy as np  # noqa: E402
import torch  # noqa: E402

from dauntless import core  # noqa: E402
from dauntless.storage import DirectoryStorageManager  # noqa: E402

BATCH = 32
FEATURES, CLASSES, HIDDEN = 64, 10, 128


def _data(n: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    x = rng.random((n, FEATURES), dtype=np.float32)
    y = rng.integers(0, CLASSES, n)
    return x, y


def _context(store: str) -> core.Context:
    trial = core.TrialInfo(
        trial_id=1,
        experiment_id=1,
        trial_seed=0,
        hparams={},
        config={"searcher": {"name": "single", "metric": "val_loss"}},
    )
    return core.Context(
        trial, backend=core.LocalBackend([1]), storage=DirectoryStorageManager(store)
    )


# ---------------------------------------------------------------------- Lightning


def _clocks() -> tuple[float, float]:
    """``(wall, CPU)`` clocks now, in seconds: ``time.perf_counter`` and the process's CPU
    time over all its threads (``time.process_time``; the integrations' background
    threads included)."""
    return time.perf_counter(), time.process_time()


def _since(start: tuple[float, float]) -> tuple[float, float]:
    """``(wall, CPU)`` seconds elapsed since ``start`` (from :func:`_clocks`)."""
    wall, cpu = _clocks()
    return wall - start[0], cpu - start[1]


Seconds = tuple[float, float]
"""``(wall, CPU)`` seconds of one round's timed span."""


def lightning_round(batches: int, integrated: bool, store: str) -> Seconds:
    """``(wall, CPU)`` seconds of one ``fit`` of ``batches`` batches."""
    import lightning.pytorch as pl

    from dauntless.integrations.lightning import DeterminedCallback

    class Module(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Sequential(
                torch.nn.Linear(FEATURES, HIDDEN), torch.nn.ReLU(), torch.nn.Linear(HIDDEN, CLASSES)
            )

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            x, y = batch
            return torch.nn.functional.cross_entropy(self.net(x), y)

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.Adam(self.parameters(), 1e-3)

    class Timer(pl.Callback):
        def on_train_start(self, trainer: Any, module: Any) -> None:
            self.t0 = _clocks()

        def on_train_end(self, trainer: Any, module: Any) -> None:
            self.seconds = _since(self.t0)

    x, y = _data(batches * BATCH)
    loader = torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(torch.from_numpy(x), torch.from_numpy(y)), batch_size=BATCH
    )
    timer = Timer()
    callbacks: list[Any] = [timer]
    ctx = _context(store) if integrated else None
    if ctx is not None:
        callbacks.append(DeterminedCallback(ctx, continue_id=1))
    torch.manual_seed(0)
    trainer = pl.Trainer(
        accelerator="cpu",
        max_steps=batches,
        callbacks=callbacks,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(Module(), loader)
    if ctx is not None:
        ctx.close()
    return timer.seconds


# ---------------------------------------------------------------------- Transformers


def transformers_round(batches: int, integrated: bool, store: str) -> Seconds:
    import transformers

    from dauntless.integrations.transformers import DetCallback

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Sequential(
                torch.nn.Linear(FEATURES, HIDDEN), torch.nn.ReLU(), torch.nn.Linear(HIDDEN, CLASSES)
            )

        def forward(self, x: torch.Tensor, labels: torch.Tensor) -> dict[str, torch.Tensor]:
            return {"loss": torch.nn.functional.cross_entropy(self.net(x), labels)}

    class Rows(torch.utils.data.Dataset):
        def __init__(self, n: int) -> None:
            x, y = _data(n)
            self.x, self.y = torch.from_numpy(x), torch.from_numpy(y)

        def __len__(self) -> int:
            return len(self.y)

        def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
            return {"x": self.x[i], "labels": self.y[i]}

    class Timer(transformers.TrainerCallback):
        def on_train_begin(self, *args: Any, **kwargs: Any) -> None:
            self.t0 = _clocks()

        def on_train_end(self, *args: Any, **kwargs: Any) -> None:
            self.seconds = _since(self.t0)

    with tempfile.TemporaryDirectory() as out:
        args = transformers.TrainingArguments(
            output_dir=out,
            max_steps=batches,
            per_device_train_batch_size=BATCH,
            logging_steps=10,
            save_strategy="steps" if integrated else "no",
            save_steps=batches,
            report_to="none",
            use_cpu=True,
            disable_tqdm=True,
        )
        timer = Timer()
        callbacks: list[Any] = [timer]
        ctx = _context(store) if integrated else None
        if ctx is not None:
            callbacks.append(DetCallback(ctx, args))
        torch.manual_seed(0)
        trainer = transformers.Trainer(
            model=Net(), args=args, train_dataset=Rows(batches * BATCH), callbacks=callbacks
        )
        trainer.train()
        if ctx is not None:
            ctx.close()
    return timer.seconds


# ---------------------------------------------------------------------- Keras


def keras_round(batches: int, integrated: bool, store: str) -> Seconds:
    import keras

    from dauntless.integrations.keras import DeterminedCallback

    class Timer(keras.callbacks.Callback):
        def on_train_begin(self, logs: Any = None) -> None:
            self.t0 = _clocks()

        def on_train_end(self, logs: Any = None) -> None:
            self.seconds = _since(self.t0)

    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [
            keras.Input((FEATURES,)),
            keras.layers.Dense(HIDDEN, activation="relu"),
            keras.layers.Dense(CLASSES),
        ]
    )
    model.compile(
        optimizer=keras.optimizers.Adam(1e-3),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    x, y = _data(batches * BATCH)
    timer = Timer()
    callbacks: list[Any] = [timer]
    ctx = _context(store) if integrated else None
    if ctx is not None:
        callbacks.append(DeterminedCallback(ctx, None, 1, train_metrics_report_period=10))
    model.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, callbacks=callbacks, verbose=0)
    if ctx is not None:
        ctx.close()
    return timer.seconds


# ---------------------------------------------------------------------- DeepSpeed


def deepspeed_round(batches: int, integrated: bool, store: str) -> Seconds:
    """DeepSpeed (ZeRO stage 1, CPU accelerator): the engine's own loop (forward,
    ``backward``, ``step`` per batch) against a ``DeepSpeedTrial`` doing the same under
    ``dauntless.pytorch.deepspeed.Trainer`` (training metrics every 10 batches, one
    validation batch and one checkpoint at the end). The span starts at the first batch
    and ends when the loop (``fit``) returns."""
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    import deepspeed

    from dauntless.pytorch import Batch, DataLoader
    from dauntless.pytorch.deepspeed import DeepSpeedTrial, Trainer, init

    x, y = _data(batches * BATCH)
    data = torch.utils.data.TensorDataset(torch.from_numpy(x), torch.from_numpy(y))
    config = {
        "train_micro_batch_size_per_gpu": BATCH,
        "zero_optimization": {"stage": 1},
        "zero_allow_untested_optimizer": True,
        "steps_per_print": 10**9,
    }

    def engine() -> Any:
        torch.manual_seed(0)
        net = torch.nn.Sequential(
            torch.nn.Linear(FEATURES, HIDDEN), torch.nn.ReLU(), torch.nn.Linear(HIDDEN, CLASSES)
        )
        opt = torch.optim.Adam(net.parameters(), 1e-3)
        return deepspeed.initialize(model=net, optimizer=opt, config=config)[0]

    started: list[tuple[float, float]] = []

    def step(eng: Any, batch: Any) -> torch.Tensor:
        if not started:
            started.append(_clocks())
        loss = torch.nn.functional.cross_entropy(eng(batch[0]), batch[1])
        eng.backward(loss)
        eng.step()
        return loss

    if not integrated:
        with init(hparams={"global_batch_size": BATCH}, exp_conf=_ds_conf(store)):
            eng = engine()  # deepspeed.comm is up: the same set-up as the integration
            for batch in torch.utils.data.DataLoader(data, batch_size=BATCH):
                step(eng, batch)
            return _since(started[0])

    class Trial(DeepSpeedTrial):
        def __init__(self, context: Any) -> None:
            self.context = context
            self.engine = context.wrap_model_engine(engine())

        def build_training_data_loader(self) -> DataLoader:
            return DataLoader(data, batch_size=BATCH)

        def build_validation_data_loader(self) -> DataLoader:
            return DataLoader(torch.utils.data.Subset(data, range(BATCH)), batch_size=BATCH)

        def train_batch(self, it: Any, epoch_idx: int, batch_idx: int) -> dict[str, Any]:
            return {"loss": step(self.engine, next(it))}

        def evaluate_batch(self, it: Any, batch_idx: int) -> dict[str, Any]:
            x, y = next(it)
            return {"val_loss": torch.nn.functional.cross_entropy(self.engine(x), y)}

    with init(hparams={"global_batch_size": BATCH}, exp_conf=_ds_conf(store)) as context:
        Trainer(Trial(context), context).fit(
            max_length=Batch(batches), reporting_period=Batch(10), checkpoint_policy="none"
        )
        return _since(started[0])


def _ds_conf(store: str) -> dict[str, Any]:
    return {
        "checkpoint_storage": {"type": "shared_fs", "host_path": store},
        "reproducibility": {"experiment_seed": 0},
        "searcher": {"name": "single", "metric": "val_loss", "max_length": {"batches": 1}},
        "hyperparameters": {"global_batch_size": BATCH},
    }


FRAMEWORKS: dict[str, Callable[[int, bool, str], Seconds]] = {
    "lightning": lightning_round,
    "transformers": transformers_round,
    "keras": keras_round,
    "deepspeed": deepspeed_round,
}


def bootstrap_median_ci(values: list[float], n: int = 2000, seed: int = 0) -> tuple[float, float]:
    """A 95% percentile-bootstrap interval of the median of ``values`` (Efron & Tibshirani,
    *An Introduction to the Bootstrap*, 1993, ch. 13)."""
    rng = random.Random(seed)
    meds = sorted(statistics.median(rng.choices(values, k=len(values))) for _ in range(n))
    return meds[int(0.025 * n)], meds[int(0.975 * n) - 1]


TARGET = 0.98
"""The issue's target: integration samples/s over baseline samples/s, at least this."""


def _verdict(lo: float, hi: float) -> str:
    """Whether the 95% interval ``[lo, hi]`` of a ratio decides the target."""
    if lo >= TARGET:
        return "met"
    if hi < TARGET:
        return "missed"
    return "undecided"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=11)
    parser.add_argument("--batches", type=int, default=200)
    parser.add_argument("--only", choices=sorted(FRAMEWORKS))
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch intra-op threads for both sides (default 1, as torchrun sets per rank)",
    )
    opts = parser.parse_args()
    torch.set_num_threads(opts.threads)
    names = [opts.only] if opts.only else list(FRAMEWORKS)
    wall0, cpu0 = time.perf_counter(), time.process_time()
    samples = opts.batches * BATCH
    print(
        f"load average {os.getloadavg()}; {opts.rounds} rounds of {opts.batches} batches of "
        f"{BATCH}; {opts.threads} torch thread(s); target ratio >= {TARGET}"
    )
    for name in names:
        run = FRAMEWORKS[name]
        pairs: list[tuple[Seconds, Seconds]] = []  # (baseline, integration) per round
        try:
            with tempfile.TemporaryDirectory() as store:
                run(10, True, store)  # warm-up: imports, first-call costs
                run(10, False, store)
                for r in range(opts.rounds):
                    # Interleaved A B / B A: a drift in the machine's load over a pair
                    # falls on each side equally often.
                    order = (False, True) if r % 2 == 0 else (True, False)
                    got = {integrated: run(opts.batches, integrated, store) for integrated in order}
                    pairs.append((got[False], got[True]))
        except ImportError as exc:
            print(f"{name}: skipped ({exc})")
            continue
        # Ratio of samples per second = baseline seconds / integration seconds, per round.
        for k, clock in ((0, "wall"), (1, "CPU")):
            ratios = [base[k] / integ[k] for base, integ in pairs]
            lo, hi = bootstrap_median_ci(ratios)
            base_rate = statistics.median(samples / base[k] for base, _ in pairs)
            integ_rate = statistics.median(samples / integ[k] for _, integ in pairs)
            print(
                f"{name:13s} {clock:4s} baseline {base_rate:9.0f} samples/s  integration "
                f"{integ_rate:9.0f} samples/s  ratio median {statistics.median(ratios):.3f} "
                f"(95% CI {lo:.3f}-{hi:.3f}, width {hi - lo:.3f}; target {_verdict(lo, hi)}; "
                f"rounds {', '.join(f'{r:.3f}' for r in ratios)})"
            )
    print(
        f"total: {time.perf_counter() - wall0:.1f} s wall, {time.process_time() - cpu0:.1f} s CPU; "
        f"load average {os.getloadavg()}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
