"""Commands, shells and task views against a real master, agent and task processes
(issue 20): ``det cmd run``, ``det shell start``, ``det task list``, bad input."""

from __future__ import annotations

import os
import sys
import time

import httpx
import pytest

from .conftest import REPO, Cluster

pytestmark = pytest.mark.integration


@pytest.fixture()
def cluster(cluster_factory, tmp_path) -> Cluster:
    c = cluster_factory(f"sqlite:///{tmp_path}/master.db")
    c.start_master()
    c.start_agent(slots=1)
    return c


def test_cmd_run_completes_and_fails_with_exit_code(cluster: Cluster, tmp_path) -> None:
    c = cluster
    proc = c.det("cmd", "run", 'python -c "print(41+1)"', timeout=120)
    assert "42" in proc.stdout.splitlines()
    tasks = c.api("/tasks", type="COMMAND")["tasks"]
    assert [t["state"] for t in tasks] == ["COMPLETED"]
    assert tasks[0]["exit_code"] == 0 and tasks[0]["owner"] == "determined"

    # A failing command: ERROR with its exit code, and det exits with that code.
    proc = c.det("cmd", "run", "sh", "-c", "echo boom >&2; exit 7", check=False, timeout=120)
    assert proc.returncode == 7, proc.stderr
    assert "boom" in proc.stdout
    failed = c.api("/tasks", type="COMMAND")["tasks"][-1]
    assert failed["state"] == "ERROR" and failed["exit_code"] == 7
    assert "ERROR" in proc.stderr

    # Context directory, config overrides and the task's environment.
    ctx = tmp_path / "ctx"
    ctx.mkdir()
    (ctx / "hello.py").write_text(
        "import os\nprint('ctx', os.environ['GREETING'], os.environ['DET_TASK_TYPE'])\n"
    )
    (ctx / "big.bin").write_bytes(b"x" * 1000)
    (ctx / ".detignore").write_text("big.bin\n")
    proc = c.det(
        "cmd",
        "run",
        "--context",
        str(ctx),
        "--config",
        "environment.environment_variables=[GREETING=hi]",
        "-c",
        "resources.slots=0",
        "sh -c 'python hello.py; ls'",
        timeout=120,
    )
    assert "ctx hi COMMAND" in proc.stdout
    assert "big.bin" not in proc.stdout
    last = c.api("/tasks")["tasks"][-1]
    assert last["slots"] == 0 and last["state"] == "COMPLETED"
    cfg = c.det("cmd", "config", last["id"]).stdout
    assert "GREETING=hi" in cfg

    # The Core API/SDK works from a task with the owner's token.
    proc = c.det(
        "cmd",
        "run",
        sys.executable,
        "-c",
        "from dauntless.client import Session; print('me', Session().whoami()['username'])",
        timeout=120,
    )
    assert "me determined" in proc.stdout

    logs = c.det("task", "logs", tasks[0]["id"]).stdout
    assert "42" in logs.splitlines()
    listing = c.det("task", "list").stdout
    assert tasks[0]["id"] in listing and "COMPLETED" in listing and "ERROR" in listing


def test_queued_task_is_visible_killable_and_restored_after_master_restart(
    cluster_factory, tmp_path
) -> None:
    c = cluster_factory(f"sqlite:///{tmp_path}/master.db")
    c.start_master()
    # No agent yet: commands wait in the queue, visible in det task list.
    queued = c.det("cmd", "run", "-d", 'python -c "print(6*7)"').stdout.strip().splitlines()[-1]
    doomed = c.det("cmd", "run", "-d", "sleep 600").stdout.strip().splitlines()[-1]
    notebook = c.det("notebook", "start", "-d").stdout.strip().splitlines()[-1]
    listing = c.det("task", "list").stdout
    assert queued in listing and "QUEUED" in listing
    nb_row = next(line for line in listing.splitlines() if line.startswith(notebook))
    assert "NOTEBOOK" in nb_row and "QUEUED" in nb_row
    assert "CANCELED" in c.det("notebook", "kill", notebook).stdout
    assert c.api(f"/tasks/{queued}")["task"]["state"] == "QUEUED"
    # A queued task is canceled at once.
    assert "CANCELED" in c.det("cmd", "kill", doomed).stdout

    # Master restart: the queued command is restored from the database and runs once an
    # agent comes.
    c.stop(c.master)
    c.start_master()
    assert c.api(f"/tasks/{queued}")["task"]["state"] == "QUEUED"
    c.start_agent(slots=1)
    done = c.wait_task(queued, {"COMPLETED", "ERROR"}, timeout=90)
    assert done["state"] == "COMPLETED", c.dump_logs()
    assert "42" in c.det("task", "logs", queued).stdout.splitlines()
    assert c.api(f"/tasks/{doomed}")["task"]["state"] == "CANCELED"


def test_running_command_survives_master_restart(cluster: Cluster) -> None:
    c = cluster
    task_id = (
        c.det("cmd", "run", "-d", "sh -c 'sleep 6; echo survived-$((40+2))'")
        .stdout.strip()
        .splitlines()[-1]
    )
    c.wait_task(task_id, {"RUNNING"})
    c.stop(c.master)
    c.start_master()
    done = c.wait_task(task_id, {"COMPLETED", "ERROR"}, timeout=90)
    assert done["state"] == "COMPLETED", done
    assert "survived-42" in c.det("task", "logs", task_id).stdout


def test_bad_input(cluster: Cluster) -> None:
    c = cluster
    proc = c.det("task", "logs", "nosuchid", check=False)
    assert proc.returncode == 1 and "task nosuchid not found" in proc.stderr
    proc = c.det("cmd", "kill", "nosuchid", check=False)
    assert proc.returncode == 1 and "not found" in proc.stderr
    r = httpx.get(c.url + "/proxy/nosuchid/", headers=c.headers(), timeout=10)
    assert r.status_code == 404
    proc = c.det("cmd", "run", "--config", "resources.resource_pool=gpu", "true", check=False)
    assert proc.returncode == 1 and "resources.resource_pool" in proc.stderr
    proc = c.det("cmd", "run", "--config", "idle_timeout=5m", "true", check=False)
    assert proc.returncode == 1 and "idle_timeout" in proc.stderr
    proc = c.det("cmd", "run", "--config", "resources.slotz=1", "true", check=False)
    assert proc.returncode == 1 and "resources.slotz" in proc.stderr


def test_shell_runs_a_command_and_an_interactive_session(cluster: Cluster) -> None:
    c = cluster
    proc = c.det(
        "shell",
        "start",
        "--config",
        "resources.slots=0",
        "--",
        "sh",
        "-c",
        "echo out-$((6*7)); exit 3",
        check=False,
        timeout=120,
    )
    assert proc.returncode == 3, proc.stderr
    assert "out-42" in proc.stdout
    shell_id = c.api("/tasks", type="SHELL")["tasks"][0]["id"]

    pexpect = pytest.importorskip("pexpect")
    child = pexpect.spawn(
        sys.executable,
        ["-m", "dauntless.cli.main", "shell", "open", shell_id],
        cwd=str(REPO),
        env={**c.env(), "TERM": "dumb"},
        timeout=60,
        encoding="utf-8",
        dimensions=(30, 100),
    )
    prompt = r"[#$] $"
    try:
        child.expect(prompt)  # typed before the shell's prompt, input may be discarded
        child.sendline("echo first-$((20+1))")
        child.expect("first-21")
        child.sendline("stty size")
        child.expect("30 100")
        child.setwinsize(40, 120)
        time.sleep(0.3)
        child.sendline("stty size")
        child.expect("40 120")
        child.sendline("sleep 30")
        time.sleep(0.5)
        child.sendcontrol("c")
        child.expect(prompt)
        child.sendline("echo after-interrupt")
        child.expect("after-interrupt")
        child.sendline("exit 5")
        child.expect(pexpect.EOF)
    finally:
        child.close()
    assert child.exitstatus == 5
    c.det("shell", "kill", shell_id)
    c.wait_task(shell_id, {"CANCELED"})
    assert os.environ.get("DAUNTLESS_SERVICE_TOKEN") is None
