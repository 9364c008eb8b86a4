"""Session-wide fixtures: one real object-store server per kind, shared by every test
that asks for it (SeaweedFS for S3, fake-gcs-server for GCS, Azurite for Azure Blob).

Where a server cannot start on this machine its tests skip, saying why.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import object_stores  # noqa: E402

_STARTERS = {
    "s3": ("boto3", object_stores.start_seaweedfs),
    "gcs": ("google.cloud.storage", object_stores.start_fake_gcs),
    "azure": ("azure.storage.blob", object_stores.start_azurite),
}


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def pytest_sessionstart(session: pytest.Session) -> None:
    """SIGTERM (``timeout``, CI stopping a run) interrupts the run as Ctrl-C does, so
    pytest tears its fixtures down: the masters, agents and object stores they started
    (in sessions of their own, out of reach of a signal to this process group) are
    stopped instead of left running (issue 38)."""
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _interrupt)


def _server(kind: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    module, start = _STARTERS[kind]
    try:
        found = importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        found = False
    if not found:
        pytest.skip(f"{kind} tests need {module}: pip install 'dauntless[{kind}]'")
    try:
        server = start(tmp_path_factory.mktemp(f"{kind}-server"))
    except object_stores.StoreUnavailable as exc:
        pytest.skip(f"the {kind} test server cannot start here: {exc}")
    # Clients in this process, and the master, agents and trials the tests start (they
    # inherit the environment), find the emulator through these variables.
    os.environ.update(server.env)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory) -> Iterator[object_stores.StoreServer]:
    """SeaweedFS's S3 gateway (about 12 s to start, once per session)."""
    yield from _server("s3", tmp_path_factory)


@pytest.fixture(scope="session")
def gcs_server(tmp_path_factory) -> Iterator[object_stores.StoreServer]:
    """fake-gcs-server (file-system backend)."""
    yield from _server("gcs", tmp_path_factory)


@pytest.fixture(scope="session")
def azure_server(tmp_path_factory) -> Iterator[object_stores.StoreServer]:
    """Azurite's Blob service."""
    yield from _server("azure", tmp_path_factory)


@pytest.fixture(params=["s3", "gcs", "azure"])
def store_server(request) -> object_stores.StoreServer:
    """Each of the three servers in turn."""
    return request.getfixturevalue(f"{request.param}_server")
