"""The ``slurm`` resource manager against a real Slurm on this machine: Debian's
``slurm-wlm`` and ``munge`` (scripts/test.sh installs them as root), started here with
a generated ``slurm.conf`` in a temporary directory (own munge socket and key,
non-default ports). Trials of the digits example run as Slurm jobs submitted with
``sbatch``; pause, activate and kill go through Slurm. Skipped, saying why, where Slurm
is missing or cannot start."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

from .conftest import free_port

pytestmark = pytest.mark.integration

EXPERIMENT = """
name: slurm-{slots}
entrypoint: model_def:DigitsTrial
hyperparameters:
  global_batch_size: 32
  lr: 0.003
  hidden_size: 32
  dropout: 0.1
  optimizer: adam
data: {{validation_fraction: 0.2, split_seed: 0}}
records_per_epoch: 1438
searcher:
  name: single
  metric: accuracy
  smaller_is_better: false
  max_length: {{batches: {batches}}}
min_validation_period: {{batches: {batches}}}
min_checkpoint_period: {{batches: 50}}
resources: {{slots_per_trial: {slots}}}
max_restarts: 0
"""

SLURM_CONF = """
ClusterName=dauntlesstest
SlurmctldHost={host}
SlurmUser=root
SlurmdUser=root
SlurmctldPort={ctld_port}
SlurmdPort={d_port}
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={dir}/munge.sock
StateSaveLocation={dir}/state
SlurmdSpoolDir={dir}/spool
SlurmctldPidFile={dir}/slurmctld.pid
SlurmdPidFile={dir}/slurmd.pid
SlurmctldLogFile={dir}/slurmctld.log
SlurmdLogFile={dir}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
ReturnToService=2
MpiDefault=none
KillWait=5
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
NodeName={host} CPUs={cpus} State=UNKNOWN
PartitionName=batch Nodes={host} Default=YES MaxTime=INFINITE State=UP
"""


def _pid(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    """A running munged + slurmctld + slurmd; yields the slurm.conf path."""
    missing = [
        b for b in ("munged", "slurmctld", "slurmd", "sbatch", "sinfo") if not shutil.which(b)
    ]
    if missing:
        pytest.skip(
            f"Slurm is not installed ({', '.join(missing)} missing): scripts/test.sh installs "
            "Debian's slurm-wlm and munge when run as root"
        )
    if os.geteuid() != 0:
        pytest.skip("starting slurmctld/slurmd with SlurmUser=root needs root")
    if os.cpu_count() is None or os.cpu_count() < 2:
        pytest.skip("the 2-slot Slurm test needs a node with 2 CPUs")
    d = tmp_path_factory.mktemp("slurm")
    for sub in ("state", "spool"):
        (d / sub).mkdir()
    key = d / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o600)
    host = socket.gethostname().split(".")[0]
    conf = d / "slurm.conf"
    conf.write_text(
        SLURM_CONF.format(
            host=host, dir=d, ctld_port=free_port(), d_port=free_port(), cpus=os.cpu_count()
        )
    )
    env = dict(os.environ, SLURM_CONF=str(conf))
    started: list[Path] = []

    def run(argv: list[str]) -> None:
        out = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
        if out.returncode != 0:
            pytest.skip(f"Slurm could not start: {argv[0]} exited {out.returncode}: {out.stderr}")

    try:
        run(
            [
                "munged",
                "--force",
                f"--socket={d}/munge.sock",
                f"--key-file={key}",
                f"--pid-file={d}/munged.pid",
                f"--log-file={d}/munged.log",
                f"--seed-file={d}/munge.seed",
            ]
        )
        started.append(d / "munged.pid")
        run(["slurmctld", "-f", str(conf)])
        started.append(d / "slurmctld.pid")
        run(["slurmd", "-f", str(conf)])
        started.append(d / "slurmd.pid")
        deadline = time.time() + 60
        state = ""
        while time.time() < deadline:
            out = subprocess.run(
                ["sinfo", "-h", "-o", "%T"], env=env, capture_output=True, text=True
            )
            state = out.stdout.strip()
            if state == "idle":
                break
            time.sleep(0.5)
        else:
            logs = "\n".join(p.read_text()[-2000:] for p in d.glob("*.log"))
            pytest.skip(f"the Slurm node did not become idle in 60 s (state {state!r}):\n{logs}")
        yield conf
    finally:
        for pidfile in reversed(started):
            pid = _pid(pidfile)
            if pid:
                try:
                    os.kill(pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        time.sleep(0.5)


@pytest.fixture()
def cluster(slurm, cluster_factory, tmp_path):
    cfg = tmp_path / "master.yaml"
    cfg.write_text(
        "resource_manager:\n"
        "  type: slurm\n"
        f"  slurm_conf: {slurm}\n"
        "  slot_type: cpu\n"
        "  poll_interval: 0.5\n"
        f"  work_dir: {tmp_path / 'slurm-work'}\n"
    )
    c = cluster_factory(f"sqlite:///{tmp_path}/m.db")
    c.master_args = ["--config-file", str(cfg)]
    c.start_master()
    c.slurm_env = dict(os.environ, SLURM_CONF=str(slurm))
    return c


def _create(cluster, tmp_path: Path, slots: int, batches: int) -> int:
    path = tmp_path / f"exp-{slots}-{batches}.yaml"
    path.write_text(EXPERIMENT.format(slots=slots, batches=batches))
    out = cluster.det("experiment", "create", str(path), "examples/digits").stdout
    return int(out.split("Created experiment")[1].split()[0])


def _our_jobs(cluster) -> list[str]:
    out = subprocess.run(
        ["squeue", "-h", "-o", "%j"], env=cluster.slurm_env, capture_output=True, text=True
    ).stdout
    return [line for line in out.split() if line.startswith("dauntless-")]


def _wait(cond, timeout: float, what: str, cluster, exp_id=None) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if cond():
            return
        time.sleep(0.2)
    raise AssertionError(f"{what} not within {timeout} s:\n{cluster.dump_logs(exp_id)}")


def _trial(cluster, exp_id: int) -> dict:
    trials = cluster.api(f"/experiments/{exp_id}")["trials"]
    return trials[0] if trials else {"total_batches": 0, "run_id": 0}


def test_two_slot_digits_completes_through_sbatch(cluster, tmp_path):
    host = socket.gethostname().split(".")[0]
    agents = cluster.api("/agents")["agents"]
    assert [a["id"] for a in agents] == [f"{host}.batch"]
    assert len(agents[0]["slots"]) == os.cpu_count()
    pools = cluster.api("/resource-pools")["resource_pools"]
    assert pools[0]["name"] == "default"
    assert pools[0]["description"] == "Slurm partition batch"
    assert pools[0]["slots_total"] == os.cpu_count()
    assert '"Slurm partition batch"' in cluster.det("resource-pool", "list", "--json").stdout

    exp_id = _create(cluster, tmp_path, slots=2, batches=30)
    body = cluster.wait_experiment(exp_id, timeout=240)
    assert body["experiment"]["state"] == "COMPLETED", cluster.dump_logs(exp_id)
    trial = body["trials"][0]
    assert trial["total_batches"] == 30
    logs = cluster.api(f"/trials/{trial['id']}/logs", limit=10000)["logs"]
    assert logs, "no task logs arrived from the Slurm job"
    # One job for the 2-slot trial: one launcher on the node starts the two ranks.
    scripts = list((tmp_path / "slurm-work" / "jobs").glob("*.sh"))
    assert len(scripts) == 1
    _wait(lambda: not _our_jobs(cluster), 30, "Slurm jobs gone", cluster)


def test_one_slot_pause_activate_complete_then_kill(cluster, tmp_path):
    # Long enough that the pause reaches the trial mid-training (150 batches took
    # 1.5 s, and the pause came after its last batch).
    exp_id = _create(cluster, tmp_path, slots=1, batches=600)
    _wait(lambda: _trial(cluster, exp_id)["total_batches"] >= 50, 180, "a checkpoint", cluster)
    assert len(_our_jobs(cluster)) == 1
    cluster.det("experiment", "pause", str(exp_id))
    # Graceful preemption first: the trial checkpoints and exits; its job is gone.
    _wait(lambda: not _our_jobs(cluster), 90, "the paused trial's job gone", cluster, exp_id)
    body = cluster.api(f"/experiments/{exp_id}")
    assert body["experiment"]["state"] == "PAUSED"
    paused = body["trials"][0]
    assert paused["restarts"] == 0 and paused["latest_checkpoint"]
    assert paused["total_batches"] < 600
    cluster.det("experiment", "activate", str(exp_id))
    body = cluster.wait_experiment(exp_id, timeout=240)
    assert body["experiment"]["state"] == "COMPLETED", cluster.dump_logs(exp_id)
    trial = body["trials"][0]
    assert trial["total_batches"] == 600 and trial["restarts"] == 0
    assert trial["run_id"] >= 2  # it ran again, as a new Slurm job, after the pause
    assert len(list((tmp_path / "slurm-work" / "jobs").glob("*.sh"))) == 2

    # A kill of a running trial cancels its job with scancel.
    killed = _create(cluster, tmp_path, slots=1, batches=3000)
    _wait(lambda: _trial(cluster, killed)["total_batches"] > 0, 180, "training", cluster)
    cluster.det("experiment", "kill", str(killed))
    body = cluster.wait_experiment(killed, timeout=120)
    assert body["experiment"]["state"] == "CANCELED"
    _wait(lambda: not _our_jobs(cluster), 60, "the killed trial's job cancelled", cluster, killed)
    assert "cancelled Slurm job" in cluster.logs[0].read_text()


def test_command_runs_as_a_slurm_job_in_its_work_dir(cluster, tmp_path):
    """A command (issue 20) on a Slurm pool runs without the rank launcher, in its
    ``work_dir``, like on an agent."""
    wd = tmp_path / "cmd-wd"
    wd.mkdir()
    out = cluster.det("cmd", "run", "-d", "--config", f"work_dir={wd}", "pwd; echo s-$((6*7))")
    task_id = out.stdout.strip().splitlines()[-1]

    def done() -> bool:
        return cluster.api(f"/tasks/{task_id}")["task"]["state"] in ("COMPLETED", "ERROR")

    _wait(done, cluster.deadline(120), "the command's end", cluster)
    assert cluster.api(f"/tasks/{task_id}")["task"]["state"] == "COMPLETED"
    logs = cluster.det("task", "logs", task_id).stdout
    assert str(wd) in logs and "s-42" in logs
