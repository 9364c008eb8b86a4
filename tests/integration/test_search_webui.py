"""The WebUI's search card (issue 35): a multi-objective search's trials on its first two
objectives with the Pareto front drawn apart, and a PBT search's lineage. A master is
served in-process and the trials are played through the API; Debian's chromium draws
the page."""

from __future__ import annotations

import httpx
import pytest
import yaml
from chromium import launch_chromium, require_chromium

from dauntless.master.testing import model_def_tarball, serve

pytestmark = pytest.mark.integration
X = {"x": {"type": "double", "minval": 0, "maxval": 1}}


def _create(url: str, headers: dict, config: dict) -> int:
    r = httpx.post(
        f"{url}/api/v1/experiments",
        data={"config": yaml.safe_dump(config)},
        files={"context": ("c.tar.gz", model_def_tarball(), "application/gzip")},
        headers=headers,
    )
    assert r.status_code == 201, r.text
    return r.json()["experiment"]["id"]


def _trials(url: str, headers: dict, exp_id: int) -> list[dict]:
    body = httpx.get(f"{url}/api/v1/experiments/{exp_id}", headers=headers).json()
    return sorted(body["trials"], key=lambda t: t["id"])


def _complete(url: str, headers: dict, trial_id: int, length: int, metrics: dict) -> None:
    r = httpx.post(
        f"{url}/api/v1/trials/{trial_id}/metrics",
        json={
            "group": "validation",
            "steps_completed": length,
            "trial_run_id": 1,
            "metrics": metrics,
        },
        headers=headers,
    )
    assert r.status_code < 300, r.text
    r = httpx.post(
        f"{url}/api/v1/trials/{trial_id}/searcher/completed_operation",
        json={"op": {"length": length}, "searcher_metric": metrics["loss"]},
        headers=headers,
    )
    assert r.status_code == 200, r.text


def test_pareto_front_and_lineage_are_drawn(tmp_path, deadline):
    require_chromium()
    with serve(str(tmp_path / "master"), run_loop=False) as live:
        url = live.url
        token = httpx.post(f"{url}/api/v1/auth/login", json={"username": "admin", "password": ""})
        headers = {"Authorization": f"Bearer {token.json()['token']}"}
        multi = _create(
            url,
            headers,
            {
                "entrypoint": "python3 train.py",
                "hyperparameters": X,
                "searcher": {
                    "name": "nsgaii",
                    "metrics": [{"name": "loss"}, {"name": "acc", "smaller_is_better": False}],
                    "max_trials": 3,
                    "max_concurrent_trials": 3,
                    "max_length": {"batches": 2},
                },
            },
        )
        values = [(0.1, 0.5), (0.2, 0.9), (0.3, 0.4)]  # the third is dominated
        for t, (loss, acc) in zip(_trials(url, headers, multi), values, strict=True):
            _complete(url, headers, t["id"], 2, {"loss": loss, "acc": acc})
        pbt = _create(
            url,
            headers,
            {
                "entrypoint": "python3 train.py",
                "hyperparameters": X,
                "searcher": {
                    "name": "pbt",
                    "metric": "loss",
                    "population_size": 2,
                    "num_rounds": 2,
                    "length_per_round": 3,
                    "replace_function": {"truncate_fraction": 0.5},
                    "explore_function": {"resample_probability": 0.5, "perturb_factor": 0.2},
                },
            },
        )
        for t, loss in zip(_trials(url, headers, pbt), [0.2, 0.4], strict=True):
            _complete(url, headers, t["id"], 3, {"loss": loss, "acc": 0.0})
        parent = _trials(url, headers, pbt)[0]["id"]

        pw, browser = launch_chromium()
        errors: list[str] = []
        try:
            page = browser.new_page(viewport={"width": 1200, "height": 1600})
            page.on("pageerror", lambda e: errors.append(f"page error: {e}"))
            page.goto(f"{url}/experiments/{multi}")
            page.wait_for_selector(
                "#pareto-front[data-rendered='1'][data-front='2'][data-points='3'] canvas",
                timeout=deadline(30) * 1000,
            )
            assert page.locator("#search-card").is_visible()
            page.goto(f"{url}/experiments/{pbt}")
            page.wait_for_selector("#trial-lineage li", timeout=deadline(30) * 1000)
            text = page.locator("#trial-lineage").inner_text()
            assert f"warm-started from trial {parent}" in text, text
        finally:
            browser.close()
            pw.stop()
        assert not errors, errors
