"""The master's side of task environments: the TaskSpec's ``environment``, placement by
agent runtime, refusal at create, and the environment fields of the config."""

from __future__ import annotations

from dataclasses import replace

import pytest
from databases import migrated_sqlite

from dauntless.config import parse_experiment_config
from dauntless.config._experiment import ConfigError, parse_size
from dauntless.master import loop
from dauntless.master.environments import (
    CONTAINERS,
    agent_has,
    check_pool_can_run,
    required_features,
    task_environment,
)
from dauntless.scheduler import AgentState, PoolSpec, Request, schedule

BASE = {
    "entrypoint": "python3 train.py",
    "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 1}},
}

DOCKER = {"name": "docker", "containers": True, "mount_namespace": True}
PROCESS = {"name": "process", "containers": False, "mount_namespace": True}
PROCESS_NO_NS = {"name": "process", "containers": False, "mount_namespace": False}


def _cfg(**extra):
    return parse_experiment_config({**BASE, **extra})


def test_task_environment_carries_every_field():
    cfg = _cfg(
        environment={
            "image": {"cpu": "c:1", "cuda": "g:1"},
            "force_pull_image": True,
            "registry_auth": {"username": "u", "password": "p"},
            "add_capabilities": ["SYS_PTRACE"],
            "python_requirements": ["inflection"],
            "pod_spec": {"spec": {}},
        },
        bind_mounts=[{"host_path": "/data", "container_path": "/in", "read_only": True}],
        resources={
            "shm_size": "2G",
            "devices": ["/dev/fuse", {"host_path": "/dev/a", "container_path": "/dev/b"}],
        },
        checkpoint_storage={"type": "shared_fs", "host_path": "/ckpt"},
    )
    env = task_environment(cfg.environment, cfg.bind_mounts, cfg.resources, cfg.checkpoint_storage)
    assert env == {
        "image": {"cpu": "c:1", "cuda": "g:1"},
        "force_pull_image": True,
        "registry_auth": {"username": "u", "password": "p"},
        "bind_mounts": [
            {
                "host_path": "/data",
                "container_path": "/in",
                "read_only": True,
                "propagation": "rprivate",
            }
        ],
        "shm_size": 2 * 1024**3,
        "devices": [
            {"host_path": "/dev/fuse", "container_path": "/dev/fuse", "mode": "mrw"},
            {"host_path": "/dev/a", "container_path": "/dev/b", "mode": "mrw"},
        ],
        "add_capabilities": ["SYS_PTRACE"],
        "drop_capabilities": [],
        "python_requirements": ["inflection"],
        "storage_paths": ["/ckpt"],
        "pod_spec": True,
    }


def test_per_device_variables_follow_the_slot_type():
    cfg = _cfg(environment={"environment_variables": {"cpu": ["A=cpu"], "gpu": ["A=gpu"]}})
    assert cfg.environment.variables_for("cpu") == {"A": "cpu"}
    assert cfg.environment.variables_for("cuda") == {"A": "gpu"}  # gpu: old name of cuda
    assert cfg.environment.variables_for("rocm") == {}
    cfg = _cfg(environment={"environment_variables": {"cuda": ["A=cuda"]}})
    assert cfg.environment.variables_for("cuda") == {"A": "cuda"}
    assert cfg.environment.image_for("cuda") is None


@pytest.mark.parametrize(
    ("extra", "field", "message"),
    [
        ({"resources": {"shm_size": "lots"}}, "resources.shm_size", "like '4G'"),
        ({"resources": {"devices": ["dev/x"]}}, "resources.devices", "absolute path"),
        (
            {"bind_mounts": [{"host_path": "rel", "container_path": "/x"}]},
            "bind_mounts.0.host_path",
            "absolute path",
        ),
        (
            {"bind_mounts": [{"host_path": "/a", "container_path": "."}]},
            "bind_mounts.0.container_path",
            "not '.'",
        ),
        (
            {"bind_mounts": [{"host_path": "/a", "container_path": "/b", "propagation": "x"}]},
            "bind_mounts.0.propagation",
            "rprivate",
        ),
        ({"environment": {"image": {"tpu": "x"}}}, "environment.image", "unknown device types"),
        (
            {"environment": {"python_requirements": "../req.txt"}},
            "environment.python_requirements",
            "relative path",
        ),
    ],
)
def test_bad_environment_fields_are_named(extra, field, message):
    with pytest.raises(ConfigError) as exc:
        _cfg(**extra)
    assert any(p.startswith(field) and message in m for p, m in exc.value.errors), exc.value.errors


def test_sizes():
    assert parse_size("4G") == 4 * 1024**3
    assert parse_size("512Mi") == 512 * 1024**2
    assert parse_size("64mb") == 64 * 1024**2
    assert parse_size(1000) == 1000
    with pytest.raises(ValueError):
        parse_size(-1)


def test_refused_at_create_only_when_no_agent_of_the_pool_can_run_it():
    image = _cfg(environment={"image": "python:3.11"})
    agents = [("a1", "default", PROCESS), ("a2", "gpu", DOCKER)]
    ((field, msg),) = check_pool_can_run(image, "default", agents)
    assert field == "environment.image"
    assert "no agent in resource pool 'default' can run container images" in msg
    assert "a1 (process)" in msg and "pools with such agents: ['gpu']" in msg
    assert check_pool_can_run(image, "gpu", agents) == []
    assert check_pool_can_run(image, "empty", agents) == []  # agents may join later
    mounts = _cfg(bind_mounts=[{"host_path": "/a", "container_path": "/b"}])
    assert check_pool_can_run(mounts, "default", agents) == []
    ((field, msg),) = check_pool_can_run(mounts, "p", [("a3", "p", None)])
    assert field == "bind_mounts" and "no pool has such an agent" in msg
    assert required_features(image.environment, image.bind_mounts) == {
        CONTAINERS: "environment.image"
    }


def test_images_are_placed_only_on_container_agents():
    """The features an agent's runtime provides (``agent_has``) become its
    ``AgentState.features``; the pure scheduler places each request only where its
    ``needs`` are met."""
    spec = PoolSpec(name="default")
    runtimes = {"a-proc": PROCESS, "b-docker": DOCKER}
    agents = [
        AgentState(
            id=a,
            pool="default",
            slots=slots,
            features=frozenset(f for f in [CONTAINERS] if agent_has(runtimes[a], f)),
        )
        for a, slots in (("a-proc", ("0", "1")), ("b-docker", ("0",)))
    ]
    image = frozenset({CONTAINERS})
    requests = [
        Request(id="img1", group_id="1", slots_needed=1, submitted_at=1, needs=image),
        Request(id="img2", group_id="1", slots_needed=1, submitted_at=2, needs=image),
        Request(id="plain", group_id="2", slots_needed=1, submitted_at=3),
    ]
    d = schedule(spec, agents, requests, [])
    placed = {a.request_id: dict(a.slots) for a in d.assignments}
    assert placed == {"img1": {"b-docker": ("0",)}, "plain": {"a-proc": ("0",)}}  # img2 waits
    # Without needs every agent will do.
    plain = [replace(r, needs=frozenset()) for r in requests]
    assert len(schedule(spec, agents, plain, []).assignments) == 3
    # A request that must avoid an agent is decided after the others, whatever its
    # submission time: img1 (best fit) takes b-docker's only slot, and x, kept off a-proc,
    # waits although a-proc has free slots.
    x = Request(id="x", group_id="3", slots_needed=1, avoid_agents=frozenset({"a-proc"}))
    d = schedule(spec, agents, [x, plain[0]], [])
    assert {a.request_id: dict(a.slots) for a in d.assignments} == {"img1": {"b-docker": ("0",)}}
    d = schedule(spec, agents, [x], [])
    assert {a.request_id: dict(a.slots) for a in d.assignments} == {"x": {"b-docker": ("0",)}}


SCRIPT = """
entrypoint: python3 train.py
searcher: {name: single, metric: loss, max_length: {batches: 1}}
environment:
  environment_variables: {cpu: [WHERE=cpu], cuda: [WHERE=cuda]}
  python_requirements: [inflection]
"""


@pytest.fixture()
def master(tmp_path):
    from fastapi.testclient import TestClient

    from dauntless.config import MasterConfig
    from dauntless.master.app import create_app
    from dauntless.master.testing import sign_in

    migrated_sqlite(tmp_path / "dauntless.db")  # the schema at head: no Alembic
    app = create_app(MasterConfig(data_dir=str(tmp_path), port=18080), run_loop=False)
    with TestClient(app) as client:
        sign_in(client)
        yield client, app.state.ctx


def test_the_master_picks_variables_by_slot_type_places_by_runtime_and_ends_fatal_runs(master):
    client, ctx = master
    gpu = {"id": "g", "slots": [{"id": "0", "type": "cuda"}], "runtime": PROCESS}
    assert client.post("/api/v1/agents", json=gpu).status_code == 200
    exp = client.post("/api/v1/experiments", data={"config": SCRIPT}).json()["experiment"]
    assert loop.schedule_pass(ctx) == 1
    (spec,) = client.post("/api/v1/agents/g/heartbeat", json={"running": []}).json()["start"]
    assert spec["env"]["WHERE"] == "cuda"  # was always the cpu list
    assert spec["environment"]["python_requirements"] == ["inflection"]
    # A fatal exit (the environment does not build) ends the trial without a restart.
    r = client.post(
        f"/api/v1/allocations/{spec['allocation_id']}/exited",
        json={"exit_code": 1, "message": "pip failed", "fatal": True},
    )
    assert r.status_code == 200
    (trial,) = client.get(f"/api/v1/experiments/{exp['id']}").json()["trials"]
    assert trial["state"] == "ERROR" and trial["restarts"] == 0

    # An image: refused while only process agents are registered in the pool ...
    image = SCRIPT + "  image: my/image:1\n"
    r = client.post("/api/v1/experiments", data={"config": image})
    assert r.status_code == 400
    assert r.json()["errors"][0]["field"] == "environment.image"
    # ... accepted once a docker agent joins, and placed on it, not on the free GPU agent.
    docker = {"id": "d", "slots": [{"id": "cpu0"}], "runtime": DOCKER}
    assert client.post("/api/v1/agents", json=docker).json()["agent"]["runtime"] == DOCKER
    r = client.post("/api/v1/experiments", data={"config": image})
    assert r.status_code == 201, r.text
    assert loop.schedule_pass(ctx) == 1
    assert client.post("/api/v1/agents/g/heartbeat", json={"running": []}).json()["start"] == []
    (spec,) = client.post("/api/v1/agents/d/heartbeat", json={"running": []}).json()["start"]
    assert spec["env"]["WHERE"] == "cpu" and spec["environment"]["image"] == "my/image:1"
