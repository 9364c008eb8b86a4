"""The WebUI, served by the master at ``/`` (same origin as ``/api/v1``).

The UI's source is in ``webui/`` at the top of the repository (plain ES modules and
uPlot from npm); ``scripts/build-webui.sh`` (run by ``scripts/setup-venv.sh``) bundles
them into one module with esbuild and puts what is served into :data:`DIST_DIR`. It is a single-page application: a path that is neither
a built file nor under ``/api/`` answers ``index.html``, whose script routes on the path.
When the UI was not built (no npm), every page says so and how to build it.
"""

from __future__ import annotations

import html
from pathlib import Path

from fastapi import APIRouter, Request
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, Response

from .api_spec import method_not_allowed

DIST_DIR = Path(__file__).resolve().parent / "webui_dist"
"""Where ``scripts/build-webui.sh`` puts the built UI."""

_NO_CACHE = {"Cache-Control": "no-cache"}

_NOT_BUILT = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Dauntless</title></head>
<body style="font-family: sans-serif; max-width: 46em; margin: 3em auto">
<h1>Dauntless</h1>
<p>The WebUI was not built, so this master has no pages to show (looked in
<code>{dist}</code>). Build it with <code>bash scripts/build-webui.sh</code> (it needs
Node.js and npm), or run <code>bash scripts/setup-venv.sh</code>, which does it too.</p>
<p>The REST API works without it: see <a href="/docs">/docs</a>.</p>
</body></html>
"""


def make_webui_router(dist_dir: Path | str | None = None) -> APIRouter:
    """A router that serves the built UI from ``dist_dir``.

    Include it after the API routers: its catch-all route answers every GET path they do
    not (``/api/...`` paths get a JSON 404, never the page).

    Args:
        dist_dir: the built UI (holding ``index.html``); None: :data:`DIST_DIR`.

    Raises:
        TypeError: ``dist_dir`` is not a path.
    """
    if dist_dir is not None and not isinstance(dist_dir, (str, Path)):
        raise TypeError(f"dist_dir must be a path, got {type(dist_dir).__name__}")
    root = Path(dist_dir).resolve() if dist_dir is not None else DIST_DIR
    router = APIRouter(include_in_schema=False)

    def index() -> Response:
        page = root / "index.html"
        if not page.is_file():
            return HTMLResponse(_NOT_BUILT.format(dist=html.escape(str(root))), headers=_NO_CACHE)
        return FileResponse(page, media_type="text/html", headers=_NO_CACHE)

    @router.get("/")
    def webui_index() -> Response:
        """The UI's page."""
        return index()

    @router.get("/{path:path}")
    def webui_file(path: str, request: Request) -> Response:
        """A built file, or the UI's page for a route of the UI (e.g. /experiments/3)."""
        if path == "api" or path.startswith("api/"):
            wrong_method = method_not_allowed(request.app, request.scope)
            if wrong_method is not None:
                return wrong_method
            return JSONResponse({"detail": f"no route /{path}"}, status_code=404)
        target = (root / path).resolve()
        if target.is_relative_to(root) and target.is_file():
            return FileResponse(target, headers=_NO_CACHE)
        last = path.rsplit("/", 1)[-1]
        if "." in last:  # a missing asset, not a page
            return JSONResponse({"detail": f"no file /{path}"}, status_code=404)
        return index()

    return router


router = make_webui_router()
"""The UI served from :data:`DIST_DIR`."""
