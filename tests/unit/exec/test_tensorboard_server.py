"""TensorBoard's web files as a TensorBoard task serves them (issue 38): the page's font
URLs relative, so that behind the proxy they are under the task's prefix; the browser
test (tests/integration/test_tasks_browser.py) checks that no request of the page fails."""

from __future__ import annotations

import io
import zipfile

import pytest

from dauntless.exec.tensorboard_server import relative_font_urls


def _zip(members: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        for name, data in members.items():
            z.writestr(name, data)
    return out.getvalue()


def test_font_urls_of_the_page_become_relative() -> None:
    page = b"<style>src: local('Roboto'), url(/font-roboto/a.woff2) format('woff2');</style>"
    fixed = relative_font_urls(_zip({"index.html": page, "index.js": b"url(/font-roboto/x)"}))
    with zipfile.ZipFile(io.BytesIO(fixed)) as z:
        assert z.read("index.html") == page.replace(b"url(/font-roboto/", b"url(font-roboto/")
        assert z.read("index.js") == b"url(/font-roboto/x)"  # only the page is changed


def test_tensorboards_own_web_files() -> None:
    assets = pytest.importorskip("tensorboard.assets", reason="TensorBoard is not installed")
    provider = assets.get_default_assets_zip_provider()
    assert provider is not None
    with provider() as f:
        original = f.read()
    fixed = relative_font_urls(original)
    with zipfile.ZipFile(io.BytesIO(original)) as a, zipfile.ZipFile(io.BytesIO(fixed)) as b:
        assert a.namelist() == b.namelist()
        page = b.read("index.html")
        assert b"url(/font-roboto/" in a.read("index.html")
        assert b"url(/font-roboto/" not in page and b"url(font-roboto/" in page
        assert all(a.read(n) == b.read(n) for n in a.namelist() if n != "index.html")


def test_not_tensorboards_web_files() -> None:
    with pytest.raises(ValueError, match="no index.html"):
        relative_font_urls(_zip({"other.html": b""}))
