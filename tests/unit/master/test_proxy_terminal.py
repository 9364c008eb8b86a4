"""Which requests of a task the master answers itself on the proxy origin: a shell's
browser terminal page and its two files (issue 38 scope 4); everything else goes to the
task's service. The whole path (ticket, cookie, WebSocket, xterm.js) runs in Chromium in
tests/integration/test_tasks_browser.py."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from dauntless.master.proxy_terminal import CSP, terminal_file


def _built(tmp_path: Path) -> Path:
    for name, text in [("index.html", "<p>terminal</p>"), ("terminal.js", "1"), ("xterm.css", "")]:
        (tmp_path / name).write_text(text)
    return tmp_path


def test_a_shell_gets_its_terminal_page_and_files(tmp_path: Path) -> None:
    root = _built(tmp_path)
    shell = SimpleNamespace(id="ab12cd34", type="SHELL")
    page = terminal_file(shell, "GET", "/proxy/ab12cd34/", root)
    assert page is not None and page.status_code == 200
    assert page.headers["content-security-policy"] == CSP
    assert page.headers["content-type"].startswith("text/html")
    js = terminal_file(shell, "HEAD", "/proxy/ab12cd34/terminal.js", root)
    assert js is not None and js.headers["content-type"].startswith("text/javascript")
    assert "content-security-policy" not in js.headers
    css = terminal_file(shell, "GET", "/proxy/ab12cd34/xterm.css", root)
    assert css is not None and css.headers["content-type"].startswith("text/css")


def test_everything_else_goes_to_the_service(tmp_path: Path) -> None:
    root = _built(tmp_path)
    shell = SimpleNamespace(id="ab12cd34", type="SHELL")
    notebook = SimpleNamespace(id="ab12cd34", type="NOTEBOOK")
    assert terminal_file(notebook, "GET", "/proxy/ab12cd34/", root) is None
    assert terminal_file(shell, "POST", "/proxy/ab12cd34/", root) is None
    assert terminal_file(shell, "GET", "/proxy/ab12cd34/pty", root) is None
    assert terminal_file(shell, "GET", "/proxy/ab12cd34/index.html", root) is None
    assert terminal_file(shell, "GET", "/proxy/other/terminal.js", root) is None


def test_without_a_built_ui_the_answer_says_how_to_build_it(tmp_path: Path) -> None:
    shell = SimpleNamespace(id="ab12cd34", type="SHELL")
    page = terminal_file(shell, "GET", "/proxy/ab12cd34/", tmp_path / "missing")
    assert page is not None and page.status_code == 404
    assert b"build-webui.sh" in page.body and b"det shell open ab12cd34" in page.body
