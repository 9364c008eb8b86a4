"""What a few microseconds of Python per batch cost a small torch training loop.

The harness adds a little Python to every batch (keep the batch's metrics, move the
batch, read the stop flags). Timed alone, in a tight loop, that code takes a few
microseconds; run between the torch operations of a training step, it can cost the step
several times as much, because it displaces the interpreter's and torch's code and data
from the processor's caches and branch predictors, which the next step then reloads.
How much depends on the machine. This benchmark measures the factor, so that the
``digits`` ratio of ``harness_overhead.py`` can be read against it.

It trains the digits model (``examples/digits``, batches of 32, prepared in advance so
that no data loading is timed) in rounds of ``--batches`` steps, in random order per
round, three ways:

* ``plain``: forward, loss, backward, optimizer step, ``zero_grad``, accuracy;
* ``+harness``: the same plus, per batch, the harness's own per-batch calls on the
  step's outputs (``batch_row`` of the metrics dict, appending it to a window that is
  emptied every 100 batches, the device mover, a stop-flag read);
* ``+python``: the same plus a pure-Python function of similar size with no torch call
  (formats and parses a short string, builds and sorts a small dict).

and also times each added function alone, in a tight loop (``hot`` cost). It prints,
per added function, the medians of the per-batch step times, the added time per batch,
the hot cost, and their ratio (the amplification).

A fourth way, ``zero_grads``, is ``plain`` with the harness's
``dauntless.pytorch._context.zero_grads(optimizer)`` in place of
``optimizer.zero_grad()`` (the same effect, gradients set to None, without torch's
profiler range when no profiler records); it prints the time that saves per batch
against both calls' hot costs.

Usage::

    python benchmarks/per_batch_python_cost.py [--rounds 60] [--batches 200]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

import torch

from dauntless.core import TrialInfo
from dauntless.pytorch import PyTorchTrialContext
from dauntless.pytorch._context import zero_grads
from dauntless.pytorch._device import mover
from dauntless.pytorch._import import load_trial_class
from dauntless.pytorch._reducer import batch_row
from dauntless.pytorch._state import seed_all

REPO = Path(__file__).resolve().parents[1]
DIGITS = REPO / "examples" / "digits"
sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness_overhead import digits_config  # noqa: E402  (after the path is set)


def make_step() -> tuple[Any, Any, Any, list[tuple[torch.Tensor, torch.Tensor]]]:
    """The digits trial's training step (with ``optimizer.zero_grad()``), the same step
    with the harness's ``zero_grads``, the optimizer, and 40 prepared batches of 32
    records."""
    config = digits_config(100)
    info = TrialInfo(
        trial_id=1,
        experiment_id=1,
        trial_seed=1,
        hparams=dict(config["hyperparameters"]),
        config=config,
    )
    seed_all(1)
    trial = load_trial_class("model_def:DigitsTrial", str(DIGITS))(PyTorchTrialContext(info))
    model, optimizer, loss_fn = trial.model, trial.optimizer, trial.loss_fn
    model.train()
    loader = torch.utils.data.DataLoader(
        trial.train_set, batch_size=32, shuffle=True, drop_last=True
    )
    batches = [batch for _, batch in zip(range(40), loader, strict=False)]

    def step(x: torch.Tensor, y: torch.Tensor) -> dict[str, Any]:
        logits = model(x)
        loss = loss_fn(logits, y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        return {"loss": loss, "train_accuracy": (logits.argmax(dim=1) == y).float().mean()}

    def step_zero_grads(x: torch.Tensor, y: torch.Tensor) -> dict[str, Any]:
        logits = model(x)
        loss = loss_fn(logits, y)
        loss.backward()
        optimizer.step()
        zero_grads(optimizer)
        return {"loss": loss, "train_accuracy": (logits.argmax(dim=1) == y).float().mean()}

    return step, step_zero_grads, optimizer, batches


def harness_calls() -> Any:
    """The harness's per-batch calls (see the module docstring), as one function."""
    move = mover(torch.device("cpu"))
    stop = threading.Event()
    window: list[dict[str, Any]] = []

    def calls(batch: Any, out: dict[str, Any]) -> None:
        move(batch)
        window.append(batch_row(out))
        if len(window) == 100:
            window.clear()
        if stop.is_set():
            raise RuntimeError("unreachable: nothing sets the flag")

    return calls


def python_calls() -> Any:
    """Pure Python of a similar hot cost, touching no torch code."""
    data = {"loss": 0.5, "batches": 100, "epochs": 2.25}

    def calls(batch: Any, out: dict[str, Any]) -> None:
        text = json.dumps(data)
        parsed = json.loads(text)
        sorted(parsed.items())
        "batches={batches} loss={loss:.4f}".format(**parsed).split()

    return calls


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--batches", type=int, default=200)
    args = parser.parse_args()
    if args.rounds < 1 or args.batches < 1:
        parser.error("--rounds and --batches must be >= 1")
    torch.set_num_threads(1)
    step, step_zero_grads, optimizer, batches = make_step()
    added = {"+harness": harness_calls(), "+python": python_calls()}
    n = args.batches

    def run(extra: Any, step: Any = step) -> float:
        start = time.perf_counter()
        for i in range(n):
            x, y = batches[i % len(batches)]
            out = step(x, y)
            if extra is not None:
                extra((x, y), out)
        return (time.perf_counter() - start) / n * 1e6

    def hot_zero(zero: Any) -> float:
        start = time.perf_counter()
        for _ in range(n * 10):
            zero()
        return (time.perf_counter() - start) / (n * 10) * 1e6

    def hot(extra: Any, out: dict[str, Any]) -> float:
        batch = batches[0]
        start = time.perf_counter()
        for _ in range(n * 10):
            extra(batch, out)
        return (time.perf_counter() - start) / (n * 10) * 1e6

    sample_out = step(*batches[0])
    sample_out = {k: v.detach() for k, v in sample_out.items()}
    variants = {"plain": None, **added, "zero_grads": None}
    times: dict[str, list[float]] = {name: [] for name in variants}
    hots: dict[str, list[float]] = {name: [] for name in added}
    zero_hots: dict[str, list[float]] = {"zero_grad": [], "zero_grads": []}
    rng = random.Random(0)
    for _ in range(args.rounds):
        for name in rng.sample(list(variants), len(variants)):
            times[name].append(
                run(None, step_zero_grads) if name == "zero_grads" else run(variants[name])
            )
        for name, extra in added.items():
            hots[name].append(hot(extra, sample_out))
        zero_hots["zero_grad"].append(hot_zero(optimizer.zero_grad))
        zero_hots["zero_grads"].append(hot_zero(lambda: zero_grads(optimizer)))
    plain = statistics.median(times["plain"])
    print(f"plain step: {plain:.1f} us per batch (median of {args.rounds} rounds x {n})")
    summary: dict[str, Any] = {"plain_us_per_batch": round(plain, 1)}
    for name in added:
        with_it = statistics.median(times[name])
        cost = statistics.median(hots[name])
        extra_us = with_it - plain
        print(
            f"{name:9s}: {with_it:.1f} us per batch, +{extra_us:.1f} us; the added calls "
            f"alone take {cost:.2f} us hot: amplification {extra_us / cost:.1f}x"
        )
        summary[name] = {
            "us_per_batch": round(with_it, 1),
            "added_us": round(extra_us, 2),
            "hot_us": round(cost, 2),
            "amplification": round(extra_us / cost, 2),
        }
    with_zero = statistics.median(times["zero_grads"])
    zero_grad_hot = statistics.median(zero_hots["zero_grad"])
    zero_grads_hot = statistics.median(zero_hots["zero_grads"])
    print(
        f"zero_grads: {with_zero:.1f} us per batch, {with_zero - plain:+.1f} us against "
        f"optimizer.zero_grad(); hot: zero_grad() {zero_grad_hot:.2f} us, zero_grads "
        f"{zero_grads_hot:.2f} us"
    )
    summary["zero_grads"] = {
        "us_per_batch": round(with_zero, 1),
        "added_us": round(with_zero - plain, 2),
        "hot_us": round(zero_grads_hot, 2),
        "zero_grad_hot_us": round(zero_grad_hot, 2),
    }
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
