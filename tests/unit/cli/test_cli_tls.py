"""TLS options: the CA bundle argument, and a failed verification reported once, clearly."""

from __future__ import annotations

import ssl
from pathlib import Path

import httpx
import pytest
from pydantic import ValidationError

from dauntless._tls import describe_cert_error, is_cert_verify_error, make_verify
from dauntless.client import MasterUnreachableError, Session
from dauntless.config import AgentConfig, MasterConfig
from dauntless.master.__main__ import parse_args


def _verify_error(request: httpx.Request) -> httpx.Response:
    cause = ssl.SSLCertVerificationError(
        1, "[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: self-signed certificate"
    )
    cause.verify_message = "self-signed certificate"
    try:
        raise cause
    except ssl.SSLError as exc:
        raise httpx.ConnectError(str(exc), request=request) from exc


def test_make_verify(tmp_path: Path) -> None:
    assert make_verify(None) is True
    assert make_verify("noverify") is False
    with pytest.raises(ValueError, match="does not exist"):
        make_verify(str(tmp_path / "missing.pem"))
    bad = tmp_path / "bad.pem"
    bad.write_text("not a certificate")
    with pytest.raises(ValueError, match="cannot load the CA bundle"):
        make_verify(str(bad))


def test_cert_verify_failure_is_not_retried_and_says_what_to_do() -> None:
    calls = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(1)
        return _verify_error(request)

    s = Session(
        "https://master:8443",
        transport=httpx.MockTransport(handler),
        retries=4,
        sleep=lambda _: None,
    )
    with pytest.raises(MasterUnreachableError) as info:
        s.list_agents()
    assert len(calls) == 1
    text = str(info.value)
    assert "self-signed certificate" in text and "--cert-file" in text
    assert "DET_MASTER_CERT_FILE" in text


def test_is_cert_verify_error_follows_the_cause() -> None:
    req = httpx.Request("GET", "https://x")
    with pytest.raises(httpx.ConnectError) as info:
        _verify_error(req)
    assert is_cert_verify_error(info.value)
    assert not is_cert_verify_error(httpx.ConnectError("[Errno 111] refused", request=req))
    assert "--master-cert-file" in describe_cert_error(
        "https://x", info.value, "--master-cert-file PATH"
    )


def test_session_reads_the_env_var(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DET_MASTER_CERT_FILE", str(tmp_path / "nope.pem"))
    with pytest.raises(ValueError, match="nope.pem"):
        Session("https://m:8443")
    monkeypatch.setenv("DET_MASTER_CERT_FILE", "noverify")
    assert Session("https://m:8443").cert_file == "noverify"


def test_master_tls_config(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="both cert and key"):
        MasterConfig.model_validate({"data_dir": "d", "security": {"tls": {"cert": "c.pem"}}})
    cert, key = tmp_path / "c.pem", tmp_path / "k.pem"
    cert.write_text("x")
    key.write_text("y")
    config = parse_args(
        ["--data-dir", str(tmp_path), "--tls-cert", str(cert), "--tls-key", str(key)]
    )
    assert config.security.tls.enabled and config.security.tls.cert == str(cert)
    with pytest.raises(SystemExit):
        parse_args(
            [
                "--data-dir",
                str(tmp_path),
                "--tls-cert",
                str(tmp_path / "no.pem"),
                "--tls-key",
                str(key),
            ]
        )
    assert AgentConfig(work_dir="w", master_cert_file="ca.pem").master_cert_file == "ca.pem"


def test_trial_clients_verify_with_the_env_bundle(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """core.Session and its lighter LiteClient both trust DET_MASTER_CERT_FILE, and both
    refuse an https server signed by another CA at once (no retries)."""
    import http.server
    import importlib.util
    import threading

    pytest.importorskip("cryptography")
    spec = importlib.util.spec_from_file_location(
        "tls_helpers", Path(__file__).resolve().parents[2] / "integration" / "test_tls.py"
    )
    assert spec is not None and spec.loader is not None
    helpers = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(helpers)
    ca, cert, key = helpers.make_ca_and_server_cert(tmp_path)
    other = tmp_path / "other"
    other.mkdir()
    other_ca, _, _ = helpers.make_ca_and_server_cert(other)

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            body = b'{"ok": true}'
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ctx.load_cert_chain(cert, key)
    server.socket = server_ctx.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    url = f"https://127.0.0.1:{server.server_address[1]}"
    from dauntless.core._lite import LiteClient
    from dauntless.core._session import MasterUnreachableError as CoreUnreachable
    from dauntless.core._session import Session as CoreSession

    try:
        monkeypatch.setenv("DET_MASTER_CERT_FILE", str(ca))
        with CoreSession(url, max_attempts=3, sleep=lambda _: None) as s:
            assert s.get("/x") == {"ok": True}
            lite = LiteClient(s)
            assert lite.get("/x") == {"ok": True}
            lite.close()
        monkeypatch.setenv("DET_MASTER_CERT_FILE", str(other_ca))
        slept: list[float] = []
        with CoreSession(url, max_attempts=3, sleep=slept.append) as s:
            with pytest.raises(CoreUnreachable, match="could not be verified"):
                s.get("/x")
            lite = LiteClient(s)
            with pytest.raises(CoreUnreachable, match="could not be verified"):
                lite.get("/x")
            lite.close()
        assert slept == []
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
