"""The Determined compatibility surface off the cluster: the ``determined`` package only
when opted in, local-mode training with unchanged Determined code, the launch layers'
command lines, and ClusterInfo's node fields."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

from dauntless.core import ClusterInfo
from dauntless.launch.torch_distributed import parse_args
from dauntless.launch.wrap_rank import resolve_rank
from dauntless.pytorch import data_length, to_device


def _run(code: str, **env: str) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if not k.startswith("DET_")}
    full.pop("PYTHONPATH", None)
    full.update(env)
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=full,
        capture_output=True,
        text=True,
        timeout=120,
    )


LOCAL_TRIAL = """
import dauntless.compat
dauntless.compat.install()

import torch
import determined as det
from determined import pytorch
from determined.experimental import test_one_batch


class Trial(pytorch.PyTorchTrial):
    def __init__(self, context):
        self.context = context
        self.model = context.wrap_model(torch.nn.Linear(1, 1, bias=False))
        self.opt = context.wrap_optimizer(torch.optim.SGD(self.model.parameters(), lr=0.1))

    def build_training_data_loader(self):
        x = torch.ones(16, 1)
        return pytorch.DataLoader(torch.utils.data.TensorDataset(x, 2 * x), batch_size=4)

    build_validation_data_loader = build_training_data_loader

    def train_batch(self, batch, epoch_idx, batch_idx):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.model(x), y)
        self.context.backward(loss)
        self.context.step_optimizer(self.opt)
        return loss

    def evaluate_batch(self, batch):
        x, y = batch
        return {"validation_loss": torch.nn.functional.mse_loss(self.model(x), y)}


assert det.get_cluster_info() is None
with pytorch.init(hparams={"global_batch_size": 4}) as context:
    trial = Trial(context)
    pytorch.Trainer(trial, context).fit(max_length=pytorch.Batch(8), checkpoint_period=pytorch.Batch(100))
    print("trained", context.current_train_batch())
tested = test_one_batch(Trial, hparams={"global_batch_size": 4})
print("one batch", tested.context.current_train_batch())
print("module", det.__file__)
"""


def test_determined_code_trains_in_local_mode_after_opting_in(tmp_path):
    r = _run(LOCAL_TRIAL, TMPDIR=str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert "trained 8" in r.stdout and "one batch 1" in r.stdout
    assert "dauntless/compat/_shim/determined/__init__.py" in r.stdout


def test_no_determined_without_opting_in():
    r = _run("import importlib.util; print(importlib.util.find_spec('determined'))")
    assert r.stdout.strip() == "None", "a 'determined' package is installed in site-packages"
    r = _run("import dauntless.compat, sys; print(dauntless.compat.is_installed())")
    assert r.stdout.strip() == "False"
    path = _run("import runpy; runpy.run_module('dauntless.compat', run_name='__main__')")
    r = _run(
        "import determined, determined.launch.torch_distributed", PYTHONPATH=path.stdout.strip()
    )
    assert r.returncode == 0, r.stderr


def test_launcher_command_lines():
    assert parse_args(["python3", "train.py", "--lr", "1"]) == (
        None,
        ["python3", "train.py", "--lr", "1"],
    )
    assert parse_args(["--", "python3", "train.py"]) == (None, ["python3", "train.py"])
    nproc, cmd = parse_args(["--trial", "model_def:Trial"])
    assert nproc is None and cmd[1:] == [
        "-m",
        "dauntless.exec.harness",
        "--trial",
        "model_def:Trial",
    ]
    assert parse_args(["--nproc_per_node", "1", "--", "x"]) == (1, ["x"])
    assert parse_args(["--nproc-per-node=2", "--", "x"]) == (2, ["x"])
    with pytest.raises(SystemExit, match="'--master_port' is not supported"):
        parse_args(["--master_port", "9", "--", "x"])
    with pytest.raises(SystemExit, match="empty command"):
        parse_args(["--"])
    with pytest.raises(SystemExit, match="exactly one"):
        parse_args(["--trial", "a:B", "extra"])


def test_nproc_override_runs_fewer_workers():
    launcher = [sys.executable, "-m", "dauntless.launch.torch_distributed"]
    code = "import os; print('w', os.environ['RANK'], os.environ['WORLD_SIZE'])"
    env = {k: v for k, v in os.environ.items() if not k.startswith("DET_") and k != "RANK"}
    env.update(DET_WORLD_SIZE="3", DET_SLOT_IDS="a,b,c")
    r = subprocess.run(
        [*launcher, "--nproc_per_node", "2", "--", sys.executable, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    assert sorted(r.stdout.split("\n")[:2]) == ["[rank=0] w 0 2", "[rank=1] w 1 2"]
    r = subprocess.run(
        [*launcher, "--nproc_per_node", "4", "--", "true"], env=env, capture_output=True, text=True
    )
    assert r.returncode != 0 and "exceeds the node's 3 slot(s)" in r.stderr


def test_wrap_rank_prefixes_both_streams_and_keeps_the_exit_code():
    code = "import sys; print('out'); sys.stdout.write('a\\rb\\n'); print('err', file=sys.stderr); sys.exit(4)"
    env = dict(os.environ, OMPI_COMM_WORLD_RANK="5")
    env.pop("RANK", None)
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "dauntless.launch.wrap_rank",
            "RANK,OMPI_COMM_WORLD_RANK",
            "--",
            sys.executable,
            "-c",
            code,
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 4
    assert r.stdout.splitlines() == ["[rank=5] out", "[rank=5] a", "[rank=5] b"]
    assert r.stderr.splitlines() == ["[rank=5] err"]
    assert resolve_rank("7", {}) == 7
    with pytest.raises(ValueError, match="not set"):
        resolve_rank("NOPE", {})


def test_cluster_info_node_fields():
    env = {
        "DET_MASTER": "http://m:8080",
        "DET_ALLOCATION_ID": "a.1",
        "DET_TASK_TYPE": "NOTEBOOK",
        "DET_SLOT_IDS": "cpu0,cpu1",
        "DET_PART_INDEX": "0",
        "DET_NUM_PARTS": "1",
        "DET_ADVERTISE_ADDR": "10.0.0.5",
    }
    info = ClusterInfo.from_env(env)
    assert info.container_addrs == ("10.0.0.5",) and info.container_rank == 0
    assert info.slot_ids == ("cpu0", "cpu1")
    two = dict(env, DET_PART_INDEX="1", DET_NUM_PARTS="2", DET_CONTAINER_ADDRS="h0,h1")
    info = ClusterInfo.from_env(two)
    assert info.container_rank == 1 and info.container_addrs == ("h0", "h1")


def test_data_length_and_to_device():
    x = torch.zeros(5, 2)
    assert data_length(x) == 5
    assert data_length({"a": [np.zeros((3, 1))], "b": x}) == 3
    assert data_length((x, x)) == 5
    with pytest.raises(TypeError, match="unrecognized batch type"):
        data_length(object())
    moved = to_device({"x": np.ones(2)}, "cpu", warned_types=set())
    assert isinstance(moved["x"], torch.Tensor)
