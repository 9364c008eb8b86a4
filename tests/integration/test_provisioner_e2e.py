"""Agents provisioned on demand with the ``local`` provider, with real processes: a
master with no agents launches instances (agent processes) for pending trials, stops
them when idle, replaces one that never registers, and launches no duplicates when it
restarts in the middle of a scale-up."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

pytestmark = pytest.mark.integration

EXPERIMENT = """
name: provisioned
entrypoint: model_def:DigitsTrial
hyperparameters:
  global_batch_size: 32
  lr: {{type: categorical, vals: [0.003, 0.01]}}
  hidden_size: 32
  dropout: 0.1
  optimizer: adam
data: {{validation_fraction: 0.2, split_seed: 0}}
records_per_epoch: 1438
searcher:
  name: grid
  metric: accuracy
  smaller_is_better: false
  max_length: {{batches: {batches}}}
min_validation_period: {{batches: {batches}}}
max_restarts: 0
"""

MASTER = """
resource_pools:
  - pool_name: default
    provider:
      type: local
      instance_type: {{slots: 1}}
      max_instances: {max_instances}
      max_idle_agent_period: {idle}
      max_agent_starting_period: {starting}
      work_dir: {work_dir}
      startup_script: |
{script}
"""


@pytest.fixture(autouse=True)
def _stop_instances(tmp_path):
    """Local instances outlive masters by design: stop any a test leaves behind."""
    yield
    if not (tmp_path / "m.db").exists():
        return
    for row in _instances(tmp_path):
        pid = row["provider_id"]
        if pid and _alive(int(pid)):
            try:
                os.killpg(int(pid), signal.SIGKILL)
            except ProcessLookupError:
                pass


def _start(cluster_factory, tmp_path: Path, script: str, **kw) -> object:
    cfg = tmp_path / "master.yaml"
    indented = "\n".join("        " + line for line in script.strip().splitlines())
    cfg.write_text(
        MASTER.format(work_dir=tmp_path / "instances", script=indented or "        true", **kw)
    )
    cluster = cluster_factory(f"sqlite:///{tmp_path}/m.db")
    cluster.master_args = ["--config-file", str(cfg)]
    cluster.start_master()
    return cluster


def _instances(tmp_path: Path) -> list[dict]:
    engine = sa.create_engine(f"sqlite:///{tmp_path}/m.db")
    try:
        with engine.connect() as conn:
            rows = conn.execute(sa.text("SELECT * FROM instances ORDER BY launched_at, id"))
            return [dict(r._mapping) for r in rows]
    finally:
        engine.dispose()


def _create(cluster, tmp_path: Path, batches: int) -> int:
    path = tmp_path / "exp.yaml"
    path.write_text(EXPERIMENT.format(batches=batches))
    out = cluster.det("experiment", "create", str(path), "examples/digits").stdout
    return int(out.split("Created experiment")[1].split()[0])


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def _wait(cond, timeout: float, what: str, cluster) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if cond():
            return
        time.sleep(0.2)
    raise AssertionError(f"{what} not within {timeout} s:\n{cluster.dump_logs()}")


def test_scale_up_for_two_trials_then_idle_instances_stop(cluster_factory, tmp_path):
    cluster = _start(cluster_factory, tmp_path, "", max_instances=3, idle="2s", starting="60s")
    assert cluster.api("/agents")["agents"] == []
    assert _instances(tmp_path) == []
    exp_id = _create(cluster, tmp_path, batches=40)
    body = cluster.wait_experiment(exp_id, timeout=240)
    assert body["experiment"]["state"] == "COMPLETED", cluster.dump_logs(exp_id)
    assert [t["state"] for t in body["trials"]] == ["COMPLETED", "COMPLETED"]
    rows = _instances(tmp_path)
    # Two trials of one slot each: two one-slot instances, never more.
    assert len(rows) == 2, rows
    pool = cluster.api("/resource-pools")["resource_pools"][0]
    assert (pool["provider"], pool["max_instances"]) == ("local", 3)
    assert all(r["provider"] == "local" and r["registered_at"] is not None for r in rows)
    # Idle for max_idle_agent_period (2 s): terminated, agents gone, processes ended.
    _wait(
        lambda: all(r["state"] == "TERMINATED" for r in _instances(tmp_path)),
        60,
        "idle instances terminated",
        cluster,
    )
    rows = _instances(tmp_path)
    assert {r["reason"] for r in rows} == {"idle"}
    assert cluster.api("/agents")["agents"] == []
    for r in rows:
        assert not _alive(int(r["provider_id"])), r


def test_instance_that_never_registers_is_replaced(cluster_factory, tmp_path):
    marker = tmp_path / "first-launch"
    # The first instance hangs in its startup script and never starts its agent.
    script = f'if mkdir "{marker}" 2>/dev/null; then sleep 600; fi'
    cluster = _start(cluster_factory, tmp_path, script, max_instances=1, idle="1h", starting="4s")
    _create(cluster, tmp_path, batches=20)

    def replaced() -> bool:
        rows = _instances(tmp_path)
        return len(rows) == 2 and rows[1]["state"] == "RUNNING"

    _wait(replaced, 120, "a replacement instance registered", cluster)
    first, second = _instances(tmp_path)
    assert first["state"] == "TERMINATED" and first["reason"] == "never registered"
    assert first["registered_at"] is None
    assert not _alive(int(first["provider_id"]))
    assert second["registered_at"] is not None
    # The replacement's agent gets the waiting trial.
    _wait(
        lambda: any(
            sl["allocation_id"]
            for a in cluster.api("/agents")["agents"]
            if a["id"] == second["id"]
            for sl in a["slots"]
        ),
        60,
        "a trial placed on the replacement",
        cluster,
    )
    assert [a["id"] for a in cluster.api("/agents")["agents"]] == [second["id"]]
    assert len(_instances(tmp_path)) == 2


def test_master_restart_mid_scale_up_launches_no_duplicates(cluster_factory, tmp_path):
    # Instances take a few seconds to register: the master is killed while they start.
    cluster = _start(
        cluster_factory, tmp_path, "sleep 4", max_instances=2, idle="1h", starting="120s"
    )
    exp_id = _create(cluster, tmp_path, batches=20)
    _wait(
        lambda: len([r for r in _instances(tmp_path) if r["state"] == "STARTING"]) == 2,
        60,
        "two instances starting",
        cluster,
    )
    os.killpg(cluster.master.pid, signal.SIGKILL)
    cluster.master.wait(timeout=10)
    cluster.start_master()
    body = cluster.wait_experiment(exp_id, timeout=240)
    assert body["experiment"]["state"] == "COMPLETED", cluster.dump_logs(exp_id)
    rows = _instances(tmp_path)
    assert len(rows) == 2, rows
    assert all(r["state"] == "RUNNING" for r in rows), rows
    assert sorted(a["id"] for a in cluster.api("/agents")["agents"]) == sorted(
        r["id"] for r in rows
    )
