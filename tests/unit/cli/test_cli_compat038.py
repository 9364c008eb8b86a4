"""``det experiment create`` prints the master's config warnings; ``continue`` and
``fork`` send what Determined's API takes (against the real master, in this process)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dauntless.cli import main
from dauntless.master.testing import Cluster

CONFIG = """\
entrypoint: python3 train.py
searcher: {name: single, metric: loss}
tensorboard_storage: {type: shared_fs}
"""


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_create_prints_warnings(tmp_path: Path, cluster: Cluster, capsys) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(CONFIG)
    warning = "tensorboard_storage: Determined 0.38 accepts and ignores it; so does Dauntless"
    code, out, err = run(capsys, "-m", cluster.url, "e", "create", str(cfg))
    assert code == 0 and out == "Created experiment 1\n"
    assert err == f"Warning: {warning}\n"
    assert cluster.experiment(1)["experiment"]["state"] == "ACTIVE"


def test_continue_sends_id_and_overrides(cluster: Cluster, capsys) -> None:
    exp = cluster.create_experiment(CONFIG + "max_restarts: 0\n", context=False)
    cluster.action(exp, "cancel")
    cluster.wait_state(exp, "CANCELED")
    code, out, err = run(
        capsys,
        "-m",
        cluster.url,
        "-u",
        "admin",  # the experiment's owner
        "e",
        "continue",
        str(exp),
        "--config",
        "searcher.max_length.batches=50",
    )
    assert code == 0 and out == f"Continued experiment {exp}\n", err
    body = cluster.experiment(exp)
    assert body["experiment"]["state"] == "ACTIVE"
    assert body["experiment"]["config"]["searcher"]["max_length"]["batches"] == 50
    assert [t["state"] for t in body["trials"]] == ["ACTIVE"]


def test_fork_merges_overrides_into_the_parent_config(cluster: Cluster, capsys) -> None:
    parent = cluster.create_experiment(
        CONFIG + "hyperparameters: {global_batch_size: 8, lr: 0.1}\n", activate=False
    )
    code, out, err = run(
        capsys, "-m", cluster.url, "e", "fork", str(parent), "--config", "hyperparameters.lr=0.5"
    )
    assert code == 0 and out == f"Created experiment 2 (forked from {parent})\n", err
    parent_cfg = cluster.experiment(parent)["experiment"]["config"]
    child = cluster.experiment(2)["experiment"]
    assert child["config"]["hyperparameters"] == {
        "global_batch_size": {"type": "const", "val": 8},
        "lr": {"type": "const", "val": 0.5},
    }
    assert child["config"]["searcher"] == parent_cfg["searcher"]
