"""The process runtime with real processes: bind mounts in a private mount namespace,
startup-hook.sh, the warnings, and the command lines it builds."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from dauntless.agent.runtimes import (
    BindMountSpec,
    EnvironmentSpec,
    PrepareError,
    ProcessRuntime,
    TaskLaunch,
    mount_namespace_prefix,
)
from dauntless.agent.runtimes.python_env import environment_key, read_requirements

PREFIX, WHY = mount_namespace_prefix()
needs_namespace = pytest.mark.skipif(PREFIX is None, reason=f"no mount namespace: {WHY}")


def _launch(tmp_path: Path, argv: list[str], **spec) -> TaskLaunch:
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    return TaskLaunch(
        allocation_id="a1",
        argv=argv,
        work_dir=str(work),
        env=dict(os.environ),
        environment=EnvironmentSpec(**spec),
    )


def _run(rt: ProcessRuntime, launch: TaskLaunch) -> tuple[int, str, str, list[str]]:
    logged: list[str] = []
    rt.prepare(launch, lambda t, line: logged.append(line))
    handle = rt.start(launch)  # under its supervisor, the shim
    out, err = handle.communicate(timeout=60)
    code = handle.returncode
    rt.cleanup(handle)
    assert code is not None
    return code, out.decode(), err.decode(), logged


@needs_namespace
def test_bind_mount_is_visible_read_only_and_private(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "hello.txt").write_text("hi\n")
    target = tmp_path / "mnt" / "in"
    script = (
        f"cat {target}/hello.txt; touch {target}/new 2>/dev/null && echo WRITABLE || echo RO;"
        f"touch {tmp_path}/rw/made && echo RW-OK"
    )
    (tmp_path / "rw-host").mkdir()
    rt = ProcessRuntime(str(tmp_path / "envs"))
    code, out, err, _ = _run(
        rt,
        _launch(
            tmp_path,
            ["sh", "-c", script],
            bind_mounts=(
                BindMountSpec(str(data), str(target), read_only=True),
                BindMountSpec(str(tmp_path / "rw-host"), str(tmp_path / "rw")),
            ),
        ),
    )
    assert code == 0, err
    assert out.split() == ["hi", "RO", "RW-OK"]
    assert (tmp_path / "rw-host" / "made").exists()  # writes reach the host path
    assert list(target.iterdir()) == []  # the host never saw the mount


def test_bind_mounts_refused_without_a_namespace(tmp_path):
    rt = ProcessRuntime(str(tmp_path / "envs"), namespace_prefix=None)
    assert rt.describe() == {"name": "process", "containers": False, "mount_namespace": False}
    launch = _launch(tmp_path, ["true"], bind_mounts=(BindMountSpec("/tmp", "/x"),))
    with pytest.raises(PrepareError, match="bind_mounts: this agent cannot create") as exc:
        rt.prepare(launch, lambda *a: None)
    assert exc.value.fatal


@needs_namespace
def test_missing_host_path_is_reported(tmp_path):
    rt = ProcessRuntime(str(tmp_path / "envs"), namespace_prefix=PREFIX)
    launch = _launch(tmp_path, ["true"], bind_mounts=(BindMountSpec("/no/such/dir", "/x"),))
    with pytest.raises(PrepareError, match="host_path /no/such/dir does not exist"):
        rt.prepare(launch, lambda *a: None)


def test_startup_hook_exports_reach_the_entrypoint_and_failure_keeps_its_code(tmp_path):
    rt = ProcessRuntime(str(tmp_path / "envs"), namespace_prefix=None)
    launch = _launch(tmp_path, ["sh", "-c", "echo entry HOOK=$HOOK_VAR"])
    hook = Path(launch.work_dir) / "startup-hook.sh"
    hook.write_text("echo hook says hi\nexport HOOK_VAR=yes\n")
    code, out, err, _ = _run(rt, launch)
    assert code == 0 and out.split("\n")[:2] == ["hook says hi", "entry HOOK=yes"]
    assert "running startup-hook.sh" in err
    hook.write_text("echo before\nfalse\necho after\n")
    code, out, err, _ = _run(rt, launch)
    assert code == 1 and out == "before\n"
    assert "startup-hook.sh failed with exit code 1" in err
    hook.write_text("exit 7\n")
    code, out, err, _ = _run(rt, launch)
    assert code == 7 and "entry" not in out
    assert "startup-hook.sh failed with exit code 7" in err


def test_fields_a_process_cannot_honour_are_warned_about(tmp_path):
    rt = ProcessRuntime(str(tmp_path / "envs"), namespace_prefix=None)
    code, _, _, logged = _run(
        rt,
        _launch(
            tmp_path,
            ["true"],
            shm_size=1024,
            add_capabilities=("SYS_ADMIN",),
            pod_spec=True,
            force_pull_image=True,
        ),
    )
    assert code == 0
    text = "\n".join(logged)
    assert "resources.shm_size (1024 bytes) is not applied" in text
    assert "add_capabilities/drop_capabilities are not applied" in text
    assert "pod_spec applies to Kubernetes only" in text
    assert "force_pull_image/registry_auth apply to images only" in text


def test_python_is_swapped(tmp_path):
    rt = ProcessRuntime(str(tmp_path / "envs"), namespace_prefix=None)
    launch = _launch(tmp_path, [sys.executable, "-m", "x"])
    launch.python = "/envs/e/bin/python"
    argv = rt.command(launch)
    assert argv[:2] == ["sh", "-c"]  # the startup hook's wrapper; the shim starts it
    assert argv[-3:] == ["/envs/e/bin/python", "-m", "x"]
    env = rt.task_env(launch)
    assert env["PATH"].startswith("/envs/e/bin" + os.pathsep) and env["VIRTUAL_ENV"] == "/envs/e"


def test_requirements_from_a_list_or_a_file_in_the_context(tmp_path):
    (tmp_path / "requirements.txt").write_text("# pinned\nsix==1.16.0\n\ninflection\n")
    assert read_requirements("requirements.txt", str(tmp_path)) == ["six==1.16.0", "inflection"]
    assert read_requirements([" a ", ""], str(tmp_path)) == ["a"]
    with pytest.raises(PrepareError, match="cannot read 'nope.txt'") as exc:
        read_requirements("nope.txt", str(tmp_path))
    assert exc.value.fatal
    (tmp_path / "ctx").mkdir()
    with pytest.raises(PrepareError, match="outside the context"):
        read_requirements("../requirements.txt", str(tmp_path / "ctx"))
    assert environment_key(["a"]) == environment_key(["a"]) != environment_key(["b"])


def test_mount_namespace_probe_agrees_with_unshare():
    if PREFIX is None:
        assert WHY
        return
    res = subprocess.run([*PREFIX, "--", "true"], capture_output=True)
    assert res.returncode == 0
