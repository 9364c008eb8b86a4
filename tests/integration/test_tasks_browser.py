"""Notebooks and TensorBoards in a real headless Chromium through the master's proxy
(issue 20), against a real master, agent, JupyterLab and TensorBoard.

* A notebook opens signed in, runs a cell printing a value and ``DET_MASTER``; another
  user and a task's session token get 403 on its URL; closed, it is killed after its
  ``idle_timeout``.
* A TensorBoard over a finished digits experiment shows its ``accuracy`` scalar.
* JupyterLab or TensorBoard missing from the agent's environment: the task fails with a
  message naming the extra to install.

Skipped, with the reason, when Playwright or Chromium is missing (as test_webui.py), or
JupyterLab/TensorBoard are not installed here (the ``test`` extra has them).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import httpx
import pytest

from .conftest import Cluster
from .test_webui import SHOTS, _browser

pytestmark = pytest.mark.integration

NOTEBOOK = {
    "cells": [
        {
            "cell_type": "code",
            "execution_count": None,
            "id": "c1",
            "metadata": {},
            "outputs": [],
            "source": ["import os\n", "print('value', 6 * 7, os.environ['DET_MASTER'])"],
        }
    ],
    "metadata": {
        "kernelspec": {
            "display_name": "Python 3 (ipykernel)",
            "language": "python",
            "name": "python3",
        }
    },
    "nbformat": 4,
    "nbformat_minor": 5,
}

DIGITS = """
name: tb-digits
entrypoint: model_def:DigitsTrial
data: {validation_fraction: 0.2, split_seed: 0}
records_per_epoch: 1438
reproducibility: {experiment_seed: 3}
hyperparameters: {global_batch_size: 32, lr: 0.01, hidden_size: 32, dropout: 0.0, optimizer: adam}
searcher: {name: single, metric: accuracy, smaller_is_better: false, max_length: {batches: 30}}
min_validation_period: {batches: 15}
scheduling_unit: 5
max_restarts: 0
"""


@pytest.fixture()
def cluster(cluster_factory, tmp_path) -> Cluster:
    c = cluster_factory(f"sqlite:///{tmp_path}/master.db")
    c.start_master()
    c.start_agent(slots=2)
    return c


def _login(c: Cluster, username: str, password: str = "") -> str:
    r = httpx.post(
        c.url + "/api/v1/auth/login", json={"username": username, "password": password}, timeout=30
    )
    r.raise_for_status()
    return r.json()["token"]


def test_notebook_and_tensorboard_through_the_proxy(cluster: Cluster, tmp_path: Path) -> None:
    pytest.importorskip("jupyterlab", reason="JupyterLab is not installed (the test extra)")
    pytest.importorskip("tensorboard", reason="TensorBoard is not installed (the test extra)")
    pw, browser = _browser()
    c = cluster
    ctx = tmp_path / "nb"
    ctx.mkdir()
    (ctx / "check.ipynb").write_text(json.dumps(NOTEBOOK))
    try:
        # A digits experiment trains (its slot) while JupyterLab starts (no slot).
        cfg = tmp_path / "digits.yaml"
        cfg.write_text(DIGITS)
        out = c.det("experiment", "create", str(cfg), "examples/digits").stdout
        exp_id = int(out.split("Created experiment")[1].split()[0])
        task_id = (
            c.det(
                "notebook",
                "start",
                "-d",
                "--context",
                str(ctx),
                "--config",
                "resources.slots=0",
                "--config",
                "idle_timeout=30s",
            )
            .stdout.strip()
            .splitlines()[-1]
        )
        url = c.det("notebook", "open", "--no-browser", task_id, timeout=200).stdout.strip()
        assert url == f"{c.url}/proxy/{task_id}/lab"

        page = browser.new_page(viewport={"width": 1300, "height": 900})
        page.goto(c.url + "/")  # the WebUI signs in as determined, the notebook's owner
        page.wait_for_selector("#experiments-table", timeout=30000)
        page.goto(f"{c.url}/proxy/{task_id}/lab/tree/check.ipynb")
        page.wait_for_selector(".jp-Notebook .jp-Cell .cm-content", timeout=120000)
        # The kernel is started and idle (the status bar says so) before the cell runs.
        page.wait_for_selector(".jp-StatusBar-TextItem:has-text('| Idle')", timeout=120000)
        page.click(".jp-Notebook .jp-Cell .cm-content")
        page.keyboard.press("Shift+Enter")
        out = page.wait_for_selector(".jp-OutputArea-output:has-text('value 42')", timeout=90000)
        assert f"value 42 {c.url}" in out.inner_text()
        SHOTS.mkdir(exist_ok=True)
        page.screenshot(path=str(SHOTS / "notebook.png"))

        # Another user, and a task's (or trial's) session token, are refused.
        c.det("-u", "admin", "user", "create", "alice", "--password", "pw-alice")
        other = browser.new_context()
        other.request.post(
            c.url + "/api/v1/auth/login", data={"username": "alice", "password": "pw-alice"}
        )
        denied = other.new_page().goto(f"{c.url}/proxy/{task_id}/lab")
        assert denied is not None and denied.status == 403
        assert "only the owner" in denied.text()
        other.close()
        r = httpx.get(
            f"{c.url}/proxy/{task_id}/lab",
            headers={"Authorization": f"Bearer {_login(c, 'alice', 'pw-alice')}"},
            timeout=30,
        )
        assert r.status_code == 403
        # The task's own session token, which the agent hands it as a file (issue 29).
        probe = (
            "import httpx, os; print('status', httpx.get(os.environ['DET_MASTER'] + "
            f"'/proxy/{task_id}/lab', headers={{'Authorization': 'Bearer ' + "
            "open(os.environ['DET_SESSION_TOKEN_FILE']).read()}).status_code)"
        )
        proc = c.det("cmd", "run", "--config", "resources.slots=0", sys.executable, "-c", probe)
        assert "status 403" in proc.stdout
        assert httpx.get(f"{c.url}/proxy/{task_id}/lab", timeout=30).status_code == 401
        # Closed, the notebook becomes idle (checked at the end).
        page.close()

        # TensorBoard over the finished experiment shows its accuracy scalar.
        done = c.wait_experiment(exp_id, timeout=240)
        assert done["experiment"]["state"] == "COMPLETED", c.dump_logs(exp_id)
        url = c.det("tensorboard", "start", "--no-browser", str(exp_id), timeout=200).stdout
        url = url.strip().splitlines()[-1]
        tb = c.api("/tasks", type="TENSORBOARD")["tasks"]
        assert len(tb) == 1 and url == f"{c.url}/proxy/{tb[0]['id']}/"
        assert tb[0]["experiment_ids"] == [exp_id] and tb[0]["slots"] == 0
        page = browser.new_page(viewport={"width": 1300, "height": 900})
        page.goto(c.url + "/")
        page.wait_for_selector("#experiments-table", timeout=30000)
        page.goto(url + "#timeseries")
        page.wait_for_selector("text=validation/accuracy", timeout=120000)
        page.fill("input[placeholder='Filter tags (regex)']", "accuracy")
        page.screenshot(path=str(SHOTS / "tensorboard.png"))

        # The WebUI's tasks page lists it with Open, Logs and Kill; the experiment page's
        # TensorBoard button reuses it (the same set of experiments).
        tb_id = tb[0]["id"]
        page.goto(f"{c.url}/experiments/{exp_id}")
        page.click("#open-tensorboard")
        page.wait_for_url("**/tasks")
        row = f"#tasks-table tr[data-task='{tb_id}']"
        page.wait_for_selector(f"{row} a[data-open='{tb_id}']")
        assert len(c.api("/tasks", type="TENSORBOARD")["tasks"]) == 1
        page.click(f"{row} button[data-logs='{tb_id}']")
        page.wait_for_selector(f"#task-logs[data-task='{tb_id}']:has-text('TensorBoard is ready')")
        page.screenshot(path=str(SHOTS / "tasks.png"), full_page=True)
        page.click(f"{row} button[data-kill='{tb_id}']")
        c.wait_task(tb_id, {"CANCELED"}, timeout=60)

        # The notebook, idle since its page closed, was killed after its idle_timeout.
        ended = c.wait_task(task_id, {"CANCELED", "ERROR", "COMPLETED"}, timeout=120)
        assert ended["state"] == "CANCELED" and "idle" in (ended["exit_message"] or ""), ended
    finally:
        browser.close()
        pw.stop()


def test_missing_service_packages_name_the_extra(cluster_factory, tmp_path: Path) -> None:
    """An agent whose Python cannot import jupyterlab/tensorboard: the task ends ERROR
    with a message naming the extra (the modules are hidden by a shadowing package)."""
    c = cluster_factory(f"sqlite:///{tmp_path}/master.db")
    c.start_master()
    shadow = tmp_path / "shadow"
    for name in ("jupyterlab", "tensorboard"):
        (shadow / name).mkdir(parents=True)
        (shadow / name / "__init__.py").write_text(f"raise ImportError('no {name} here')\n")
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = str(shadow) + (os.pathsep + old if old else "")
    try:
        c.start_agent(slots=1)
    finally:
        if old is None:
            os.environ.pop("PYTHONPATH")
        else:
            os.environ["PYTHONPATH"] = old
    proc = c.det("notebook", "start", "--no-browser", "--config", "resources.slots=0", check=False)
    assert proc.returncode == 1
    assert "pip install 'dauntless[notebook]'" in proc.stderr
    nb = c.api("/tasks", type="NOTEBOOK")["tasks"][0]
    assert nb["state"] == "ERROR" and "dauntless[notebook]" in nb["exit_message"]

    exp_cfg = tmp_path / "e.yaml"
    exp_cfg.write_text(DIGITS.replace("max_length: {batches: 30}", "max_length: {batches: 1}"))
    exp_id = int(
        c.det("experiment", "create", str(exp_cfg), "examples/digits", "--paused")
        .stdout.split("Created experiment")[1]
        .split()[0]
    )
    proc = c.det("tensorboard", "start", "--no-browser", str(exp_id), check=False)
    assert proc.returncode == 1
    assert "pip install 'dauntless[tensorboard]'" in proc.stderr
