"""Master URL resolution: explicit argument, DET_MASTER, default; normalization."""

from __future__ import annotations

import pytest

from dauntless.client import DEFAULT_MASTER_URL, normalize_master_url, resolve_master_url


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("127.0.0.1:8080", "http://127.0.0.1:8080"),
        ("master.example:9000", "http://master.example:9000"),
        ("master.example", "http://master.example:8080"),
        ("http://10.0.0.5:8081/", "http://10.0.0.5:8081"),
        ("https://det.example.com", "https://det.example.com"),
        ("  localhost:8080  ", "http://localhost:8080"),
        ("[::1]:8090", "http://[::1]:8090"),
        ("[::1]", "http://[::1]:8080"),
        ("http://host:8080/prefix/", "http://host:8080/prefix"),
    ],
)
def test_normalize(given: str, expected: str) -> None:
    assert normalize_master_url(given) == expected


@pytest.mark.parametrize(
    ("given", "match"),
    [("", "empty"), ("   ", "empty"), ("ftp://host:21", "scheme"), ("http://", "host")],
)
def test_normalize_rejects(given: str, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        normalize_master_url(given)


def test_resolution_order() -> None:
    env = {"DET_MASTER": "envhost:1234", "DET_MASTER_ADDR": "other:1"}
    assert resolve_master_url("cli:5555", env) == "http://cli:5555"  # explicit wins
    assert resolve_master_url(None, env) == "http://envhost:1234"
    assert resolve_master_url(None, {"DET_MASTER_ADDR": "other:1"}) == "http://other:1"
    assert resolve_master_url(None, {"DET_MASTER": "  "}) == DEFAULT_MASTER_URL
    assert resolve_master_url(None, {}) == DEFAULT_MASTER_URL == "http://127.0.0.1:8080"


def test_resolution_reads_os_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DET_MASTER", "fromenv:7777")
    assert resolve_master_url() == "http://fromenv:7777"


def test_bad_env_value_names_the_variable() -> None:
    with pytest.raises(ValueError, match="DET_MASTER: .*scheme"):
        resolve_master_url(None, {"DET_MASTER": "gopher://x"})
