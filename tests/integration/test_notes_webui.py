"""Notes and editing in the WebUI (issue 31 scope 4): on an experiment's page the user
edits its name and labels and writes Markdown notes, which are shown rendered and
sanitised (no script, no event handler survives) and kept after a reload; on a project's
page the user adds and edits a note; the Tasks page's launch form offers the config
templates. A master is served in-process; Debian's chromium
draws the pages (signed in as the built-in ``determined`` user, who owns what it edits)."""

from __future__ import annotations

import httpx
import pytest
import yaml
from chromium import launch_chromium, require_chromium

from dauntless.master.testing import model_def_tarball, serve, wait_for

pytestmark = pytest.mark.integration
CONFIG = {
    "name": "plain",
    "entrypoint": "python3 train.py",
    "hyperparameters": {"global_batch_size": 8},
    "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 2}},
}
NOTES = (
    "# Findings\n\nThe **lr** of 0.1 works.\n\n<script>window.pwned = 1</script>"
    '<img src="x" onerror="window.pwned = 2">\n\n[bad](javascript:window.pwned=3)'
)


def test_edit_notes_name_and_labels(tmp_path, deadline):
    require_chromium()
    with serve(str(tmp_path / "master"), run_loop=False) as live:
        url = live.url
        token = httpx.post(
            f"{url}/api/v1/auth/login", json={"username": "determined", "password": ""}
        )
        headers = {"Authorization": f"Bearer {token.json()['token']}"}
        r = httpx.post(
            f"{url}/api/v1/experiments",
            data={"config": yaml.safe_dump(CONFIG), "activate": "false"},
            files={"context": ("c.tar.gz", model_def_tarball(), "application/gzip")},
            headers=headers,
        )
        assert r.status_code == 201, r.text
        exp = r.json()["experiment"]["id"]
        ws = httpx.post(f"{url}/api/v1/workspaces", json={"name": "team"}, headers=headers)
        assert ws.status_code == 201, ws.text
        proj = httpx.post(
            f"{url}/api/v1/workspaces/{ws.json()['workspace']['id']}/projects",
            json={"name": "notes"},
            headers=headers,
        )
        assert proj.status_code == 201, proj.text
        project = proj.json()["project"]["id"]

        pw, browser = launch_chromium()
        errors: list[str] = []
        wait = deadline(30) * 1000
        try:
            page = browser.new_page(viewport={"width": 1200, "height": 1600})
            page.on("pageerror", lambda e: errors.append(f"page error: {e}"))
            page.goto(f"{url}/experiments/{exp}")
            page.click("#edit-experiment", timeout=wait)
            page.fill("#edit-name", "renamed")
            page.fill("#edit-labels", "baseline, lr-0.1")
            page.click("#edit-save")
            page.wait_for_selector("#experiment-header [data-label='lr-0.1']", timeout=wait)
            assert "renamed" in page.locator("#experiment-header h1").inner_text()

            page.click("#experiment-notes-edit", timeout=wait)
            page.fill("#experiment-notes-text", NOTES)
            page.click("#experiment-notes-save")
            page.wait_for_selector("#experiment-notes-body .markdown h1", timeout=wait)
            page.reload()
            body = page.wait_for_selector("#experiment-notes-body .markdown h1", timeout=wait)
            assert body.inner_text() == "Findings"
            notes = page.locator("#experiment-notes-body")
            assert notes.locator("strong").inner_text() == "lr"
            assert notes.locator("script").count() == 0
            assert notes.locator("[onerror]").count() == 0
            assert notes.locator("a[href^='javascript']").count() == 0
            page.wait_for_timeout(200)
            assert page.evaluate("window.pwned") is None
            shown = httpx.get(f"{url}/api/v1/experiments/{exp}", headers=headers).json()
            assert shown["experiment"]["notes"] == NOTES
            assert shown["experiment"]["labels"] == ["baseline", "lr-0.1"]
            assert shown["experiment"]["name"] == "renamed"

            page.goto(f"{url}/projects/{project}")
            page.fill("#new-note-name", "plan", timeout=wait)
            page.click("#add-note")
            page.click("#project-note-0-edit", timeout=wait)
            page.fill("#project-note-0-text", "- [x] baseline\n- try *warmup*")
            page.click("#project-note-0-save")
            page.wait_for_selector("#project-note-0-body .markdown em", timeout=wait)
            got = httpx.get(f"{url}/api/v1/projects/{project}", headers=headers).json()
            assert got["project"]["notes"] == [
                {"name": "plan", "contents": "- [x] baseline\n- try *warmup*"}
            ]

            # The Tasks page's launch form offers the templates (merged by the master).
            r = httpx.put(
                f"{url}/api/v1/templates/envs",
                json={"config": {"environment": {"environment_variables": ["FROM_TPL=1"]}}},
                headers=headers,
            )
            assert r.status_code == 200, r.text
            page.goto(f"{url}/tasks")
            page.click("#launch-open", timeout=wait)
            page.select_option("#launch-type", "commands")
            page.wait_for_selector("#launch-template option[value='envs']", state="attached")
            page.select_option("#launch-template", "envs")
            page.fill("#launch-command", "true")
            page.fill("#launch-slots", "0")
            page.click("#launch-submit")
            tasks = wait_for(
                "the launched command",
                lambda: httpx.get(f"{url}/api/v1/tasks", headers=headers).json()["tasks"],
            )
            env = tasks[0]["config"]["environment"]["environment_variables"]
            assert "FROM_TPL=1" in env, tasks[0]["config"]
        finally:
            browser.close()
            pw.stop()
        assert not errors, errors
