"""Debian's real Prometheus scrapes a live master and agent (issue 34 scope 1).

A master and a real agent (serving its own metrics, ``--prometheus-port``) run one
``sleep`` command on the agent's slot; a pretend agent over REST holds one trial whose
session token posts metric reports at a steady pace. Prometheus (``/usr/bin/prometheus``)
scrapes the master's ``/prom/det-state-metrics`` and ``/debug/prom/metrics`` with an
admin's access token read from a file, and the agent's page, every second; the test then
asks Prometheus's HTTP API for slot usage and the ingest rate.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
import time

import httpx
import pytest
import yaml

from .conftest import REPO, free_port

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("prometheus") is None, reason="no prometheus binary"),
]


def _pretend_trial(cluster) -> dict:
    """The task spec (session token) of one trial a pretend agent took over REST."""
    api, headers = cluster.url + "/api/v1", cluster.headers()
    r = httpx.post(
        api + "/agents",
        json={"id": "pretend", "hostname": "localhost", "slots": [{"id": "0", "type": "cpu"}]},
        headers=headers,
        timeout=30,
    )
    r.raise_for_status()
    config = {
        "name": "scraped",
        "entrypoint": "python3 train.py",
        "labels": ["prom-label"],
        "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 10**9}},
    }
    r = httpx.post(
        api + "/experiments", data={"config": yaml.safe_dump(config)}, headers=headers, timeout=30
    )
    r.raise_for_status()
    deadline = time.time() + cluster.deadline(60)
    while time.time() < deadline:
        r = httpx.post(
            api + "/agents/pretend/heartbeat", json={"running": []}, headers=headers, timeout=30
        )
        r.raise_for_status()
        if r.json()["start"]:
            return r.json()["start"][0]
        time.sleep(0.1)
    raise AssertionError("the pretend agent got no trial")


def _query(prom_url: str, expr: str) -> list[dict]:
    r = httpx.get(prom_url + "/api/v1/query", params={"query": expr}, timeout=10)
    r.raise_for_status()
    body = r.json()
    assert body["status"] == "success", body
    return body["data"]["result"]


def test_prometheus_scrapes_master_and_agent(cluster_factory, tmp_path, deadline) -> None:
    cluster = cluster_factory(f"sqlite:///{tmp_path}/master.db")
    cluster.start_master()
    agent_port = free_port()
    cluster.start_agent("agent-1", slots=1, extra_args=("--prometheus-port", str(agent_port)))
    # An access token of the admin for the scraper, in a file only this user reads.
    r = httpx.post(
        cluster.url + "/api/v1/tokens",
        json={"description": "prometheus"},
        headers=cluster.headers(),
        timeout=30,
    )
    r.raise_for_status()
    token_file = tmp_path / "prom-token"
    fd = os.open(token_file, os.O_WRONLY | os.O_CREAT, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(r.json()["token"])

    # Without a credential, and for a user who is not an admin, the metrics are refused.
    assert httpx.get(cluster.url + "/prom/det-state-metrics", timeout=30).status_code == 401

    sleeper = cluster.det("cmd", "run", "-d", "sleep 600").stdout.strip().splitlines()[-1]
    cluster.wait_task(sleeper, {"RUNNING"})
    spec = _pretend_trial(cluster)

    stop = threading.Event()
    sent = [0]

    def report() -> None:
        headers = {"Authorization": f"Bearer {spec['env']['DET_SESSION_TOKEN']}"}
        admin = cluster.headers()
        with httpx.Client(base_url=cluster.url + "/api/v1", timeout=30) as c:
            while not stop.is_set():
                sent[0] += 1
                body = {
                    "group": "training",
                    "steps_completed": sent[0],
                    "trial_run_id": 1,
                    "metrics": {"loss": 1.0 / sent[0]},
                }
                c.post(
                    f"/trials/{spec['trial_id']}/metrics", json=body, headers=headers
                ).raise_for_status()
                if sent[0] % 20 == 0:  # the pretend agent stays alive
                    c.post(
                        "/agents/pretend/heartbeat",
                        json={"running": [spec["allocation_id"]]},
                        headers=admin,
                    ).raise_for_status()
                stop.wait(0.05)

    reporter = threading.Thread(target=report, daemon=True)
    reporter.start()

    host_port = f"127.0.0.1:{cluster.port}"
    auth = {"type": "Bearer", "credentials_file": str(token_file)}
    prom_config = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s"},
        "scrape_configs": [
            {
                "job_name": "det-state",
                "metrics_path": "/prom/det-state-metrics",
                "authorization": auth,
                "static_configs": [{"targets": [host_port]}],
            },
            {
                "job_name": "det-master",
                "metrics_path": "/debug/prom/metrics",
                "authorization": auth,
                "static_configs": [{"targets": [host_port]}],
            },
            {  # the agents, discovered through the master (Determined's HTTP SD route)
                "job_name": "det-agent",
                "http_sd_configs": [
                    {
                        "url": f"{cluster.url}/prom/det-http-sd-config",
                        "refresh_interval": "1s",
                        "authorization": auth,
                    }
                ],
            },
        ],
    }
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(prom_config))
    prom_port = free_port()
    prom_url = f"http://127.0.0.1:{prom_port}"
    log = (tmp_path / "prometheus.log").open("w")
    prom = subprocess.Popen(
        [
            "prometheus",
            f"--config.file={tmp_path / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{prom_port}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        limit = time.time() + deadline(90)
        used = rate = agent_used = net = None
        net_expr = 'rate(det_agent_network_recv_bytes_total{agent_id="agent-1"}[5s])'
        while time.time() < limit:
            time.sleep(1)
            try:
                ups = _query(prom_url, "up")
            except httpx.HTTPError:
                continue
            if len(ups) < 3 or any(u["value"][1] != "1" for u in ups):
                continue
            used = _query(prom_url, 'sum(det_slots_used{agent_id="agent-1"})')
            agent_used = _query(prom_url, 'det_agent_slots_used{agent_id="agent-1"}')
            rate = _query(prom_url, "sum(rate(det_metric_reports_total[5s]))")
            # A rate needs two scrapes in its window; the agent, found through service
            # discovery, may have had only one when the master's series have several.
            net = _query(prom_url, net_expr)
            if used and agent_used and rate and float(rate[0]["value"][1]) > 0 and net:
                break
        else:
            raise AssertionError(
                f"no scrape in time: up={ups!r} used={used!r} rate={rate!r} net={net!r}\n"
                + (tmp_path / "prometheus.log").read_text()[-5000:]
            )
        assert float(used[0]["value"][1]) == 1.0  # the sleep command holds the one slot
        assert float(agent_used[0]["value"][1]) == 1.0
        # Reports go out every ~50 ms (slower under load): a rate well above zero.
        assert 1.0 < float(rate[0]["value"][1]) < 100.0
        # Determined's label mappings: the trial's allocation and the experiment's label.
        label = _query(prom_url, 'det_experiment_id_label{label="prom-label"}')
        assert label and label[0]["metric"]["experiment_id"] == str(spec["experiment_id"])
        tasks = _query(prom_url, 'det_allocation_id_task_id_task_actor{task_actor="TRIAL"}')
        assert [t["metric"]["task_id"] for t in tasks] == [f"trial-{spec['trial_id']}"]
        part = _query(
            prom_url, f'det_container_id_allocation_id{{container_id="{spec["allocation_id"]}"}}'
        )
        assert part and part[0]["metric"]["allocation_id"] == tasks[0]["metric"]["allocation_id"]
        # The master's own request histogram, by route template.
        lat = _query(
            prom_url,
            'det_http_request_duration_seconds_count{handler="/api/v1/trials/{trial_id}/metrics"}',
        )
        assert lat and float(lat[0]["value"][1]) > 0
        # The agent was found through the master's service discovery, with its labels.
        found = _query(prom_url, 'up{job="det-agent",agent_id="agent-1",resource_pool="default"}')
        assert [x["value"][1] for x in found] == ["1"]
        # The agent machine's system metrics (psutil; NVML where there are GPUs).
        mem = _query(prom_url, 'det_agent_memory_total_bytes{agent_id="agent-1"}')
        assert mem and float(mem[0]["value"][1]) > 0
        assert net and float(net[0]["value"][1]) >= 0
        # Every query of the Grafana dashboard in docs/ is valid PromQL over these series.
        dashboard = json.loads((REPO / "docs" / "grafana" / "dauntless-cluster.json").read_text())
        for panel in dashboard["panels"]:
            for target in panel["targets"]:
                _query(prom_url, target["expr"])
    finally:
        stop.set()
        reporter.join(timeout=30)
        prom.terminate()
        try:
            prom.wait(timeout=20)
        except subprocess.TimeoutExpired:
            prom.kill()
            prom.wait(timeout=10)
        log.close()

    # Usage (scope 5): `det resources` sums the slot time the allocations recorded.
    cluster.det("cmd", "kill", sleeper)
    cluster.wait_task(sleeper, {"CANCELED", "COMPLETED", "ERROR"})
    allocs = cluster.api("/allocations")["allocations"]
    done = [a for a in allocs if a["task_id"] == sleeper]
    assert done and all(a["ended_at"] for a in done)
    expected = sum((a["ended_at"] - a["started_at"]) * len(a["slot_ids"]) for a in done)
    raw = json.loads(
        cluster.det(
            "-u",
            "admin",
            "resources",
            "raw",
            "2000-01-01T00:00:00Z",
            "2100-01-01T00:00:00Z",
            "--json",
        ).stdout
    )["resource_entries"]
    got = sum(e["seconds"] * e["slots"] for e in raw if e["kind"] == "COMMAND")
    assert got == pytest.approx(expected, rel=0.01)
    table = cluster.det("-u", "admin", "res", "summary", "--days", "1", "--csv").stdout
    rows = {
        tuple(line.split(",")[:2]): float(line.split(",")[2]) for line in table.splitlines()[1:]
    }
    assert rows[("resource_pool", "default")] * 3600 >= got * 0.99
