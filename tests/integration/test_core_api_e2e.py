"""End to end: script entrypoints (``python3 train.py``) on a real master and agent.

The Core API example (numpy, ``dauntless.core``) and the Trainer API example (the digits
MLP, ``dauntless.pytorch.Trainer``) run side by side on one agent with two slots and must
both complete with metrics and checkpoints.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]


def _create(cluster, example: str) -> int:
    out = cluster.det(
        "experiment", "create", f"examples/{example}/const.yaml", f"examples/{example}"
    ).stdout
    return int(out.split("Created experiment")[1].split()[0])


def test_core_api_and_trainer_scripts_complete_on_the_cluster(cluster_factory, tmp_path):
    cluster = cluster_factory(f"sqlite:///{tmp_path}/master.db")
    cluster.start_master()
    cluster.start_agent(slots=2)
    t0 = time.time()
    core_id = _create(cluster, "core_api")
    trainer_id = _create(cluster, "trainer")
    core_body = cluster.wait_experiment(core_id, timeout=120)
    trainer_body = cluster.wait_experiment(trainer_id, timeout=120)
    print(f"\nboth experiments completed {time.time() - t0:.1f} s after creation")

    # ---- the Core API script
    assert core_body["experiment"]["state"] == "COMPLETED", cluster.dump_logs(core_id)
    (trial,) = core_body["trials"]
    assert trial["state"] == "COMPLETED" and trial["total_batches"] == 200
    training = cluster.api(f"/trials/{trial['id']}/metrics", group="training")["metrics"]
    assert [m["total_batches"] for m in training] == list(range(20, 201, 20))
    assert training[-1]["values"]["loss"] < training[0]["values"]["loss"]
    (validation,) = cluster.api(f"/trials/{trial['id']}/metrics", group="validation")["metrics"]
    assert validation["total_batches"] == 200 and validation["values"]["validation_loss"] < 0.05
    assert (
        core_body["experiment"]["best_searcher_metric"] == validation["values"]["validation_loss"]
    )
    ckpt = cluster.api(f"/checkpoints/{trial['latest_checkpoint']}")["checkpoint"]
    assert ckpt["total_batches"] == 200
    assert set(ckpt["resources"]) == {"weights.npy", "state.json", "metadata.json"}
    path = Path(ckpt["storage_path"])
    assert json.loads((path / "state.json").read_text()) == {"batches": 200}

    # ---- the Trainer API script
    assert trainer_body["experiment"]["state"] == "COMPLETED", cluster.dump_logs(trainer_id)
    (trial,) = trainer_body["trials"]
    assert trial["state"] == "COMPLETED" and trial["total_batches"] == 1438 * 3 // 32
    validation = cluster.api(f"/trials/{trial['id']}/metrics", group="validation")["metrics"]
    assert [m["total_batches"] for m in validation] == [44, 88, 132, 134]
    assert validation[-1]["values"]["accuracy"] >= 0.85
    training = cluster.api(f"/trials/{trial['id']}/metrics", group="training")["metrics"]
    assert training and all("loss" in m["values"] for m in training)
    ckpt = cluster.api(f"/checkpoints/{trial['latest_checkpoint']}")["checkpoint"]
    path = Path(ckpt["storage_path"])
    assert {
        "state-dict.pth",
        "load_data.json",
        "metadata.json",
        "code/train.py",
        "code/const.yaml",
    } <= set(ckpt["resources"])
    load_data = json.loads((path / "load_data.json").read_text())
    assert load_data["is_trainer"] is True and load_data["trial_cls_spec"] == "train:DigitsTrial"
    state = torch.load(path / "state-dict.pth", weights_only=True)
    assert state["trial_state"]["batches_trained"] == 134
