"""Task environments on the process runtime, with a real master, agent and trials:
bind mounts (read-only enforced), startup-hook.sh (and its failure), a cached Python
environment with a package from PyPI shared by two trials, a build failure that is not
retried, and an image refused at create in a pool of process agents."""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
from pathlib import Path

import httpx
import pytest

from dauntless.agent.runtimes import mount_namespace_prefix

pytestmark = pytest.mark.integration

PACKAGE = "inflection==0.5.1"
"""A small pure-Python package from PyPI that the agent's own environment lacks."""


def _script_config(name: str, entrypoint: str, extra: str = "", trials: int = 1) -> str:
    vals = ", ".join(str(i) for i in range(trials))
    hps = f"hyperparameters: {{x: {{type: categorical, vals: [{vals}]}}}}"
    return f"""
name: {name}
entrypoint: {json.dumps(entrypoint)}
{hps}
searcher: {{name: grid, metric: loss, max_length: {{batches: 1}}, max_concurrent_trials: 1}}
{extra}
"""


def _create(cluster, config: str, context: Path | None = None) -> httpx.Response:
    files = {"config": (None, config)}
    if context is not None:
        tgz = context.parent / (context.name + ".tgz")
        with tarfile.open(tgz, "w:gz") as tar:
            for p in sorted(context.iterdir()):
                tar.add(p, arcname=p.name)
        files["context"] = ("context.tgz", tgz.read_bytes(), "application/gzip")
    return httpx.post(
        cluster.url + "/api/v1/experiments", files=files, headers=cluster.headers(), timeout=60
    )


def _run(cluster, config: str, context: Path | None = None, timeout: float = 240) -> dict:
    r = _create(cluster, config, context)
    assert r.status_code == 201, r.text
    return cluster.wait_experiment(r.json()["experiment"]["id"], timeout=timeout)


def _logs(cluster, trial_id: int) -> str:
    return "\n".join(x["log"] for x in cluster.api(f"/trials/{trial_id}/logs", limit=10000)["logs"])


@pytest.fixture()
def cluster(cluster_factory, tmp_path):
    c = cluster_factory(f"sqlite:///{tmp_path}/m.db")
    c.start_master()
    c.start_agent(slots=1, extra_args=("--runtime", "process"))
    return c


def test_bind_mounts_hooks_and_image_refusal(cluster, tmp_path):
    # An image cannot run on a pool whose agents run processes: refused at create.
    r = _create(cluster, _script_config("img", "true", "environment: {image: 'python:3.11'}"))
    assert r.status_code == 400, r.text
    (err,) = r.json()["errors"]
    assert err["field"] == "environment.image"
    assert "no agent in resource pool 'default' can run container images" in err["message"]
    assert "agent-1 (process)" in err["message"]
    agent = cluster.api("/agents")["agents"][0]
    assert agent["runtime"]["name"] == "process" and agent["runtime"]["containers"] is False
    table = cluster.det("agent", "list").stdout.splitlines()
    assert "Runtime" in table[0] and " process " in table[-1]

    if mount_namespace_prefix()[0] is None:
        pytest.skip(f"this machine cannot make mount namespaces: {mount_namespace_prefix()[1]}")
    data = tmp_path / "host-data"
    data.mkdir()
    (data / "hello.txt").write_text("hello from the host\n")
    target = tmp_path / "seen"
    ctx = tmp_path / "ctx"
    ctx.mkdir()
    (ctx / "startup-hook.sh").write_text("echo hook ran\nexport FROM_HOOK=yes\n")
    entry = (
        f"cat {target}/hello.txt; echo FROM_HOOK=$FROM_HOOK; "
        f"if touch {target}/new 2>/dev/null; then echo WRITABLE; exit 3; else echo READONLY; fi"
    )
    extra = f"bind_mounts: [{{host_path: {data}, container_path: {target}, read_only: true}}]"
    body = _run(cluster, _script_config("mounts", entry, extra), ctx)
    assert body["experiment"]["state"] == "COMPLETED", cluster.dump_logs(body["experiment"]["id"])
    logs = _logs(cluster, body["trials"][0]["id"])
    assert "running startup-hook.sh" in logs and "hook ran" in logs
    assert "hello from the host" in logs and "FROM_HOOK=yes" in logs and "READONLY" in logs
    assert not (data / "new").exists() and list(target.iterdir()) == []

    # A failing hook fails the trial with its exit code; the entrypoint never runs.
    (ctx / "startup-hook.sh").write_text("echo about to fail\nexit 7\n")
    body = _run(cluster, _script_config("hook", "echo ENTRYPOINT-RAN", "max_restarts: 0"), ctx)
    assert body["experiment"]["state"] == "ERROR"
    logs = _logs(cluster, body["trials"][0]["id"])
    assert "startup-hook.sh failed with exit code 7" in logs
    assert "ENTRYPOINT-RAN" not in logs


def test_python_environment_built_once_and_reused(cluster, tmp_path):
    probe = subprocess.run(
        [sys.executable, "-c", "import inflection"], capture_output=True, cwd=cluster.tmp
    )
    assert probe.returncode != 0  # (run from tmp: the agent's own Python lacks it)
    entry = 'python -c \'import inflection, sys; print("CAMEL", inflection.camelize("a_b"))\''
    extra = f"environment: {{python_requirements: [{PACKAGE!r}]}}"
    body = _run(cluster, _script_config("pyenv", entry, extra, trials=2), timeout=400)
    assert body["experiment"]["state"] == "COMPLETED", cluster.dump_logs(body["experiment"]["id"])
    first, second = sorted(body["trials"], key=lambda t: t["id"])
    first_logs, second_logs = _logs(cluster, first["id"]), _logs(cluster, second["id"])
    assert "building environment" in first_logs and "CAMEL AB" in first_logs
    assert "using cached Python environment" in second_logs and "CAMEL AB" in second_logs
    assert "building environment" not in second_logs
    envs = list((cluster.tmp / "agent-1" / "python-envs").glob("*/.dauntless-env-ready"))
    assert len(envs) == 1

    # A requirement pip cannot satisfy ends the trial with pip's error, without restarts.
    bad = "environment: {python_requirements: ['dauntless-no-such-package-xyz==9.9']}"
    body = _run(cluster, _script_config("badenv", "true", bad))
    assert body["experiment"]["state"] == "ERROR"
    (trial,) = body["trials"]
    assert trial["restarts"] == 0 and trial["state"] == "ERROR"
    logs = _logs(cluster, trial["id"])
    assert "building the Python environment failed (pip exited with 1)" in logs
    assert "No matching distribution found for dauntless-no-such-package-xyz" in logs
