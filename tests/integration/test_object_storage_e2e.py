"""Checkpoints in S3 (SeaweedFS), GCS (fake-gcs-server) and Azure Blob (Azurite) with a
real master, agent and digits trials.

For each store, one cluster runs two experiments side by side. While both train, the
store's process is stopped (SIGSTOP), so their next uploads hang: the second experiment
is killed with its upload in flight (it leaves no COMPLETED checkpoint for it, and once
the store answers again GC deletes whatever the dead upload wrote), the first is paused
(its pause waits for the upload, which completes when the store continues). Then `det
checkpoint download` and `det experiment download --top-n` get the paused checkpoint's
files through the master, the experiment resumes from the bucket and completes, and a GC
policy of all zeros empties the bucket of checkpoints. With S3 (SeaweedFS), `det checkpoint
delete` runs while the store is down (killed): the checkpoint stays DELETING, and once the
store is back the master's retries delete its files and mark it DELETED (issue 38).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from pathlib import Path

import pytest
import torch
from object_stores import list_keys, start_seaweedfs

pytestmark = pytest.mark.integration

CONFIG = """
name: object-store
entrypoint: model_def:DigitsTrial
hyperparameters:
  global_batch_size: 16
  lr: 0.003
  hidden_size: 32
  dropout: 0.0
  optimizer: adam
data: {validation_fraction: 0.2, split_seed: 0}
records_per_epoch: 1438
searcher:
  name: single
  metric: accuracy
  smaller_is_better: false
  max_length: {batches: MAX_LENGTH}
min_validation_period: {batches: 40}
min_checkpoint_period: {batches: 40}
scheduling_unit: 10
reproducibility: {experiment_seed: 7}
max_restarts: 0
"""
MAIN_LENGTH = 400
"""Batches of the experiment that is paused while its upload hangs."""


def _create(cluster, tmp_path: Path, storage: dict, name: str, max_length: int) -> int:
    path = tmp_path / f"{name}.yaml"
    text = CONFIG.replace("MAX_LENGTH", str(max_length))
    path.write_text(text + "checkpoint_storage: " + json.dumps(storage) + "\n")
    out = cluster.det("experiment", "create", str(path), "examples/digits").stdout
    return int(out.split("Created experiment")[1].split()[0])


def _wait(cond, what: str, cluster, timeout: float = 120.0, exp_ids=(), server=None):
    """Poll ``cond`` every 0.1 s; on timeout fail with the cluster's logs, the trial logs
    of ``exp_ids`` and the end of the store's own log."""
    timeout = cluster.deadline(timeout)  # scaled to the machine's load now
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = cond()
        if value:
            return value
        time.sleep(0.1)
    dumps = [cluster.dump_logs(tuple(exp_ids))]
    if server is not None and server.log.exists():
        dumps.append(
            f"===== {server.kind} server log\n{server.log.read_text(errors='replace')[-6000:]}"
        )
    raise AssertionError(f"{what} within {timeout} s:\n" + "\n".join(dumps))


_T0 = [0.0]


def _phase(label: str) -> None:
    """Print the seconds since the previous phase (shown with pytest -s)."""
    now = time.monotonic()
    print(f"[object-store e2e] {label}: {now - _T0[0]:.1f} s", flush=True)
    _T0[0] = now


def _checkpoints(cluster, exp_id: int) -> list[dict]:
    return cluster.api(f"/experiments/{exp_id}/checkpoints")["checkpoints"]


def _ckpt_keys(server, storage: dict) -> list[str]:
    return [k for k in list_keys(server, storage) if "/tensorboard/" not in f"/{k}"]


@contextlib.contextmanager
def _frozen(server):
    """The store's process stopped (SIGSTOP): requests hang until it continues."""
    os.killpg(server.proc.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.killpg(server.proc.pid, signal.SIGCONT)


def _slots_free(cluster) -> bool:
    return all(s["allocation_id"] is None for s in cluster.api("/agents")["agents"][0]["slots"])


def _all_logs(cluster, trial_id: int) -> list[dict]:
    """Every log line of a trial, following ``after_id`` across pages of 1,000."""
    out: list[dict] = []
    while True:
        page = cluster.api(f"/trials/{trial_id}/logs", after_id=out[-1]["id"] if out else 0)
        if not page["logs"]:
            return out
        out.extend(page["logs"])


@pytest.fixture
def own_store(store_server, tmp_path):
    """The store this test uses. The s3 case kills its store and starts it again
    (`det checkpoint delete` while it is down), so it gets a SeaweedFS of its own: the
    session's shared one, once restarted on its data, accepted writes into buckets that
    do not exist, which the storage unit tests rely on being refused."""
    if store_server.kind != "s3":
        yield store_server
        return
    server = start_seaweedfs(tmp_path / "own-s3")
    try:
        yield server
    finally:
        server.stop()


def test_checkpoints_in_object_store(own_store, cluster_factory, tmp_path):
    store_server = own_store
    _T0[0] = time.monotonic()
    storage = store_server.storage(prefix="dauntless/ckpts")
    doomed_storage = store_server.storage()
    cluster = cluster_factory(f"sqlite:///{tmp_path}/m.db")
    cluster.start_master()
    cluster.start_agent(slots=2)
    _phase("cluster up")
    # 400 batches, not fewer: on a loaded machine the test's polls can lag the trial by
    # seconds, and a main trial that reached its end before the store froze completed
    # instead of pausing (CI, GCS case).
    exp_id = _create(cluster, tmp_path, storage, "main", MAIN_LENGTH)
    doomed_id = _create(cluster, tmp_path, doomed_storage, "doomed", 400)
    _wait(
        lambda: (
            any(c["state"] == "COMPLETED" for c in _checkpoints(cluster, exp_id))
            and cluster.api(f"/experiments/{doomed_id}")["trials"]
        ),
        "no checkpoint",
        cluster,
        exp_ids=(exp_id, doomed_id),
        server=store_server,
    )
    _phase("first checkpoint")
    with _frozen(store_server):
        uploading = _wait(
            lambda: [c for c in _checkpoints(cluster, doomed_id) if c["state"] == "UPLOADING"],
            "no upload started",
            cluster,
        )
        _phase("upload hanging")
        cluster.det("experiment", "kill", str(doomed_id))
        cluster.det("experiment", "pause", str(exp_id))
        body = cluster.wait_experiment(doomed_id, timeout=120)
        assert body["experiment"]["state"] == "CANCELED"
        states = {c["uuid"]: c["state"] for c in _checkpoints(cluster, doomed_id)}
        assert states[uploading[0]["uuid"]] != "COMPLETED"
        _phase("killed")
    _wait(lambda: _slots_free(cluster), "the paused trial did not free its slot", cluster)
    _phase("paused")
    trial = cluster.api(f"/experiments/{exp_id}")["trials"][0]
    assert trial["state"] == "ACTIVE"
    paused = cluster.api(f"/checkpoints/{trial['latest_checkpoint']}")["checkpoint"]
    assert paused["state"] == "COMPLETED" and 40 <= paused["total_batches"] < MAIN_LENGTH
    # The pause waited for the upload that hung: the last checkpoint is the stopping one.
    assert paused["total_batches"] == trial["total_batches"]
    uuid = paused["uuid"]
    base = "" if store_server.kind == "azure" else "dauntless/ckpts/"
    keys = _ckpt_keys(store_server, storage)
    # Every file the checkpoint reported is in the bucket, under <prefix>/<uuid>/.
    assert {f"{base}{uuid}/{f}" for f in paused["resources"]} <= set(keys)
    assert f"{base}{uuid}/metadata.json" in keys and f"{base}{uuid}/state-dict.pth" in keys
    assert paused["storage_path"].endswith(f"{base}{uuid}")

    # det checkpoint download (through the master, from the bucket).
    out = tmp_path / "dl"
    cluster.det("checkpoint", "download", uuid, "-o", str(out))
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()) == sorted(
        paused["resources"]
    )
    state = torch.load(out / "state-dict.pth", map_location="cpu", weights_only=False)
    assert state["trial_state"]["batches_trained"] == paused["total_batches"]
    _phase("downloaded")

    cluster.det("experiment", "activate", str(exp_id))
    body = cluster.wait_experiment(exp_id)
    assert body["experiment"]["state"] == "COMPLETED", cluster.dump_logs(exp_id)
    trial = body["trials"][0]
    assert trial["total_batches"] == MAIN_LENGTH and trial["restarts"] == 0
    logs = "\n".join(x["log"] for x in _all_logs(cluster, trial["id"]))
    assert f"restored checkpoint {uuid}" in logs, "the run did not resume from the bucket"
    _phase("resumed and completed")

    top = tmp_path / "top"
    cluster.det("experiment", "download", str(exp_id), "--top-n", "1", "-o", str(top))
    (best_dir,) = top.iterdir()
    assert (best_dir / "state-dict.pth").is_file()

    if store_server.kind == "s3":
        _delete_while_the_store_is_down(cluster, store_server, storage, exp_id, base)
        _phase("deleted a checkpoint while the store was down")

    cluster.det(
        "experiment",
        "set",
        "gc-policy",
        str(exp_id),
        "--save-experiment-best",
        "0",
        "--save-trial-best",
        "0",
        "--save-trial-latest",
        "0",
    )
    _wait(
        lambda: all(c["state"] == "DELETED" for c in _checkpoints(cluster, exp_id)),
        "checkpoints not DELETED",
        cluster,
    )
    assert _ckpt_keys(store_server, storage) == []
    _phase("GC emptied the prefix")

    # The dead upload's objects are gone too (GC of the killed trial, with a settle time).
    dead = uploading[0]["uuid"]
    _wait(
        lambda: (
            {c["uuid"]: c["state"] for c in _checkpoints(cluster, doomed_id)}[dead] == "DELETED"
        ),
        "the orphaned upload was not deleted",
        cluster,
    )
    assert dead not in " ".join(list_keys(store_server, doomed_storage))
    _phase("orphan deleted")


def _delete_while_the_store_is_down(cluster, server, storage: dict, exp_id: int, base: str):
    """`det checkpoint delete` with the store killed: the checkpoint is not marked DELETED
    while its files are there; the master retries, and once the store is started again
    the files go and the checkpoint becomes DELETED."""
    completed = [c for c in _checkpoints(cluster, exp_id) if c["state"] == "COMPLETED"]
    uuid = completed[0]["uuid"]
    assert any(k.startswith(f"{base}{uuid}/") for k in _ckpt_keys(server, storage))
    server.stop()  # SIGKILL: connections are refused until it is started again
    try:
        out = cluster.det("checkpoint", "delete", uuid, "--yes").stdout
        assert f"Deleting checkpoint {uuid}" in out and "retries" in out, out
        assert cluster.api(f"/checkpoints/{uuid}")["checkpoint"]["state"] == "DELETING"
    finally:
        server.restart()
    _wait(
        lambda: cluster.api(f"/checkpoints/{uuid}")["checkpoint"]["state"] == "DELETED",
        "the checkpoint deleted while the store was down did not become DELETED",
        cluster,
        server=server,
    )
    assert not any(k.startswith(f"{base}{uuid}/") for k in _ckpt_keys(server, storage))
    for other in completed[1:]:  # the others are untouched
        assert cluster.api(f"/checkpoints/{other['uuid']}")["checkpoint"]["state"] == "COMPLETED"
