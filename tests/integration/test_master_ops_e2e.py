"""The master's operation through the real CLI (issue 34 scope 4): ``det master logs``,
``det master config show|set``, ``det master cluster-message`` (shown on other commands'
stderr), ``det e set log-retention`` and ``det task cleanup-logs``."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import httpx
import pytest
import yaml
from chromium import launch_chromium

from .conftest import REPO

pytestmark = pytest.mark.integration


def test_master_logs_config_and_cluster_message_through_the_cli(cluster_factory, tmp_path):
    c = cluster_factory(f"sqlite:///{tmp_path}/master.db")
    c.start_master()

    def det(*args: str, **kw):  # as the admin (empty password on a new cluster)
        return c.det("-u", "admin", *args, **kw)

    logs = det("master", "logs", "--tail", "5").stdout.strip().splitlines()
    assert 1 <= len(logs) <= 5 and all("[" in line for line in logs)
    shown = yaml.safe_load(det("master", "config", "show").stdout)
    assert shown["security"]["cluster_secret"] == "********"
    assert shown["log"]["level"] == "info"
    assert "log.level: debug" in det("master", "config", "set", "--log.level", "debug").stdout
    assert yaml.safe_load(det("master", "config", "show").stdout)["log"]["level"] == "debug"

    det("master", "cluster-message", "set", "-m", "Upgrade tonight", "-d", "2h")
    listed = c.det("experiment", "list")
    assert "Cluster message: Upgrade tonight" in listed.stderr
    assert "Upgrade tonight" in det("master", "cluster-message", "get").stdout
    det("master", "cluster-message", "clear")
    assert "Cluster message" not in c.det("experiment", "list").stderr

    config = {
        "name": "kept",
        "entrypoint": "python3 train.py",
        "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 1}},
    }
    (tmp_path / "exp.yaml").write_text(yaml.safe_dump(config))
    (tmp_path / "ctx").mkdir()
    (tmp_path / "ctx" / "train.py").write_text("print('hi')\n")
    out = det("experiment", "create", "--paused", str(tmp_path / "exp.yaml"), str(tmp_path / "ctx"))
    exp_id = re.search(r"experiment (\d+)", out.stdout, re.IGNORECASE)[1]
    out = det("e", "set", "log-retention", exp_id, "--days", "3").stdout
    assert "for 3 day(s)" in out
    bad = det("e", "set", "log-retention", exp_id, "--days", "-5", check=False)
    assert bad.returncode != 0 and "num_days" in bad.stderr
    assert "Removed 0 log line(s)." in det("task", "cleanup-logs").stdout
    # `det master logs -f` keeps printing: it shows a line logged after it started.
    follow = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "dauntless.cli.main",
            "-u",
            "admin",
            "master",
            "logs",
            "-f",
            "--tail",
            "1",
        ],
        cwd=REPO,
        env=c.env(),
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert follow.stdout is not None
        follow.stdout.readline()  # the --tail line: it has started
        det("master", "config", "set", "--log.level", "info")
        deadline = time.time() + c.deadline(30)
        seen = ""
        while "log level set to info" not in seen and time.time() < deadline:
            seen = follow.stdout.readline()
        assert "log level set to info" in seen
    finally:
        os.killpg(follow.pid, signal.SIGTERM)
        follow.wait(timeout=20)


def test_webui_banner_and_usage_card(cluster_factory, tmp_path, deadline):
    """The cluster message shows as a banner for every user; the cluster page's usage card
    shows slot-hours to an admin and says why to a user without the permission."""
    c = cluster_factory(f"sqlite:///{tmp_path}/master.db")
    c.start_master()
    r = httpx.put(
        c.url + "/api/v1/master/cluster_message",
        json={"message": "Maintenance window tonight", "duration": "1h"},
        headers=c.headers(),
        timeout=30,
    )
    r.raise_for_status()
    pw, browser = launch_chromium()
    errors: list[str] = []
    try:
        ctx = browser.new_context(viewport={"width": 1200, "height": 900})
        page = ctx.new_page()
        page.on("pageerror", lambda e: errors.append(f"page error: {e}"))
        page.goto(c.url + "/cluster")  # signed in silently as `determined`
        page.wait_for_selector("#cluster-message:not([hidden])", timeout=deadline(30) * 1000)
        assert page.inner_text("#cluster-message") == "Maintenance window tonight"
        page.wait_for_selector("#cluster-usage >> text=cluster-usage permission")
        page.click("#sign-out")
        page.wait_for_selector("#login-form")
        page.fill("#login-username", "admin")
        page.fill("#login-password", "")
        page.click("#login-submit")  # back on the cluster page, as the admin
        page.wait_for_selector("#cluster-usage table[data-usage=by_username]")
        assert page.inner_text("#user-name") == "admin"
        assert "slot-hours" in page.inner_text("#cluster-usage")
        ctx.close()
    finally:
        browser.close()
        pw.stop()
    assert not errors, errors
