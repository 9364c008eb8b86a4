"""Serving the built WebUI: files, the single-page fallback, the API left alone, and the
page shown when the UI was not built."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from dauntless.config import MasterConfig
from dauntless.master import webui
from dauntless.master.app import create_app
from dauntless.master.testing import sign_in
from dauntless.master.webui import make_webui_router

REPO = Path(__file__).resolve().parents[3]


def _app(dist: Path) -> TestClient:
    app = FastAPI()

    @app.get("/api/v1/ping")
    def ping() -> dict:
        return {"pong": True}

    app.include_router(make_webui_router(dist))
    return TestClient(app)


@pytest.fixture()
def dist(tmp_path) -> Path:
    d = tmp_path / "dist"
    (d / "vendor").mkdir(parents=True)
    (d / "index.html").write_text("<!doctype html><title>ui</title>")
    (d / "main.js").write_text("export const x = 1;\n")
    (d / "vendor" / "lib.css").write_text("body{}")
    (tmp_path / "secret.txt").write_text("not for the web")
    return d


def test_files_pages_and_api(dist):
    client = _app(dist)
    r = client.get("/")
    assert r.status_code == 200 and "<title>ui</title>" in r.text
    assert r.headers["content-type"].startswith("text/html")
    assert r.headers["cache-control"] == "no-cache"
    r = client.get("/main.js")
    assert r.status_code == 200 and "javascript" in r.headers["content-type"]
    assert client.get("/vendor/lib.css").headers["content-type"].startswith("text/css")
    for page in ("/experiments", "/experiments/12", "/trials/3", "/cluster"):
        r = client.get(page)
        assert r.status_code == 200 and "<title>ui</title>" in r.text, page
    assert client.get("/api/v1/ping").json() == {"pong": True}
    r = client.get("/api/v1/nothing")
    assert r.status_code == 404 and r.headers["content-type"] == "application/json"
    assert client.get("/missing.js").status_code == 404


def test_no_file_outside_the_build(dist):
    client = _app(dist)
    for path in ("/../secret.txt", "/%2e%2e/secret.txt", "/vendor/../../secret.txt"):
        r = client.get(path)
        assert "not for the web" not in r.text, path


def test_not_built_page(tmp_path):
    client = _app(tmp_path / "nowhere")
    for path in ("/", "/experiments/1"):
        r = client.get(path)
        assert r.status_code == 200
        assert "not built" in r.text and "scripts/build-webui.sh" in r.text
    with pytest.raises(TypeError, match="dist_dir"):
        make_webui_router(3)  # type: ignore[arg-type]


def test_master_serves_ui_after_api(tmp_path):
    app = create_app(MasterConfig(data_dir=str(tmp_path)), run_loop=False)
    with TestClient(app) as client:
        sign_in(client)
        assert client.get("/api/v1/master").json()["version"]
        assert client.get("/docs").status_code == 200
        r = client.get("/experiments/1")
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
        if (webui.DIST_DIR / "index.html").is_file():
            assert '<script type="module" src="/main.js">' in r.text
            assert client.get("/main.js").status_code == 200
            assert client.get("/vendor/uPlot.min.css").status_code == 200
        else:
            assert "not built" in r.text


def test_source_and_lock_file_are_in_the_repository():
    lock = (REPO / "webui" / "package-lock.json").read_text()
    assert '"node_modules/uplot"' in lock and '"integrity"' in lock
    src = REPO / "webui" / "src"
    assert {p.name for p in src.iterdir()} >= {"index.html", "main.js", "charts.js", "api.js"}


def test_the_ui_is_one_bundled_module():
    """index.html loads one module, main.js, which the build bundles from every module of
    the UI and uPlot with esbuild (issue 22: 17 modules fetched one by one cost the first
    paint a request each), pinned in the lock file."""
    import re

    src = REPO / "webui" / "src"
    html = (src / "index.html").read_text()
    assert re.findall(r"<script[^>]*>", html) == [
        '<script type="module" src="/main.js">',
        "<script>",
    ]
    assert "modulepreload" not in html
    lock = (REPO / "webui" / "package-lock.json").read_text()
    assert '"node_modules/esbuild"' in lock
    assert "--bundle" in (REPO / "scripts" / "build-webui.sh").read_text()
    if not (webui.DIST_DIR / "index.html").is_file():
        pytest.skip("the WebUI is not built (bash scripts/build-webui.sh; needs npm)")
    built = sorted(
        str(p.relative_to(webui.DIST_DIR)) for p in webui.DIST_DIR.rglob("*") if p.is_file()
    )
    scripts = [p for p in built if p.endswith(".js")]
    # main.js, plus what is loaded only on demand and never on the first paint's path: the
    # launch form's YAML/tar libraries (import() of chunks/launch_libs.js) and the shell
    # terminal, a page of its own (terminal/index.html loads terminal/terminal.js).
    assert set(scripts) == {"main.js", "chunks/launch_libs.js", "terminal/terminal.js"}, built
    bundle = (webui.DIST_DIR / "main.js").read_text()
    # A static import statement; the text " from " inside a string is not one.
    static_import = re.compile(r"""(?:^|[;}\n])\s*(?:import|export)\b[^;"'`]*\bfrom\s*["']""")
    for name in scripts:
        text = (webui.DIST_DIR / name).read_text()
        assert not static_import.search(text), f"{name} still imports modules statically"
    assert "chunks/launch_libs.js" in bundle
    assert "u-over" in bundle  # uPlot's
    assert "Parallel coordinates" in bundle  # pages/experiment.js's


def test_the_early_stream_asks_what_the_experiment_page_asks():
    """index.html opens the experiment page's stream before main.js runs; the page adopts
    it only when it asks for the same path, so the two must agree on the default view's
    summary (top 10 above 40 trials, 400 points a series)."""
    src = REPO / "webui" / "src"
    html = (src / "index.html").read_text()
    page = (src / "pages" / "experiment.js").read_text()
    assert "?chart_group=validation&chart_max_points=400&chart_top=10&chart_all_up_to=40" in html
    assert "const q = { chart_group: view.g, chart_max_points: MAX_POINTS };" in page
    assert "Object.assign(q, { chart_top: 10, chart_all_up_to: TOP_N_ABOVE });" in page
    assert "const MAX_POINTS = 400;" in page and "const TOP_N_ABOVE = 40;" in page
    assert "dauntless-signed-in" in (src / "main.js").read_text()
