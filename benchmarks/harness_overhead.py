"""Training throughput through the PyTorchTrial harness vs a hand-written torch loop.

Two models, each trained the same number of batches both ways, in turns, in one
process:

* ``digits``: the digits example (``examples/digits``: MLP 64-128-10, batches of 32);
* ``mlp``: a larger MLP (512-1024-1024-10, batches of 128) on synthetic data.

The harness side runs on the cluster path: a real master is started as a subprocess
(SQLite in a temporary directory); this script plays the agent over the REST API
(registers, heartbeats, receives the trial's task spec and ``DET_*`` environment) and
runs the real ``_TrialController`` in-process with a ``MasterBackend`` that reports to
that master over HTTP (training metrics every 100 batches, progress, the preemption
long poll, checkpoints). The timed span is from the first training batch to the
training report of the last batch (metrics handed to the background sender); the
request for the searcher's first operation before it is printed on its own, and the
final validation and checkpoint are not timed.

The hand-written loop uses the same model class and initial weights, the same dataset,
batch size and shuffling (a torch ``DataLoader``), the same forward / loss / backward /
step / ``zero_grad`` and the same per-batch metrics, accumulated as tensors and read
every 100 batches. It calls ``optimizer.zero_grad()``, as hand-written loops do; the
harness's ``step_optimizer`` drops the gradients with its own loop
(``dauntless.pytorch._context.zero_grads``: the same effect without torch's profiler
range when no profiler records), which saves about 9 us per ``digits`` batch on the
2-core CI machine (``per_batch_python_cost.py``) and so offsets most of the harness's own
per-batch cost in the ``digits`` ratio.

The two take turns within each round: at the end of each of the harness's epochs the
hand loop trains as many batches as the harness has trained since the hand loop's last
turn (44 for ``digits``, 56 for ``mlp``), from inside the harness's trial (a callback),
and that time is taken out of the harness's. A turn that would start within
``QUIET_AFTER_REPORT`` batches after a training report waits for the next epoch's end, so
that the request the background sender makes right after a report stays in the
harness's time; the turn after the last report trains what is left, after the harness's
timed span. On this shared 2-core machine the speed of one and the same loop drifts by
10-30% over seconds (slow and fast phases); whole rounds run one after the other
measured that drift more than the harness (7-round medians of 0.93 and 1.00 for the
same code), turns a fraction of a second apart see the same machine. The turns start
from a callback the harness calls anyway, not from a wrapper around ``train_batch``:
such a wrapper is Python the harness would run on every batch and the hand loop not,
and on this machine a microsecond of per-batch Python costs a small training step
several (``per_batch_python_cost.py``); it made the ``digits`` ratio about 0.5% lower.

Throughput is records per second; the ratio harness / hand-written is reported per
round, as the median over rounds with a 95% bootstrap confidence interval of that
median, and as best-of-rounds (the highest throughput of each side). The target,
>= 0.98, is judged on the median.

What the harness adds per batch is a few microseconds of Python (moving the batch,
keeping its metrics as tensors, checking the boundaries and a preemption flag); per
reporting period one device-to-host read per metric and one metrics POST sent by a
background thread (progress at most every 10 s). The master's own CPU for that POST
and its long-poll loop runs in another process: on a machine with a free core it costs
the training nothing, on a busy one it competes with it, which a model whose batch
takes under a millisecond (``digits``) shows most.

Usage::

    python benchmarks/harness_overhead.py [--rounds 25] [--digits-batches 1500]
                                          [--mlp-batches 120] [--threads 1]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import _cluster
import httpx
import torch
import yaml
from torch import nn
from torch.utils.data import TensorDataset

from dauntless.core import ClusterInfo, Context, TrialInfo
from dauntless.pytorch import (
    DataLoader,
    PyTorchCallback,
    PyTorchTrial,
    PyTorchTrialContext,
)
from dauntless.pytorch._controller import _TrialController
from dauntless.pytorch._import import load_trial_class
from dauntless.pytorch._state import seed_all

REPO = Path(__file__).resolve().parents[1]
DIGITS = REPO / "examples" / "digits"
REPORT_EVERY = 100  # batches, the harness's reporting period (scheduling_unit)
# A hand-loop turn does not start within this many batches after a training report
# (about 12 ms of digits batches, 32 ms of mlp ones: the sender's request after a report
# takes about 10 ms).
QUIET_AFTER_REPORT = {"digits": 20, "mlp": 2}
TARGET = 0.98


# ---------------------------------------------------------------- the larger MLP


class MLPTrial(PyTorchTrial):
    """512-1024-1024-10 MLP with dropout on 8,192 synthetic records, SGD with momentum."""

    def __init__(self, context: PyTorchTrialContext) -> None:
        self.context = context
        g = torch.Generator().manual_seed(0)
        x = torch.randn(8192, 512, generator=g)
        y = (x[:, :10].argmax(dim=1) + (x[:, 10] > 1).long()) % 10
        self.train_set = TensorDataset(x[:7168], y[:7168])
        self.val_set = TensorDataset(x[7168:], y[7168:])
        self.model = context.wrap_model(
            nn.Sequential(
                nn.Linear(512, 1024),
                nn.ReLU(),
                nn.Dropout(0.1),
                nn.Linear(1024, 1024),
                nn.ReLU(),
                nn.Linear(1024, 10),
            )
        )
        self.optimizer = context.wrap_optimizer(
            torch.optim.SGD(self.model.parameters(), lr=0.01, momentum=0.9)
        )
        self.loss_fn = nn.CrossEntropyLoss()

    def build_training_data_loader(self) -> DataLoader:
        return DataLoader(
            self.train_set,
            batch_size=self.context.get_per_slot_batch_size(),
            shuffle=True,
            drop_last=True,
        )

    def build_validation_data_loader(self) -> DataLoader:
        return DataLoader(self.val_set, batch_size=512)

    def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> dict[str, Any]:
        x, y = batch
        logits = self.model(x)
        loss = self.loss_fn(logits, y)
        self.context.backward(loss)
        self.context.step_optimizer(self.optimizer)
        return {"loss": loss, "train_accuracy": (logits.argmax(dim=1) == y).float().mean()}

    def evaluate_batch(self, batch: Any) -> dict[str, Any]:
        x, y = batch
        logits = self.model(x)
        return {
            "validation_loss": self.loss_fn(logits, y).item(),
            "accuracy": (logits.argmax(dim=1) == y).float().mean().item(),
        }


def digits_config(batches: int) -> dict[str, Any]:
    config = yaml.safe_load((DIGITS / "legacy-const.yaml").read_text())
    config["searcher"]["max_length"] = {"batches": batches}
    config.update(
        scheduling_unit=REPORT_EVERY,
        min_validation_period={"batches": 0},
        checkpoint_policy="none",
        max_restarts=0,
    )
    return config


def mlp_config(batches: int) -> dict[str, Any]:
    return {
        "name": "bench-mlp",
        "entrypoint": "harness_overhead:MLPTrial",
        "hyperparameters": {"global_batch_size": 128},
        "searcher": {
            "name": "single",
            "metric": "accuracy",
            "smaller_is_better": False,
            "max_length": {"batches": batches},
        },
        "scheduling_unit": REPORT_EVERY,
        "checkpoint_policy": "none",
        "max_restarts": 0,
    }


# ---------------------------------------------------------------- a pretend agent


class FakeAgent:
    """Plays the agent over REST: registers one CPU slot, takes task specs."""

    def __init__(self, url: str) -> None:
        self.client = httpx.Client(base_url=url + "/api/v1", timeout=30)
        # The built-in admin (empty password on a new master) may call agents' routes too.
        r = self.client.post("/auth/login", json={"username": "admin", "password": ""})
        r.raise_for_status()
        self.client.headers["Authorization"] = f"Bearer {r.json()['token']}"
        self.client.post(
            "/agents",
            json={
                "id": "bench-agent",
                "hostname": "localhost",
                "slots": [{"id": "0", "type": "cpu"}],
            },
        ).raise_for_status()

    def start_trial(self, config: dict[str, Any]) -> dict[str, Any]:
        """Create an experiment and return its trial's task spec."""
        r = self.client.post("/experiments", data={"config": yaml.safe_dump(config)})
        r.raise_for_status()
        deadline = time.time() + 30
        while time.time() < deadline:
            r = self.client.post("/agents/bench-agent/heartbeat", json={"running": []})
            r.raise_for_status()
            if r.json()["start"]:
                return r.json()["start"][0]
            time.sleep(0.1)
        raise RuntimeError("the master scheduled no trial in 30 s")

    def exited(self, allocation_id: str) -> None:
        self.client.post(f"/allocations/{allocation_id}/exited", json={"exit_code": 0})


# ---------------------------------------------------------------- the two loops


class _Timer(PyTorchCallback):
    """Times the harness from its first training batch to the report of the last one,
    less the time lent to the hand-written loop's turns (``paused``).

    ``first_op_seconds`` is what ran between ``on_training_start`` and the first batch:
    mostly the request for the searcher's first operation, paid once per operation
    (the benchmark's operations last a few seconds; a real one lasts minutes to
    hours), so it is printed on its own instead of being spread over the records per
    second.
    """

    def __init__(self, batches: int) -> None:
        self.batches = batches
        self.training_start = self.start = self.end = 0.0
        self.paused = 0.0

    def on_training_start(self) -> None:
        self.training_start = time.perf_counter()

    def on_training_epoch_start(self, epoch_idx: int) -> None:
        if not self.start:
            self.start = time.perf_counter()

    def on_training_workload_end(self, avg_metrics: dict, batch_metrics: list) -> None:
        if avg_metrics["batches"] == self.batches:
            self.end = time.perf_counter()

    @property
    def seconds(self) -> float:
        return self.end - self.start - self.paused

    @property
    def first_op_seconds(self) -> float:
        return self.start - self.training_start


class HandLoop:
    """A hand-written torch loop over the same model class, data and batch size.

    Built from the trial class (so the model, its initial weights for seed 1, the
    optimizer and the loss are the trial's own) with a plain torch ``DataLoader``
    (``shuffle=True``, ``drop_last=True``). Each batch: forward, loss, backward, step,
    ``zero_grad``, and the same per-batch metrics as the trial (loss and accuracy),
    added up as tensors and read every ``REPORT_EVERY`` batches. :meth:`run` trains the
    next ``n`` batches and returns the seconds they took; the loop carries on where it
    stopped (a new pass over the loader at each epoch's end, as a ``for`` loop would).
    """

    def __init__(self, trial_cls: type, config: dict) -> None:
        hparams = dict(config["hyperparameters"])
        info = TrialInfo(trial_id=1, experiment_id=1, trial_seed=1, hparams=hparams, config=config)
        seed_all(1)
        trial = trial_cls(PyTorchTrialContext(info))
        self.model, self.optimizer, self.loss_fn = trial.model, trial.optimizer, trial.loss_fn
        self.loader = torch.utils.data.DataLoader(
            trial.train_set,
            batch_size=int(hparams["global_batch_size"]),
            shuffle=True,
            drop_last=True,
        )
        self.model.train()
        self.batches = 0
        self.loss_sum = torch.zeros(())
        self.acc_sum = torch.zeros(())
        self.logged: list[tuple[float, float]] = []
        self._iter: Iterator[Any] | None = None

    def run(self, n: int) -> float:
        """Train ``n`` more batches; return the seconds they took."""
        model, optimizer, loss_fn = self.model, self.optimizer, self.loss_fn
        start = time.perf_counter()
        for _ in range(n):
            if self._iter is None:
                self._iter = iter(self.loader)
            try:
                x, y = next(self._iter)
            except StopIteration:  # the epoch ended: the next pass, as a for loop would
                self._iter = iter(self.loader)
                x, y = next(self._iter)
            logits = model(x)
            loss = loss_fn(logits, y)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            self.loss_sum += loss.detach()
            self.acc_sum += (logits.argmax(dim=1) == y).float().mean()
            self.batches += 1
            if self.batches % REPORT_EVERY == 0:
                self.logged.append((self.loss_sum.item(), self.acc_sum.item()))
                self.loss_sum.zero_()
                self.acc_sum.zero_()
        return time.perf_counter() - start


def interleaved_round(
    agent: FakeAgent, trial_cls: type, config: dict, batches: int, quiet: int, code_dir: Path
) -> tuple[float, float, float]:
    """Train ``batches`` batches through the harness on the cluster path and as many
    with the hand-written loop, in turns.

    At each of the harness's epoch ends the hand loop catches up with the harness's
    batch count, unless the harness reported within the last ``quiet`` batches (the
    turn then waits for the next epoch's end); after the last report it
    trains what is left. The harness's time excludes the turns. Both loops thus sample
    the machine within the same second, over and over, which a shared machine whose
    speed drifts by tens of percent over seconds needs: comparing whole rounds run one
    after the other measured the drift more than the harness.

    Returns:
        (harness seconds, hand-written seconds, seconds from ``on_training_start`` to
        the first batch).

    Raises:
        ValueError: if ``batches`` < 1 or ``quiet`` < 0.
        RuntimeError: if either loop did not train ``batches`` batches.
    """
    if batches < 1 or quiet < 0:
        raise ValueError(f"batches must be >= 1 and quiet >= 0, got {batches} and {quiet}")
    spec = agent.start_trial(config)
    info = ClusterInfo.from_env(spec["env"])
    hand = HandLoop(trial_cls, config)
    hand_seconds = 0.0

    class Turns(_Timer):
        last_report = 0
        context: PyTorchTrialContext | None = None  # the harness's, set once built

        def on_training_epoch_end(self, epoch_idx: int) -> None:
            nonlocal hand_seconds
            assert self.context is not None
            trained = self.context.current_train_batch()  # batches trained so far
            due = trained - hand.batches
            if due > 0 and trained - self.last_report >= quiet:
                paused = time.perf_counter()
                hand_seconds += hand.run(due)
                self.paused += time.perf_counter() - paused

        def on_training_workload_end(self, avg_metrics: dict, batch_metrics: list) -> None:
            nonlocal hand_seconds
            super().on_training_workload_end(avg_metrics, batch_metrics)
            self.last_report = avg_metrics["batches"]
            if self.end and hand.batches < batches:  # after the harness's timed span
                hand_seconds += hand.run(batches - hand.batches)

    timer = Turns(batches)

    class Interleaved(trial_cls):  # type: ignore[misc, valid-type]
        def build_callbacks(self) -> dict[str, PyTorchCallback]:
            return {"timer": timer}

    seed_all(info.trial.trial_seed)
    # the trial's credential, as the agent would hand it to the task's environment
    os.environ["DET_SESSION_TOKEN"] = spec["env"]["DET_SESSION_TOKEN"]
    try:
        with Context.from_cluster_info(info) as core:
            context = PyTorchTrialContext(info.trial, core=core)
            trial = Interleaved(context)
            timer.context = context
            _TrialController(trial, context, core, code_dir=code_dir).run()
    finally:
        os.environ.pop("DET_SESSION_TOKEN", None)
    agent.exited(spec["allocation_id"])
    if not timer.end:
        raise RuntimeError("the harness did not report the last batch")
    if hand.batches != batches:
        raise RuntimeError(f"the hand-written loop trained {hand.batches} of {batches} batches")
    return timer.seconds, hand_seconds, timer.first_op_seconds


# ---------------------------------------------------------------- main


def median_interval(
    values: list[float], confidence: float = 0.95, resamples: int = 4000
) -> tuple[float, float]:
    """A percentile-bootstrap confidence interval for the median of ``values``.

    Efron and Tibshirani, *An Introduction to the Bootstrap* (1993), ch. 13: resample
    ``values`` with replacement ``resamples`` times (a fixed seed, so the same rounds
    give the same interval), take each resample's median, and return the
    ``(1 - confidence) / 2`` and ``(1 + confidence) / 2`` quantiles of those medians.

    Raises:
        ValueError: if ``values`` is empty.
    """
    if not values:
        raise ValueError("values must not be empty")
    rng = random.Random(0)
    medians = sorted(
        statistics.median(rng.choices(values, k=len(values))) for _ in range(resamples)
    )
    tail = (1.0 - confidence) / 2.0
    return medians[int(tail * (resamples - 1))], medians[int((1.0 - tail) * (resamples - 1))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=25)
    parser.add_argument("--digits-batches", type=int, default=1500)
    parser.add_argument("--mlp-batches", type=int, default=120)
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    digits_cls = load_trial_class("model_def:DigitsTrial", str(DIGITS))
    # (name, trial class, config, batches, records per batch)
    cases = [
        ("digits", digits_cls, digits_config(args.digits_batches), args.digits_batches, 32),
        ("mlp", MLPTrial, mlp_config(args.mlp_batches), args.mlp_batches, 128),
    ]
    results: dict[str, dict[str, list[float]]] = {}
    with tempfile.TemporaryDirectory(prefix="dauntless-bench-") as tmp:
        with _cluster.master(Path(tmp), start_new_session=True) as master:
            agent = FakeAgent(master.url)
            code_dir = Path(tmp) / "code"
            code_dir.mkdir()
            for name, cls, config, batches, bs in cases:
                quiet = QUIET_AFTER_REPORT[name]
                records = batches * bs
                res = results.setdefault(
                    name, {"hand": [], "harness": [], "ratio": [], "first_op_ms": []}
                )
                interleaved_round(agent, cls, config, batches, quiet, code_dir)  # warm-up
                for r in range(args.rounds):
                    harness_s, hand_s, first_op = interleaved_round(
                        agent, cls, config, batches, quiet, code_dir
                    )
                    rates = {"hand": records / hand_s, "harness": records / harness_s}
                    for kind, rate in rates.items():
                        res[kind].append(rate)
                    res["first_op_ms"].append(first_op * 1e3)
                    res["ratio"].append(rates["harness"] / rates["hand"])
                    print(
                        f"{name:6s} round {r + 1}: hand {rates['hand']:9.0f} rec/s, "
                        f"harness {rates['harness']:9.0f} rec/s, "
                        f"ratio {rates['harness'] / rates['hand']:.3f}",
                        flush=True,
                    )
    print()
    summary = {}
    for name, res in results.items():
        ratio = statistics.median(res["ratio"])
        low, high = median_interval(res["ratio"])
        best = max(res["harness"]) / max(res["hand"])
        summary[name] = {
            "hand_records_per_s": round(statistics.median(res["hand"])),
            "harness_records_per_s": round(statistics.median(res["harness"])),
            "ratio_median": round(ratio, 4),
            "ratio_median_95ci": [round(low, 4), round(high, 4)],
            "ratio_best_of": round(best, 4),
            "ratio_min": round(min(res["ratio"]), 4),
            "ratio_max": round(max(res["ratio"]), 4),
            "meets_target": ratio >= TARGET,
            "first_operation_ms": round(statistics.median(res["first_op_ms"]), 1),
        }
        verdict = f"{'meets' if ratio >= TARGET else 'misses'} the target >= {TARGET}"
        if low < TARGET <= high:
            verdict += ", which lies inside the interval"
        print(
            f"{name:6s}: hand {summary[name]['hand_records_per_s']} rec/s, harness "
            f"{summary[name]['harness_records_per_s']} rec/s (medians); ratio: median "
            f"{ratio:.3f} (95% CI {low:.3f}-{high:.3f}: {verdict}), "
            f"best-of {best:.3f}, rounds {min(res['ratio']):.3f}-{max(res['ratio']):.3f}; "
            f"before the first batch (first searcher operation): "
            f"{summary[name]['first_operation_ms']} ms"
        )
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
