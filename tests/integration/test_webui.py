"""The WebUI in a real headless Chromium (Debian's package, driven by Playwright) against a
real master and agent: a finished grid search and a trial that keeps running.

Checks that every page loads without console errors, that the charts draw one series per
trial (or per metric), that live logs show a new line within 2 s, and that Pause and
Activate clicked in the UI change the experiment's state. Screenshots of each page go to
``screenshots/`` at the top of the repository (git-ignored).

Skipped, with the reason, when Playwright or Chromium is missing or Chromium cannot
start, or when the UI was not built (no npm).
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import httpx
import pytest
from chromium import launch_chromium

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]
SHOTS = REPO / "screenshots"

BASE = """
entrypoint: model_def:DigitsTrial
data: {validation_fraction: 0.2, split_seed: 0}
records_per_epoch: 1438
reproducibility: {experiment_seed: 11}
max_restarts: 1
"""

SEARCH = (
    BASE
    + """
name: webui-grid
description: two learning rates, forty batches each
hyperparameters:
  global_batch_size: 32
  lr: {type: log, base: 10, minval: -3.0, maxval: -1.0, count: 2}
  hidden_size: 32
  dropout: 0.0
  optimizer: adam
searcher:
  name: grid
  metric: accuracy
  smaller_is_better: false
  max_length: {batches: 40}
  max_concurrent_trials: 2
min_validation_period: {batches: 20}
scheduling_unit: 10
"""
)

RUNNING = (
    BASE
    + """
name: webui-running
description: trains long enough to be watched
hyperparameters:
  global_batch_size: 16
  lr: 0.001
  hidden_size: 32
  dropout: 0.0
  optimizer: adam
searcher:
  name: single
  metric: accuracy
  smaller_is_better: false
  max_length: {batches: 2000000}
min_validation_period: {batches: 100}
min_checkpoint_period: {batches: 20000}
scheduling_unit: 50
"""
)


def _create(cluster, tmp_path: Path, name: str, config: str) -> int:
    path = tmp_path / f"{name}.yaml"
    path.write_text(config)
    out = cluster.det("experiment", "create", str(path), "examples/digits").stdout
    return int(out.split("Created experiment")[1].split()[0])


def _trial_logs(cluster, exp_id: int) -> str:
    out = []
    for t in cluster.api(f"/experiments/{exp_id}")["trials"]:
        lines = cluster.api(f"/trials/{t['id']}/logs")["logs"]
        out.append(f"----- trial {t['id']} ({t['state']})")
        out.extend(line["log"] for line in lines[-60:])
    return "\n".join(out)


def _wait_state(cluster, exp_id: int, states: set[str], timeout: float) -> dict:
    deadline = time.time() + cluster.deadline(timeout)
    while time.time() < deadline:
        body = cluster.api(f"/experiments/{exp_id}")
        if body["experiment"]["state"] in states:
            return body
        time.sleep(0.2)
    raise AssertionError(
        f"experiment {exp_id} not {states} in {timeout} s:\n"
        f"{_trial_logs(cluster, exp_id)}\n{cluster.dump_logs()}"
    )


def _wait_trial(cluster, exp_id: int, batches: int, timeout: float) -> dict:
    deadline = time.time() + cluster.deadline(timeout)
    while time.time() < deadline:
        for t in cluster.api(f"/experiments/{exp_id}")["trials"]:
            if t["total_batches"] >= batches:
                return t
        time.sleep(0.2)
    raise AssertionError(
        f"no trial of experiment {exp_id} trained {batches} batches in "
        f"{timeout} s:\n{_trial_logs(cluster, exp_id)}\n{cluster.dump_logs()}"
    )


@pytest.fixture()
def cluster(cluster_factory, tmp_path):
    c = cluster_factory(f"sqlite:///{tmp_path}/master.db")
    c.start_master()
    c.start_agent("agent-1", slots=2)
    return c


def test_webui_pages_live_updates_and_actions(cluster, tmp_path, deadline):
    pw, browser = launch_chromium()
    SHOTS.mkdir(exist_ok=True)
    errors: list[str] = []
    try:
        search_id = _create(cluster, tmp_path, "search", SEARCH)
        done = _wait_state(cluster, search_id, {"COMPLETED", "ERROR", "CANCELED"}, 120)
        assert done["experiment"]["state"] == "COMPLETED", _trial_logs(cluster, search_id)
        running_id = _create(cluster, tmp_path, "running", RUNNING)
        trial = _wait_trial(cluster, running_id, 200, 60)

        page = browser.new_page(viewport={"width": 1400, "height": 900})
        page.on(
            "console",
            lambda m: errors.append(f"console {m.type}: {m.text}") if m.type == "error" else None,
        )
        page.on("pageerror", lambda e: errors.append(f"page error: {e}"))
        base = cluster.url

        # Page 1: experiments, live, with both experiments and their states.
        page.goto(base + "/")
        page.wait_for_selector(
            f"#experiments-table tr[data-id='{running_id}'][data-state='ACTIVE']"
        )
        page.wait_for_selector(
            f"#experiments-table tr[data-id='{search_id}'][data-state='COMPLETED']"
        )
        assert page.locator("#experiments-table tbody tr").count() == 2
        page.fill("#filter-name", "grid")
        page.wait_for_function(
            "document.querySelectorAll('#experiments-table tbody tr').length === 1"
        )
        page.fill("#filter-name", "")
        page.select_option("#filter-state", "COMPLETED")
        page.wait_for_function(
            "document.querySelectorAll('#experiments-table tbody tr').length === 1"
        )
        page.select_option("#filter-state", "")
        first_id = "document.querySelector('#experiments-table tbody tr').dataset.id"
        page.click("#experiments-table th[data-sort='num_trials']")  # ascending: 1 trial first
        page.wait_for_function(f"{first_id} === '{running_id}'")
        page.click("#experiments-table th[data-sort='num_trials']")  # descending: the search
        page.wait_for_function(f"{first_id} === '{search_id}'")
        page.click("#experiments-table th[data-sort='id']")
        page.screenshot(path=str(SHOTS / "experiments.png"), full_page=True)

        # Page 2: the finished search: one learning curve per trial, one point per trial.
        page.click(f"#experiments-table tr[data-id='{search_id}'] a >> nth=0")
        page.wait_for_url(f"**/experiments/{search_id}")
        search = cluster.api(f"/experiments/{search_id}")
        n_trials = len(search["trials"])
        assert n_trials == 2
        page.wait_for_selector(f"#learning-curves[data-series='{n_trials}'] canvas")
        page.select_option("#hp-view", "scatter")  # the default view: parallel coordinates
        page.wait_for_selector(f"#hparam-scatter[data-points='{n_trials}'] canvas")
        page.wait_for_selector("#trials-table tbody tr[data-trial]")
        assert page.locator("#trials-table tbody tr[data-trial]").count() == n_trials
        # The checkpoints load after the chart and the trials (the page draws those from
        # the stream's first event): wait for their rows.
        n_ckpts = len(cluster.api(f"/experiments/{search_id}/checkpoints")["checkpoints"])
        assert n_ckpts > 0
        page.wait_for_function(
            "document.querySelectorAll('#checkpoints-table tbody tr[data-uuid]').length"
            f" === {n_ckpts}"
        )
        assert "searcher:" in page.inner_text("#config-yaml")
        page.select_option("#curve-group", "training")
        page.wait_for_function("document.querySelector('#curve-metric').value === 'loss'")
        page.wait_for_selector(f"#learning-curves[data-series='{n_trials}'] canvas")
        page.screenshot(path=str(SHOTS / "experiment-search.png"), full_page=True)

        # Page 3: the running trial: charts per metric, and logs that follow new lines.
        page.goto(f"{base}/trials/{trial['id']}")
        training = {
            k
            for m in cluster.api(f"/trials/{trial['id']}/metrics", group="training")["metrics"]
            for k, v in m["values"].items()
            if k not in ("batches", "epochs") and isinstance(v, (int, float))
        }
        page.wait_for_selector(f"#training-charts[data-charts='{len(training)}']")
        assert page.locator("#training-charts .chart[data-series='1'] canvas").count() == len(
            training
        )
        page.wait_for_selector("#validation-charts[data-rendered='1']")
        page.wait_for_selector("#trial-logs div[data-id]")
        # A line the agent ships now shows on the open page, with no reload: a mark set on
        # the page before the line is shipped is still there when the line shows, and only
        # the open log stream brings lines to a page that was not reloaded. The wait's
        # deadline, scaled to the load, is for failure only (how fast a line arrives is
        # not decided by this machine's speed here).
        page.evaluate("window.__beforeTheLine = true")
        alloc = cluster.api("/allocations", trial_id=trial["id"], active="true")["allocations"][0]
        marker = f"webui-marker-{time.time_ns()}"
        httpx.post(
            f"{base}/api/v1/task/logs",
            json={"logs": [{"allocation_id": alloc["id"], "stdtype": "stdout", "log": marker}]},
            headers=cluster.headers(),  # an admin may report for any agent
            timeout=10,
        ).raise_for_status()
        page.wait_for_selector(f"#trial-logs div:has-text('{marker}')", timeout=deadline(30) * 1000)
        assert page.evaluate("window.__beforeTheLine === true"), "the page was reloaded"
        page.wait_for_selector("#trial-runs-table tbody tr")
        page.screenshot(path=str(SHOTS / "trial-running.png"), full_page=True)

        # Page 4: the cluster: two slots, one busy with the running trial.
        page.goto(base + "/cluster")
        page.wait_for_selector("[data-slot][data-state='busy']")
        assert page.locator("[data-slot]").count() == 2
        assert (
            page.locator(
                "[data-slot][data-state='busy'] a", has_text=f"trial {trial['id']}"
            ).count()
            == 1
        )
        assert page.inner_text("[data-stat='busy'] b") == "1"
        page.screenshot(path=str(SHOTS / "cluster.png"), full_page=True)

        # Pause and activate from the experiments table, confirming each.
        page.goto(base + "/experiments")
        row = f"#experiments-table tr[data-id='{running_id}']"
        page.click(f"{row} button[data-action='pause']")
        page.wait_for_selector("#confirm-dialog[open]")
        page.screenshot(path=str(SHOTS / "confirm-pause.png"))
        page.click("#confirm-yes")
        page.wait_for_selector(f"{row}[data-state='PAUSED']", timeout=deadline(10) * 1000)
        assert cluster.api(f"/experiments/{running_id}")["experiment"]["state"] == "PAUSED"
        page.click(f"{row} button[data-action='activate']")
        page.click("#confirm-yes")
        page.wait_for_selector(f"{row}[data-state='ACTIVE']", timeout=deadline(10) * 1000)
        assert cluster.api(f"/experiments/{running_id}")["experiment"]["state"] == "ACTIVE"
        page.screenshot(path=str(SHOTS / "experiments-after-activate.png"), full_page=True)
        cluster.det("experiment", "kill", str(running_id))
    finally:
        browser.close()
        pw.stop()
    assert not errors, json.dumps(errors, indent=1)


def _set_password(cluster, username: str, password: str) -> None:
    """`det user change-password USERNAME` as admin (empty password), reading stdin."""
    import subprocess
    import sys

    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "dauntless.cli.main",
            "-u",
            "admin",
            "user",
            "change-password",
            username,
        ],
        input=password + "\n",
        cwd=str(Path(__file__).resolve().parents[2]),
        env=cluster.env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_webui_sign_in(cluster_factory, tmp_path):
    """A new cluster opens on the experiments page (silent sign-in as `determined`); once
    that user has a password the UI asks for it: a wrong one shows an error, the right one
    reaches the experiments; Sign out returns to the form."""
    c = cluster_factory(f"sqlite:///{tmp_path}/master.db")
    c.start_master()
    pw, browser = launch_chromium()
    SHOTS.mkdir(exist_ok=True)
    page_errors: list[str] = []
    try:
        ctx = browser.new_context(viewport={"width": 1200, "height": 800})
        page = ctx.new_page()
        page.on("pageerror", lambda e: page_errors.append(f"page error: {e}"))
        console: list[str] = []
        page.on("console", lambda m: console.append(m.text) if m.type == "error" else None)
        page.goto(c.url + "/")
        page.wait_for_selector("#experiments-table")
        assert page.inner_text("#user-name") == "determined"
        assert console == [], console  # no 401 on a new cluster's first visit
        ctx.close()

        _set_password(c, "determined", "s3cret-pw")

        ctx = browser.new_context(viewport={"width": 1200, "height": 800})
        page = ctx.new_page()
        page.on("pageerror", lambda e: page_errors.append(f"page error: {e}"))
        page.goto(c.url + "/experiments")
        page.wait_for_selector("#login-form")
        assert page.locator("#experiments-table").count() == 0
        page.screenshot(path=str(SHOTS / "login.png"))
        page.fill("#login-username", "determined")
        page.fill("#login-password", "wrong")
        page.click("#login-submit")
        page.wait_for_selector("#login-error:not([hidden])")
        assert "Invalid user name or password" in page.inner_text("#login-error")
        page.screenshot(path=str(SHOTS / "login-error.png"))
        page.fill("#login-password", "s3cret-pw")
        page.click("#login-submit")
        page.wait_for_selector("#experiments-table")
        assert page.inner_text("#user-name") == "determined"
        page.screenshot(path=str(SHOTS / "signed-in.png"))
        # The session is a cookie: a reload stays signed in, and streams work with it.
        page.reload()
        page.wait_for_selector("#experiments-table")
        page.wait_for_selector("#live-indicator.on")
        page.click("#sign-out")
        page.wait_for_selector("#login-form")
        page.reload()
        page.wait_for_selector("#login-form")
        ctx.close()
    finally:
        browser.close()
        pw.stop()
    assert not page_errors, json.dumps(page_errors, indent=1)


CHART_PAGE = """<!doctype html><html><head><link rel="icon" href="data:,"></head><body>
<div id="one-point" style="width:600px"></div>
<div id="same-x" style="width:600px"></div>
<script type="module">
import { MultiLineChart } from "./charts.js";
// One trial with one validation: a single point at one batch count.
new MultiLineChart(document.getElementById("one-point")).draw(
  { series: [{ label: "trial 1", x: [100], y: [0.5] }] });
// Three trials that all validated once at the same batch count (an ASHA rung): every x
// equal, two of the y values equal too.
new MultiLineChart(document.getElementById("same-x")).draw({ series: [
  { label: "trial 1", x: [40], y: [0.25] },
  { label: "trial 2", x: [40], y: [0.25] },
  { label: "trial 3", x: [40], y: [0.75] },
] });
</script></body></html>"""


def test_learning_curves_with_single_points_render(tmp_path, deadline):
    """Series of one point each, all at the same batch count, used to make uPlot's tick
    generator loop over a zero-width range (the tab froze, then RangeError). They must draw,
    one point per series, with no page error (a frozen tab never draws: the wait's
    deadline, scaled to the load, is for failure only)."""
    import functools
    import http.server
    import threading

    uplot = REPO / "webui" / "node_modules" / "uplot" / "dist" / "uPlot.esm.js"
    if not uplot.is_file():
        pytest.skip("webui/node_modules is not installed (bash scripts/build-webui.sh)")
    pw, browser = launch_chromium()
    # The UI's modules unbundled, with uPlot where they import it from (the layout that
    # scripts/build-webui.sh bundles), so that the page can import charts.js alone.
    root = tmp_path / "ui"
    shutil.copytree(REPO / "webui" / "src", root)
    (root / "vendor").mkdir()
    shutil.copy(uplot, root / "vendor")
    (root / "chart-test.html").write_text(CHART_PAGE)
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    handler.log_message = lambda *a: None  # type: ignore[method-assign]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    errors: list[str] = []
    try:
        page = browser.new_page(viewport={"width": 800, "height": 800})
        page.on("pageerror", lambda e: errors.append(f"page error: {e}"))
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.goto(f"http://127.0.0.1:{server.server_address[1]}/chart-test.html")
        for box, series in (("one-point", 1), ("same-x", 3)):
            page.wait_for_selector(
                f"#{box}[data-rendered='1'][data-series='{series}'] canvas",
                timeout=deadline(10) * 1000,
            )
            assert page.locator(f"#{box}").get_attribute("data-points") == str(series)
    finally:
        browser.close()
        pw.stop()
        server.shutdown()
    assert not errors, errors
