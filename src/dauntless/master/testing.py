"""Helpers for tests that drive the master in-process (``fastapi.testclient``)."""

from __future__ import annotations

import gzip
import io
import tarfile
from typing import Any

from dauntless._auth import CLUSTER_SECRET_HEADER


def login(client: Any, username: str = "admin", password: str = "") -> str:
    """Sign in through ``POST /api/v1/auth/login`` and return the token.

    The cookie the login sets is dropped, so that the client sends only what the caller
    gives it.

    Raises:
        AssertionError: the login was refused.
    """
    r = client.post("/api/v1/auth/login", json={"username": username, "password": password})
    assert r.status_code == 200, f"login as {username} failed: {r.status_code} {r.text}"
    client.cookies.clear()
    return r.json()["token"]


def sign_in(client: Any, username: str = "admin", password: str = "") -> str:
    """Sign ``client`` in (default: the built-in admin, empty password): every later
    request carries ``Authorization: Bearer <token>``. Returns the token."""
    token = login(client, username, password)
    client.headers["Authorization"] = f"Bearer {token}"
    return token


def bearer(token: str) -> dict[str, str]:
    """Headers presenting ``token``."""
    return {"Authorization": f"Bearer {token}"}


def agent_headers(app: Any) -> dict[str, str]:
    """Headers presenting the cluster secret of ``app`` (what agents send)."""
    return {CLUSTER_SECRET_HEADER: app.state.auth.cluster_secret}


def model_def_tarball(source: bytes = b"print('hello')\n") -> bytes:
    """A gzipped tar holding one file, ``model_def.py`` with ``source``: the smallest
    context directory the master accepts (``POST /api/v1/experiments``'s ``model_definition``).

    The bytes are the same on every call (the gzip header's time stamp is fixed at 0), so a
    test may compare what the master serves back with a fresh call; with the default time
    stamp two calls straddling a second differ in byte 4.
    """
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo("model_def.py")
        info.size = len(source)
        tar.addfile(info, io.BytesIO(source))
    return gzip.compress(buf.getvalue(), mtime=0)
