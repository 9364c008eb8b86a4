"""Notebooks and TensorBoards in a real headless Chromium through the master's proxy
(issue 20), against a real master, agent, JupyterLab and TensorBoard.

* A script in a page served by user ``determined``'s notebook, opened by a signed-in
  admin, can neither create a user nor read ``/api/v1/users`` (issue 29 scope 4): the
  page is on the proxy origin, the master answers its cookie-carrying POSTs 403 for want
  of the CSRF token, and the browser keeps the master's answers from it.
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
import time
from pathlib import Path

import httpx
import pytest
from chromium import launch_chromium

from .conftest import Cluster
from .test_webui import SHOTS

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


@pytest.fixture(scope="module")
def cluster(module_cluster_factory, tmp_path_factory) -> Cluster:
    """One master and agent for the module's notebook tests."""
    tmp = tmp_path_factory.mktemp("tasks-browser-db")
    c = module_cluster_factory(f"sqlite:///{tmp}/master.db")
    # An origin per task (Chromium takes every *.localhost name for this machine), so
    # that an admin may open another user's notebook in the browser (issue 29).
    c.master_args += ["--proxy-domain", "localhost"]
    c.start_master()
    c.start_agent(slots=2)
    return c


@pytest.fixture(scope="module")
def browser():
    pytest.importorskip("jupyterlab", reason="JupyterLab is not installed (the test extra)")
    pw, browser = launch_chromium()
    yield browser
    browser.close()
    pw.stop()


@pytest.fixture(scope="module")
def notebook(cluster: Cluster, tmp_path_factory) -> str:
    """User determined's notebook (no slot, idle_timeout 30 s) over a context holding
    check.ipynb; its id once it answers."""
    ctx = tmp_path_factory.mktemp("nb")
    (ctx / "check.ipynb").write_text(json.dumps(NOTEBOOK))
    task_id = (
        cluster.det(
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
    return task_id


ATTACK = """async (master) => {
  const out = {};
  const attempt = async (name, url, init) => {
    try {
      const r = await fetch(url, { credentials: "include", ...init });
      out[name] = { status: r.status, body: (await r.text()).slice(0, 300) };
    } catch (e) {
      out[name] = { error: `${e.name}: ${e.message}` };
    }
  };
  const admin = JSON.stringify({ username: "mallory", password: "", admin: true });
  await attempt("read", master + "/api/v1/users", {});
  await attempt("create_json", master + "/api/v1/users",
    { method: "POST", headers: { "Content-Type": "application/json" }, body: admin });
  await attempt("create_simple", master + "/api/v1/users",
    { method: "POST", headers: { "Content-Type": "text/plain" }, body: admin });
  const form = new FormData();
  form.append("entrypoint", JSON.stringify(["touch", "/tmp/dauntless-pwned"]));
  await attempt("command_form", master + "/api/v1/commands", { method: "POST", body: form });
  await attempt("same_origin", "/api/v1/users", {});
  out.cookie = document.cookie;
  return out;
}"""
"""What a script in a task's page tries against the master (``master`` is its URL)."""


def test_a_task_page_cannot_act_as_the_signed_in_admin(
    cluster: Cluster, browser, notebook: str
) -> None:
    c = cluster
    admin = browser.new_context()
    try:
        r = admin.request.post(
            c.url + "/api/v1/auth/login", data={"username": "admin", "password": ""}
        )
        assert r.ok, r.text()
        page = admin.new_page()
        # What reached the network and what the master answered, also where the browser
        # then kept the answer from the page (Chromium's own network events: Playwright
        # reports no response that CORS blocked).
        cdp = admin.new_cdp_session(page)
        cdp.send("Network.enable")
        sent: dict[str, tuple[str, str]] = {}
        status: dict[str, int] = {}
        cdp.on(
            "Network.requestWillBeSent",
            lambda e: sent.setdefault(
                e["requestId"], (e["request"]["method"], e["request"]["url"])
            ),
        )
        cdp.on(
            "Network.responseReceivedExtraInfo",
            lambda e: status.__setitem__(e["requestId"], e["statusCode"]),
        )
        c.det("notebook", "open", "--no-browser", notebook, timeout=200)  # waits until ready
        page.goto(f"{c.url}/proxy/{notebook}/lab")
        page.wait_for_selector(".jp-LabShell", timeout=120000)
        origin = page.evaluate("location.origin")
        # The notebook is served on the proxy origin, not the master's.
        assert origin != c.url and page.url.startswith(f"{origin}/proxy/{notebook}/lab")
        got = page.evaluate(ATTACK, c.url)
        # The page's script cannot read the master's answers (no CORS), cannot send a
        # JSON POST (its preflight is refused), and its simple POSTs are refused 403 by
        # the master for want of the session's CSRF token; its own origin has no API.
        assert got["read"] == {"error": "TypeError: Failed to fetch"}, got
        assert got["create_json"] == {"error": "TypeError: Failed to fetch"}, got
        assert got["create_simple"] == {"error": "TypeError: Failed to fetch"}, got
        assert got["command_form"] == {"error": "TypeError: Failed to fetch"}, got
        assert got["same_origin"]["status"] == 404, got
        assert "dauntless_token" not in got["cookie"]
        page.wait_for_timeout(1000)  # the network events of the last answers
        to_master = sorted(
            (method, url, status.get(rid, 0))
            for rid, (method, url) in sent.items()
            if url.startswith(c.url + "/api/")
        )
        # The page is served at <task id>.localhost, another site than the master's
        # 127.0.0.1, so the browser sends the master's SameSite=Strict cookie with none of
        # its requests: the read and the simple POSTs reached the master unauthenticated
        # (401; on a shared proxy origin of the same site they are refused 403 by the CSRF
        # check instead: tests/unit/master/test_proxy_origin.py), and the JSON POST never
        # left the browser (status 0: its OPTIONS preflight got no CORS grant).
        assert to_master == [
            ("GET", f"{c.url}/api/v1/users", 401),
            ("OPTIONS", f"{c.url}/api/v1/users", 405),
            ("POST", f"{c.url}/api/v1/commands", 401),
            ("POST", f"{c.url}/api/v1/users", 0),
            ("POST", f"{c.url}/api/v1/users", 401),
        ], to_master
        # Nothing was done as the admin.
        users = [u["username"] for u in c.api("/users")["users"]]
        assert "mallory" not in users
        assert c.api("/tasks", type="COMMAND", owner="admin")["tasks"] == []
        page.close()
    finally:
        admin.close()


def _login(c: Cluster, username: str, password: str = "") -> str:
    r = httpx.post(
        c.url + "/api/v1/auth/login", json={"username": username, "password": password}, timeout=30
    )
    r.raise_for_status()
    return r.json()["token"]


def test_notebook_and_tensorboard_through_the_proxy(
    cluster: Cluster, browser, notebook: str, tmp_path: Path
) -> None:
    pytest.importorskip("tensorboard", reason="TensorBoard is not installed (the test extra)")
    c = cluster
    task_id = notebook
    # A digits experiment trains (its slot) while JupyterLab starts (no slot).
    cfg = tmp_path / "digits.yaml"
    cfg.write_text(DIGITS)
    out = c.det("experiment", "create", str(cfg), "examples/digits").stdout
    exp_id = int(out.split("Created experiment")[1].split()[0])
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
    # Every request of TensorBoard's page goes through the proxy and is answered (its
    # fonts were asked for at the proxy origin's root and answered 404). The WebUI's
    # own stream, ended by leaving its page, is not TensorBoard's.
    failed: list[str] = []

    def fail(what: str, url: str) -> None:
        if not url.startswith(c.url + "/api/"):
            failed.append(f"{what} {url}")

    page.on("response", lambda r: fail(str(r.status), r.url) if r.status >= 400 else None)
    page.on("requestfailed", lambda r: fail(str(r.failure), r.url))
    start = time.monotonic()
    page.goto(url + "#timeseries")
    # Its scalars page draws: the accuracy card's line chart (a canvas, or SVG paths).
    page.wait_for_selector("text=validation/accuracy", timeout=120000)
    card = "card-view:has-text('validation/accuracy')"
    page.wait_for_selector(f"{card} line-chart canvas, {card} line-chart svg path", timeout=60000)
    drawn = time.monotonic() - start
    page.wait_for_load_state("networkidle")
    print(f"TensorBoard drew its scalars page {drawn:.1f} s after it was ready")
    assert failed == [], failed
    page.fill("input[placeholder='Filter tags (regex)']", "accuracy")
    page.screenshot(path=str(SHOTS / "tensorboard.png"))

    # The WebUI's tasks page lists it with Open, Logs and Kill and a link to the
    # experiment it shows; the experiment page's TensorBoard button reuses it (the same
    # set of experiments).
    tb_id = tb[0]["id"]
    page.goto(f"{c.url}/experiments/{exp_id}")
    page.click("#open-tensorboard")
    page.wait_for_url("**/tasks")
    row = f"#tasks-table tr[data-task='{tb_id}']"
    page.wait_for_selector(f"{row} a[data-open='{tb_id}']")
    page.click(f"{row} a[href='/experiments/{exp_id}']")
    page.wait_for_url(f"**/experiments/{exp_id}")
    page.wait_for_selector("#open-tensorboard")
    page.go_back()
    page.wait_for_selector(f"{row} a[data-open='{tb_id}']")
    assert len(c.api("/tasks", type="TENSORBOARD")["tasks"]) == 1
    page.click(f"{row} button[data-logs='{tb_id}']")
    page.wait_for_selector(f"#task-logs[data-task='{tb_id}']:has-text('TensorBoard is ready')")
    page.screenshot(path=str(SHOTS / "tasks.png"), full_page=True)
    page.click(f"{row} button[data-kill='{tb_id}']")
    c.wait_task(tb_id, {"CANCELED"}, timeout=60)
    # The experiment page's Notebook button opens the launch form for a notebook about it.
    page.goto(f"{c.url}/experiments/{exp_id}")
    page.click("#open-notebook")
    page.wait_for_selector("#launch-form")
    assert page.input_value("#launch-type") == "notebooks"
    assert page.input_value("#launch-experiments") == str(exp_id)
    page.close()

    # The notebook, idle since its page closed, was killed after its idle_timeout.
    ended = c.wait_task(task_id, {"CANCELED", "ERROR", "COMPLETED"}, timeout=120)
    assert ended["state"] == "CANCELED" and "idle" in (ended["exit_message"] or ""), ended


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


def _launched(page, row: str) -> str:
    """The id of the task the launch form started (its row), or the form's error."""
    page.wait_for_selector(f"{row}, #launch-error:not([hidden])", timeout=60000)
    error = page.query_selector("#launch-error:not([hidden])")
    assert error is None, error.inner_text()
    task_id = page.get_attribute(row, "data-task")
    assert task_id is not None
    return task_id


def test_tasks_page_launch_form_shell_terminal_and_command(
    cluster: Cluster, browser, tmp_path: Path
) -> None:
    """The Tasks page's launch form starts a shell, whose browser terminal (xterm.js
    over the shell's WebSocket, on the proxy origin) runs ``echo`` and shows its output;
    the same form starts a command over an uploaded context directory."""
    c = cluster
    page = browser.new_page(viewport={"width": 1300, "height": 900})
    try:
        page.goto(c.url + "/tasks")
        try:
            page.wait_for_selector("#tasks-table", timeout=60000)
        except Exception as exc:
            SHOTS.mkdir(exist_ok=True)
            page.screenshot(path=str(SHOTS / "tasks-not-drawn.png"))
            body = page.inner_text("body")[:500]
            raise AssertionError(f"the Tasks page did not draw: {body}") from exc
        page.click("#launch-open")
        page.select_option("#launch-type", "shells")
        page.fill("#launch-slots", "0")
        page.fill("#launch-description", "browser shell")
        page.fill("#launch-config", "idle_timeout: 10m\n")
        page.click("#launch-submit")
        row = "#tasks-table tr[data-family='shells']:has-text('browser shell')"
        shell_id = _launched(page, row)
        shell = c.api(f"/tasks/{shell_id}")["task"]
        assert shell["slots"] == 0 and shell["config"]["idle_timeout"] == 600
        # Open (once the shell answers) opens its terminal in a new tab.
        opener = f"{row} a[data-open='{shell_id}']"
        page.wait_for_selector(opener, timeout=120000)
        with page.context.expect_page() as opened:
            page.click(opener)
        term = opened.value
        term.wait_for_selector("#status[data-state='open']", timeout=60000)
        origin = term.evaluate("location.origin")
        assert origin != c.url and term.url == f"{origin}/proxy/{shell_id}/"
        term.wait_for_selector(".xterm-rows")
        term.keyboard.type("echo tasks-ui-$((6*7))\n")
        term.wait_for_selector(".xterm-rows :text('tasks-ui-42')", timeout=30000)
        SHOTS.mkdir(exist_ok=True)
        term.screenshot(path=str(SHOTS / "terminal.png"))
        term.keyboard.type("exit 3\n")
        term.wait_for_selector("body[data-exit='3']", timeout=30000)
        term.close()

        # A command over a context directory (its .detignore and the built-in patterns
        # leave files out), with the experiment field naming nothing.
        ctx = tmp_path / "ctx"
        (ctx / "sub").mkdir(parents=True)
        (ctx / "sub" / "hello.txt").write_text("hello from the context\n")
        (ctx / "secret.key").write_text("left out\n")
        (ctx / ".detignore").write_text("*.key\n")
        (ctx / "__pycache__").mkdir()
        (ctx / "__pycache__" / "x.pyc").write_bytes(b"\0")
        page.select_option("#launch-type", "commands")
        page.fill("#launch-description", "browser command")
        page.fill("#launch-config", "")
        page.fill("#launch-command", "cat sub/hello.txt; ls -A; echo sum=$((2+3))")
        page.set_input_files("#launch-context", str(ctx))
        page.wait_for_selector("#launch-context-info:has-text('4 files in ctx/')")
        page.click("#launch-submit")
        row = "#tasks-table tr[data-family='commands']:has-text('browser command')"
        cmd_id = _launched(page, row)
        done = c.wait_task(cmd_id, {"COMPLETED", "ERROR", "CANCELED"}, timeout=120)
        logs = "\n".join(line["log"] for line in c.api(f"/tasks/{cmd_id}/logs")["logs"])
        assert done["state"] == "COMPLETED", logs
        assert "hello from the context" in logs and "sum=5" in logs, logs
        assert "secret.key" not in logs and "__pycache__" not in logs, logs
        # Bad input is refused in the form, naming the field.
        page.select_option("#launch-type", "tensorboards")
        page.fill("#launch-experiments", "")
        page.click("#launch-submit")
        page.wait_for_selector("#launch-error:has-text('experiments:')")
        page.select_option("#launch-type", "notebooks")
        page.fill("#launch-config", "resources: [1, 2]\nidle: {")
        page.click("#launch-submit")
        page.wait_for_selector("#launch-error:has-text('config:')")
        page.screenshot(path=str(SHOTS / "tasks-launch.png"), full_page=True)
    finally:
        page.close()
