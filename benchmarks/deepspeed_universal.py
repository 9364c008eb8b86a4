"""What restoring a DeepSpeed checkpoint onto another number of ranks costs.

A ZeRO-2 engine (a stack of linear layers of about ``--params`` million parameters,
Adam) is saved twice: by 2 ranks (gloo, DeepSpeed's CPU accelerator) and by 1. Then, in
one 1-rank process, rounds alternate (A B, then B A, ...) between

* baseline: ``engine.load_checkpoint`` of the 1-rank checkpoint (the same number of
  ranks: DeepSpeed's own load);
* universal: what the platform does for the 2-rank checkpoint
  (``pytorch/deepspeed/_universal.py``): ``convert_to_universal`` into a new temporary
  directory, the load with ``load_universal`` on, the directory removed.

Each is timed on the wall clock and the process's CPU clock. Printed: the checkpoint's
size, the largest size of the temporary directory, per round the seconds of each side,
their medians, and the ratio universal / baseline per round with its median and a
distribution-free 95% interval (order statistics; with fewer than 6 rounds the range,
said so); then the whole run's CPU seconds beside its wall time and the load average.
No target: the figure says what a restore onto another slot count costs.

Usage::

    python benchmarks/deepspeed_universal.py [--params 8] [--rounds 7]
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("DS_ACCELERATOR", "cpu")

import torch  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _search_model import median_interval  # noqa: E402

TAG = "model0"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _engine(params_millions: float) -> Any:
    import deepspeed

    width = 512
    layers = max(1, round(params_millions * 1e6 / (width * width + width)))
    torch.manual_seed(0)
    model = torch.nn.Sequential(*(torch.nn.Linear(width, width) for _ in range(layers)))
    config = {
        "train_micro_batch_size_per_gpu": 2,
        "zero_optimization": {"stage": 2},
        "zero_allow_untested_optimizer": True,
        "steps_per_print": 10**9,
    }
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, config=config)
    return engine


def _join(rank: int, size: int, port: int) -> None:
    os.environ.update(
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        WORLD_SIZE=str(size),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
    )
    torch.set_num_threads(1)
    from dauntless.pytorch.deepspeed._trainer import init_deepspeed_comm

    init_deepspeed_comm()


def _save(rank: int, size: int, port: int, out: str, params: float) -> None:
    _join(rank, size, port)
    engine = _engine(params)
    x = torch.randn(2, 512)
    engine.backward(engine(x).square().mean())
    engine.step()
    engine.save_checkpoint(out, tag=TAG, save_latest=False)


def _du(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _measure(rank: int, port: int, one: str, two: str, params: float, rounds: int) -> None:
    from dauntless.pytorch.deepspeed._universal import convert_to_universal, loading_universal

    _join(0, 1, port)
    engine = _engine(params)

    def baseline() -> None:
        with loading_universal(engine, False):
            engine.load_checkpoint(one, tag=TAG)

    peak = [0]

    def universal() -> None:
        root = Path(tempfile.mkdtemp(prefix="bench-ds-universal-"))
        try:
            convert_to_universal(Path(two) / TAG, root / TAG)
            peak[0] = max(peak[0], _du(root))
            with loading_universal(engine, True):
                engine.load_checkpoint(str(root), tag=TAG)
        finally:
            shutil.rmtree(root, ignore_errors=True)

    sides = {"baseline": baseline, "universal": universal}
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in sides}
    for name in sides:  # warm both once, untimed
        sides[name]()
    for r in range(rounds):
        order = ["baseline", "universal"] if r % 2 == 0 else ["universal", "baseline"]
        for name in order:
            w0, c0 = time.perf_counter(), time.process_time()
            sides[name]()
            times[name].append((time.perf_counter() - w0, time.process_time() - c0))
    torch.save({"times": times, "peak": peak[0]}, Path(two).parent / "times.pt")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--params", type=float, default=8.0, help="million parameters")
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    load_before = open("/proc/loadavg").read().split()[:3]
    wall0, cpu0 = time.perf_counter(), time.process_time()
    with tempfile.TemporaryDirectory(prefix="bench-ds-") as tmp:
        one, two = Path(tmp, "one"), Path(tmp, "two")
        mp.spawn(_save, args=(2, _free_port(), str(two), args.params), nprocs=2)
        mp.spawn(_save, args=(1, _free_port(), str(one), args.params), nprocs=1)
        size = _du(two / TAG)
        mp.spawn(
            _measure,
            args=(_free_port(), str(one), str(two), args.params, args.rounds),
            nprocs=1,
        )
        result = torch.load(Path(tmp, "times.pt"), weights_only=False)
    children = os.times()
    cpu = time.process_time() - cpu0 + children.children_user + children.children_system
    times = result["times"]
    print(f"ZeRO-2, Adam, {args.params:g}M parameters; 2-rank checkpoint {size / 2**20:.1f} MiB")
    print(f"largest universal copy in TMPDIR: {result['peak'] / 2**20:.1f} MiB")
    for clock, i in (("wall", 0), ("CPU", 1)):
        base = [t[i] for t in times["baseline"]]
        uni = [t[i] for t in times["universal"]]
        ratios = [u / b for u, b in zip(uni, base, strict=True)]
        med, low, high = median_interval(ratios)
        note = "" if len(ratios) >= 6 else " (range: fewer than 6 rounds)"
        print(
            f"{clock}: baseline (same-count load) median {statistics.median(base):.3f} s, "
            f"universal (convert + load) {statistics.median(uni):.3f} s; ratio "
            f"{med:.2f} [95% interval {low:.2f}, {high:.2f}]{note}"
        )
        print("  per round:", ", ".join(f"{b:.3f}/{u:.3f}" for b, u in zip(base, uni, strict=True)))
    load_after = open("/proc/loadavg").read().split()[:3]
    print(
        f"run: {time.perf_counter() - wall0:.1f} s wall, {cpu:.1f} CPU-s (this process and its "
        f"children); load average {' '.join(load_before)} -> {' '.join(load_after)}"
    )


if __name__ == "__main__":
    main()
