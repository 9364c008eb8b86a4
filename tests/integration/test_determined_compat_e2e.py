"""Determined 0.38 model code on a real cluster, unchanged: Core API scripts that launch
their own per-slot workers, and a PyTorchTrial written against ``import determined``.

Four two-slot experiments run on one agent with four slots:

1. ``python3 -m dauntless.launch.torch_distributed -- python3 core_dist.py`` (dauntless);
2. the same script against ``determined`` under ``python3 -m
   determined.launch.torch_distributed python3 core_dist_det.py`` (Determined's form, no
   ``--``);
3. a script that is its own launcher, starting workers through ``determined.launch.
   wrap_rank`` and building each ``DistributedContext`` by hand from ``ClusterInfo``
   (the shape of Determined's Core API tutorial, stage 4);
4. a ``module:Class`` PyTorchTrial importing ``determined``, with a legacy callback.

Each must reach COMPLETED; the entrypoints ran once per node (one launcher line), their
workers saw complete cluster info and exchanged values.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

CORE_DIST = """
import {api} as det
from {api} import core


def main():
    info = det.get_cluster_info()
    distributed = core.DistributedContext.from_torch_distributed()
    print(
        f"worker rank={{distributed.rank}} size={{distributed.size}} "
        f"local_rank={{distributed.local_rank}} container_rank={{info.container_rank}} "
        f"addrs={{','.join(info.container_addrs)}} slots={{len(info.slot_ids)}}",
        flush=True,
    )
    with core.init(distributed=distributed) as ctx:
        x = 0
        for op in ctx.searcher.operations():
            for batch in range(1, op.length + 1):
                x += sum(ctx.distributed.allgather(ctx.distributed.rank + 1))
                if batch % 5 == 0 and ctx.distributed.rank == 0:
                    ctx.train.report_training_metrics(steps_completed=batch, metrics={{"x": x}})
                    op.report_progress(batch)
            if ctx.distributed.rank == 0:
                ctx.train.report_validation_metrics(steps_completed=op.length, metrics={{"x": x}})
                op.report_completed(x)
        if ctx.distributed.rank == 0:
            with ctx.checkpoint.store_path({{"steps_completed": 10}}) as (path, uuid):
                (path / "x.txt").write_text(str(x))


if __name__ == "__main__":
    main()
"""

HAND_DIST = """
import subprocess
import sys

import determined as det
from determined import core

info = det.get_cluster_info()
per_node = len(info.slot_ids)
nodes = len(info.container_addrs)


def launcher():
    procs = []
    for local_rank in range(per_node):
        rank = info.container_rank * per_node + local_rank
        procs.append(subprocess.Popen([
            sys.executable, "-m", "determined.launch.wrap_rank", str(rank), "--",
            sys.executable, __file__, "worker", str(rank), str(local_rank),
        ]))
    codes = [p.wait() for p in procs]
    return max(codes)


def worker(rank, local_rank):
    distributed = core.DistributedContext(
        rank=rank, size=nodes * per_node, local_rank=local_rank, local_size=per_node,
        cross_rank=info.container_rank, cross_size=nodes, chief_ip=info.container_addrs[0],
    )
    with core.init(distributed=distributed) as ctx:
        total = sum(ctx.distributed.allgather(rank + 1))
        print(f"hand-built worker {rank}: total {total}", flush=True)
        for op in ctx.searcher.operations():
            if rank == 0:
                ctx.train.report_validation_metrics(steps_completed=op.length, metrics={"x": total})
                op.report_completed(total)
    return 0


if __name__ == "__main__":
    if sys.argv[1] == "launcher":
        print("launcher starts", per_node, "workers", flush=True)
        sys.exit(launcher())
    sys.exit(worker(int(sys.argv[2]), int(sys.argv[3])))
"""

DET_TRIAL = """
import torch

import determined as det
from determined import pytorch


class LegacyCallback(pytorch.PyTorchCallback):
    def __init__(self):
        self.workloads = 0

    def on_training_epoch_start(self):  # the pre-epoch_idx signature
        print("legacy epoch start", flush=True)

    def on_training_workload_end(self, avg_metrics, batch_metrics):
        self.workloads += 1
        print(f"workload end {self.workloads} batches={avg_metrics['batches']}", flush=True)


class OneVarTrial(pytorch.PyTorchTrial):
    def __init__(self, context: pytorch.PyTorchTrialContext):
        self.context = context
        self.model = context.wrap_model(torch.nn.Linear(1, 1, bias=False))
        self.opt = context.wrap_optimizer(torch.optim.SGD(self.model.parameters(), lr=0.01))
        assert isinstance(det.get_cluster_info(), (det.ClusterInfo, type(None)))

    def _data(self):
        x = torch.ones(64, 1)
        return pytorch.DataLoader(
            torch.utils.data.TensorDataset(x, 3 * x),
            batch_size=self.context.get_per_slot_batch_size(),
        )

    def build_training_data_loader(self):
        return self._data()

    def build_validation_data_loader(self):
        return self._data()

    def build_callbacks(self):
        return {"legacy": LegacyCallback()}

    def train_batch(self, batch, epoch_idx, batch_idx):
        x, y = batch
        assert pytorch.data_length(batch) == x.shape[0]
        loss = torch.nn.functional.mse_loss(self.model(x), y)
        self.context.backward(loss)
        self.context.step_optimizer(self.opt)
        return {"loss": loss}

    def evaluate_batch(self, batch):
        x, y = pytorch.to_device(batch, self.context.device)
        return {"val_loss": torch.nn.functional.mse_loss(self.model(x), y)}
"""

CONFIG = """
name: {name}
entrypoint: {entrypoint}
hyperparameters:
  global_batch_size: 8
searcher:
  name: single
  metric: {metric}
  max_length: {{batches: 10}}
resources: {{slots_per_trial: 2}}
scheduling_unit: 5
max_restarts: 0
"""


def _experiment(
    cluster, model_dir: Path, name: str, entrypoint: str, metric: str = "x", *extra: str
) -> int:
    config = model_dir / f"{name}.yaml"
    config.write_text(CONFIG.format(name=name, entrypoint=entrypoint, metric=metric))
    out = cluster.det("experiment", "create", str(config), str(model_dir), *extra).stdout
    return int(out.split("Created experiment")[1].split()[0])


def _logs(cluster, trial_id: int) -> str:
    logs = cluster.api(f"/trials/{trial_id}/logs", limit=10000)["logs"]
    return "\n".join(line["log"] for line in logs)


def test_determined_style_distributed_code_runs_unchanged(cluster_factory, tmp_path):
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    (model_dir / "core_dist.py").write_text(CORE_DIST.format(api="dauntless"))
    (model_dir / "core_dist_det.py").write_text(CORE_DIST.format(api="determined"))
    (model_dir / "hand_dist.py").write_text(textwrap.dedent(HAND_DIST))
    (model_dir / "det_trial.py").write_text(DET_TRIAL)

    extra = tmp_path / "extra"
    extra.mkdir()
    (extra / "answer.txt").write_text("42")
    cluster = cluster_factory(f"sqlite:///{tmp_path}/master.db")
    cluster.start_master()
    cluster.start_agent(slots=4)
    ids = {
        "dauntless": _experiment(
            cluster,
            model_dir,
            "core-dauntless",
            "python3 -m dauntless.launch.torch_distributed -- python3 core_dist.py",
            "x",
            "-i",
            str(extra),
        ),
        "determined": _experiment(
            cluster,
            model_dir,
            "core-determined",
            "python3 -m determined.launch.torch_distributed python3 core_dist_det.py",
        ),
        "hand": _experiment(cluster, model_dir, "hand-built", "python3 hand_dist.py launcher"),
        "trial": _experiment(
            cluster, model_dir, "det-trial", "det_trial:OneVarTrial", metric="val_loss"
        ),
    }
    bodies = {k: cluster.wait_experiment(v, timeout=480) for k, v in ids.items()}
    for key, body in bodies.items():
        trial_logs = [_logs(cluster, t["id"]) for t in body["trials"]]
        assert body["experiment"]["state"] == "COMPLETED", (key, trial_logs)

    for key in ("dauntless", "determined"):
        (trial,) = bodies[key]["trials"]
        text = _logs(cluster, trial["id"])
        # One launcher per node started one worker per slot; each saw the whole picture.
        for rank in (0, 1):
            assert (
                f"[rank={rank}] worker rank={rank} size=2 local_rank={rank} container_rank=0 "
                "addrs=127.0.0.1 slots=2"
            ) in text, text
        validation = cluster.api(f"/trials/{trial['id']}/metrics", group="validation")["metrics"]
        assert validation[-1]["values"]["x"] == 30  # 10 batches x (1 + 2)
        ckpt = cluster.api(f"/checkpoints/{trial['latest_checkpoint']}")["checkpoint"]
        assert (Path(ckpt["storage_path"]) / "x.txt").read_text() == "30"

    (trial,) = bodies["hand"]["trials"]
    text = _logs(cluster, trial["id"])
    assert text.count("launcher starts 2 workers") == 1, text  # the entrypoint ran once
    assert "[rank=0] hand-built worker 0: total 3" in text
    assert "[rank=1] hand-built worker 1: total 3" in text

    (trial,) = bodies["trial"]["trials"]
    assert trial["total_batches"] == 10
    text = _logs(cluster, trial["id"])
    assert "legacy epoch start" in text and "FutureWarning" in text
    # Reports every 5 batches (scheduling_unit): workload ends at 5 and 10, on both ranks.
    assert "[rank=0] workload end 2 batches=10" in text
    assert "[rank=1] workload end 2 batches=10" in text

    _determined_cli_habits(cluster, tmp_path, ids, bodies)


def _determined_cli_habits(cluster, tmp_path: Path, ids: dict, bodies: dict) -> None:
    """Determined's CLI options against the finished experiments."""
    import io
    import json
    import tarfile

    core, trial_exp = ids["dauntless"], ids["trial"]
    (core_trial,) = bodies["dauntless"]["trials"]
    out = cluster.det("e", "describe", str(core), str(ids["determined"]), "--metrics", "--csv")
    text = out.stdout
    assert "Experiment ID,Trial ID,Group,Batches,Metric,Value" in text
    assert f"{core},{core_trial['id']},validation,10,x,30" in text
    assert text.count("core-d") == 2  # both experiments' rows

    cluster.det("e", "label", "add", str(core), "baseline")
    cluster.det("e", "label", "add", str(core), "v2")
    cluster.det("e", "label", "remove", str(core), "baseline")
    config = json.loads(cluster.det("e", "config", str(core), "--json").stdout)
    assert config["labels"] == ["v2"]

    cluster.det("e", "download-model-def", str(core), "--output-dir", str(tmp_path / "md"))
    tgz = tmp_path / "md" / f"experiment_{core}_model_def.tgz"
    with tarfile.open(fileobj=io.BytesIO(tgz.read_bytes()), mode="r:gz") as tar:
        names = tar.getnames()
        assert "core_dist.py" in names or "./core_dist.py" in names
        member = next(n for n in names if n.endswith("extra/answer.txt"))  # -i/--include
        assert tar.extractfile(member).read() == b"42"

    uuid = core_trial["latest_checkpoint"]
    for flag in (["--latest"], ["--best"], ["--uuid", uuid]):
        dest = tmp_path / ("dl" + flag[0])
        cluster.det("t", "download", str(core_trial["id"]), *flag, "--output-dir", str(dest))
        assert (dest / "x.txt").read_text() == "30"
    cluster.det("c", "download", uuid, "--output-dir", str(tmp_path / "c"))
    assert (tmp_path / "c" / "x.txt").read_text() == "30"
    cluster.det("e", "download", str(core), "--output-dir", str(tmp_path / "e"))
    assert (tmp_path / "e" / uuid / "x.txt").read_text() == "30"

    storage = Path(cluster.api(f"/checkpoints/{uuid}")["checkpoint"]["storage_path"])
    cluster.det("c", "delete", uuid, "--yes")
    assert cluster.api(f"/checkpoints/{uuid}")["checkpoint"]["state"] == "DELETED"
    assert not storage.exists()

    lines = cluster.det("e", "logs", str(trial_exp), "--json", "--rank-id", "1", "--tail", "3")
    parsed = [json.loads(x) for x in lines.stdout.splitlines()]
    assert len(parsed) == 3 and all(x["log"].startswith("[rank=1] ") for x in parsed), parsed
    (det_trial,) = bodies["trial"]["trials"]
    warned = cluster.det("t", "logs", str(det_trial["id"]), "--level", "WARNING").stdout
    assert "FutureWarning" in warned and "legacy epoch start" not in warned
    head = cluster.det("t", "logs", str(det_trial["id"]), "--head", "2").stdout
    assert len(head.splitlines()) == 2
