"""Debian's Chromium for the WebUI browser tests, driven by Playwright: one place that
finds it, starts it, or skips the test saying exactly what is missing.

A browser test calls :func:`require_chromium` before it builds anything costly (a cluster,
seeded experiments), so a machine without Chromium skips at once, and later opens the
browser with :func:`launch_chromium` (a ``(playwright, browser)`` pair the caller stops)
or the :func:`chromium` context manager.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
DIST = REPO / "src" / "dauntless" / "master" / "webui_dist"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def require_chromium() -> str:
    """The path of Debian's ``chromium`` executable.

    Skips the calling test (``pytest.skip``) when Playwright is not installed, Chromium
    is not on PATH, or the WebUI was not built into ``webui_dist`` (no npm), naming which.
    """
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        pytest.skip("playwright is not installed (pip install -e '.[test]')")
    exe = shutil.which("chromium")
    if exe is None:
        pytest.skip("Debian's chromium is not installed (apt-get install chromium)")
    if not (DIST / "index.html").is_file():
        pytest.skip("the WebUI is not built (bash scripts/build-webui.sh; needs npm)")
    return exe


def launch_chromium(extra_args: tuple[str, ...] = ()) -> tuple[Any, Any]:
    """Start Playwright and a headless Chromium: ``(playwright, browser)``.

    The caller closes the browser and stops Playwright. ``extra_args`` are added to
    Chromium's command line. Skips as :func:`require_chromium` does, and also when
    Chromium exists but does not start (the first line of its error is the reason).
    """
    exe = require_chromium()
    from playwright.sync_api import Error, sync_playwright

    pw = sync_playwright().start()
    try:
        browser = pw.chromium.launch(executable_path=exe, args=[*ARGS, *extra_args])
    except Error as exc:
        pw.stop()
        pytest.skip(f"chromium did not start: {str(exc).splitlines()[0]}")
    return pw, browser


@contextmanager
def chromium(extra_args: tuple[str, ...] = ()) -> Iterator[Any]:
    """A headless Chromium browser for a ``with`` block, closed (with Playwright) on exit.

    Skips as :func:`launch_chromium` does.
    """
    pw, browser = launch_chromium(extra_args)
    try:
        yield browser
    finally:
        browser.close()
        pw.stop()
