"""The WebUI's experiment list searches on the master and compares experiments (issue 31
scope 7): a hyperparameter filter and a hyperparameter column, then three experiments
ticked and compared (their learning curves on one chart, their hyperparameters side by
side). A master is served in-process, metrics are reported through the API; Debian's
chromium draws the pages."""

from __future__ import annotations

import httpx
import pytest
import yaml
from chromium import launch_chromium, require_chromium

from dauntless.master.testing import model_def_tarball, serve

pytestmark = pytest.mark.integration


def _create(url: str, headers: dict, name: str, lr: float, optimizer: str) -> int:
    config = {
        "name": name,
        "entrypoint": "python3 train.py",
        "hyperparameters": {"lr": lr, "optimizer": optimizer},
        "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 30}},
    }
    r = httpx.post(
        f"{url}/api/v1/experiments",
        data={"config": yaml.safe_dump(config)},
        files={"context": ("c.tar.gz", model_def_tarball(), "application/gzip")},
        headers=headers,
    )
    assert r.status_code == 201, r.text
    return int(r.json()["experiment"]["id"])


def _report(url: str, headers: dict, exp_id: int, losses: list[float]) -> None:
    body = httpx.get(f"{url}/api/v1/experiments/{exp_id}", headers=headers).json()
    (trial,) = body["trials"]
    for i, loss in enumerate(losses, start=1):
        r = httpx.post(
            f"{url}/api/v1/trials/{trial['id']}/metrics",
            json={
                "group": "validation",
                "steps_completed": 10 * i,
                "trial_run_id": 1,
                "metrics": {"loss": loss},
            },
            headers=headers,
        )
        assert r.status_code < 300, r.text


def test_search_columns_and_compare_three_experiments(tmp_path, deadline):
    require_chromium()
    with serve(str(tmp_path / "master"), run_loop=False) as live:
        url = live.url
        token = httpx.post(f"{url}/api/v1/auth/login", json={"username": "admin", "password": ""})
        headers = {"Authorization": f"Bearer {token.json()['token']}"}
        ids = []
        for i, (lr, opt) in enumerate([(0.001, "adam"), (0.01, "sgd"), (0.1, "adam")]):
            exp_id = _create(url, headers, f"cmp-{i}", lr, opt)
            _report(url, headers, exp_id, [1.0 - 0.1 * i, 0.8 - 0.1 * i, 0.5 - 0.1 * i])
            ids.append(exp_id)
        outlier = _create(url, headers, "outlier", 5.0, "sgd")  # filtered out below

        pw, browser = launch_chromium()
        errors: list[str] = []
        try:
            page = browser.new_page(viewport={"width": 1300, "height": 1400})
            page.on("pageerror", lambda e: errors.append(f"page error: {e}"))
            wait = deadline(60) * 1000
            page.goto(f"{url}/experiments")
            page.wait_for_selector(f"#experiments-table tr[data-id='{outlier}']", timeout=wait)
            # A server-side hyperparameter filter: the outlier (lr 5) leaves the list.
            page.fill("#filter-hp", "lr<=1")
            page.wait_for_function(
                "document.querySelectorAll('#experiments-table tbody tr[data-id]').length === 3",
                timeout=wait,
            )
            assert page.inner_text("#page-range").endswith("of 3")
            # The lr column, sorted by it on the master (ascending, then descending).
            page.click("#columns-menu summary")
            page.check("#column-choice input[data-column='hp.lr']")
            page.wait_for_selector("#experiments-table th[data-column='hp.lr']", timeout=wait)
            cells = page.locator("#experiments-table td[data-column='hp.lr']").all_inner_texts()
            assert sorted(cells) == ["0.001", "0.01", "0.1"]
            first = "document.querySelector('#experiments-table tbody tr').dataset.id"
            page.click("#experiments-table th[data-column='hp.lr']")  # ascending
            page.wait_for_function(
                "document.querySelector(\"#experiments-table th[data-column='hp.lr']\")"
                ".classList.contains('sorted-asc')",
                timeout=wait,
            )
            page.wait_for_function(f"{first} === '{ids[0]}'", timeout=wait)
            page.click("#experiments-table th[data-column='hp.lr']")  # descending
            page.wait_for_function(f"{first} === '{ids[2]}'", timeout=wait)
            # Tick three and compare.
            for exp_id in ids:
                page.check(f"#experiments-table input[data-compare='{exp_id}']")
            assert page.inner_text("#compare-experiments") == "Compare (3)"
            page.click("#compare-experiments")
            page.wait_for_selector(
                "#compare-experiment-curves[data-rendered='1'][data-series='3'][data-points='9'] canvas",
                timeout=wait,
            )
            table = "#compare-experiments-table"
            heads = page.locator(f"{table} thead th[data-id]").all_text_contents()
            assert heads == [f"{i}: cmp-{n}" for n, i in enumerate(ids)]
            lr_row = page.locator(f"{table} tr[data-hparam='lr']")
            assert lr_row.get_attribute("class") == "diff"
            assert lr_row.locator("td").all_inner_texts() == ["lr", "0.001", "0.01", "0.1"]
            opt_row = page.locator(f"{table} tr[data-hparam='optimizer']")
            assert opt_row.locator("td").all_inner_texts() == ["optimizer", "adam", "sgd", "adam"]
            best = page.locator(f"{table} tr[data-field='best_searcher_metric'] td")
            assert best.all_inner_texts() == ["best metric", "loss=0.5", "loss=0.4", "loss=0.3"]
            assert "compare?ids=" in page.url
        finally:
            browser.close()
            pw.stop()
        assert not errors, errors
