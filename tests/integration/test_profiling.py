"""The system-metrics profiler end to end (issue 34 scope 2 and its acceptance): a
Trainer script with ``profiling.enabled: true`` runs on a real master and agent; its
chief samples the machine in a background thread and reports the ``profiling`` groups
(cpu, memory, disk, network, and the data loader's and the step's timings); ``det trial
describe --json`` shows them, and the WebUI's trial page draws them (Debian's chromium).
The volume bound is asserted from the sampling rules (tests/unit/master/
test_profiler_routes.py), not by waiting an hour."""

from __future__ import annotations

import json
import textwrap

import pytest
import yaml
from chromium import launch_chromium, require_chromium

pytestmark = pytest.mark.integration

# A data loader that takes 20 ms a batch: the timings must show it.
SCRIPT = textwrap.dedent(
    """
    import time

    import torch

    import dauntless
    from dauntless import pytorch as det_torch


    class Slow(torch.utils.data.Dataset):
        def __len__(self):
            return 64

        def __getitem__(self, i):
            time.sleep(0.005)
            return torch.ones(1), torch.full((1,), 2.0)


    class Trial(det_torch.PyTorchTrial):
        def __init__(self, context):
            self.context = context
            self.model = context.wrap_model(torch.nn.Linear(1, 1))
            self.opt = context.wrap_optimizer(torch.optim.SGD(self.model.parameters(), lr=0.1))

        def build_training_data_loader(self):
            return det_torch.DataLoader(Slow(), batch_size=4)

        def build_validation_data_loader(self):
            return det_torch.DataLoader(Slow(), batch_size=16)

        def train_batch(self, batch, epoch_idx, batch_idx):
            x, y = batch
            loss = torch.nn.functional.mse_loss(self.model(x), y)
            self.context.backward(loss)
            self.context.step_optimizer(self.opt)
            return {"loss": loss}

        def evaluate_batch(self, batch):
            x, y = batch
            return {"validation_loss": torch.nn.functional.mse_loss(self.model(x), y).item()}


    with det_torch.init() as context:
        det_torch.Trainer(Trial(context), context).fit(max_length=det_torch.Batch(150))
    """
)

CONFIG = {
    "name": "profiled",
    "entrypoint": "python3 train.py",
    "hyperparameters": {"global_batch_size": 4},
    "searcher": {"name": "single", "metric": "validation_loss"},
    "profiling": {"enabled": True, "begin_on_batch": 10, "end_after_batch": 109},
    "max_restarts": 0,
}


def test_profiled_trial_shows_system_metrics(cluster_factory, tmp_path, deadline):
    c = cluster_factory(f"sqlite:///{tmp_path}/master.db")
    c.start_master()
    c.start_agent(slots=1)
    (tmp_path / "ctx").mkdir()
    (tmp_path / "ctx" / "train.py").write_text(SCRIPT)
    (tmp_path / "exp.yaml").write_text(yaml.safe_dump(CONFIG))
    out = c.det("experiment", "create", str(tmp_path / "exp.yaml"), str(tmp_path / "ctx"))
    assert "profiling" not in out.stderr, out.stderr  # no warning: the fields are acted on
    exp_id = int(out.stdout.split("Created experiment")[1].split()[0])
    body = c.wait_experiment(exp_id, timeout=180)
    assert body["experiment"]["state"] == "COMPLETED", c.dump_logs(exp_id)
    (trial,) = body["trials"]

    described = json.loads(c.det("trial", "describe", str(trial["id"]), "--json").stdout)
    latest = described["profiling"]["latest"]
    assert {"cpu", "memory", "network", "timing"} <= set(latest), latest
    ((agent, cpu),) = latest["cpu"].items()
    assert agent and 0.0 <= cpu["cpu_util_simple"] <= 100.0
    assert next(iter(latest["memory"].values()))["memory_free"] > 0
    # Timed batches: 10..109 of 150 (profiling.begin_on_batch / end_after_batch), each
    # waiting about 20 ms for its 4 records.
    timings = [r["values"] for r in _rows(c, trial["id"]) if r["group"] == "timing"]
    counted = sum(t["dataloader_next"]["count"] for t in timings)
    assert counted == 100, timings
    assert sum(t["train_batch"]["count"] for t in timings) == 100
    loader = sum(t["dataloader_next"]["total_seconds"] for t in timings)
    assert loader >= 100 * 4 * 0.005 * 0.9, timings
    assert all(0.0 < t["dataloader_share"] < 1.0 for t in timings)
    series = {(s["group"], s["agent_id"]) for s in described["profiling"]["series"]}
    assert ("cpu", agent) in series and ("timing", agent) in series

    _webui_draws_the_charts(c, trial["id"], deadline)


def _rows(c, trial_id: int) -> list[dict]:
    with_rows = json.loads(c.det("trial", "describe", str(trial_id), "--json", "--metrics").stdout)
    return with_rows["profiling"]["metrics"]


def _webui_draws_the_charts(c, trial_id: int, deadline) -> None:
    require_chromium()
    pw, browser = launch_chromium()
    errors: list[str] = []
    try:
        # Signed in as the built-in ``determined`` user (no password on a new cluster),
        # who created the experiment.
        page = browser.new_page(viewport={"width": 1200, "height": 2400})
        page.on("pageerror", lambda e: errors.append(f"page error: {e}"))
        page.goto(f"{c.url}/trials/{trial_id}")
        wait = deadline(30) * 1000
        page.wait_for_selector("#profiler-charts[data-rendered='1']", timeout=wait)
        assert page.locator("#profiler-card").is_visible()
        names = page.eval_on_selector_all(
            "#profiler-charts .chart", "els => els.map(e => e.dataset.metric)"
        )
        assert "cpu.cpu_util_simple" in names and "memory.memory_free" in names, names
        assert "timing.dataloader_next.mean_seconds" in names, names
        cpu = page.locator("#profiler-charts [data-metric='cpu.cpu_util_simple']")
        cpu.wait_for(timeout=wait)
        page.wait_for_function(
            "() => document.querySelector(\"#profiler-charts [data-metric='cpu.cpu_util_simple']\")"
            ".dataset.rendered === '1'",
            timeout=wait,
        )
    finally:
        browser.close()
        pw.stop()
    assert not errors, errors


def test_task_memory_above_its_request_is_flagged(cluster_factory, tmp_path, deadline):
    """A command that holds 96 MiB while requesting 32 MiB: its agent's samples reach
    ``GET /tasks/{id}/resource_metrics`` with the flag set, and the WebUI's tasks page
    shows its usage and the flag."""
    import time

    import httpx

    c = cluster_factory(f"sqlite:///{tmp_path}/master.db")
    c.start_master()
    c.start_agent(slots=1)
    login = httpx.post(
        f"{c.url}/api/v1/auth/login", json={"username": "determined", "password": ""}, timeout=30
    )
    headers = {"Authorization": f"Bearer {login.json()['token']}"}
    hold = (
        "b = bytearray(96 << 20); b[::4096] = b'x' * len(b[::4096]); import time; time.sleep(300)"
    )
    r = httpx.post(
        f"{c.url}/api/v1/commands",
        data={
            "entrypoint": json.dumps(["python3", "-c", hold]),
            "config": "resources: {slots: 0, memory: 32M}",
        },
        headers=headers,
        timeout=30,
    )
    assert r.status_code == 201, r.text
    task_id = r.json()["task"]["id"]
    try:
        c.wait_task(task_id, {"RUNNING"}, timeout=60)
        limit = time.time() + deadline(60)
        got: dict = {}
        while time.time() < limit:
            got = httpx.get(
                f"{c.url}/api/v1/tasks/{task_id}/resource_metrics", headers=headers, timeout=30
            ).json()
            if got["latest"] and got["latest"]["rss_bytes"] >= 96 << 20:
                break
            time.sleep(1)
        assert got["latest"] and got["latest"]["rss_bytes"] >= 96 << 20, (got, c.dump_logs())
        assert got["memory_request_bytes"] == 32 << 20 and got["over_request"] is True
        assert got["latest"]["processes"] >= 1 and got["latest"]["agent_id"]
        _webui_flags_the_task(c, task_id, deadline)
    finally:
        httpx.post(f"{c.url}/api/v1/tasks/{task_id}/kill", headers=headers, timeout=30)
        c.wait_task(task_id, {"CANCELED", "COMPLETED", "ERROR"}, timeout=60)


def _webui_flags_the_task(c, task_id: str, deadline) -> None:
    require_chromium()
    pw, browser = launch_chromium()
    errors: list[str] = []
    try:
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        page.on("pageerror", lambda e: errors.append(f"page error: {e}"))
        page.goto(f"{c.url}/tasks")
        wait = deadline(30) * 1000
        flag = page.locator(f"[data-over-request='{task_id}']")
        flag.wait_for(timeout=wait)
        cell = page.locator(f"td[data-usage='{task_id}']")
        assert cell.get_attribute("data-over") == "1"
        assert "CPU" in cell.inner_text() and "MB" in cell.inner_text()
    finally:
        browser.close()
        pw.stop()
    assert not errors, errors
