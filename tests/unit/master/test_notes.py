"""Experiment notes and editing (issue 31 scope 4): ``PATCH /experiments/{id}`` sets
name, description, Markdown notes and the whole set of labels; the experiment's answer
shows them (SQLite and PostgreSQL)."""

from __future__ import annotations

from typing import Any

import yaml
from fastapi.testclient import TestClient

from dauntless.master.testing import model_def_tarball

CONFIG = {
    "name": "noted",
    "entrypoint": "model_def:Trial",
    "labels": ["a"],
    "hyperparameters": {"global_batch_size": 8},
    "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 10}},
}


def test_patch_name_description_notes_and_labels(master: tuple[TestClient, Any]) -> None:
    client, _ctx = master
    r = client.post(
        "/api/v1/experiments",
        data={"config": yaml.safe_dump(CONFIG), "activate": "false"},
        files={"context": ("c.tar.gz", model_def_tarball(), "application/gzip")},
    )
    assert r.status_code == 201, r.text
    exp = r.json()["experiment"]
    assert exp["notes"] == "" and exp["labels"] == ["a"]
    notes = "# Findings\n\n<script>alert(1)</script> *lr* 0.1 works"
    body = {"name": "renamed", "description": "d", "notes": notes, "labels": ["x", "y", "x"]}
    r = client.patch(f"/api/v1/experiments/{exp['id']}", json=body)
    assert r.status_code == 200, r.text
    got = client.get(f"/api/v1/experiments/{exp['id']}").json()["experiment"]
    assert got["name"] == "renamed" and got["description"] == "d"
    assert got["notes"] == notes  # stored as written; the WebUI renders it sanitised
    assert got["labels"] == ["x", "y"] and got["config"]["labels"] == ["x", "y"]
    r = client.patch(f"/api/v1/experiments/{exp['id']}", json={"labels": [" "]})
    assert r.status_code == 400 and "labels" in r.text
    r = client.patch(f"/api/v1/experiments/{exp['id']}", json={"notes": "x" * 1_048_577})
    assert r.status_code == 400 and "notes" in r.text
    r = client.patch(f"/api/v1/experiments/{exp['id']}", json={"notes": ""})
    assert client.get(f"/api/v1/experiments/{exp['id']}").json()["experiment"]["notes"] == ""
