"""A DeepSpeed checkpoint restores onto another number of ranks with its optimizer
state: ZeRO partitions written by 2 ranks load on 1 and those of 1 rank on 2, through
DeepSpeed's universal checkpoint (``pytorch/deepspeed/_universal.py``), with the full
Adam state (``exp_avg``, ``exp_avg_sq``) and fp32 weights equal to those saved, no
batch trained twice, and the conversion's temporary directory removed.

Real processes: DeepSpeed's CPU accelerator over gloo on 127.0.0.1, the Trainer API in
local mode (ds_universal_worker.py). Skipped, naming the reason, without deepspeed."""

from __future__ import annotations

import multiprocessing
import os
import socket
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

os.environ.setdefault("DS_ACCELERATOR", "cpu")
pytest.importorskip(
    "deepspeed", reason="the deepspeed extra is not installed (pip install 'dauntless[deepspeed]')"
)

from dauntless.core import DistributedContext  # noqa: E402
from dauntless.pytorch.deepspeed._universal import (  # noqa: E402
    TEMP_PREFIX,
    ConversionError,
    Layout,
    needs_conversion,
    saved_layout,
    universal_copies,
)

pytestmark = [
    pytest.mark.skipif(sys.platform != "linux", reason="gloo over TCP is tested on Linux"),
    pytest.mark.filterwarnings("ignore::UserWarning"),
]

sys.path.insert(0, str(Path(__file__).parent))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _train(tmp: Path, size: int, **options: Any) -> list[dict[str, Any]]:
    """Run ``size`` ranks of ds_universal_worker.run; every rank's record."""
    import ds_universal_worker

    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["torch", "deepspeed", "dauntless.pytorch", "ds_universal_worker"])
    options = {"storage": str(tmp / "ckpt"), "tmpdir": str(tmp / "scratch"), **options}
    port = _free_port()
    procs = [
        ctx.Process(target=ds_universal_worker.run, args=(r, size, port, str(tmp), options))
        for r in range(size)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(300)
    assert [p.exitcode for p in procs] == [0] * size
    return [
        torch.load(tmp / f"{options['label']}-rank{r}.pt", weights_only=False) for r in range(size)
    ]


def _assert_same_state(got: dict[str, Any], want: dict[str, Any], what: str) -> None:
    assert got.keys() == want.keys()
    for name, tensors in want.items():
        for label, a, b in zip(("fp32", "exp_avg", "exp_avg_sq"), got[name], tensors, strict=True):
            assert torch.equal(a, b), f"{what}: {name} {label} differs"


def test_zero2_restores_from_two_ranks_onto_one_and_back_with_adam_state(tmp_path):
    (tmp_path / "scratch").mkdir()
    # 2 ranks train 4 batches; the checkpoint at batch 4 holds 2 optimizer partitions.
    two = _train(tmp_path, 2, label="two", batches=4, zero_stage=2)
    uuid = two[0]["checkpoints"][-1]
    assert sorted(p.name for p in (tmp_path / "ckpt" / uuid / "model0").iterdir()) == [
        "mp_rank_00_model_states.pt",
        "zero_pp_rank_0_mp_rank_00_optim_states.pt",
        "zero_pp_rank_1_mp_rank_00_optim_states.pt",
    ]
    # 1 rank restores it: the weights and Adam state it starts from are the 2 ranks' last.
    (one,) = _train(tmp_path, 1, label="one", batches=6, zero_stage=2, latest=uuid)
    assert one["error"] is None
    assert one["calls"] == [4, 5]  # no batch trained twice
    assert one["first"] is not None
    _assert_same_state(one["first"], two[0]["last"], "2 ranks -> 1")
    assert one["global_steps"] == 6  # DeepSpeed's own step counter came along
    assert any("converting it to DeepSpeed's universal checkpoint" in line for line in one["log"])
    # And the 1-rank checkpoint at batch 6 restores on 2 ranks.
    back = _train(tmp_path, 2, label="back", batches=7, zero_stage=2, latest=one["checkpoints"][-1])
    for rank in back:
        assert rank["error"] is None
        assert rank["calls"] == [6]
        _assert_same_state(rank["first"], one["last"], "1 rank -> 2")
    # The conversions were removed (torch keeps its own cache in TMPDIR too).
    assert not [p for p in (tmp_path / "scratch").iterdir() if p.name.startswith(TEMP_PREFIX)]


def test_layouts_are_read_from_file_names(tmp_path):
    for name in (
        "mp_rank_00_model_states.pt",
        "zero_pp_rank_0_mp_rank_00_optim_states.pt",
        "zero_pp_rank_1_mp_rank_00_optim_states.pt",
        "zero_pp_rank_2_mp_rank_00_optim_states.pt",
    ):
        (tmp_path / name).touch()
    assert saved_layout(tmp_path) == Layout("zero", 3)
    (tmp_path / "zero_pp_rank_0_mp_rank_00_model_states.pt").touch()
    assert saved_layout(tmp_path) == Layout("zero3", 3)
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "mp_rank_00_model_states.pt").touch()
    assert saved_layout(plain) == Layout("none", None)
    assert needs_conversion(Layout("zero", 2), Layout("zero", 1))
    assert needs_conversion(Layout("zero3", 1), Layout("zero3", 4))
    assert not needs_conversion(Layout("zero", 2), Layout("zero", 2))
    assert not needs_conversion(Layout("none", None), Layout("zero", 2))


def test_a_failed_conversion_names_why_and_leaves_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path / "scratch"))
    monkeypatch.setattr("tempfile.tempdir", None)
    (tmp_path / "scratch").mkdir()
    tag = tmp_path / "ckpt" / "model0"
    tag.mkdir(parents=True)
    (tag / "mp_rank_00_model_states.pt").write_bytes(b"not a checkpoint")
    (tag / "zero_pp_rank_0_mp_rank_00_optim_states.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(RuntimeError) as info:
        with universal_copies(tag.parent, ["model0"], DistributedContext(), reason="a test"):
            pass
    message = str(info.value)
    assert "could not be restored (a test)" in message
    assert "ds_to_universal could not convert" in message and str(tag) in message
    assert list((tmp_path / "scratch").iterdir()) == []
    # SGD's momentum is not carried by DeepSpeed's conversion (Adam's state only): refused
    # naming the state, before ds_to_universal runs.
    momentum = {0: {"momentum_buffer": torch.zeros(3)}}
    torch.save(
        {"optimizer_state_dict": {"base_optimizer_state": {"state": momentum}}},
        tag / "zero_pp_rank_0_mp_rank_00_optim_states.pt",
    )
    with pytest.raises(ConversionError, match=r"Adam-like optimizers only .*momentum_buffer"):
        with universal_copies(tag.parent, ["model0"], DistributedContext(), reason="a test"):
            pass
    assert list((tmp_path / "scratch").iterdir()) == []
