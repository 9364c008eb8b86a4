"""The CLI's one way to open a WebSocket to a task service through the master's proxy
(``/proxy/<task id>/<path>``): the shell's terminal (``pty``) and its SSH relay
(``ssh``)."""

from __future__ import annotations

import ssl
import urllib.parse
from typing import Any

from websockets.sync.client import ClientConnection, connect

from dauntless._tls import make_verify
from dauntless.client import Session


def connect_task_socket(
    session: Session,
    task_id: str,
    path: str,
    query: dict[str, str] | None = None,
    compression: str | None = "deflate",
) -> ClientConnection:
    """A WebSocket to task ``task_id``'s ``path`` through the master, signed in as the
    session's user (bearer token in a header, never in the URL), verifying the master's
    certificate as the session does; messages of any size, 30 s to open.

    Args:
        session: a signed-in session (its token is refreshed first).
        task_id: the task.
        path: the service path under ``/proxy/<task id>/`` (``pty``, ``ssh``).
        query: query parameters of the request.
        compression: ``"deflate"`` or None (for bytes that do not compress, such as
            an SSH stream, compressing only costs the master CPU).

    Raises:
        websockets.exceptions.InvalidStatus: the master refused (its answer inside).
        OSError: the master could not be reached.
    """
    session.get_json("/me")  # sign in (or refresh the token) before the WebSocket
    base = session.master_url.rstrip("/")
    scheme = "wss" if base.startswith("https") else "ws"
    url = f"{scheme}://{base.split('://', 1)[1]}/proxy/{urllib.parse.quote(task_id)}/{path}"
    if query:
        url += "?" + urllib.parse.urlencode(query)
    ssl_ctx: Any = None
    if scheme == "wss":
        verify = make_verify(session.cert_file)
        ssl_ctx = verify if not isinstance(verify, bool) else ssl.create_default_context()
    return connect(
        url,
        additional_headers={"Authorization": f"Bearer {session.token}"},
        ssl=ssl_ctx,
        max_size=None,
        open_timeout=30,
        compression=compression,
    )
