"""Issue 29 on the master's side: agents speak only for themselves (their own credential,
reports only about their own allocations, slot caps), and tasks carry the Unix identity
they run as (users' links, ``security.default_task``, placement and refusals).

One in-process master (SQLite, no control loop) serves every test of the module: users
alice and bob, agents a1 (root) and a2 (uid 1000, not root), and the credentials of all.
"""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from dauntless._auth import AGENT_TOKEN_HEADER
from dauntless.config import (
    AgentUserGroup,
    DefaultTaskConfig,
    MasterConfig,
    TaskIdentity,
    agent_refusal,
    resolve_task_identity,
)
from dauntless.master import loop
from dauntless.master.app import create_app
from dauntless.master.testing import (
    agent_headers,
    bearer,
    login,
    model_def_tarball,
    register_agent,
)

CONFIG = """
name: ident
entrypoint: python3 train.py
searcher: {name: single, metric: loss, max_length: {batches: 1}}
resources: {resource_pool: %s}
"""

ROOT = {"uid": 0, "gid": 0, "root": True, "pid_namespace": True}
NOT_ROOT = {"uid": 1000, "gid": 1000, "root": False, "pid_namespace": False}


def _runtime(identity: dict) -> dict:
    return {"name": "process", "containers": False, "mount_namespace": True, "identity": identity}


class World:
    def __init__(self, client: TestClient, app) -> None:
        self.client, self.app, self.ctx = client, app, app.state.ctx
        self.admin = login(client)
        self.ids = {}
        for name in ("alice", "bob"):
            r = client.post(
                "/api/v1/users",
                headers=bearer(self.admin),
                json={"username": name, "password": f"{name}-pw"},
            )
            self.ids[name] = r.json()["user"]["id"]
        self.alice = login(client, "alice", "alice-pw")
        self.bob = login(client, "bob", "bob-pw")
        slot = [{"id": "cpu0", "type": "cpu"}]
        self.a1 = register_agent(
            client, app, {"id": "a1", "slots": slot, "runtime": _runtime(ROOT)}
        )
        self.a2 = register_agent(
            client,
            app,
            {"id": "a2", "resource_pool": "small", "slots": slot, "runtime": _runtime(NOT_ROOT)},
        )

    def experiment(self, token: str, pool: str = "default"):
        return self.client.post(
            "/api/v1/experiments",
            headers=bearer(token),
            data={"config": CONFIG % pool},
            files={"context": ("c.tar.gz", model_def_tarball(), "application/gzip")},
        )


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("agent-identity")
    config = MasterConfig(
        data_dir=str(tmp),
        port=18082,
        resource_pools=[{"pool_name": "default"}, {"pool_name": "small"}],
        security={"agents": {"max_slots": 4}},
    )
    app = create_app(config, run_loop=False)
    with TestClient(app) as client:
        yield World(client, app)


def test_identity_resolution_is_field_by_field():
    default = DefaultTaskConfig()
    assert resolve_task_identity(None, default) == TaskIdentity(65534, 65534, "nobody", "nogroup")
    link = AgentUserGroup(agent_uid=1001, agent_gid=1002, agent_user="al", agent_group="als")
    assert resolve_task_identity(link, default) == TaskIdentity(1001, 1002, "al", "als")
    partial = AgentUserGroup(agent_uid=1001)
    assert resolve_task_identity(partial, default) == TaskIdentity(1001, 65534, "nobody", "nogroup")
    workspace = AgentUserGroup(agent_gid=7)  # the hook for workspaces: it wins per field
    assert resolve_task_identity(link, default, workspace).gid == 7
    alice = TaskIdentity(1001, 1002, "al", "als")
    assert agent_refusal(ROOT, alice) is None
    assert agent_refusal(None, alice) is None  # a hand-made agent: taken at its word
    assert "without root" in (agent_refusal(NOT_ROOT, alice) or "")
    assert agent_refusal(NOT_ROOT, TaskIdentity(1000, 1000, "me", "me")) is None
    with pytest.raises(ValueError, match="identity.uid"):
        TaskIdentity.from_json({"uid": -1, "gid": 0, "user": "x", "group": "x"})


def test_links_are_set_by_admins_and_shown_with_the_user(world):
    w, c = world, world.client
    url = f"/api/v1/users/{w.ids['alice']}"
    link = {"agent_uid": 1001, "agent_gid": 1002, "agent_user": "alice", "agent_group": "alice"}
    r = c.patch(url, headers=bearer(w.alice), json={"agent_user_group": link})
    assert r.status_code == 403 and "agent_user_group" in r.json()["detail"]
    r = c.patch(url, headers=bearer(w.admin), json={"agent_user_group": {**link, "agent_uid": -5}})
    assert r.status_code == 400 and r.json()["errors"][0]["field"].startswith("agent_user_group")
    r = c.patch(url, headers=bearer(w.admin), json={"agent_user_group": {"agent_user": "a b"}})
    assert r.status_code == 400
    r = c.patch(url, headers=bearer(w.admin), json={"agent_user_group": link})
    assert r.status_code == 200 and r.json()["user"]["agent_user_group"] == link
    me = c.get("/api/v1/me", headers=bearer(w.alice)).json()["user"]
    assert me["agent_user_group"] == link
    bob = c.get("/api/v1/me", headers=bearer(w.bob)).json()["user"]
    assert bob["agent_user_group"] is None


def test_task_specs_carry_the_identity_and_placement_follows_it(world):
    w, c = world, world.client
    link = {"agent_uid": 1001, "agent_gid": 1002, "agent_user": "alice", "agent_group": "alice"}
    c.patch(
        f"/api/v1/users/{w.ids['alice']}",
        headers=bearer(w.admin),
        json={"agent_user_group": link},
    )
    # Pool "small" has only a2, not root and uid 1000: nobody can run there (refused at
    # create, naming the pool), and neither can alice (linked to 1001).
    for token, who in ((w.bob, "nobody (uid 65534)"), (w.alice, "alice (uid 1001)")):
        r = w.experiment(token, "small")
        assert r.status_code == 400, r.text
        (err,) = r.json()["errors"]
        assert err["field"] == "resources.resource_pool" and who in err["message"]
        assert "agent a2: it runs as uid 1000, gid 1000 without root" in err["message"]
    r = c.post(
        "/api/v1/commands",
        headers=bearer(w.bob),
        data={"entrypoint": '"true"', "config": "resources: {slots: 0, resource_pool: small}"},
    )
    assert r.status_code == 400 and r.json()["errors"][0]["field"] == "resources.resource_pool"
    # In the default pool (root agent a1) both run, each as its own identity.
    a = w.experiment(w.alice).json()["experiment"]["id"]
    r = c.post(
        "/api/v1/commands",
        headers=bearer(w.bob),
        data={"entrypoint": '"true"', "config": "resources: {slots: 0}"},
    )
    assert r.status_code == 201, r.text
    assert loop.schedule_pass(w.ctx) == 2
    specs = c.post("/api/v1/agents/a1/heartbeat", headers=w.a1, json={"running": []}).json()
    by_kind = {sp.get("task_type", "TRIAL"): sp for sp in specs["start"]}
    assert by_kind["TRIAL"]["experiment_id"] == a
    assert by_kind["TRIAL"]["identity"] == {
        "uid": 1001,
        "gid": 1002,
        "user": "alice",
        "group": "alice",
    }
    assert by_kind["COMMAND"]["identity"] == {
        "uid": 65534,
        "gid": 65534,
        "user": "nobody",
        "group": "nogroup",
    }
    w.started = [sp["allocation_id"] for sp in specs["start"]]
    w.trial_spec = by_kind["TRIAL"]
    w.command_spec = by_kind["COMMAND"]


def test_the_cluster_secret_only_registers(world):
    w, c = world, world.client
    secret = agent_headers(w.app)
    r = c.post("/api/v1/agents/a1/heartbeat", headers=secret, json={"running": []})
    assert r.status_code == 403 and "only registers agents" in r.json()["detail"]
    r = c.post("/api/v1/task/logs", headers=secret, json={"logs": []})
    assert r.status_code == 403
    assert c.get("/api/v1/agents", headers=secret).status_code == 200  # listing: allowed
    r = c.post("/api/v1/agents/a1/heartbeat", headers={AGENT_TOKEN_HEADER: "forged"}, json={})
    assert r.status_code == 401


def test_agents_report_only_on_their_own_allocations(world):
    w, c = world, world.client
    if not hasattr(w, "trial_spec"):
        pytest.skip("needs test_task_specs_carry_the_identity_and_placement_follows_it")
    alloc = w.trial_spec["allocation_id"]
    # a2 speaks for a1: its heartbeat, a1's exits, logs and contexts are refused.
    r = c.post("/api/v1/agents/a1/heartbeat", headers=w.a2, json={"running": []})
    assert r.status_code == 403 and "only for itself" in r.json()["detail"]
    r = c.post(f"/api/v1/allocations/{alloc}/exited", headers=w.a2, json={"exit_code": 0})
    assert r.status_code == 403 and f"allocation {alloc} is not one of them" in r.text
    line = {"allocation_id": alloc, "seq": 1, "log": "forged"}
    r = c.post("/api/v1/task/logs", headers=w.a2, json={"logs": [line]})
    assert r.status_code == 403
    exp_id = w.trial_spec["experiment_id"]
    r = c.get(f"/api/v1/experiments/{exp_id}/model_def", headers=w.a2)
    assert r.status_code == 403 and "runs no allocation of experiment" in r.text
    task_id = w.command_spec["task_id"]
    r = c.get(f"/api/v1/tasks/{task_id}/context", headers=w.a2)
    assert r.status_code == 403  # refused before it could learn there is no context
    # An exit a2 slips into its own heartbeat is skipped: a1's trial still runs.
    r = c.post(
        "/api/v1/agents/a2/heartbeat",
        headers=w.a2,
        json={"running": [], "exited": [{"allocation_id": alloc, "exit_code": 0}]},
    )
    assert r.status_code == 200
    running = c.get("/api/v1/allocations", params={"active": "true"}, headers=bearer(w.admin))
    assert alloc in [a["id"] for a in running.json()["allocations"]]
    # a1 itself may do all of it.
    assert c.get(f"/api/v1/experiments/{exp_id}/model_def", headers=w.a1).status_code == 200
    r = c.post("/api/v1/task/logs", headers=w.a1, json={"logs": [line]})
    assert r.status_code == 200 and r.json() == {"stored": 1}
    r = c.post("/api/v1/agents/a1/heartbeat", headers=w.a1, json={"running": w.started})
    assert r.status_code == 200
    # A registration replaces the credential: the old one stops working at once.
    old = w.a1
    w.a1 = register_agent(
        c, w.app, {"id": "a1", "slots": [{"id": "cpu0"}], "running": w.started,
                   "runtime": _runtime(ROOT)}
    )  # fmt: skip
    assert c.post("/api/v1/agents/a1/heartbeat", headers=old, json={}).status_code == 401
    r = c.post("/api/v1/agents/a1/heartbeat", headers=w.a1, json={"running": w.started})
    assert r.status_code == 200


def test_slurm_part_credentials_speak_for_their_part_only(world):
    w, c = world, world.client
    if not hasattr(w, "trial_spec"):
        pytest.skip("needs test_task_specs_carry_the_identity_and_placement_follows_it")
    parts = w.app.state.auth.agents
    trial_part = w.trial_spec["allocation_id"]
    command_part = w.command_spec["allocation_id"]
    mine = {AGENT_TOKEN_HEADER: parts.part_token(trial_part)}
    assert parts.verify_part_token(parts.part_token(trial_part)) == trial_part
    line = {"allocation_id": command_part, "seq": 1, "log": "not mine"}
    r = c.post("/api/v1/task/logs", headers=mine, json={"logs": [line]})
    assert r.status_code == 403 and "the Slurm job of part" in r.json()["detail"]
    r = c.post("/api/v1/task/logs", headers=mine, json={"logs": [{**line, "allocation_id": trial_part, "seq": 2}]})  # fmt: skip
    assert r.status_code == 200
    forged = parts.part_token(trial_part)[:-4] + "0000"
    assert c.post("/api/v1/task/logs", headers={AGENT_TOKEN_HEADER: forged}, json={"logs": []}).status_code == 401  # fmt: skip
    r = c.post("/api/v1/agents/a1/heartbeat", headers=mine, json={})
    assert r.status_code == 403


def test_slot_caps_and_artificial_slots(world):
    w, c = world, world.client
    secret = agent_headers(w.app)
    many = [{"id": f"cpu{i}", "type": "cpu"} for i in range(5)]
    r = c.post("/api/v1/agents", headers=secret, json={"id": "big", "slots": many})
    assert r.status_code == 400
    assert "at most 4 per agent (security.agents.max_slots)" in r.json()["detail"]
    assert r.json()["errors"][0]["field"] == "slots"
    fake = [{"id": "cpu0", "type": "cpu", "device": "artificial"}]
    r = c.post("/api/v1/agents", headers=secret, json={"id": "fake", "slots": fake})
    assert r.status_code == 400 and "allow_artificial_slots" in r.json()["detail"]
    ids = [a["id"] for a in c.get("/api/v1/agents", headers=bearer(w.admin)).json()["agents"]]
    assert "big" not in ids and "fake" not in ids


def test_an_exit_of_a_part_handed_over_reads_no_placement(tmp_path):
    """The agent a beat hands a part to is where that part is placed for good, so its
    exit's report check reads no placement (issue 37: statements per trial), and another
    agent's report of that exit is still refused (skipped in its heartbeat)."""
    from sqlalchemy import event

    config = MasterConfig(data_dir=str(tmp_path), port=18083)
    app = create_app(config, run_loop=False)
    with TestClient(app) as c:
        admin = login(c)
        slot = [{"id": "cpu0", "type": "cpu"}]
        a1 = register_agent(c, app, {"id": "a1", "slots": slot, "runtime": _runtime(ROOT)})
        a2 = register_agent(c, app, {"id": "a2", "slots": slot, "runtime": _runtime(ROOT)})
        r = c.post(
            "/api/v1/experiments",
            headers=bearer(admin),
            data={"config": CONFIG % "default"},
            files={"context": ("c.tar.gz", model_def_tarball(), "application/gzip")},
        )
        assert r.status_code == 201, r.text
        ctx = app.state.ctx
        loop.schedule_pass(ctx)
        specs = {}
        for name, headers in (("a1", a1), ("a2", a2)):
            r = c.post(f"/api/v1/agents/{name}/heartbeat", headers=headers, json={"running": []})
            assert r.status_code == 200, r.text
            specs[name] = r.json()["start"]
        ((owner, (spec,)),) = [(n, s) for n, s in specs.items() if s]
        other = {"a1": a2, "a2": a1}[owner]
        alloc = spec["allocation_id"]
        statements: list[str] = []
        event.listen(
            ctx.db.engine,
            "before_cursor_execute",
            lambda conn, cursor, statement, *a: statements.append(" ".join(statement.split())),
        )
        exited = {"running": [], "exited": [{"allocation_id": alloc, "exit_code": 0}]}
        r = c.post(
            f"/api/v1/agents/{'a2' if owner == 'a1' else 'a1'}/heartbeat",
            headers=other,
            json=exited,
        )
        assert r.status_code == 200, r.text
        running = c.get("/api/v1/allocations", params={"active": "true"}, headers=bearer(admin))
        assert alloc in [a["id"] for a in running.json()["allocations"]]  # refused: skipped
        r = c.post(
            f"/api/v1/agents/{owner}/heartbeat", headers={"a1": a1, "a2": a2}[owner], json=exited
        )
        assert r.status_code == 200, r.text
        placement = "SELECT allocations.id, allocations.agent_id FROM allocations WHERE"
        assert [q for q in statements if q.startswith(placement)] == []
        running = c.get("/api/v1/allocations", params={"active": "true"}, headers=bearer(admin))
        assert alloc not in [a["id"] for a in running.json()["allocations"]]
