"""Data-parallel training speed of our launcher and of a PyTorchTrial against ``torchrun``
(issue 37 scope 3).

The same model (an MLP), data (a synthetic dataset; rank r trains its shard, in order,
through a DataLoader), optimizer and per-rank batch, with gloo on CPU, ``--ranks`` local
ranks, run three ways:

- ``torchrun``: a hand-written DDP script under
  ``python -m torch.distributed.run --standalone --nproc_per_node N`` (the baseline; it
  gives each rank ``OMP_NUM_THREADS=1`` when the environment sets none);
- ``dauntless``: the same script under ``python -m dauntless.launch.torch_distributed --
  python script.py`` with the environment an agent gives an N-slot task on one node
  (``DET_WORLD_SIZE``, ``DET_SLOT_IDS``; no master, so the launcher picks its own
  rendezvous port), the environment without ``OMP_NUM_THREADS`` as for torchrun;
- ``dauntless trial``: the same model and data as a ``PyTorchTrial`` trained by the
  Trainer API under our launcher (``context.wrap_model`` wraps it in DDP; the harness's
  own loop, metrics reduced across ranks every reporting period; local training, so no
  master): what a 2-slot trial adds to hand-written DDP;
- with ``--trial-baseline SRC``, also ``dauntless trial, baseline``: the same trial with
  ``PYTHONPATH=SRC`` (the ``src`` directory of another checkout, e.g. ``git archive
  main src | tar -x -C /tmp/base``), so a change to the harness is measured against
  the code before it in the same rounds; printed as trial / baseline per round with
  its interval, on the wall and CPU clocks;
- with ``--before``, also ``dauntless, threads = cores`` (the launcher before issue 37,
  which set nothing: each rank's PyTorch took every core): the hand-written script with
  ``OMP_NUM_THREADS`` = the CPU count (slow on a small machine: that is the point).

Each round runs every way once (the order rotating between rounds); rank 0 prints the
samples per second of the timed steps: from step ``--warmup`` to the end of the last
step, each end behind a barrier, so start-up, warm-up, the trial's final validation and
checkpoint are not timed. Printed: samples/s per way (median), each way's ratio to
torchrun per round with its mean and 95% interval (Student's t over the rounds), and the
CPU seconds of all the processes of each way (``RUSAGE_CHILDREN``) beside the wall
seconds. Beside it, less moved by the load of a shared machine, each way's CPU time
per sample in the timed span (process CPU of every rank, summed), as the ratio
torchrun / way per round with its interval: it shows work the harness adds per batch,
not time a rank spends waiting at a collective (which costs no CPU). Target: trial /
torchrun >= 0.98.

Usage::

    python benchmarks/ddp_launcher.py [--rounds 6] [--ranks 2] [--steps 200] [--width 512]
        [--before] [--trial-baseline SRC]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

DDP_PY = """\
import os, sys, time
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

steps, width, batch, warmup = (int(x) for x in sys.argv[1:5])
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
model = DDP(torch.nn.Sequential(
    torch.nn.Linear(width, width), torch.nn.ReLU(),
    torch.nn.Linear(width, width), torch.nn.ReLU(),
    torch.nn.Linear(width, 10),
))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
g = torch.Generator().manual_seed(0)
n = batch * world * (warmup + steps)
data = TensorDataset(torch.randn(n, width, generator=g), torch.randint(0, 10, (n,), generator=g))
loader = DataLoader(data, batch_size=batch, sampler=DistributedSampler(data, shuffle=False))
for i, (x, y) in enumerate(loader):
    if i == warmup:
        dist.barrier()
        t0, c0 = time.perf_counter(), time.process_time()
    opt.zero_grad()
    torch.nn.functional.cross_entropy(model(x), y).backward()
    opt.step()
dist.barrier()
elapsed, cpu = time.perf_counter() - t0, torch.tensor([time.process_time() - c0])
dist.all_reduce(cpu)
if rank == 0:
    print(f"SAMPLES_PER_S {steps * batch * world / elapsed:.1f} "
          f"CPU_US_PER_SAMPLE {cpu.item() / (steps * batch * world) * 1e6:.2f} "
          f"threads {torch.get_num_threads()}")
dist.destroy_process_group()
"""

# The same model, data (rank r's shard of the same dataset, in order) and optimizer as
# DDP_PY, as a PyTorchTrial trained by the Trainer API (the harness's loop: batch moved
# to the device, metrics kept as tensors and reduced across ranks every reporting
# period, boundary and preemption checks); DDP wrapping by ``context.wrap_model``. The
# timed span is the same: from batch ``warmup`` to the end of the last batch, each end
# behind a barrier. The final validation and checkpoint come after it.
TRIAL_PY = """\
import logging, sys, time
import torch
import torch.distributed as dist
from torch.utils.data import TensorDataset
from dauntless import core, pytorch as det_torch

steps, width, batch, warmup = (int(x) for x in sys.argv[1:5])
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
logging.basicConfig(level=logging.WARNING)


class Bench(det_torch.PyTorchTrial):
    def __init__(self, context):
        self.context = context
        torch.manual_seed(0)
        self.model = context.wrap_model(torch.nn.Sequential(
            torch.nn.Linear(width, width), torch.nn.ReLU(),
            torch.nn.Linear(width, width), torch.nn.ReLU(),
            torch.nn.Linear(width, 10),
        ))
        self.opt = context.wrap_optimizer(torch.optim.SGD(self.model.parameters(), lr=0.01))
        g = torch.Generator().manual_seed(0)
        n = batch * world * (warmup + steps)
        self.data = TensorDataset(
            torch.randn(n, width, generator=g), torch.randint(0, 10, (n,), generator=g)
        )

    def build_training_data_loader(self):
        return det_torch.DataLoader(self.data, batch_size=batch)

    def build_validation_data_loader(self):
        return det_torch.DataLoader(TensorDataset(self.data.tensors[0][:batch * world],
                                                  self.data.tensors[1][:batch * world]),
                                    batch_size=batch)

    def train_batch(self, b, epoch_idx, batch_idx):
        if batch_idx == warmup:
            dist.barrier()
            self.t0, self.c0 = time.perf_counter(), time.process_time()
        x, y = b
        loss = torch.nn.functional.cross_entropy(self.model(x), y)
        self.context.backward(loss)
        self.context.step_optimizer(self.opt)
        if batch_idx == warmup + steps - 1:
            dist.barrier()
            elapsed = time.perf_counter() - self.t0
            cpu = torch.tensor([time.process_time() - self.c0])
            dist.all_reduce(cpu)
            if rank == 0:
                print(f"SAMPLES_PER_S {steps * batch * world / elapsed:.1f} "
                      f"CPU_US_PER_SAMPLE {cpu.item() / (steps * batch * world) * 1e6:.2f} "
                      f"threads {torch.get_num_threads()}", flush=True)
        return {"loss": loss}

    def evaluate_batch(self, b):
        x, y = b
        return {"validation_loss": torch.nn.functional.cross_entropy(self.model(x), y)}


conf = {
    "hyperparameters": {"global_batch_size": batch * world},
    "searcher": {"name": "single", "metric": "validation_loss", "max_length": {"batches": 1}},
    "checkpoint_storage": {"type": "directory", "container_path": sys.argv[5]},
    "reproducibility": {"experiment_seed": 0},
}
with det_torch.init(exp_conf=conf, distributed=core.DistributedContext.from_torch_distributed()) as ctx:
    det_torch.Trainer(Bench(ctx), ctx).fit(max_length=det_torch.Batch(warmup + steps))
"""

# Student's t, two-sided 95%, by degrees of freedom (1..30); normal beyond.
_T95 = [12.71, 4.30, 3.18, 2.78, 2.57, 2.45, 2.36, 2.31, 2.26, 2.23, 2.20, 2.18, 2.16, 2.14]
_T95 += [2.13, 2.12, 2.11, 2.10, 2.09, 2.09, 2.08, 2.07, 2.07, 2.06, 2.06, 2.06, 2.05, 2.05]
_T95 += [2.05, 2.04]


def interval95(xs: list[float]) -> tuple[float, float, float]:
    """Mean and 95% confidence interval (Student's t) of ``xs``."""
    mean = statistics.fmean(xs)
    if len(xs) < 2:
        return mean, float("nan"), float("nan")
    t = _T95[len(xs) - 2] if len(xs) - 1 <= len(_T95) else 1.96
    half = t * statistics.stdev(xs) / len(xs) ** 0.5
    return mean, mean - half, mean + half


def clean_env() -> dict[str, str]:
    """This environment without launcher, rank or thread variables."""
    drop = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
    return {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("DET_") and k not in drop and k != "OMP_NUM_THREADS"
    }


def run_way(
    way: str, tmp: Path, args: list[str], ranks: int, baseline: str | None = None
) -> tuple[float, float, float, float]:
    """Run one way (its script is in ``tmp``; ``baseline``: the baseline trial's
    PYTHONPATH); returns ``(samples/s, wall s, CPU s of
    all processes, CPU microseconds per sample of the ranks in the timed span)``.

    Raises:
        RuntimeError: the run failed or printed no figure.
    """
    env = clean_env()
    trial = way in (TRIAL_WAY, BASELINE_WAY)
    script = tmp / ("trial.py" if trial else "ddp.py")
    if trial:
        args = [*args, str(tmp / "checkpoints")]
    if way == BASELINE_WAY:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [baseline, env.get("PYTHONPATH")]))
    if way == "torchrun":
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
        cmd += [f"--nproc_per_node={ranks}", str(script), *args]
    else:
        cmd = [sys.executable, "-m", "dauntless.launch.torch_distributed", "--"]
        cmd += [sys.executable, str(script), *args]
        env.update(
            DET_WORLD_SIZE=str(ranks),
            DET_SLOT_IDS=",".join(f"cpu{i}" for i in range(ranks)),
            DET_RANK_OFFSET="0",
        )
        if way == "dauntless, threads = cores":
            env["OMP_NUM_THREADS"] = str(os.cpu_count() or 1)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    for line in proc.stdout.splitlines():
        if "SAMPLES_PER_S" in line:
            words = line.split()
            rate = float(words[words.index("SAMPLES_PER_S") + 1])
            per_sample = float(words[words.index("CPU_US_PER_SAMPLE") + 1])
            return rate, wall, cpu, per_sample
    raise RuntimeError(f"{way} failed (exit {proc.returncode}): {proc.stderr[-2000:]}")


TRIAL_WAY = "dauntless trial"
BASELINE_WAY = "dauntless trial, baseline"
WAYS = ("torchrun", "dauntless", TRIAL_WAY, "dauntless, threads = cores")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument(
        "--steps",
        type=int,
        default=200,
        help="timed steps per run (60 timed ~0.5 s: the launcher alone then read 0.89x torchrun "
        "[0.82, 0.97] on a quiet machine, 1.02x [0.97, 1.06] with 200)",
    )
    p.add_argument("--warmup", type=int, default=10, help="untimed steps first")
    p.add_argument("--width", type=int, default=512, help="MLP width")
    p.add_argument("--batch", type=int, default=64, help="per-rank batch size")
    p.add_argument("--before", action="store_true", help="also the launcher before issue 37")
    p.add_argument(
        "--trial-baseline",
        metavar="SRC",
        help="also the trial with PYTHONPATH=SRC (another checkout's src), paired per round",
    )
    a = p.parse_args()
    ways = WAYS if a.before else WAYS[:3]
    if a.trial_baseline:
        if not (Path(a.trial_baseline) / "dauntless" / "__init__.py").is_file():
            p.error(f"--trial-baseline {a.trial_baseline}: no dauntless package there")
        ways = (*ways, BASELINE_WAY)
        a.trial_baseline = str(Path(a.trial_baseline).resolve())
    if a.rounds < 1 or a.ranks < 2 or a.steps < 1:
        p.error("need --rounds >= 1, --ranks >= 2, --steps >= 1")
    print(f"load average: {open('/proc/loadavg').read().strip()} ({os.cpu_count()} CPUs)")
    with tempfile.TemporaryDirectory(prefix="ddp-bench-") as tmp:
        (Path(tmp) / "ddp.py").write_text(DDP_PY)
        (Path(tmp) / "trial.py").write_text(TRIAL_PY)
        args = [str(a.steps), str(a.width), str(a.batch), str(a.warmup)]
        figures: dict[str, list[tuple[float, float, float, float]]] = {w: [] for w in ways}
        ratios: dict[str, list[float]] = {w: [] for w in ways[1:]}
        cpu_ratios: dict[str, list[float]] = {w: [] for w in ways[1:]}
        for r in range(a.rounds):
            order = ways[r % len(ways) :] + ways[: r % len(ways)]
            got = {way: run_way(way, Path(tmp), args, a.ranks, a.trial_baseline) for way in order}
            for way, fig in got.items():
                figures[way].append(fig)
            for way in ways[1:]:
                ratios[way].append(got[way][0] / got["torchrun"][0])
                cpu_ratios[way].append(got["torchrun"][3] / got[way][3])
            print(
                f"round {r + 1}: "
                + ", ".join(f"{w} {got[w][0]:.0f}" for w in ways)
                + " samples/s; / torchrun: "
                + ", ".join(f"{w} {ratios[w][-1]:.3f}" for w in ways[1:])
            )
    print(f"\n{a.ranks} ranks, MLP width {a.width}, batch {a.batch} per rank, {a.steps} steps")
    for way in ways:
        figs = figures[way]
        print(
            f"  {way:<28} {statistics.median(f[0] for f in figs):8.0f} samples/s (median); "
            f"per run {statistics.median(f[1] for f in figs):.2f} s wall, "
            f"{statistics.median(f[2] for f in figs):.2f} s CPU; timed span "
            f"{statistics.median(f[3] for f in figs):.1f} CPU us/sample"
        )
    for way in ways[1:]:
        mean, lo, hi = interval95(ratios[way])
        print(
            f"  {way} / torchrun: {mean:.3f} (95% interval {lo:.3f}-{hi:.3f}, "
            f"{a.rounds} rounds; target >= 0.98 for the trial)"
        )
        mean, lo, hi = interval95(cpu_ratios[way])
        print(
            f"  {way}: torchrun's CPU per sample / its own: {mean:.3f} "
            f"(95% interval {lo:.3f}-{hi:.3f})"
        )
    if a.trial_baseline:
        rounds = list(zip(figures[TRIAL_WAY], figures[BASELINE_WAY], strict=True))
        for label, pick in (("samples/s", 0), ("CPU per sample, baseline / trial", 3)):
            xs = [t[pick] / b[pick] if pick == 0 else b[pick] / t[pick] for t, b in rounds]
            mean, lo, hi = interval95(xs)
            print(
                f"  trial / baseline trial, {label}: {mean:.3f} (95% interval {lo:.3f}-{hi:.3f}; "
                "above 1: this checkout is faster)"
            )
    print(f"load average now: {open('/proc/loadavg').read().strip()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
