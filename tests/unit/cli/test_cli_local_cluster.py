"""``det deploy local``: process start, readiness wait, state file, stop; with fake modules.

The fake master and agent are tiny scripts written to a temporary directory, so the
process handling is tested with real processes without the real master.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from dauntless.cli import (
    LocalClusterError,
    _local_cluster,
    default_data_dir,
    main,
    read_state,
    start_local_cluster,
    stop_local_cluster,
)

FAKE_MASTER = """
import argparse, json, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
p = argparse.ArgumentParser()
p.add_argument("--port", type=int)
p.add_argument("--data-dir")
p.add_argument("--config-file")
a = p.parse_args()
if "{mode}" == "crash":
    print("master: cannot open database", flush=True)
    sys.exit(3)
agents = []
class H(BaseHTTPRequestHandler):
    def log_message(self, *x): pass
    def _send(self, obj):
        data = json.dumps(obj).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
    def do_GET(self):
        if self.path == "/api/v1/master":
            self._send({{"version": "x", "cluster_name": "c", "cluster_id": "i"}})
        else:
            self._send({{"agents": agents}})
    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        agents.append(body)
        self._send({{"agent": body}})
print("fake master on", a.port, "data", a.data_dir, flush=True)
ThreadingHTTPServer(("127.0.0.1", a.port), H).serve_forever()
"""

FAKE_AGENT = """
import argparse, json, sys, time, urllib.request
p = argparse.ArgumentParser()
p.add_argument("--master-url")
p.add_argument("--work-dir")
p.add_argument("--agent-id")
p.add_argument("--artificial-slots", type=int, default=None)
p.add_argument("--cluster-secret-file")
a = p.parse_args()
if "{mode}" == "silent":
    time.sleep(600)
body = json.dumps({{"id": a.agent_id, "slots": [{{"id": str(i)}} for i in range(a.artificial_slots or 0)],
                    "work_dir": a.work_dir}}).encode()
req = urllib.request.Request(a.master_url + "/api/v1/agents", data=body, method="POST")
urllib.request.urlopen(req).read()
print("registered", a.agent_id, flush=True)
time.sleep(600)
"""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _modules(tmp_path: Path, master_mode: str = "ok", agent_mode: str = "ok") -> dict[str, Any]:
    mods = tmp_path / "mods"
    mods.mkdir(exist_ok=True)
    (mods / f"fake_master_{master_mode}.py").write_text(
        textwrap.dedent(FAKE_MASTER.format(mode=master_mode))
    )
    (mods / f"fake_agent_{agent_mode}.py").write_text(
        textwrap.dedent(FAKE_AGENT.format(mode=agent_mode))
    )
    env = dict(os.environ, PYTHONPATH=str(mods))
    return {
        "master_module": f"fake_master_{master_mode}",
        "agent_module": f"fake_agent_{agent_mode}",
        "env": env,
        "python": sys.executable,
        "poll_interval": 0.05,
    }


@pytest.fixture
def cleanup() -> Any:
    dirs: list[Path] = []
    yield dirs
    for d in dirs:
        stop_local_cluster(d, grace=1.0)


def test_up_and_down(tmp_path: Path, cleanup: list[Path]) -> None:
    data = tmp_path / "cluster"
    cleanup.append(data)
    port = _free_port()
    state = start_local_cluster(
        data, master_port=port, agents=2, artificial_slots=3, timeout=20, **_modules(tmp_path)
    )
    assert state.master_url == f"http://127.0.0.1:{port}"
    assert [a.name for a in state.agents] == ["agent-0", "agent-1"]
    pids = [state.master.pid] + [a.pid for a in state.agents]
    assert all(_local_cluster.is_alive(p) for p in pids)
    assert all(_local_cluster.is_ours(r) for r in [state.master, *state.agents])
    recorded = json.loads((data / "cluster.json").read_text())
    assert recorded["master"]["pid"] == state.master.pid and len(recorded["agents"]) == 2
    assert read_state(data) == state
    master_log = Path(state.master.log).read_text()
    assert f"fake master on {port} data {data.resolve()}" in master_log
    assert "registered agent-1" in Path(state.agents[1].log).read_text()
    assert (data / "agent-0" / "work").is_dir()

    with pytest.raises(LocalClusterError, match="already running"):
        start_local_cluster(data, master_port=_free_port(), timeout=5, **_modules(tmp_path))

    stopped = stop_local_cluster(data, grace=5.0)
    assert stopped == state
    assert not any(_local_cluster.is_alive(p) for p in pids)
    assert not (data / "cluster.json").exists()
    assert stop_local_cluster(data) is None  # idempotent


def test_master_crash_reports_log_and_cleans_up(tmp_path: Path, cleanup: list[Path]) -> None:
    data = tmp_path / "c"
    cleanup.append(data)
    with pytest.raises(LocalClusterError) as info:
        start_local_cluster(
            data, master_port=_free_port(), timeout=10, **_modules(tmp_path, "crash")
        )
    msg = str(info.value)
    assert "the master exited during startup" in msg
    assert str(data.resolve() / "logs" / "master.log") in msg
    assert "master: cannot open database" in msg  # the log's last lines are shown
    assert read_state(data) is None


def test_agent_that_never_registers_times_out(tmp_path: Path, cleanup: list[Path]) -> None:
    data = tmp_path / "c"
    cleanup.append(data)
    # The silent agent never registers (it sleeps for 10 minutes), so this error, raised
    # only once the deadline passed, shows the start gave up at its timeout instead of
    # waiting on the agent; no clock is read. The timeout leaves the fake master room to
    # come up on a loaded machine (it shares the deadline).
    with pytest.raises(LocalClusterError, match=r"agent\(s\) agent-0 did not register") as info:
        start_local_cluster(
            data, master_port=_free_port(), timeout=5, **_modules(tmp_path, agent_mode="silent")
        )
    assert "agent-0.log" in str(info.value)
    assert read_state(data) is None  # what was started is stopped again


def test_port_in_use_and_argument_checks(tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        with pytest.raises(LocalClusterError, match=f"port {port}"):
            start_local_cluster(tmp_path / "c", master_port=port, **_modules(tmp_path))
    for kwargs, match in [
        ({"master_port": 0}, "master_port"),
        ({"agents": -1}, "agents"),
        ({"artificial_slots": -2}, "artificial_slots"),
        ({"timeout": 0}, "timeout"),
    ]:
        with pytest.raises(ValueError, match=match):
            start_local_cluster(tmp_path / "c", **kwargs)


def test_stale_state_and_reused_pid_are_left_alone(tmp_path: Path) -> None:
    data = tmp_path / "c"
    data.mkdir()
    # Our own pid runs pytest, not the recorded module: it must not be signalled.
    state = {
        "data_dir": str(data), "master_url": "http://127.0.0.1:1", "started_at": 0.0,
        "master": {"name": "master", "pid": os.getpid(), "module": "dauntless.master", "log": "x"},
        "agents": [],
    }  # fmt: skip
    (data / "cluster.json").write_text(json.dumps(state))
    stopped = stop_local_cluster(data, grace=0.1)
    assert stopped is not None and stopped.master.pid == os.getpid()
    assert not (data / "cluster.json").exists()
    (data / "cluster.json").write_text("{not json")
    with pytest.raises(LocalClusterError, match="unreadable"):
        read_state(data)


def test_default_data_dir() -> None:
    assert default_data_dir({"DAUNTLESS_DATA_DIR": "/srv/det"}) == Path("/srv/det/local-cluster")
    assert default_data_dir({}).name == "local-cluster"
    assert "dauntless" in str(default_data_dir({}))


def test_cli_cluster_up_down(tmp_path: Path, cleanup: list[Path], monkeypatch: Any,
                             capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    data = tmp_path / "cli"
    cleanup.append(data)
    mods = _modules(tmp_path)
    real = _local_cluster.start_local_cluster

    def start(*args: Any, **kwargs: Any) -> Any:
        return real(*args, **kwargs, **mods)

    monkeypatch.setattr("dauntless.cli.deploy.start_local_cluster", start)
    port = _free_port()
    code = main(["deploy", "local", "cluster-up", "--data-dir", str(data), "--master-port",
                 str(port), "--artificial-slots", "2"])  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0
    assert f"at http://127.0.0.1:{port}" in out and "Started agent agent-0" in out
    assert f"export DET_MASTER=http://127.0.0.1:{port}" in out
    assert main(["deploy", "local", "cluster-down", "--data-dir", str(data)]) == 0
    assert "Stopped the master" in capsys.readouterr().out
    assert main(["deploy", "local", "cluster-down", "--data-dir", str(data)]) == 0
    assert "nothing to stop" in capsys.readouterr().out


def test_cli_cluster_up_failure_is_one_error(tmp_path: Path, monkeypatch: Any,
                                             capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    mods = _modules(tmp_path, "crash")
    real = _local_cluster.start_local_cluster
    monkeypatch.setattr(
        "dauntless.cli.deploy.start_local_cluster", lambda *a, **k: real(*a, **k, **mods)
    )
    monkeypatch.setenv("DAUNTLESS_DATA_DIR", str(tmp_path / "root"))
    code = main(["deploy", "local", "cluster-up", "--master-port", str(_free_port())])
    err = capsys.readouterr().err
    assert code == 1 and err.startswith("Error: the master exited during startup")
    assert str(tmp_path / "root" / "local-cluster") in err and "Traceback" not in err


def test_the_deployer_is_the_default_task_identity():
    """Issue 29: a local cluster runs unlinked users' tasks as whoever deployed it, or as
    another user of the host that root names; an unknown one is refused, naming it."""
    import grp
    import pwd

    from dauntless.cli._local_cluster import deployer_task_identity

    me = deployer_task_identity()
    assert (me["uid"], me["gid"]) == (os.getuid(), os.getgid())
    assert me["user"] == pwd.getpwuid(os.getuid()).pw_name
    assert me["group"] == grp.getgrgid(os.getgid()).gr_name
    with pytest.raises(ValueError, match="no user 'no-such-user-here'"):
        deployer_task_identity("no-such-user-here")
    nobody = pwd.getpwnam("nobody")
    if os.geteuid() == 0:
        assert deployer_task_identity("nobody")["uid"] == nobody.pw_uid
    elif nobody.pw_uid != os.getuid():
        with pytest.raises(ValueError, match="only root can run tasks as another user"):
            deployer_task_identity("nobody")


def test_master_config_path_is_the_base_of_the_masters_config(tmp_path: Path) -> None:
    """``cluster-up --master-config-path``: the operator's config (here Determined's keys)
    is what the master starts with; the cluster's secret, port and data dir are added."""
    import yaml

    base = {
        "db": {"user": "u", "host": "h", "name": "d"},
        "telemetry": {"enabled": False},
        "resource_pools": [{"pool_name": "default"}, {"pool_name": "big"}],
        "security": {"authz": {"type": "rbac"}},
        "task_proxy": {"port": 9999},
        "port": 1234,
    }
    identity = {"uid": 1, "gid": 1, "user": "u", "group": "g"}
    secret = _local_cluster._write_secrets(tmp_path, None, identity, True, 0, base)
    written = yaml.safe_load((tmp_path / _local_cluster.MASTER_CONFIG_FILE).read_text())
    assert written["security"]["cluster_secret"] == secret
    assert written["security"]["authz"] == {"type": "rbac"}
    assert written["security"]["default_task"] == identity
    assert written["security"]["agents"] == {"allow_artificial_slots": True}
    assert written["resource_pools"] == base["resource_pools"]
    assert written["db"] == base["db"] and written["telemetry"] == {"enabled": False}
    assert written["task_proxy"] == {"port": 9999} and "port" not in written
    # The operator's own cluster secret is kept (agents elsewhere may hold it).
    mine = {"security": {"cluster_secret": "s" * 40}}
    assert _local_cluster._write_secrets(tmp_path, None, identity, False, 0, mine) == "s" * 40
