"""Heartbeats that change nothing are answered from memory, their times written by the
loop in one statement (issue 37); every change still reaches the agent at its next beat,
lost agents are still reaped, and a restarted master does not lose live agents."""

from __future__ import annotations

import contextlib
import threading
import time

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from dauntless._auth import AGENT_TOKEN_HEADER
from dauntless.config import MasterConfig
from dauntless.master import heartbeat_asgi, loop, scheduling
from dauntless.master.app import create_app
from dauntless.master.body_limits import MAX_JSON_BODY_BYTES
from dauntless.master.db import AgentRow, AllocationRow
from dauntless.master.heartbeats import ANSWER_MAX_AGE, MAX_HOLD_SECONDS, STALL_SECONDS
from dauntless.master.models import agents
from dauntless.master.testing import model_def_tarball, register_agent, sign_in

CONFIG = """
name: beats
entrypoint: model_def:Trial
hyperparameters: {global_batch_size: 8}
searcher: {name: single, metric: loss, max_length: {batches: 30}}
max_restarts: 0
"""


def _app(tmp_path, db_url):
    config = MasterConfig(data_dir=str(tmp_path), port=18080, db_url=db_url, agent_timeout=30)
    return create_app(config, run_loop=False)


@contextlib.contextmanager
def _agent_a1(tmp_path, db_url):
    """A master (no control loop) with agent a1 of one slot registered: (client signed
    in as admin, context, a1's headers, the master's clock when a1 registered)."""
    app = _app(tmp_path, db_url)
    with TestClient(app) as client:
        sign_in(client)
        a1 = register_agent(client, app, {"id": "a1", "slots": [{"id": "cpu0"}]})
        yield client, app.state.ctx, a1, app.state.ctx.clock()


@pytest.fixture()
def master(tmp_path, db_url):
    """(client signed in as admin, context, agent a1's headers, a beat function)."""
    with _agent_a1(tmp_path, db_url) as (client, ctx, a1, t0):
        ctx.clock = lambda: t0

        def beat(running: list[str], at: float) -> dict:
            ctx.clock = lambda: at
            r = client.post("/api/v1/agents/a1/heartbeat", json={"running": running}, headers=a1)
            assert r.status_code == 200, r.text
            return r.json()

        yield client, ctx, a1, beat, t0


def _stored_beat(ctx) -> float:
    with ctx.db.read() as s:
        return s.scalar(select(AgentRow.last_heartbeat).where(AgentRow.id == "a1"))


def _state(client) -> str:
    (agent,) = [a for a in client.get("/api/v1/agents").json()["agents"] if a["id"] == "a1"]
    return str(agent["state"])


def _start_trial(client, ctx, beat, at: float) -> str:
    files = {"context": ("c.tar.gz", model_def_tarball(), "application/gzip")}
    r = client.post("/api/v1/experiments", data={"config": CONFIG}, files=files)
    assert r.status_code == 201, r.text
    assert loop.schedule_pass(ctx, maintenance=False) == 1
    (spec,) = beat([], at)["start"]
    return str(spec["allocation_id"])


def test_quiet_beats_are_kept_in_memory_until_the_loop_writes_them(master):
    client, ctx, _, beat, t0 = master
    alloc = _start_trial(client, ctx, beat, t0)
    assert beat([alloc], t0 + 1) == {"start": [], "kill": [], "agent_timeout": 30.0}
    assert _stored_beat(ctx) == t0 + 1  # the full path wrote it
    # The same beat again: answered from memory, the row not written...
    assert beat([alloc], t0 + 6) == {"start": [], "kill": [], "agent_timeout": 30.0}
    assert _stored_beat(ctx) == t0 + 1
    # ...but the agent's views show it, and the loop's maintenance writes it.
    (agent,) = client.get("/api/v1/agents").json()["agents"]
    assert agent["last_heartbeat"] == t0 + 6
    r = client.post("/api/v1/agents/a1/enable")  # answers with the agent
    assert r.json()["agent"]["last_heartbeat"] == t0 + 6
    ctx.clock = lambda: t0 + 7
    loop.schedule_pass(ctx, maintenance=True)
    assert _stored_beat(ctx) == t0 + 6


def test_every_change_reaches_the_agent_at_its_next_beat(master):
    client, ctx, _, beat, t0 = master
    alloc = _start_trial(client, ctx, beat, t0)
    assert beat([alloc], t0 + 1)["kill"] == []
    assert beat([alloc], t0 + 2)["kill"] == []  # from memory
    # A part it does not run any more, an unknown one: the full path, which kills it.
    assert beat([alloc, "stray"], t0 + 3)["kill"] == ["stray"]
    assert beat([alloc, "stray"], t0 + 4)["kill"] == ["stray"]  # the same answer, kept
    # The experiment killed: the kill order comes at the next beat, not the kept answer.
    exp_id = client.get("/api/v1/experiments").json()["experiments"][0]["id"]
    assert client.post(f"/api/v1/experiments/{exp_id}/kill").status_code == 200
    assert beat([alloc], t0 + 5)["kill"] == [alloc]
    # Its exit, carried by a beat, is recorded before the answer.
    r = client.post(
        "/api/v1/agents/a1/heartbeat",
        json={"running": [], "exited": [{"allocation_id": alloc, "exit_code": -9}]},
        headers=master[2],
    )
    assert r.status_code == 200 and r.json()["kill"] == []
    with ctx.db.read() as s:
        assert s.get_one(AllocationRow, alloc).state == "TERMINATED"


def test_new_work_reaches_a_kept_agent_and_another_agent_is_refused(master):
    client, ctx, a1, beat, t0 = master
    assert beat([], t0 + 1) == {"start": [], "kill": [], "agent_timeout": 30.0}
    assert beat([], t0 + 2)["start"] == []  # from memory
    files = {"context": ("c.tar.gz", model_def_tarball(), "application/gzip")}
    r = client.post("/api/v1/experiments", data={"config": CONFIG}, files=files)
    assert r.status_code == 201, r.text
    assert loop.schedule_pass(ctx, maintenance=False) == 1
    assert len(beat([], t0 + 3)["start"]) == 1
    # Another agent's credential may not beat for a1, kept answer or not.
    app = client.app
    a2 = register_agent(client, app, {"id": "a2", "slots": [{"id": "cpu0"}]})
    r = client.post("/api/v1/agents/a1/heartbeat", json={"running": []}, headers=a2)
    assert r.status_code == 403 and "only for itself" in r.text


def test_an_agent_beating_from_memory_is_not_lost_and_a_silent_one_is(master):
    client, ctx, _, beat, t0 = master
    beat([], t0)
    for k in range(1, 9):  # every 5 s for 40 s, past the 30 s agent_timeout
        assert beat([], t0 + 5 * k)["start"] == []
        loop.schedule_pass(ctx, maintenance=True)
        assert _state(client) == "ACTIVE"
    assert _stored_beat(ctx) == t0 + 40
    # Beaten from memory after the flush of the same second: still not lost.
    beat([], t0 + 45)
    ctx.clock = lambda: t0 + 45 + 29
    loop.schedule_pass(ctx, maintenance=True)
    assert _state(client) == "ACTIVE"
    # Silent for longer than agent_timeout: lost; its next beat takes the full path.
    ctx.clock = lambda: t0 + 45 + 31
    loop.schedule_pass(ctx, maintenance=True)
    assert _state(client) == "LOST"
    beat([], t0 + 80)
    assert _state(client) == "ACTIVE"


def test_a_kept_answer_is_recomputed_after_its_maximum_age(master):
    client, ctx, _, beat, t0 = master
    beat([], t0)
    beat([], t0 + 1)
    assert _stored_beat(ctx) == t0  # from memory
    beat([], t0 + ANSWER_MAX_AGE + 1)
    assert _stored_beat(ctx) == t0 + ANSWER_MAX_AGE + 1  # the full path again


def test_a_restarted_master_gives_agents_a_fresh_deadline(tmp_path, db_url):
    """Beats answered from memory and not yet written are lost with the master; the
    restarted master still counts the agent's timeout from its own start."""
    with _agent_a1(tmp_path, db_url) as (client, ctx, a1, t0):
        for k in range(3):
            ctx.clock = lambda k=k: t0 - 300 + 5 * k
            r = client.post("/api/v1/agents/a1/heartbeat", json={"running": []}, headers=a1)
            assert r.status_code == 200
        with ctx.db.read() as s:  # the last two only in memory, lost with this master
            assert s.get_one(AgentRow, "a1").last_heartbeat == t0 - 300
    restarted = time.time()
    app = _app(tmp_path, db_url)
    with TestClient(app) as client:
        ctx = app.state.ctx
        with ctx.db.read() as s:
            started = s.get_one(AgentRow, "a1").last_heartbeat
        assert started >= restarted  # the start's fresh deadline
        ctx.clock = lambda: started + 29
        loop.schedule_pass(ctx, maintenance=True)
        with ctx.db.read() as s:
            assert s.get_one(AgentRow, "a1").state == "ACTIVE"
        ctx.clock = lambda: started + 31
        loop.schedule_pass(ctx, maintenance=True)
        with ctx.db.read() as s:
            assert s.get_one(AgentRow, "a1").state == "LOST"


def test_time_the_master_stood_still_does_not_count_against_its_agents(master):
    """Issue 37: a master stopped (SIGSTOP) or starved of CPU past ``agent_timeout``
    declared its agents lost the moment it ran again, before it read their beats."""
    client, ctx, _, beat, t0 = master
    beats = ctx.heartbeats
    beat([], t0)
    assert beats.tick(time.monotonic(), t0) == 0.0  # the intake's ticks start
    assert beats.tick(time.monotonic() + STALL_SECONDS - 0.5, t0) == 0.0  # late, not stalled
    # The last tick 40 s ago: the intake stands still now, and no agent is reaped.
    beats.tick(time.monotonic() - 40.0, t0)
    assert beats.intake_stalled(time.monotonic())
    ctx.clock = lambda: t0 + 40
    loop.schedule_pass(ctx, maintenance=True)
    assert _state(client) == "ACTIVE"
    # The next tick ends the stall: every agent's timeout runs from then.
    assert beats.tick(time.monotonic(), t0 + 40) == pytest.approx(40.0, abs=1.0)
    assert not beats.intake_stalled(time.monotonic())
    ctx.clock = lambda: t0 + 40 + 29
    loop.schedule_pass(ctx, maintenance=True)
    assert _state(client) == "ACTIVE"
    # An agent that stays silent after the stall is lost as before.
    ctx.clock = lambda: t0 + 40 + 31
    loop.schedule_pass(ctx, maintenance=True)
    assert _state(client) == "LOST"


def test_a_beat_counts_from_its_arrival(master):
    """A beat that takes the full path is alive from when it arrived, however long the
    worker threads take to get to it."""
    _, ctx, _, beat, t0 = master
    beat([], t0)
    ctx.heartbeats.arrived("a1", t0 + 20)
    assert ctx.heartbeats.deadline_from("a1", t0) == t0 + 20
    ctx.clock = lambda: t0 + 45
    loop.schedule_pass(ctx, maintenance=True)  # 25 s after the arrival: not lost
    assert _stored_beat(ctx) == t0 + 20  # written by the loop, as beats from memory


def test_an_agent_whose_beat_waits_past_agent_timeout_is_not_lost(tmp_path):
    """Issue 37: on an overloaded master a beat carrying exits waited longer than
    ``agent_timeout`` for the worker threads and the database; the agent sends its next
    beat only after an answer, so the reaper declared it lost meanwhile and every trial
    on it ended ERROR. The test holds the master's database write lock (re-entrant: the
    reaper below runs in this thread) while a beat that takes the full path waits for
    it, past the timeout counted from the beat's arrival."""
    with _agent_a1(tmp_path, f"sqlite:///{tmp_path}/beats.db") as (client, ctx, a1, t0):

        def beat(running: list[str], at: float) -> dict:
            ctx.clock = lambda: at
            r = client.post("/api/v1/agents/a1/heartbeat", json={"running": running}, headers=a1)
            assert r.status_code == 200, r.text
            return r.json()

        alloc = _start_trial(client, ctx, beat, t0)
        beat([alloc], t0 + 1)
        answers: list[int] = []
        with ctx.db.write_lock:
            ctx.clock = lambda: t0 + 2
            # Not quiet (it lists a part the master does not know): a write transaction.
            slow = threading.Thread(
                target=lambda: answers.append(
                    client.post(
                        "/api/v1/agents/a1/heartbeat",
                        json={"running": [alloc, "stray"]},
                        headers=a1,
                    ).status_code
                )
            )
            slow.start()
            deadline = time.monotonic() + 60
            while ctx.heartbeats.latest("a1") != t0 + 2:  # it arrived; it waits for the lock
                assert time.monotonic() < deadline, "the beat never arrived"
                time.sleep(0.01)
            ctx.clock = lambda: t0 + 40  # 38 s after its arrival, unanswered
            loop.schedule_pass(ctx, maintenance=True)
            assert _state(client) == "ACTIVE"
        slow.join(60)
        assert answers == [200]
        with ctx.db.read() as s:
            assert s.get_one(AllocationRow, alloc).state == "RUNNING"
        # Its answer at t0 + 40 counts as a beat: alive 29 s later, lost once silent for 31.
        ctx.clock = lambda: t0 + 40 + 29
        loop.schedule_pass(ctx, maintenance=True)
        assert _state(client) == "ACTIVE"
        ctx.clock = lambda: t0 + 40 + 31
        loop.schedule_pass(ctx, maintenance=True)
        assert _state(client) == "LOST"


def _trial(client) -> dict:
    exp_id = client.get("/api/v1/experiments").json()["experiments"][0]["id"]
    (trial,) = client.get(f"/api/v1/experiments/{exp_id}").json()["trials"]
    return trial


def test_a_part_whose_answer_never_reached_the_agent_is_handed_over_again(master):
    """Issue 37: an answer that handed a trial over can be lost after the master
    committed it (on an overloaded master the agent gave up waiting after 30 s and beat
    again); its trial then ended ERROR as "the agent no longer runs this task". A beat
    that arrives after the hand-over and leaves out a part the agent never listed gets
    it again, with a new token; one the agent listed and then left out ends as before."""
    client, ctx, a1, beat, t0 = master
    files = {"context": ("c.tar.gz", model_def_tarball(), "application/gzip")}
    r = client.post("/api/v1/experiments", data={"config": CONFIG}, files=files)
    assert r.status_code == 201, r.text
    assert loop.schedule_pass(ctx, maintenance=False) == 1
    (lost,) = beat([], t0)["start"]  # this answer never reaches the agent
    assert beat([], t0 + 2)["start"] == []  # within the grace: nothing yet
    (again,) = beat([], t0 + 10)["start"]
    assert again["allocation_id"] == lost["allocation_id"]
    assert again["env"]["DET_SESSION_TOKEN"] != lost["env"]["DET_SESSION_TOKEN"]
    alloc = again["allocation_id"]
    with ctx.db.read() as s:
        assert s.get_one(AllocationRow, alloc).state == "RUNNING"
    assert (_trial(client)["state"], _trial(client)["restarts"]) == ("ACTIVE", 0)
    # The first token is void: only the second one's holder may report.
    metrics = f"/api/v1/trials/{_trial(client)['id']}"
    old = {"Authorization": f"Bearer {lost['env']['DET_SESSION_TOKEN']}"}
    new = {"Authorization": f"Bearer {again['env']['DET_SESSION_TOKEN']}"}
    assert client.get(metrics, headers=old).status_code == 401
    assert client.get(metrics, headers=new).status_code == 200
    # Listed once, then left out past the grace: the agent lost it; it ends as before.
    assert beat([alloc], t0 + 11)["start"] == []
    assert beat([], t0 + 20)["start"] == []
    assert _trial(client)["state"] == "ERROR"  # max_restarts: 0


def test_a_beat_that_arrived_before_the_hand_over_decides_nothing_about_it(master):
    """A beat that arrived before the part was handed over (it waited for a worker
    thread while an earlier beat handed the part over) was sent before the agent could
    have the part: it neither hands the part over again nor ends it, however long after
    the hand-over it is processed (issue 37: on an overloaded master such beats ended
    the parts as "the agent no longer runs this task"). A beat sent after decides."""
    client, ctx, a1, beat, t0 = master
    alloc = _start_trial(client, ctx, beat, t0)
    with ctx.db.write() as s:
        answer, _ = agents.beat(s, ctx, "a1", [], t0 + 40, arrived=t0 - 1)
    assert answer["start"] == []
    assert _trial(client)["state"] == "ACTIVE"
    with ctx.db.read() as s:
        assert s.get_one(AllocationRow, alloc).state == "RUNNING"
    (again,) = beat([], t0 + 41)["start"]  # arrived after: the answer was lost
    assert again["allocation_id"] == alloc


def test_a_part_starts_when_it_is_handed_over_not_when_its_beat_read_the_clock(master):
    """A beat reads its time before it waits for the write lock; a part placed while it
    waited (another agent's beat ended the trial's last run and placed the next) is
    handed over after that time, and its ``started_at`` must not come before the last
    run's ``ended_at`` (a multi-node test read that as two runs of a trial at once)."""
    client, ctx, _a1, _beat, t0 = master
    files = {"context": ("c.tar.gz", model_def_tarball(), "application/gzip")}
    r = client.post("/api/v1/experiments", data={"config": CONFIG}, files=files)
    assert r.status_code == 201, r.text
    assert loop.schedule_pass(ctx, maintenance=False) == 1
    ctx.clock = lambda: t0 + 7  # the clock once the beat holds the lock
    with ctx.db.write() as s:
        answer, _ = agents.beat(s, ctx, "a1", [], t0 + 3, arrived=t0 + 3)
    (spec,) = answer["start"]
    with ctx.db.read() as s:
        assert s.get_one(AllocationRow, spec["allocation_id"]).started_at == t0 + 7


# The quiet beats' fast path in front of FastAPI (dauntless.master.heartbeat_asgi): each
# test first makes a1's next beat one it would answer, then checks that a request it
# must not answer reaches the route and gets the route's answer.


def _answered(ctx_or_client) -> int:
    """Beats answered by the fast path so far."""
    return int(ctx_or_client.app.state.quiet_heartbeats.answered)


def _kept(client, beat, t0) -> int:
    """Make a1's next empty beat quiet (the full path, then one from memory), return
    the fast path's count after that."""
    beat([], t0)
    before = _answered(client)
    beat([], t0 + 1)
    assert _answered(client) == before + 1  # answered before the routing
    return before + 1


def test_a_quiet_beat_is_answered_before_routing_as_the_route_answers(master):
    client, ctx, a1, _, t0 = master
    ctx.clock = lambda: t0
    full = client.post("/api/v1/agents/a1/heartbeat", json={"running": []}, headers=a1)
    assert _answered(client) == 0 and _stored_beat(ctx) == t0
    ctx.clock = lambda: t0 + 5
    quiet = client.post("/api/v1/agents/a1/heartbeat", json={"running": []}, headers=a1)
    assert _answered(client) == 1
    assert quiet.status_code == full.status_code == 200
    assert quiet.content == full.content == b'{"start":[],"kill":[],"agent_timeout":30.0}'
    for name in ("content-type", "content-length"):
        assert quiet.headers[name] == full.headers[name]
    assert _stored_beat(ctx) == t0 and ctx.heartbeats.latest("a1") == t0 + 5


def test_the_fast_path_checks_the_agent_credential_on_every_beat(master):
    client, ctx, a1, beat, t0 = master
    answered = _kept(client, beat, t0)
    ctx.clock = lambda: t0 + 2
    # A credential the master does not know: 401 from the route, nothing recorded.
    wrong = {AGENT_TOKEN_HEADER: "not-a1-token"}
    r = client.post("/api/v1/agents/a1/heartbeat", json={"running": []}, headers=wrong)
    assert r.status_code == 401, r.text
    # Another agent's credential may not beat for a1: 403, nothing recorded for a1.
    a2 = register_agent(client, client.app, {"id": "a2", "slots": [{"id": "cpu0"}]})
    r = client.post("/api/v1/agents/a1/heartbeat", json={"running": []}, headers=a2)
    assert r.status_code == 403 and "only for itself" in r.text
    assert _answered(client) == answered and ctx.heartbeats.latest("a1") == t0 + 1
    # a1's own credential: answered from memory again.
    assert beat([], t0 + 3) == {"start": [], "kill": [], "agent_timeout": 30.0}
    assert _answered(client) == answered + 1


def test_body_limits_apply_before_the_fast_path(master, monkeypatch):
    client, ctx, a1, beat, t0 = master
    answered = _kept(client, beat, t0)
    # Even were the fast path's own bound above the JSON limit, the limit comes first.
    monkeypatch.setattr(heartbeat_asgi, "MAX_QUIET_BODY_BYTES", 2 * MAX_JSON_BODY_BYTES)
    quiet = b'{"running": []}'
    json_type = {**a1, "content-type": "application/json"}
    padded = quiet + b" " * (MAX_JSON_BODY_BYTES + 1 - len(quiet))
    r = client.post("/api/v1/agents/a1/heartbeat", content=padded, headers=json_type)
    assert r.status_code == 413, r.text
    assert _answered(client) == answered and ctx.heartbeats.latest("a1") == t0 + 1
    # Over the fast path's own bound but within the limit: the route answers it.
    monkeypatch.undo()
    ctx.clock = lambda: t0 + 2
    padded = quiet + b" " * heartbeat_asgi.MAX_QUIET_BODY_BYTES
    r = client.post("/api/v1/agents/a1/heartbeat", content=padded, headers=json_type)
    assert r.json() == {"start": [], "kill": [], "agent_timeout": 30.0}
    assert _answered(client) == answered and ctx.heartbeats.latest("a1") == t0 + 2


def test_beats_that_are_not_quiet_take_the_route(master):
    client, ctx, a1, beat, t0 = master
    alloc = _start_trial(client, ctx, beat, t0)
    beat([alloc], t0 + 1)
    beat([alloc], t0 + 2)
    answered = _answered(client)
    # Another list of parts: the full path writes the beat and orders the kill.
    assert beat([alloc, "stray"], t0 + 3)["kill"] == ["stray"]
    assert _stored_beat(ctx) == t0 + 3 and _answered(client) == answered
    beat([alloc], t0 + 4)
    answered = _answered(client)
    # An exit (its part still listed: the exit alone makes the beat not quiet) is
    # recorded durably before the answer.
    ctx.clock = lambda: t0 + 5
    body = {"running": [alloc], "exited": [{"allocation_id": alloc, "exit_code": 0}]}
    r = client.post("/api/v1/agents/a1/heartbeat", json=body, headers=a1)
    assert r.status_code == 200 and _answered(client) == answered
    with ctx.db.read() as s:
        assert s.get_one(AllocationRow, alloc).state == "TERMINATED"
    # A body the route refuses (an unknown field) is refused by the route.
    r = client.post("/api/v1/agents/a1/heartbeat", json={"running": [], "x": 1}, headers=a1)
    assert r.status_code in (400, 422) and _answered(client) == answered


def test_an_admins_beat_takes_the_route_and_is_audited(master):
    client, ctx, _, beat, t0 = master
    answered = _kept(client, beat, t0)
    ctx.clock = lambda: t0 + 2
    # The client's own credential is the admin's session (no agent credential).
    r = client.post("/api/v1/agents/a1/heartbeat", json={"running": []})
    assert r.status_code == 200 and _answered(client) == answered
    entries = client.get("/api/v1/audit", params={"order": "asc"}).json()["entries"]
    beats = [e for e in entries if e["route"] == "/api/v1/agents/{agent_id}/heartbeat"]
    assert [(e["username"], e["status"], e["target"]) for e in beats] == [
        ("admin", 200, "agent_id=a1")
    ]


def test_quiet_beats_are_counted_and_carry_the_cluster_message(master):
    client, ctx, a1, beat, t0 = master
    body = {"message": "Maintenance at 18:00 UTC", "duration": "1h"}
    assert client.put("/api/v1/master/cluster_message", json=body).status_code == 200
    answered = _kept(client, beat, t0)
    ctx.clock = lambda: t0 + 2
    r = client.post("/api/v1/agents/a1/heartbeat", json={"running": []}, headers=a1)
    assert _answered(client) == answered + 1
    assert r.headers["x-det-cluster-message"] == "Maintenance at 18%3A00 UTC"
    # The request metrics count every beat under the route's template, 2 of 3 quiet.
    text = client.get("/debug/prom/metrics").text
    line = (
        'det_http_request_duration_seconds_count{code="200",handler='
        '"/api/v1/agents/{agent_id}/heartbeat",method="POST"} 3.0'
    )
    assert line in text, [x for x in text.splitlines() if "heartbeat" in x]


SEARCH = """
name: beats
entrypoint: model_def:Trial
hyperparameters: {global_batch_size: 8, x: {type: double, minval: 0, maxval: 1}}
searcher: {name: random, metric: loss, max_trials: 4, max_concurrent_trials: 4,
           max_length: {batches: 30}}
max_restarts: 0
"""


def test_a_beat_with_exits_places_once_and_answers_with_the_freed_slots_work(
    tmp_path, db_url, monkeypatch
):
    """Every exit a beat carries is recorded, then one placement (not one per exit:
    issue 37) puts waiting trials on the freed slots, in this beat's answer."""
    app = _app(tmp_path, db_url)
    with TestClient(app) as client:
        sign_in(client)
        slots = [{"id": "cpu0"}, {"id": "cpu1"}]
        a2 = register_agent(client, app, {"id": "a2", "slots": slots})
        ctx = app.state.ctx
        files = {"context": ("c.tar.gz", model_def_tarball(), "application/gzip")}
        r = client.post("/api/v1/experiments", data={"config": SEARCH}, files=files)
        assert r.status_code == 201, r.text
        assert loop.schedule_pass(ctx, maintenance=False) == 2  # 4 trials, 2 slots

        def beat(body: dict) -> dict:
            r = client.post("/api/v1/agents/a2/heartbeat", json=body, headers=a2)
            assert r.status_code == 200, r.text
            return r.json()

        first = [spec["allocation_id"] for spec in beat({"running": []})["start"]]
        assert len(first) == 2
        assert beat({"running": first})["start"] == []
        passes: list[int] = []
        # Placements are counted where every path places: the scheduler's glue.
        original = scheduling.place_pending
        monkeypatch.setattr(
            scheduling, "place_pending", lambda *a, **k: passes.append(1) or original(*a, **k)
        )
        exited = [{"allocation_id": a, "exit_code": 1} for a in first]
        answer = beat({"running": [], "exited": exited})
        assert len(passes) == 1
        second = [spec["allocation_id"] for spec in answer["start"]]
        assert len(second) == 2 and not set(second) & set(first)
        with ctx.db.read() as s:
            assert {s.get_one(AllocationRow, a).state for a in first} == {"TERMINATED"}
        # Exits recorded before (a repeated report) change nothing: no placement.
        beat({"running": second, "exited": exited})
        assert len(passes) == 1


def _held_beat(client, a1, wait: float, out: list) -> threading.Thread:
    """Send a1's empty beat with ``wait_seconds=wait`` from a thread of its own; its
    response goes into ``out``."""

    def send() -> None:
        out.append(
            client.post(
                "/api/v1/agents/a1/heartbeat",
                json={"running": []},
                params={"wait_seconds": wait},
                headers=a1,
            )
        )

    thread = threading.Thread(target=send)
    thread.start()
    return thread


def _until_held_or_answered(ctx, thread: threading.Thread) -> None:
    """Wait until the beat in ``thread`` is held by the master (or was answered)."""
    deadline = time.monotonic() + 60
    while thread.is_alive() and time.monotonic() < deadline:
        with ctx.heartbeats._lock:
            if getattr(ctx.heartbeats, "_waiters", {}).get("a1"):
                return
        time.sleep(0.01)


@pytest.mark.parametrize("quiet", [True, False], ids=["before-routing", "route"])
def test_a_held_beat_of_an_idle_agent_is_answered_with_work_placed_meanwhile(
    master, quiet, monkeypatch
):
    """Issue 37 (create -> first metric): an idle agent's beat with ``wait_seconds`` is
    held until work is placed on the agent, and its answer carries that work, instead
    of the agent learning of it at its next beat."""
    client, ctx, a1, beat, t0 = master
    if not quiet:  # every beat through FastAPI's route (as before the route was learnt)
        monkeypatch.setattr(
            heartbeat_asgi.QuietHeartbeats, "_credential_only", staticmethod(lambda scope: False)
        )
    beat([], t0)  # the full path: its answer is kept
    out: list = []
    thread = _held_beat(client, a1, MAX_HOLD_SECONDS, out)
    _until_held_or_answered(ctx, thread)
    files = {"context": ("c.tar.gz", model_def_tarball(), "application/gzip")}
    r = client.post("/api/v1/experiments", data={"config": CONFIG}, files=files)
    assert r.status_code == 201, r.text
    assert loop.schedule_pass(ctx, maintenance=False) == 1
    thread.join(timeout=120)
    assert out and out[0].status_code == 200, out and out[0].text
    (spec,) = out[0].json()["start"]
    assert spec["trial_id"] is not None
    assert not ctx.heartbeats._waiters  # nothing left behind
    # The next beat lists it: the same answer as without a hold.
    assert beat([spec["allocation_id"]], t0 + 1)["start"] == []


def test_a_held_beat_with_no_change_gets_the_kept_answer_and_bad_waits_are_named(master):
    client, ctx, a1, beat, t0 = master
    beat([], t0)
    out: list = []
    thread = _held_beat(client, a1, 0.05, out)
    thread.join(timeout=60)
    assert out[0].status_code == 200
    assert out[0].json() == {"start": [], "kill": [], "agent_timeout": 30.0}
    assert ctx.heartbeats.latest("a1") == t0  # recorded as a quiet beat
    for bad in ("-1", str(MAX_HOLD_SECONDS + 1), "soon", "nan"):
        r = client.post(
            "/api/v1/agents/a1/heartbeat",
            json={"running": []},
            params={"wait_seconds": bad},
            headers=a1,
        )
        assert r.status_code == 400 and "wait_seconds" in r.text, (bad, r.text)


@contextlib.contextmanager
def _two_running(tmp_path, db_url):
    """A master (no control loop) with agent a2 of two slots running two trials of a
    4-trial search (the other two wait): (client, ctx, beat, the two running parts),
    where ``beat(body, status=200)`` posts a2's heartbeat and returns the response."""
    app = _app(tmp_path, db_url)
    with TestClient(app) as client:
        sign_in(client)
        slots = [{"id": "cpu0"}, {"id": "cpu1"}]
        a2 = register_agent(client, app, {"id": "a2", "slots": slots})
        ctx = app.state.ctx
        files = {"context": ("c.tar.gz", model_def_tarball(), "application/gzip")}
        r = client.post("/api/v1/experiments", data={"config": SEARCH}, files=files)
        assert r.status_code == 201, r.text
        assert loop.schedule_pass(ctx, maintenance=False) == 2  # 4 trials, 2 slots

        def beat(body: dict, status: int = 200):
            r = client.post("/api/v1/agents/a2/heartbeat", json=body, headers=a2)
            assert r.status_code == status, r.text
            return r

        first = [spec["allocation_id"] for spec in beat({"running": []}).json()["start"]]
        assert len(first) == 2
        assert beat({"running": first}).json()["start"] == []
        yield client, ctx, beat, first


def _states(ctx, ids: list[str]) -> list[str]:
    with ctx.db.read() as s:
        return [s.get_one(AllocationRow, a).state for a in ids]


def test_a_beat_with_an_exit_is_one_write_transaction(tmp_path, db_url):
    """The exit, the placement on the slot it freed and the beat that hands the next
    trial over commit once (issue 37: three write transactions per exit before)."""
    from sqlalchemy import event

    with _two_running(tmp_path, db_url) as (_client, ctx, beat, first):
        commits: list[int] = []
        event.listen(ctx.db.engine, "commit", lambda conn: commits.append(1))
        exited = [{"allocation_id": first[0], "exit_code": 0}]
        answer = beat({"running": [first[1]], "exited": exited}).json()
        assert len(commits) == 1
        (spec,) = answer["start"]
        assert _states(ctx, [first[0], first[1], spec["allocation_id"]]) == [
            "TERMINATED",
            "RUNNING",
            "RUNNING",
        ]


def test_a_refused_exit_undoes_neither_the_other_exits_nor_the_beat(tmp_path, db_url, monkeypatch):
    """An exit the master refuses after writing part of it (IllegalTransition: a
    master bug) is rolled back alone: the beat's other exit stays recorded, its slot's
    next trial is handed over, and the refused part stays RUNNING (handled as lost)."""
    from dauntless.master.models import runs
    from dauntless.master.states import IllegalTransition, State

    with _two_running(tmp_path, db_url) as (_client, ctx, beat, first):
        original = runs.record_exit

        def refuse_second(s, c, allocation_id, *a, **k):
            changed = original(s, c, allocation_id, *a, **k)  # written, then refused
            if allocation_id == first[1]:
                raise IllegalTransition("trial", State.COMPLETED, State.ACTIVE, frozenset())
            return changed

        monkeypatch.setattr(runs, "record_exit", refuse_second)
        exited = [{"allocation_id": a, "exit_code": 0} for a in first]
        answer = beat({"running": [], "exited": exited}).json()
        (spec,) = answer["start"]
        assert _states(ctx, [first[0], first[1], spec["allocation_id"]]) == [
            "TERMINATED",
            "RUNNING",
            "RUNNING",
        ]


def test_a_failed_placement_or_beat_leaves_the_exits_recorded(tmp_path, db_url, monkeypatch):
    """A placement that fails is left to the loop, and a beat that fails answers its
    error, but the exits the beat carried stay recorded either way."""
    from dauntless.master.errors import NotFound

    with _two_running(tmp_path, db_url) as (_client, ctx, beat, first):

        def fail(*a, **k):
            raise RuntimeError("placement failed")

        with monkeypatch.context() as m:
            m.setattr(scheduling, "place_pending", fail)
            answer = beat(
                {"running": [first[1]], "exited": [{"allocation_id": first[0], "exit_code": 0}]}
            )
        assert answer.json()["start"] == []  # nothing placed: the loop places it later
        assert _states(ctx, first) == ["TERMINATED", "RUNNING"]
        assert loop.schedule_pass(ctx, maintenance=False) == 1

        def gone(*a, **k):
            raise NotFound("agent a2 is not registered")

        monkeypatch.setattr(agents, "beat", gone)
        beat({"running": [], "exited": [{"allocation_id": first[1], "exit_code": 0}]}, status=404)
        assert _states(ctx, first) == ["TERMINATED", "TERMINATED"]


def test_an_exit_that_leaves_the_agent_quiet_is_answered_from_memory_next(tmp_path, db_url):
    """A beat whose exit frees a slot no work waits for is quiet: the agent's next
    identical beat is answered from memory (its change counts were read after the
    exit's commit, so they include the exit)."""
    with _two_running(tmp_path, db_url) as (client, ctx, beat, first):
        exited = [{"allocation_id": a, "exit_code": 0} for a in first]
        second = [
            spec["allocation_id"]
            for spec in beat({"running": [], "exited": exited}).json()["start"]
        ]
        assert len(second) == 2
        assert beat({"running": second}).json()["start"] == []
        exited = [{"allocation_id": second[0], "exit_code": 0}]
        assert beat({"running": [second[1]], "exited": exited}).json()["start"] == []
        quiet = client.app.state.quiet_heartbeats.answered
        assert beat({"running": [second[1]]}).json() == {
            "start": [],
            "kill": [],
            "agent_timeout": 30.0,
        }
        assert client.app.state.quiet_heartbeats.answered == quiet + 1
