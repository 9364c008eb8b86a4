"""The docker and podman runtimes against a recorded CLI, and for real where an engine
can run containers.

The recorded CLI is an executable named ``docker``/``podman`` put first on ``PATH``: it
appends each argv (and, for ``run``, the values of the variables passed by name) to a
JSON-lines file and acts out the engine's part: ``image inspect`` fails until a
``pull``, ``pull`` prints progress lines, ``run`` prints a line and waits until ``kill``
is called for its container, then exits 128 + the signal number, ``ps`` lists the ids in
``$FAKE_PS_IDS``. It stands in for an engine this sandbox cannot run (no docker daemon;
podman's crun may not set RLIMIT_NOFILE), not for a library we call.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import dauntless
from dauntless.agent.runtimes import (
    BindMountSpec,
    DeviceSpec,
    DockerRuntime,
    EnvironmentSpec,
    PodmanRuntime,
    PrepareError,
    TaskLaunch,
    select_runtimes,
)
from dauntless.agent.runtimes.base import startup_hook_script

FAKE_CLI = """#!{python}
import json, os, signal, sys, time
state = os.environ["FAKE_STATE"]
args = sys.argv[1:]
rec = {{"argv": [os.path.basename(sys.argv[0])] + args}}
if args[:1] == ["run"]:
    rec["env"] = {{a: os.environ.get(a) for a in
                  (args[i + 1] for i, x in enumerate(args) if x == "--env")}}
with open(os.path.join(state, "calls.jsonl"), "a") as f:
    f.write(json.dumps(rec) + "\\n")
cmd = args[0] if args else ""
while cmd.startswith("--"):  # global options (docker --config DIR)
    args = args[2:]
    cmd = args[0]
if cmd == "version":
    sys.exit(int(os.environ.get("FAKE_INFO_RC", "0")))
if cmd == "image":
    sys.exit(0 if os.path.exists(os.path.join(state, "pulled")) else 1)
if cmd == "pull":
    for line in ("latest: Pulling from library/img", "abc123: Pull complete",
                 "Status: Downloaded newer image"):
        print(line, flush=True)
    open(os.path.join(state, "pulled"), "w").close()
    sys.exit(int(os.environ.get("FAKE_PULL_RC", "0")))
if cmd == "run":
    name = args[args.index("--name") + 1]
    print("container running", flush=True)
    marker = os.path.join(state, "killed-" + name)
    for _ in range(3000):
        if os.path.exists(marker):
            sig = open(marker).read().strip()
            sys.exit(128 + signal.Signals[sig].value)
        time.sleep(0.01)
    sys.exit(0)
if cmd == "kill":  # written whole, then renamed: `run` never reads half of it
    marker = os.path.join(state, "killed-" + args[-1])
    with open(marker + ".tmp", "w") as f:
        f.write(args[args.index("--signal") + 1])
    os.replace(marker + ".tmp", marker)
    sys.exit(0)
if cmd == "ps":
    print("\\n".join(os.environ.get("FAKE_PS_IDS", "").split()))
    sys.exit(0)
sys.exit(0)
"""


@pytest.fixture()
def fake_cli(tmp_path, monkeypatch):
    """Install recorded ``docker`` and ``podman`` CLIs; returns a reader of the calls."""
    bin_dir = tmp_path / "bin"
    state = tmp_path / "state"
    bin_dir.mkdir()
    state.mkdir()
    for name in ("docker", "podman"):
        path = bin_dir / name
        path.write_text(FAKE_CLI.format(python=sys.executable))
        path.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_STATE", str(state))

    def calls() -> list[dict]:
        f = state / "calls.jsonl"
        return [json.loads(x) for x in f.read_text().splitlines()] if f.exists() else []

    return calls


def _launch(tmp_path: Path, **spec) -> TaskLaunch:
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    return TaskLaunch(
        allocation_id="abc123",
        argv=[sys.executable, "-m", "dauntless.exec.harness"],
        work_dir=str(work),
        env={"DET_SESSION_TOKEN": "s3cret-token", "DET_MASTER": "http://127.0.0.1:8080"},
        slot_ids=spec.pop("slot_ids", ["0", "1"]),
        slot_type=spec.pop("slot_type", "cuda"),
        environment=EnvironmentSpec(**spec),
        agent_id="agent-7",
    )


def test_docker_run_command_line_is_exact(tmp_path):
    rt = DockerRuntime(agent_id="agent-7")
    launch = _launch(
        tmp_path,
        image={"cpu": "img:cpu", "cuda": "img:cuda"},
        bind_mounts=(
            BindMountSpec("/data/in", "/in", read_only=True),
            BindMountSpec("/data/a,b", "/out", propagation="rslave"),
        ),
        shm_size=4 * 1024**3,
        devices=(DeviceSpec("/dev/fuse", "/dev/fuse", "rw"),),
        add_capabilities=("SYS_PTRACE",),
        drop_capabilities=("NET_RAW",),
        storage_paths=("/ckpt",),
    )
    lib = os.path.dirname(os.path.abspath(dauntless.__file__))
    assert rt.run_command(launch) == [
        "docker",
        "run",
        "--name",
        "dauntless-abc123",
        "--label",
        "ai.dauntless.agent=agent-7",
        "--label",
        "ai.dauntless.allocation=abc123",
        "--network",
        "host",
        "--workdir",
        "/run/determined/workdir",
        "--entrypoint",
        "sh",
        "--mount",
        f"type=bind,source={launch.work_dir},target=/run/determined/workdir",
        "--mount",
        f"type=bind,source={lib},target=/run/dauntless/lib/dauntless,readonly",
        "--mount",
        "type=bind,source=/ckpt,target=/ckpt",
        "--mount",
        "type=bind,source=/data/in,target=/in,readonly,bind-propagation=rprivate",
        "--mount",
        'type=bind,"source=/data/a,b",target=/out,bind-propagation=rslave',
        "--shm-size",
        str(4 * 1024**3),
        "--device",
        "/dev/fuse:/dev/fuse:rw",
        "--cap-add",
        "SYS_PTRACE",
        "--cap-drop",
        "NET_RAW",
        "--gpus",
        '"device=0,1"',
        "--env",
        "DET_CONTAINER_ID",
        "--env",
        "DET_MASTER",
        "--env",
        "DET_SESSION_TOKEN",
        "--env",
        "PYTHONPATH",
        "img:cuda",
        "-c",
        startup_hook_script(),
        "sh",
        "python3",
        "-m",
        "dauntless.exec.harness",
    ]


def test_podman_uses_cdi_for_gpus_and_cpu_image_for_cpu_slots(tmp_path):
    rt = PodmanRuntime(agent_id="agent-7")
    cuda = rt.run_command(_launch(tmp_path, image="img:1"))
    i = cuda.index("img:1")
    assert cuda[0] == "podman"
    assert "--gpus" not in cuda
    assert cuda[i - 12 : i - 8] == [
        "--device",
        "nvidia.com/gpu=0",
        "--device",
        "nvidia.com/gpu=1",
    ]
    cpu = rt.run_command(_launch(tmp_path, image={"cpu": "c", "cuda": "g"}, slot_type="cpu"))
    assert "c" in cpu and "g" not in cpu
    assert not any(a.startswith("nvidia.com/gpu") for a in cpu)
    with pytest.raises(PrepareError, match=r"environment.image names no image for rocm"):
        rt.prepare(_launch(tmp_path, image={"cpu": "c"}, slot_type="rocm"), lambda *a: None)


def test_docker_lifecycle_pull_start_kill_cleanup(tmp_path, fake_cli):
    rt = DockerRuntime(agent_id="agent-7")
    lines: list[tuple[str, str]] = []
    launch = _launch(
        tmp_path,
        image="registry.example/img:2",
        registry_auth={"username": "u", "password": "pw-not-on-argv", "serveraddress": "r.ex"},
        python_requirements=["inflection==0.5.1"],
    )
    rt.prepare(launch, lambda t, line: lines.append((t, line)))
    assert ("stdout", "abc123: Pull complete") in lines  # pull progress in the task's logs
    assert (Path(launch.work_dir) / ".dauntless-requirements.txt").read_text() == (
        "inflection==0.5.1\n"
    )
    handle = rt.start(launch)  # the client runs under the task's supervisor (its shim)
    assert next(iter(handle.lines()))[1:] == ("stdout", "container running")
    assert rt.wait(handle, 0) is None
    rt.signal(handle, signal.SIGTERM)
    assert rt.wait(handle, 30) == 128 + signal.SIGTERM
    rt.cleanup(handle)
    calls = [c["argv"] for c in fake_cli()]
    assert calls[0] == ["docker", "image", "inspect", "registry.example/img:2"]
    assert calls[1][0:2] == ["docker", "--config"] and calls[1][3:] == [
        "pull",
        "registry.example/img:2",
    ]
    assert not os.path.exists(calls[1][2])  # the private auth dir is gone after the pull
    assert calls[2][:2] == ["docker", "run"]
    assert calls[3] == ["docker", "kill", "--signal", "SIGTERM", "dauntless-abc123"]
    assert calls[4] == ["docker", "rm", "--force", "dauntless-abc123"]
    assert all("pw-not-on-argv" not in " ".join(c) for c in calls)
    run = fake_cli()[2]
    assert run["env"]["DET_SESSION_TOKEN"] == "s3cret-token"  # by name, from the env
    assert "s3cret-token" not in " ".join(run["argv"])
    script = run["argv"][run["argv"].index("-c") + 1]
    assert "pip install --user" in script and "building environment" in script
    # A second task finds the image and does not pull again.
    rt.prepare(launch, lambda t, line: lines.append((t, line)))
    assert [c["argv"][1] for c in fake_cli()[5:]] == ["image"]


def test_podman_pull_uses_an_auth_file_and_failures_are_reported(tmp_path, fake_cli, monkeypatch):
    rt = PodmanRuntime(agent_id="agent-7")
    seen = {}

    real_auth = rt._auth_args

    def keep(auth, scratch):
        opts = real_auth(auth, scratch)
        seen["file"] = json.loads(Path(opts[1]).read_text())
        seen["mode"] = os.stat(opts[1]).st_mode & 0o777
        return opts

    monkeypatch.setattr(rt, "_auth_args", keep)
    monkeypatch.setenv("FAKE_PULL_RC", "1")
    launch = _launch(
        tmp_path,
        image="img:3",
        force_pull_image=True,
        registry_auth={"username": "u", "password": "p"},
    )
    with pytest.raises(PrepareError, match="pulling image img:3 failed"):
        rt.prepare(launch, lambda *a: None)
    pull = fake_cli()[0]["argv"]
    assert pull[:2] == ["podman", "pull"] and pull[2] == "--authfile" and pull[-1] == "img:3"
    assert seen["file"] == {"auths": {"https://index.docker.io/v1/": {"auth": "dTpw"}}}
    assert seen["mode"] == 0o600


def test_agent_restart_removes_leftover_containers(fake_cli, monkeypatch):
    monkeypatch.setenv("FAKE_PS_IDS", "c1 c2")
    rt = DockerRuntime(agent_id="agent-7")
    assert rt.cleanup_orphans("agent-7") == ["c1", "c2"]
    assert [c["argv"] for c in fake_cli()] == [
        [
            "docker",
            "ps",
            "--all",
            "--filter",
            "label=ai.dauntless.agent=agent-7",
            "--format",
            '{{.ID}} {{.Label "ai.dauntless.allocation"}}',
        ],
        ["docker", "rm", "--force", "c1", "c2"],
    ]


def test_runtime_selection(tmp_path, fake_cli, monkeypatch):
    assert select_runtimes("docker", str(tmp_path), "a").name == "docker"
    assert select_runtimes("process", str(tmp_path), "a").describe()["containers"] is False
    monkeypatch.setenv("FAKE_INFO_RC", "1")
    assert select_runtimes("auto", str(tmp_path), "a").name == "process"
    with pytest.raises(RuntimeError, match="--runtime podman: podman version"):
        select_runtimes("podman", str(tmp_path), "a")


def _engine() -> tuple[str | None, str]:
    """A CLI whose engine answers here, or why none does."""
    reasons = []
    for cli in ("podman", "docker"):
        if shutil.which(cli) is None:
            reasons.append(f"{cli} is not installed")
            continue
        ok, why = (PodmanRuntime if cli == "podman" else DockerRuntime)().available()
        if ok:
            return cli, ""
        reasons.append(why)
    return None, "; ".join(reasons)


def _tiny_rootfs(root: Path, programs: list[str]) -> None:
    """A root file system holding ``programs`` and the shared libraries they load."""
    for prog in programs:
        path = shutil.which(prog)
        assert path is not None, prog
        files = [path] + [
            w
            for w in subprocess.run(["ldd", path], capture_output=True, text=True).stdout.split()
            if w.startswith("/")
        ]
        for f in files:
            dest = root / f.lstrip("/")
            dest.parent.mkdir(parents=True, exist_ok=True)
            if not dest.exists():
                shutil.copy2(f, dest)
    (root / "bin").mkdir(exist_ok=True)
    if not (root / "bin" / "sh").exists():
        shutil.copy2(shutil.which("sh"), root / "bin" / "sh")


def test_a_real_container_sees_bind_mount_env_and_shm(tmp_path):
    """Where podman or docker can run containers: an image imported from a root file
    system built here (no registry), a task that checks its bind mount, a variable and
    the size of /dev/shm from inside."""
    cli, why = _engine()
    if cli is None:
        pytest.skip(f"no container engine answers here: {why}")
    rootfs = tmp_path / "rootfs"
    _tiny_rootfs(rootfs, ["sh", "cat", "df", "touch", "tail"])
    image = f"localhost/dauntless-test:{os.getpid()}"
    tar = subprocess.run(["tar", "-C", str(rootfs), "-c", "."], capture_output=True, check=True)
    imp = subprocess.run(
        [cli, "import", "-", image], input=tar.stdout, capture_output=True, timeout=300
    )
    if imp.returncode != 0:
        pytest.skip(f"{cli} import failed: {imp.stderr.decode(errors='replace')[-300:]}")
    data = tmp_path / "data"
    data.mkdir()
    (data / "hello.txt").write_text("hello from the host\n")
    rt = (PodmanRuntime if cli == "podman" else DockerRuntime)(agent_id="t")
    launch = _launch(
        tmp_path,
        image=image,
        slot_type="cpu",
        slot_ids=[],
        bind_mounts=(BindMountSpec(str(data), "/in", read_only=True),),
        shm_size=64 * 1024**2,
    )
    launch.env["MY_VAR"] = "42"
    launch.argv = [
        "sh",
        "-c",
        "cat /in/hello.txt; echo VAR=$MY_VAR; df -k /dev/shm | tail -1; "
        "touch /in/x 2>/dev/null && echo WRITABLE || echo READONLY",
    ]
    rt.prepare(launch, lambda *a: None)
    handle = rt.start(launch)
    try:
        out, err = handle.communicate(timeout=120)
        code = handle.returncode
    finally:
        rt.cleanup(handle)
        subprocess.run([cli, "rmi", "--force", image], capture_output=True, timeout=120)
    if code != 0 and b"setrlimit" in err:
        pytest.skip(
            f"{cli} cannot start containers in this sandbox: {err.decode(errors='replace')[-200:]}"
        )
    text = out.decode()
    assert code == 0, err.decode()
    assert "hello from the host" in text and "VAR=42" in text and "READONLY" in text
    assert " 65536 " in text  # 64 MiB of /dev/shm, in KiB


def test_agent_runs_an_image_task_through_the_container_runtime(tmp_path, fake_cli):
    """The agent's own task path: registration reports the runtime, a TaskSpec naming
    an image starts ``docker run``, a kill order becomes ``docker kill`` and the exit
    is reported after ``docker rm``; a task whose image map lacks its slot type ends
    at once, marked fatal."""
    import httpx

    from dauntless.agent._agent import Agent
    from dauntless.config import AgentConfig

    posted: list[tuple[str, dict]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        if request.method == "POST":
            posted.append((request.url.path, json.loads(request.content or b"{}")))
        return httpx.Response(200, json={"agent": {}, "token": "credential"})

    config = AgentConfig(
        work_dir=str(tmp_path / "work"),
        artificial_slots=1,
        slot_type="cpu",
        cluster_secret="s",
        advertise_addr="127.0.0.1",
        runtime="docker",
        agent_id="agent-7",
    )
    agent = Agent(config, httpx.Client(base_url="http://m", transport=httpx.MockTransport(handler)))
    agent.register()
    runtime = posted[0][1]["runtime"]
    assert runtime["name"] == "docker" and runtime["containers"] is True
    spec = {
        "allocation_id": "al-1",
        "slot_ids": ["cpu0"],
        "entrypoint": "echo hi",
        "env": {"DET_SESSION_TOKEN": "t"},
        "environment": {"image": "img:1"},
    }
    agent._start(spec)
    agent._start({**spec, "allocation_id": "al-2", "environment": {"image": {"cuda": "g"}}})
    deadline = time.time() + 60
    while time.time() < deadline and not any(c["argv"][1] == "run" for c in fake_cli()):
        time.sleep(0.05)
    agent._kill("al-1")
    while agent.tasks and time.time() < deadline:
        agent._reap()
        time.sleep(0.05)
    agent._flush_exits()
    agent.shipper.stop()
    argvs = [c["argv"][1:3] for c in fake_cli()]
    assert ["run", "--name"] in argvs
    assert argvs[-2:] == [["kill", "--signal"], ["rm", "--force"]]
    exits = {p.split("/")[-2]: body for p, body in posted if p.endswith("/exited")}
    assert exits["al-1"] == {"exit_code": 128 + signal.SIGTERM, "message": "exit code 143"}
    assert exits["al-2"]["fatal"] is True
    assert "names no image for cpu slots" in exits["al-2"]["message"]


def test_container_python_path_puts_the_determined_compat_package_first(tmp_path):
    """Model code for Determined imports our `determined` inside a container too, before
    any `determined` the image has installed (as the agent does for host processes)."""
    env = DockerRuntime(agent_id="agent-7").container_env(_launch(tmp_path, image="img:1"))
    assert env["PYTHONPATH"].split(os.pathsep) == [
        "/run/determined/workdir",
        "/run/dauntless/lib/dauntless/compat/_shim",
        "/run/dauntless/lib",
    ]
    # The package mounted at /run/dauntless/lib/dauntless has the shim at that place.
    lib = os.path.dirname(os.path.abspath(dauntless.__file__))
    assert os.path.isfile(os.path.join(lib, "compat", "_shim", "determined", "__init__.py"))


def test_a_container_runs_as_the_tasks_identity_with_its_private_dir(tmp_path):
    """Issue 29: ``--user UID:GID`` and ``--group-add`` for the other groups, the task's
    private directory (its secret files, its home) at its host path, and ``HOME`` there."""
    from dauntless.agent._identity import TaskUser
    from dauntless.config import TaskIdentity

    private = str(tmp_path / ".private" / "abc123")
    launch = _launch(tmp_path, image="img:1", slot_type="cpu", slot_ids=[])
    launch.user = TaskUser(TaskIdentity(1001, 1002, "al", "als"), (1002, 27), None, True)
    launch.private_dir = private
    launch.env["HOME"] = private + "/home"
    argv = DockerRuntime(agent_id="agent-7").run_command(launch)
    i = argv.index("--user")
    assert argv[i : i + 4] == ["--user", "1001:1002", "--group-add", "27"]
    assert f"type=bind,source={private},target={private}" in argv
    env = DockerRuntime(agent_id="agent-7").container_env(launch)
    assert env["HOME"] == private + "/home"
    launch.env["HOME"] = "/root"  # the agent's own home never reaches the container
    assert "HOME" not in DockerRuntime(agent_id="agent-7").container_env(launch)
