"""``det experiment create`` prints the master's config warnings; ``continue`` and
``fork`` send what Determined's API takes (against the CLI tests' HTTP fake master)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from dauntless.cli import main

CONFIG = """\
entrypoint: python3 train.py
searcher: {name: single, metric: loss}
tensorboard_storage: {type: shared_fs}
"""


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_create_prints_warnings(tmp_path: Path, fake_master: Any, capsys) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(CONFIG)
    warning = "tensorboard_storage: Determined 0.38 accepts and ignores it; so does Dauntless"
    fake_master.forced[("POST", "/api/v1/experiments")] = (
        201,
        {"experiment": {"id": 5}, "warnings": [warning]},
    )
    code, out, err = run(capsys, "-m", fake_master.url, "e", "create", str(cfg))
    assert code == 0 and out == "Created experiment 5\n"
    assert err == f"Warning: {warning}\n"


def test_continue_sends_id_and_overrides(fake_master: Any, capsys) -> None:
    fake_master.forced[("POST", "/api/v1/experiments/continue")] = (
        200,
        {"experiment": {"id": 3, "state": "ACTIVE"}},
    )
    code, out, err = run(
        capsys,
        "-m",
        fake_master.url,
        "e",
        "continue",
        "3",
        "--config",
        "searcher.max_length.batches=50",
    )
    assert code == 0 and out == "Continued experiment 3\n", err
    (req,) = [r for r in fake_master.requests if r.path == "/api/v1/experiments/continue"]
    body = json.loads(req.body)
    assert body["id"] == 3
    assert yaml.safe_load(body["overrideConfig"]) == {"searcher": {"max_length": {"batches": 50}}}


def test_fork_merges_overrides_into_the_parent_config(
    fake_master: Any, capsys, parse_multipart: Any
) -> None:
    parent = {"entrypoint": "python3 train.py", "searcher": {"name": "single", "metric": "l"}}
    fake_master.forced[("GET", "/api/v1/experiments/3")] = (
        200,
        {"experiment": {"id": 3, "config": parent}, "trials": []},
    )
    fake_master.forced[("POST", "/api/v1/experiments")] = (
        201,
        {"experiment": {"id": 4}, "warnings": []},
    )
    code, out, err = run(
        capsys, "-m", fake_master.url, "e", "fork", "3", "--config", "hyperparameters.lr=0.5"
    )
    assert code == 0 and out == "Created experiment 4 (forked from 3)\n", err
    (req,) = [
        r for r in fake_master.requests if (r.method, r.path) == ("POST", "/api/v1/experiments")
    ]
    form = parse_multipart(req.headers["content-type"], req.body)
    assert form["parent_id"] == (None, b"3") and "context" not in form
    sent = yaml.safe_load(form["config"][1])
    assert sent["hyperparameters"] == {"lr": 0.5} and sent["searcher"] == parent["searcher"]
