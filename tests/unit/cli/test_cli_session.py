"""The Session: retries and backoff, error bodies, request shapes, log following."""

from __future__ import annotations

from email import policy
from email.parser import BytesParser
from typing import Any

import httpx
import pytest

from dauntless.client import (
    APIError,
    MasterUnreachableError,
    Session,
    _follow,
    follow_trial_logs,
    wait_for_first_trial,
)
from dauntless.master.testing import Cluster


def _session(handler: Any, sleeps: list[float] | None = None, **kw: Any) -> Session:
    return Session(
        "http://master:8080",
        transport=httpx.MockTransport(handler),
        sleep=(sleeps.append if sleeps is not None else lambda s: None),
        **kw,
    )


def test_get_retries_connection_errors_with_growing_delays() -> None:
    calls = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request.url.path)
        if len(calls) < 6:
            raise httpx.ConnectError("[Errno 111] Connection refused", request=request)
        return httpx.Response(200, json={"version": "1", "cluster_name": "c", "cluster_id": "x"})

    sleeps: list[float] = []
    s = _session(handler, sleeps, retries=5, backoff=0.5, max_backoff=3.0)
    assert s.master_info()["version"] == "1"
    assert calls == ["/api/v1/master"] * 6
    # Equal jitter: retry k waits in [c/2, c] with c = min(3.0, 0.5 * 2**k).
    for delay, ceiling in zip(sleeps, [0.5, 1.0, 2.0, 3.0, 3.0], strict=True):
        assert ceiling / 2 <= delay <= ceiling


def test_get_gives_up_with_the_url_and_reason() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("[Errno 111] Connection refused", request=request)

    sleeps: list[float] = []
    with pytest.raises(MasterUnreachableError) as info:
        _session(handler, sleeps, retries=2).list_agents()
    assert info.value.master_url == "http://master:8080"
    assert "connection refused" in str(info.value) and "http://master:8080" in str(info.value)
    assert len(sleeps) == 2


def test_real_closed_port_is_unreachable(closed_port: int) -> None:
    with Session(f"127.0.0.1:{closed_port}", retries=1, sleep=lambda s: None) as s:
        with pytest.raises(MasterUnreachableError, match="connection refused"):
            s.master_info()


def test_post_is_not_retried_after_sending_but_is_when_connect_failed() -> None:
    seen = []

    def read_timeout(request: httpx.Request) -> httpx.Response:
        seen.append("timeout")
        raise httpx.ReadTimeout("slow", request=request)

    with pytest.raises(MasterUnreachableError, match="timed out"):
        _session(read_timeout).create_experiment("name: x\n")
    assert seen == ["timeout"]

    attempts = []

    def refuse_once(request: httpx.Request) -> httpx.Response:
        attempts.append(1)
        if len(attempts) == 1:
            raise httpx.ConnectError("refused", request=request)
        return httpx.Response(201, json={"experiment": {"id": 3}})

    assert _session(refuse_once).create_experiment("name: x\n")["id"] == 3
    assert len(attempts) == 2


def test_get_retries_503_then_reports_it() -> None:
    statuses = [503, 503, 200]

    def handler(request: httpx.Request) -> httpx.Response:
        status = statuses.pop(0)
        return httpx.Response(status, json={"agents": []} if status == 200 else {"detail": "busy"})

    assert _session(handler).list_agents() == []

    def always(request: httpx.Request) -> httpx.Response:
        return httpx.Response(503, json={"detail": "starting"})

    with pytest.raises(APIError) as info:
        _session(always, retries=1).list_agents()
    assert info.value.status == 503 and info.value.detail == "starting"


def test_api_error_carries_detail_and_field_errors() -> None:
    body = {
        "detail": "invalid experiment config",
        "errors": [{"field": "searcher.max_length", "message": "Field required"}],
    }

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(400, json=body)

    with pytest.raises(APIError) as info:
        _session(handler).create_experiment({"name": "x"})
    err = info.value
    assert (err.status, err.detail) == (400, "invalid experiment config")
    assert err.errors == [{"field": "searcher.max_length", "message": "Field required"}]
    assert str(err) == "HTTP 400: invalid experiment config"


def test_api_error_from_fastapi_validation_and_plain_text() -> None:
    def fastapi(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            422, json={"detail": [{"loc": ["query", "limit"], "msg": "not an int", "type": "x"}]}
        )

    with pytest.raises(APIError) as info:
        _session(fastapi).list_experiments()
    assert info.value.errors == [{"field": "limit", "message": "not an int"}]

    def text(request: httpx.Request) -> httpx.Response:
        return httpx.Response(500, text="Internal Server Error\ntraceback...")

    with pytest.raises(APIError) as info:
        _session(text, retries=0).get_trial(1)
    assert info.value.detail == "Internal Server Error" and info.value.errors == []


def parse_multipart(content_type: str, body: bytes) -> dict[str, tuple[str | None, bytes]]:
    """Decode a multipart/form-data body into ``{name: (filename, bytes)}``."""
    raw = b"Content-Type: " + content_type.encode() + b"\r\n\r\n" + body
    msg = BytesParser(policy=policy.HTTP).parsebytes(raw)
    parts = {}
    for part in msg.iter_parts():
        name = part.get_param("name", header="content-disposition")
        parts[str(name)] = (part.get_filename(), part.get_payload(decode=True))
    return parts


def test_create_experiment_sends_multipart_config_context_and_activate() -> None:
    captured: dict[str, Any] = {}

    def handler(request: httpx.Request) -> httpx.Response:
        captured["method"] = request.method
        captured["path"] = request.url.path
        captured["parts"] = parse_multipart(request.headers["content-type"], request.read())
        return httpx.Response(201, json={"experiment": {"id": 12, "state": "PAUSED"}})

    exp = _session(handler).create_experiment("name: mnist\n", b"\x1f\x8bTAR", activate=False)
    assert exp["id"] == 12
    assert (captured["method"], captured["path"]) == ("POST", "/api/v1/experiments")
    parts = captured["parts"]
    assert parts["config"] == (None, b"name: mnist\n")
    assert parts["activate"] == (None, b"false")
    assert parts["validate_only"] == (None, b"false")
    assert parts["context"] == ("context.tar.gz", b"\x1f\x8bTAR")

    _session(handler).create_experiment({"name": "m", "searcher": {"name": "single"}})
    assert b"searcher:" in captured["parts"]["config"][1]
    assert "context" not in captured["parts"]
    with pytest.raises(TypeError, match="config"):
        _session(handler).create_experiment(42)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="context"):
        _session(handler).create_experiment("a: 1", "not bytes")  # type: ignore[arg-type]


def test_query_parameters_and_paging() -> None:
    queries = []
    data = [{"id": i} for i in range(1, 6)]

    def handler(request: httpx.Request) -> httpx.Response:
        q = dict(request.url.params)
        queries.append((request.url.path, q))
        if request.url.path.endswith("/logs"):
            return httpx.Response(200, json={"logs": [], "trial_state": "ACTIVE"})
        off, lim = int(q["offset"]), int(q["limit"])
        return httpx.Response(200, json={"experiments": data[off : off + lim], "total": 5})

    s = _session(handler)
    assert [e["id"] for e in s.iter_experiments(page_size=2)] == [1, 2, 3, 4, 5]
    assert [q["offset"] for _, q in queries] == ["0", "2", "4"]
    assert all(q["archived"] == "false" and q["limit"] == "2" for _, q in queries)
    queries.clear()
    s.list_experiments(archived=None, limit=10)
    assert queries[0][1]["archived"] == "all"
    queries.clear()
    s.get_trial_logs(4, after_id=17, limit=50)
    assert queries == [("/api/v1/trials/4/logs", {"after_id": "17", "limit": "50"})]


def test_route_paths_and_argument_checks() -> None:
    paths = []
    answers = {
        "/api/v1/experiments/3": {"experiment": {"id": 3}, "trials": []},
        "/api/v1/experiments/3/trials": {"trials": [{"id": 1}]},
        "/api/v1/experiments/3/checkpoints": {"checkpoints": []},
        "/api/v1/trials/1": {"trial": {"id": 1}},
        "/api/v1/trials/1/metrics": {"metrics": [{"group": "validation"}]},
        "/api/v1/trials/1/checkpoints": {"checkpoints": [{"uuid": "u"}]},
        "/api/v1/checkpoints/abc-1": {"checkpoint": {"uuid": "abc-1"}},
    }

    def handler(request: httpx.Request) -> httpx.Response:
        paths.append((request.url.path, dict(request.url.params)))
        if request.url.path.endswith("/model_def"):
            return httpx.Response(200, content=b"GZ", headers={"content-type": "application/gzip"})
        return httpx.Response(200, json=answers[request.url.path])

    s = _session(handler)
    assert s.get_experiment(3)["experiment"]["id"] == 3
    assert s.get_experiment_trials(3) == [{"id": 1}]
    assert s.get_experiment_checkpoints(3) == []
    assert s.get_model_def(3) == b"GZ"
    assert s.get_trial(1) == {"id": 1}
    assert s.get_trial_metrics(1, group="validation") == [{"group": "validation"}]
    assert paths[-1] == (
        "/api/v1/trials/1/metrics",
        {"group": "validation", "after_batches": "-1", "limit": "5000"},
    )
    assert s.get_trial_checkpoints(1) == [{"uuid": "u"}]
    assert s.get_checkpoint("abc-1")["uuid"] == "abc-1"
    with pytest.raises(TypeError, match="experiment_id"):
        s.get_experiment("3")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="trial_id"):
        s.get_trial(0)
    with pytest.raises(ValueError, match="group"):
        s.get_trial_metrics(1, group="test")
    with pytest.raises(ValueError, match="uuid"):
        s.get_checkpoint(" ")
    with pytest.raises(ValueError, match="after_id"):
        s.get_trial_logs(1, after_id=-1)


def test_constructor_validation() -> None:
    with pytest.raises(ValueError, match="timeout"):
        Session("h:1", timeout=0)
    with pytest.raises(TypeError, match="timeout"):
        Session("h:1", timeout="3")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="retries"):
        Session("h:1", retries=-1)
    with pytest.raises(ValueError, match="scheme"):
        Session("ftp://h:1")


GRID = """\
name: grid
entrypoint: model_def:T
hyperparameters:
  global_batch_size: 8
  lr: {type: categorical, vals: [0.1, 0.2]}
searcher: {name: grid, metric: loss, max_length: {batches: 10}}
"""


def test_session_against_real_server(cluster: Cluster) -> None:
    exp = cluster.create_experiment(GRID)
    trials = cluster.experiment(exp)["trials"]
    with Session(cluster.url) as s:
        assert s.master_info()["cluster_name"] == "dauntless"
        assert s.get_experiment(exp)["trials"] == trials
        with pytest.raises(APIError) as info:
            s.get_trial(99)
        assert info.value.status == 404 and info.value.detail == "trial 99 not found"


class _ScriptedLogs:
    """Answers get_trial_logs from a script of (new lines, trial_state) per call."""

    def __init__(self, script: list[tuple[list[int], str]], fail: set[int] | None = None):
        self.script = script
        self.fail = fail or set()
        self.calls: list[int] = []
        self.stored: list[dict[str, Any]] = []

    def get_trial_logs(self, trial_id: int, after_id: int = 0, limit: int = 1000) -> Any:
        n = len(self.calls)
        self.calls.append(after_id)
        if n in self.fail:
            raise MasterUnreachableError("http://m", "connection refused")
        new, state = self.script[min(n, len(self.script) - 1)]
        for i in new:
            self.stored.append({"id": i, "log": f"line {i}", "rank_id": None})
        lines = [x for x in self.stored if x["id"] > after_id][:limit]
        return {"logs": lines, "trial_state": state}


def test_follow_reads_in_order_and_drains_after_terminal() -> None:
    # Lines 4-5 are stored in the same poll that first reports COMPLETED (a race):
    # the extra read after the state change must still yield them.
    script = [
        ([1, 2], "ACTIVE"),
        ([], "ACTIVE"),
        ([3], "ACTIVE"),
        ([], "COMPLETED"),
        ([4, 5], "COMPLETED"),
    ]
    fake = _ScriptedLogs(script)
    sleeps: list[float] = []
    got = [x["id"] for x in follow_trial_logs(fake, 9, sleep=sleeps.append, poll_interval=0.5)]  # type: ignore[arg-type]
    assert got == [1, 2, 3, 4, 5]
    assert fake.calls == [0, 2, 2, 3, 3]
    assert sleeps == [0.5, 0.5, 0.5]


def test_follow_pages_without_sleeping(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_follow, "LOG_PAGE_SIZE", 2)
    fake = _ScriptedLogs([([1, 2, 3, 4, 5], "COMPLETED")])
    sleeps: list[float] = []
    got = [x["id"] for x in follow_trial_logs(fake, 1, sleep=sleeps.append)]  # type: ignore[arg-type]
    assert got == [1, 2, 3, 4, 5] and sleeps == []


def test_no_follow_stops_at_stored_lines_and_custom_done() -> None:
    fake = _ScriptedLogs([([1, 2], "ACTIVE"), ([3], "ACTIVE")])
    assert [x["id"] for x in follow_trial_logs(fake, 1, follow=False)] == [1, 2]  # type: ignore[arg-type]
    states = []
    fake2 = _ScriptedLogs([([1], "COMPLETED"), ([2], "COMPLETED"), ([], "COMPLETED")])

    def done(state: str) -> bool:
        states.append(state)
        return len(states) >= 2  # e.g. the experiment ends after the trial

    got = [x["id"] for x in follow_trial_logs(fake2, 1, done=done, sleep=lambda s: None)]  # type: ignore[arg-type]
    assert got == [1, 2] and states == ["COMPLETED", "COMPLETED"]


def test_follow_survives_a_short_master_outage() -> None:
    fake = _ScriptedLogs(
        [([1], "ACTIVE"), ([], "ACTIVE"), ([], "ACTIVE"), ([2], "COMPLETED")], fail={1, 2}
    )
    lost = []
    got = [
        x["id"]
        for x in follow_trial_logs(fake, 1, sleep=lambda s: None, on_connection_lost=lost.append)  # type: ignore[arg-type]
    ]
    assert got == [1, 2] and len(lost) == 1
    down = _ScriptedLogs([([], "ACTIVE")], fail=set(range(1, 100)))
    with pytest.raises(MasterUnreachableError):
        list(follow_trial_logs(down, 1, sleep=lambda s: None, reconnect_timeout=0.0))  # type: ignore[arg-type]


def test_wait_for_first_trial(cluster: Cluster) -> None:
    exp = cluster.create_experiment(GRID)
    first = min(t["id"] for t in cluster.experiment(exp)["trials"])
    with Session(cluster.url) as s:
        trial, state = wait_for_first_trial(s, exp, poll_interval=0.0)
    assert trial is not None and trial["id"] == first and state == "ACTIVE"


class _ScriptedExperiment:
    """Answers get_experiment from a script of (trial ids, state) per call: the master
    makes an experiment's trials as it creates it, so the cases where they come later
    or never are played here."""

    def __init__(self, script: list[tuple[list[int], str]]):
        self.script = script
        self.calls = 0

    def get_experiment(self, experiment_id: int) -> Any:
        ids, state = self.script[min(self.calls, len(self.script) - 1)]
        self.calls += 1
        trials = [{"id": i, "state": "ACTIVE"} for i in ids]
        return {"experiment": {"id": experiment_id, "state": state}, "trials": trials}


def test_wait_for_first_trial_polls_until_one_appears_or_the_experiment_ends() -> None:
    sleeps: list[float] = []
    later = _ScriptedExperiment([([], "ACTIVE"), ([], "ACTIVE"), ([8, 4], "ACTIVE")])
    trial, state = wait_for_first_trial(later, 1, poll_interval=0.5, sleep=sleeps.append)  # type: ignore[arg-type]
    assert trial is not None and trial["id"] == 4 and state == "ACTIVE"
    assert later.calls == 3 and sleeps == [0.5, 0.5]
    never = _ScriptedExperiment([([], "ACTIVE"), ([], "ERROR")])
    assert wait_for_first_trial(never, 2, sleep=lambda s: None) == (None, "ERROR")  # type: ignore[arg-type]


def test_trial_metrics_are_read_page_by_page() -> None:
    cursors = []

    def handler(request: httpx.Request) -> httpx.Response:
        after = int(request.url.params["after_batches"])
        cursors.append(after)
        pages = {-1: ([{"total_batches": 5}], 5), 5: ([{"total_batches": 9}], None)}
        metrics, nxt = pages[after]
        return httpx.Response(200, json={"metrics": metrics, "next_after_batches": nxt})

    s = _session(handler)
    assert s.get_trial_metrics(1) == [{"total_batches": 5}, {"total_batches": 9}]
    assert cursors == [-1, 5]
