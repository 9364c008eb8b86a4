"""The ``aws`` provider driven by the master's provisioner against moto's EC2 server
(``moto[server]``: a real HTTP endpoint on 127.0.0.1, no AWS account): for a demand
sequence it launches, tags and terminates the expected instances."""

from __future__ import annotations

import base64
import os
import socket
import subprocess
import sys
import time

import httpx
import pytest
from fastapi.testclient import TestClient

boto3 = pytest.importorskip("boto3", reason="boto3 (extra aws) is not installed")
pytest.importorskip("moto", reason="moto[server] (extra test) is not installed")

from dauntless.config import AWSProviderConfig, MasterConfig  # noqa: E402
from dauntless.master import loop  # noqa: E402
from dauntless.master.app import create_app  # noqa: E402
from dauntless.master.provisioner.aws import run_instances_params  # noqa: E402
from dauntless.master.testing import register_agent, sign_in  # noqa: E402

EXPERIMENT = """
name: three
entrypoint: model_def:Trial
hyperparameters:
  global_batch_size: 8
  lr: {type: categorical, vals: [0.1, 0.2, 0.3]}
searcher: {name: grid, metric: loss, max_length: {batches: 30}}
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def moto_url():
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 60
        while True:
            try:
                httpx.get(url + "/moto-api/", timeout=2)
                break
            except httpx.HTTPError:
                if time.time() > deadline or proc.poll() is not None:
                    raise AssertionError("moto's server did not start") from None
                time.sleep(0.2)
        yield url
    finally:
        proc.kill()  # moto's server keeps nothing worth a graceful stop
        proc.wait(timeout=10)


@pytest.fixture()
def aws_env(monkeypatch):
    for k, v in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-west-2",
    }.items():
        monkeypatch.setenv(k, v)


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def _ours(ec2, cluster: str) -> dict[str, dict]:
    out = ec2.describe_instances(Filters=[{"Name": "tag:dauntless-cluster", "Values": [cluster]}])
    return {i["InstanceId"]: i for r in out["Reservations"] for i in r["Instances"]}


def test_demand_sequence_launches_tags_and_terminates(tmp_path, moto_url, aws_env):
    cluster = f"c{os.getpid()}x{int(time.time() * 1000) % 100000}"
    provider = {
        "type": "aws",
        "endpoint_url": moto_url,
        "region": "us-west-2",
        "image_id": "ami-0123456789abcdef0",
        "instance_type": "p3.2xlarge",
        "max_instances": 2,
        "max_idle_agent_period": "5m",
        "max_agent_starting_period": "10m",
        "spot": True,
        "custom_tags": [{"key": "team", "value": "vision"}],
        "startup_script": "echo booting",
    }
    config = MasterConfig.model_validate(
        {
            "data_dir": str(tmp_path),
            "port": 18080,
            "cluster_name": cluster,
            "resource_pools": [{"pool_name": "default", "provider": provider}],
        }
    )
    app = create_app(config, run_loop=False)
    ec2 = boto3.client("ec2", region_name="us-west-2", endpoint_url=moto_url)
    clock = Clock()
    with TestClient(app) as client:
        sign_in(client)
        ctx = app.state.ctx
        ctx.clock = clock
        prov = app.state.provisioners.pools[0]

        agents: dict[str, list[str]] = {}  # registered agent -> allocations handed to it
        credentials: dict[str, dict[str, str]] = {}  # registered agent -> its credential

        def step() -> None:
            for agent_id, started in agents.items():  # the agents' heartbeats
                beat = client.post(
                    f"/api/v1/agents/{agent_id}/heartbeat",
                    json={"running": started},
                    headers=credentials[agent_id],
                ).json()
                started += [spec["allocation_id"] for spec in beat["start"]]
            loop.schedule_pass(ctx)
            prov.step(force=True)

        def register(name: str) -> None:
            credentials[name] = register_agent(
                client, app, {"id": name, "slots": [{"id": "0", "type": "cuda"}]}
            )
            agents[name] = []

        step()
        assert _ours(ec2, cluster) == {}  # no demand, min_instances 0: nothing
        exp = client.post("/api/v1/experiments", data={"config": EXPERIMENT}).json()
        exp_id = exp["experiment"]["id"]

        # Three one-GPU trials, max_instances 2: two instances.
        step()
        live = _ours(ec2, cluster)
        assert len(live) == 2
        for inst in live.values():
            tags = {t["Key"]: t["Value"] for t in inst["Tags"]}
            assert tags["dauntless-cluster"] == cluster
            assert tags["dauntless-pool"] == "default"
            assert tags["team"] == "vision"
            assert tags["Name"] == "dauntless-agent-" + tags["dauntless-instance"]
            assert inst["InstanceType"] == "p3.2xlarge"
            assert inst.get("InstanceLifecycle") == "spot"
            data = ec2.describe_instance_attribute(
                InstanceId=inst["InstanceId"], Attribute="userData"
            )
            script = base64.b64decode(data["UserData"]["Value"]).decode()
            assert "echo booting" in script
            assert f"--agent-id {tags['dauntless-instance']}" in script
        names = {
            {t["Key"]: t["Value"] for t in i["Tags"]}["dauntless-instance"]: iid
            for iid, i in live.items()
        }
        step()
        assert len(_ours(ec2, cluster)) == 2  # starting instances count: no duplicates

        # One registers; the other never does and is replaced after 10 minutes.
        first, second = sorted(names)
        clock.now += 30
        register(first)
        step()
        clock.now += 600
        step()
        states = {iid: i["State"]["Name"] for iid, i in _ours(ec2, cluster).items()}
        assert states[names[second]] in ("shutting-down", "terminated")
        live = {iid for iid, s in states.items() if s in ("pending", "running")}
        assert names[first] in live and len(live) == 2
        (replacement_id,) = live - {names[first]}
        inst = _ours(ec2, cluster)[replacement_id]
        register_later = {t["Key"]: t["Value"] for t in inst["Tags"]}["dauntless-instance"]
        register(register_later)
        step()
        step()
        trials = client.get(f"/api/v1/experiments/{exp_id}").json()["trials"]
        assert sum(1 for t in trials if t["state"] == "ACTIVE") == 3
        assert [len(agents[first]), len(agents[register_later])] == [1, 1]

        # The experiment is killed; its tasks exit; the idle instances go after 5 minutes.
        assert client.post(f"/api/v1/experiments/{exp_id}/kill").status_code == 200
        step()
        for agent_id in (first, register_later):
            for alloc_id in agents.pop(agent_id):
                client.post(
                    f"/api/v1/allocations/{alloc_id}/exited",
                    json={"exit_code": -15, "message": "killed"},
                    headers=credentials[agent_id],
                )
            agents[agent_id] = []
        step()
        assert client.get(f"/api/v1/experiments/{exp_id}").json()["experiment"]["state"] in (
            "CANCELED",
            "STOPPING_CANCELED",
        )
        clock.now += 299
        step()
        assert (
            len(
                [
                    i
                    for i in _ours(ec2, cluster).values()
                    if i["State"]["Name"] == "running" or i["State"]["Name"] == "pending"
                ]
            )
            == 2
        )
        clock.now += 2
        step()
        states = [i["State"]["Name"] for i in _ours(ec2, cluster).values()]
        assert len(states) == 3
        assert all(s in ("shutting-down", "terminated") for s in states), states
        assert client.get("/api/v1/agents").json()["agents"] == []


def test_spot_and_network_parameters():
    cfg = AWSProviderConfig.model_validate(
        {
            "type": "aws",
            "image_id": "ami-1",
            "instance_type": "g4dn.12xlarge",
            "spot": True,
            "spot_max_price": "1.25",
            "network_interface": {"subnet_id": "subnet-1", "security_group_id": "sg-1"},
            "launch_template": {"name": "gpu", "version": "3"},
            "iam_instance_profile_arn": "arn:aws:iam::1:instance-profile/p",
        }
    )
    assert cfg.slots_per_instance() == 4
    p = run_instances_params(cfg, "n1", "gpu", "clu", "#!/bin/bash", spot=True)
    assert p["InstanceMarketOptions"]["SpotOptions"]["MaxPrice"] == "1.25"
    assert p["NetworkInterfaces"] == [
        {
            "DeviceIndex": 0,
            "AssociatePublicIpAddress": True,
            "SubnetId": "subnet-1",
            "Groups": ["sg-1"],
        }
    ]
    assert p["LaunchTemplate"] == {"LaunchTemplateName": "gpu", "Version": "3"}
    assert p["IamInstanceProfile"] == {"Arn": "arn:aws:iam::1:instance-profile/p"}
    assert "InstanceMarketOptions" not in run_instances_params(cfg, "n1", "gpu", "clu", "", False)


def test_aws_config_errors_name_the_field():
    with pytest.raises(ValueError, match="image_id"):
        AWSProviderConfig.model_validate({"type": "aws"})
    with pytest.raises(ValueError, match="cpu_slots_allowed"):
        AWSProviderConfig.model_validate(
            {"type": "aws", "image_id": "a", "instance_type": "t3.large"}
        )
    with pytest.raises(ValueError, match="duration"):
        AWSProviderConfig.model_validate(
            {"type": "aws", "image_id": "a", "max_idle_agent_period": "ten minutes"}
        )


def test_restart_settles_launches_whose_outcome_was_not_recorded(tmp_path, moto_url, aws_env):
    """A master that died between recording a launch (LAUNCHING) and the provider's
    answer: on restart the instance found by its tag becomes STARTING (not launched
    again); one EC2 never made is closed, and the demand launches anew."""
    from dauntless.master.db import InstanceRow

    cluster = f"r{os.getpid()}x{int(time.time() * 1000) % 100000}"
    provider = {
        "type": "aws",
        "endpoint_url": moto_url,
        "image_id": "ami-0123456789abcdef0",
        "instance_type": "p3.2xlarge",
        "max_instances": 2,
    }
    config = MasterConfig.model_validate(
        {
            "data_dir": str(tmp_path),
            "port": 18080,
            "cluster_name": cluster,
            "resource_pools": [{"pool_name": "default", "provider": provider}],
        }
    )
    app = create_app(config, run_loop=False)
    ec2 = boto3.client("ec2", region_name="us-west-2", endpoint_url=moto_url)
    with TestClient(app) as client:
        sign_in(client)
        ctx = app.state.ctx
        prov = app.state.provisioners.pools[0]
        made = prov.provider.launch("made-before-crash")  # EC2 has it; the row says LAUNCHING
        with ctx.db.write() as s:
            for name in ("made-before-crash", "never-made"):
                s.add(
                    InstanceRow(
                        id=name,
                        resource_pool="default",
                        provider="aws",
                        provider_id=None,
                        state="LAUNCHING",
                        launched_at=ctx.clock(),
                        info={},
                    )
                )
        exp = client.post("/api/v1/experiments", data={"config": EXPERIMENT}).json()
        assert exp["experiment"]["id"]
        loop.schedule_pass(ctx)
        prov.step(force=True)
        with ctx.db.read() as s:
            rows = {r.id: r for r in s.query(InstanceRow).all()}
        assert rows["made-before-crash"].state == "STARTING"
        assert rows["made-before-crash"].provider_id == made
        assert rows["never-made"].state == "TERMINATED"
        # Three trials, max_instances 2: the one found counts, one more is launched.
        live = [r for r in rows.values() if r.state in ("STARTING", "RUNNING")]
        assert len(live) == 2
        running = [
            i for i in _ours(ec2, cluster).values() if i["State"]["Name"] in ("pending", "running")
        ]
        assert len(running) == 2
