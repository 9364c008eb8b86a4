"""The browser terminal of shell tasks, served by the master on the proxy origin.

A shell task's service speaks WebSocket only (``/proxy/<task id>/pty``: the terminal's
bytes both ways and JSON control messages, :mod:`dauntless.exec.task_service`), the
protocol ``det shell`` uses. For a browser, the master answers ``GET /proxy/<task
id>/`` of a shell on the proxy origin itself, after the same checks as any request
there (:mod:`.proxy`: the task's proxy cookie or a bearer token, the owner or an admin,
the origin), with a page running xterm.js (``@xterm/xterm``, bundled by
``scripts/build-webui.sh`` into ``webui_dist/terminal/``) over that WebSocket. The
WebUI's Open button of a shell leads there through the ticket hand-over, so the page
is on the task's own origin: its WebSocket carries the task's proxy cookie and passes
the origin check, and it never sees the master's cookie. The page is the master's own
built code and holds no secret.

Only the page and its two files are answered here (``index.html`` at the task's root,
``terminal.js``, ``xterm.css``); every other path of a shell still goes to its service.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from starlette.responses import FileResponse, JSONResponse, Response

from .webui import DIST_DIR

TERMINAL_DIR = DIST_DIR / "terminal"
"""Where ``scripts/build-webui.sh`` puts the terminal page and its files."""

_FILES = {
    "": ("index.html", "text/html; charset=utf-8"),
    "terminal.js": ("terminal.js", "text/javascript; charset=utf-8"),
    "xterm.css": ("xterm.css", "text/css; charset=utf-8"),
}
"""Path under ``/proxy/<task id>/`` -> (file, media type)."""

CSP = (
    "default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
    "object-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
"""The page's Content-Security-Policy: its own files and its own origin's WebSocket
only (xterm.js sets inline styles)."""


def terminal_file(row: Any, method: str, path: str, root: Path | None = None) -> Response | None:
    """The terminal page or one of its files, when ``row`` is a shell task and ``path``
    names one; None otherwise (the request goes to the service).

    Args:
        row: the task's row (``id``, ``type``).
        method: the request's method (only GET and HEAD are answered).
        path: the request's raw path (``/proxy/<task id>/...``).
        root: where the built files are (default :data:`TERMINAL_DIR`).

    Returns:
        The file (``Cache-Control: no-cache``; the page with :data:`CSP`), a 404 naming
        the build step when the WebUI was not built, or None.
    """
    if row.type != "SHELL" or method not in ("GET", "HEAD"):
        return None
    prefix = f"/proxy/{row.id}/"
    if not path.startswith(prefix) or path[len(prefix) :] not in _FILES:
        return None
    name, media_type = _FILES[path[len(prefix) :]]
    target = (root or TERMINAL_DIR) / name
    if not target.is_file():
        return JSONResponse(
            {
                "detail": "the WebUI was not built, so there is no browser terminal "
                f"(bash scripts/build-webui.sh); use `det shell open {row.id}`"
            },
            status_code=404,
        )
    headers = {"Cache-Control": "no-cache", "X-Content-Type-Options": "nosniff"}
    if name == "index.html":
        headers["Content-Security-Policy"] = CSP
    return FileResponse(target, media_type=media_type, headers=headers)


__all__ = ["CSP", "TERMINAL_DIR", "terminal_file"]
