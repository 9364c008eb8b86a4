"""The WebUI's model registry (issue 31): "Register" on a checkpoint of the experiment
page makes a new model with the checkpoint as its version 1; the Models page lists it;
the model's page shows the version and saves edited labels and notes; the workspace's
page lists the model; the trial page
shows the status and metadata its code set. A master is served in-process, the trial's
reports are played through the API, and Debian's chromium draws the pages."""

from __future__ import annotations

import uuid as uuidlib

import httpx
import pytest
import yaml
from chromium import launch_chromium, require_chromium

from dauntless.master.testing import model_def_tarball, serve

pytestmark = pytest.mark.integration


def test_register_a_checkpoint_and_edit_the_model(tmp_path, deadline):
    require_chromium()
    storage = tmp_path / "ckpts"
    with serve(str(tmp_path / "master"), run_loop=False) as live:
        url = live.url
        token = httpx.post(f"{url}/api/v1/auth/login", json={"username": "admin", "password": ""})
        api = httpx.Client(
            base_url=f"{url}/api/v1", headers={"Authorization": f"Bearer {token.json()['token']}"}
        )
        config = {
            "entrypoint": "python3 train.py",
            "hyperparameters": {},
            "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 2}},
            "checkpoint_storage": {"type": "shared_fs", "host_path": str(storage)},
        }
        r = api.post(
            "/experiments",
            data={"config": yaml.safe_dump(config)},
            files={"context": ("c.tar.gz", model_def_tarball(), "application/gzip")},
        )
        assert r.status_code == 201, r.text
        exp_id = r.json()["experiment"]["id"]
        trial_id = api.get(f"/experiments/{exp_id}").json()["trials"][0]["id"]
        uuid = str(uuidlib.uuid4())
        (storage / uuid).mkdir(parents=True)
        (storage / uuid / "w.bin").write_bytes(b"w" * 100)
        body = {
            "uuid": uuid,
            "trial_id": trial_id,
            "steps_completed": 2,
            "resources": {"w.bin": 100},
        }
        assert api.post("/checkpoints", json=body).status_code == 200
        r = api.post(
            f"/trials/{trial_id}/runner/metadata", json={"metadata": {"state": "warming up"}}
        )
        assert r.status_code == 200, r.text
        r = api.post(f"/runs/{trial_id}/metadata", json={"metadata": {"dataset": "v2"}})
        assert r.json()["metadata"] == {"dataset": "v2"}, r.text

        pw, browser = launch_chromium()
        errors: list[str] = []
        wait = deadline(30) * 1000
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1400})
            page.on("pageerror", lambda e: errors.append(f"page error: {e}"))
            page.goto(f"{url}/experiments/{exp_id}")
            page.click(f"tr[data-uuid='{uuid}'] button[data-action='register']", timeout=wait)
            form = page.locator(f"form[data-register-form='{uuid}']")
            form.locator(f"input[data-register-new='{uuid}']").fill("digits")
            form.locator("button[type=submit]").click()
            page.wait_for_selector(
                f"tr[data-register='{uuid}'] [data-registered='1']", timeout=wait
            )
            versions = api.get("/models/digits/versions").json()["model_versions"]
            assert [v["checkpoint"]["uuid"] for v in versions] == [uuid]

            page.click("a[data-nav=models]")
            page.wait_for_selector(
                "#models table[data-loaded='1'] tr[data-model='digits']", timeout=wait
            )
            page.click("tr[data-model='digits'] a")
            page.wait_for_selector("#model-versions tr[data-version='1']", timeout=wait)
            assert uuid[:8] in page.locator("#model-versions").inner_text()
            page.fill("#model-labels", "prod, vision")
            page.fill("#model-notes", "# Digits\nthe best")
            page.click("button[data-action='save-model']")
            page.wait_for_function(
                "() => document.querySelector('#model-labels')?.value === 'prod, vision'"
                " && !!document.querySelector('#model-versions')",
                timeout=wait,
            )
            model = api.get("/models/digits").json()["model"]
            for _ in range(100):  # the save lands before the page draws again
                if model["labels"] == ["prod", "vision"]:
                    break
                page.wait_for_timeout(50)
                model = api.get("/models/digits").json()["model"]
            assert (model["labels"], model["notes"]) == (["prod", "vision"], "# Digits\nthe best")

            page.goto(f"{url}/workspaces/1")  # the workspace's Model Registry card
            page.wait_for_selector("#workspace-models tr[data-model='digits']", timeout=wait)

            page.goto(f"{url}/trials/{trial_id}")
            page.wait_for_selector("#trial-status", timeout=wait)
            assert page.locator("#trial-status").inner_text() == "warming up"
            assert "v2" in page.locator("#trial-metadata").inner_text()
        finally:
            browser.close()
            pw.stop()
            api.close()
        assert not errors, errors
