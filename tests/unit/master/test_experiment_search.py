"""Search across experiments (issue 31 scope 7, issue 37 scope 5): ``GET /experiments``
filters, sorts, pages and projects on the server, on SQLite and PostgreSQL, keeps its
index in step with creates, validations, label edits and deletes, and shows each caller
only the experiments of the workspaces they may view."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from fastapi.testclient import TestClient

from dauntless.config import MasterConfig
from dauntless.master.app import create_app
from dauntless.master.context import MasterContext
from dauntless.master.errors import BadRequest
from dauntless.master.models import metrics
from dauntless.master.models.experiment_index import hparam_rows
from dauntless.master.models.experiment_search import parse_condition
from dauntless.master.rbac import ROLES_BY_NAME
from dauntless.master.testing import model_def_tarball, sign_in

SEARCH = {
    "name": "grid",
    "entrypoint": "model_def:Trial",
    "hyperparameters": {
        "global_batch_size": 8,
        "lr": {"type": "categorical", "vals": [0.0001, 0.001, 0.01]},
        "opt": {"kind": {"type": "categorical", "vals": ["adam"]}},
    },
    "searcher": {"name": "grid", "metric": "loss", "max_length": {"batches": 10}},
}


def _config(name: str, lr: float, optimizer: str, labels: list[str]) -> dict[str, Any]:
    return {
        "name": name,
        "entrypoint": "model_def:Trial",
        "labels": labels,
        "hyperparameters": {
            "global_batch_size": 8,
            "lr": lr,
            "optimizer": optimizer,
            "nested": {"depth": 3, "wide": True},
        },
        "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 10}},
    }


def _create(client: TestClient, config: dict[str, Any], **form: str) -> int:
    r = client.post(
        "/api/v1/experiments",
        data={"config": yaml.safe_dump(config), "activate": "false", **form},
        files={"context": ("c.tar.gz", model_def_tarball(), "application/gzip")},
    )
    assert r.status_code == 201, r.text
    return int(r.json()["experiment"]["id"])


def _trials(client: TestClient, exp_id: int) -> list[int]:
    return [t["id"] for t in client.get(f"/api/v1/experiments/{exp_id}/trials").json()["trials"]]


def _validate(ctx: MasterContext, trial_id: int, loss: float, batches: int = 10) -> None:
    assert metrics.report_metrics(ctx, trial_id, "validation", batches, 0, {"loss": loss}, None)


def _ids(client: TestClient, **params: Any) -> list[int]:
    r = client.get("/api/v1/experiments", params={"fields": "id", **params})
    assert r.status_code == 200, r.text
    return [e["id"] for e in r.json()["experiments"]]


@pytest.fixture()
def populated(
    master: tuple[TestClient, MasterContext],
) -> tuple[TestClient, MasterContext, list[int]]:
    """Four single-trial experiments (lr 1e-4, 1e-3, 1e-2, 1e-1; losses 0.4, 0.2, 0.3,
    0.9) and a three-trial grid search, each trial validated once."""
    client, ctx = master
    ids = []
    for i, (lr, opt, loss) in enumerate(
        [(1e-4, "adam", 0.4), (1e-3, "sgd", 0.2), (1e-2, "adam", 0.3), (1e-1, "sgd", 0.9)]
    ):
        labels = ["tuned"] if i % 2 else ["base", "tuned"] if i == 2 else ["base"]
        exp_id = _create(client, _config(f"exp-{i}", lr, opt, labels))
        (trial_id,) = _trials(client, exp_id)
        _validate(ctx, trial_id, loss)
        ids.append(exp_id)
    grid = _create(client, SEARCH)
    for trial_id, loss in zip(_trials(client, grid), [0.5, 0.15, 0.6], strict=True):
        _validate(ctx, trial_id, loss)
    ids.append(grid)
    return client, ctx, ids


def test_filters_sorts_pages_and_projects(populated) -> None:
    client, ctx, (a, b, c, d, grid) = populated
    # Hyperparameter range (numbers) and value (text), ANDed.
    assert _ids(client, hp=["lr>=0.001", "lr<=0.01"]) == [grid, c, b]
    assert _ids(client, hp=["lr>=0.001", "lr<=0.01", "optimizer=adam"]) == [c]
    assert _ids(client, hp="nested.depth=3") == [d, c, b, a]
    assert _ids(client, hp="nested.wide=true") == [d, c, b, a]
    assert _ids(client, hp="optimizer!=adam") == [d, b]
    # The search is represented by its best trial (lr 0.001, loss 0.15).
    assert _ids(client, best_metric="loss<=0.2") == [grid, b]
    assert _ids(client, best_metric="loss<0.2") == [grid]
    assert _ids(client, best_metric="accuracy<1") == []  # not their searcher metric
    assert _ids(client, hp="lr>=0.001", best_metric="loss<=0.3") == [grid, c, b]
    # Labels (all of them), state, owner, searcher, name, time range.
    assert _ids(client, label="tuned") == [d, c, b]
    assert _ids(client, label=["tuned", "base"]) == [c]
    assert _ids(client, searcher="grid") == [grid]
    assert _ids(client, state="PAUSED", owner="admin") == [grid, d, c, b, a]
    assert _ids(client, state="ACTIVE") == []
    assert _ids(client, owner="somebody-else") == []
    assert _ids(client, name="EXP-2") == [c]
    created = {
        e["id"]: e["start_time"] for e in client.get("/api/v1/experiments").json()["experiments"]
    }
    assert _ids(client, start_after=created[c], start_before=created[d]) == [d, c]
    # Sorting by a hyperparameter, the best metric, the trial count; both orders.
    assert _ids(client, sort_by="hp.lr", order_by="asc") == [a, b, grid, c, d]  # ties: id
    assert _ids(client, sort_by="best_searcher_metric", order_by="asc") == [grid, b, c, a, d]
    assert _ids(client, sort_by="num_trials")[0] == grid
    assert _ids(client, sort_by="name", order_by="asc") == [a, b, c, d, grid]
    # Paging: total counts every match.
    page = client.get(
        "/api/v1/experiments", params={"fields": "id", "limit": 2, "offset": 1, "order_by": "asc"}
    ).json()
    assert page == {"experiments": [{"id": b}, {"id": c}], "total": 5}
    past = client.get("/api/v1/experiments", params={"fields": "id", "offset": 7}).json()
    assert past == {"experiments": [], "total": 5}, "paged past the end: still the count"
    sorted_page = client.get(
        "/api/v1/experiments", params={"fields": "id", "limit": 1, "sort_by": "hp.lr"}
    ).json()
    assert sorted_page["total"] == 5, "one count per experiment with an hp sort's join"
    # Projection: only the fields asked for.
    r = client.get(
        "/api/v1/experiments",
        params={
            "fields": "name,best_searcher_metric,hp.lr,hp.nested.depth,labels,num_trials,"
            "workspace_name,searcher",
            "sort_by": "id",
            "order_by": "asc",
        },
    ).json()["experiments"]
    assert r[1] == {
        "id": b,
        "name": "exp-1",
        "best_searcher_metric": 0.2,
        "hp.lr": 0.001,
        "hp.nested.depth": 3,
        "labels": ["tuned"],
        "num_trials": 1,
        "workspace_name": "Uncategorized",
        "searcher": "single",
    }
    assert r[4]["num_trials"] == 3 and r[4]["hp.nested.depth"] is None
    full = client.get("/api/v1/experiments", params={"hp": "lr<0.0005"}).json()
    assert full["total"] == 1 and full["experiments"][0]["config"]["name"] == "exp-0"
    _bad_filters_answer_4xx_naming_the_field(client)


BAD = [
    ({"hp": "lr>>1"}, "hp"),
    ({"hp": "lr>=fast"}, "hp"),
    ({"hp": ">=1"}, "hp"),
    ({"best_metric": "loss=low"}, "best_metric"),
    ({"sort_by": "config"}, "sort_by"),
    ({"fields": "id,password"}, "fields"),
    ({"state": "RUNNING"}, "state"),
    ({"order_by": "up"}, "order_by"),
    ({"start_after": "yesterday"}, "start_after"),
    ({"id": str(2**40)}, "id"),
]


def _bad_filters_answer_4xx_naming_the_field(client: TestClient) -> None:
    for params, field in BAD:
        for route in ("/api/v1/experiments", "/api/v1/stream/experiments"):
            r = client.get(
                route, params={**params, "max_seconds": 1} if "stream" in route else params
            )
            assert r.status_code in (400, 422), (params, r.text)
            assert field in r.text, (params, r.text)


def test_index_follows_labels_best_trials_and_deletes(populated) -> None:
    client, ctx, (a, b, c, d, grid) = populated
    assert client.put(f"/api/v1/experiments/{a}/labels/fresh").status_code == 200
    assert _ids(client, label="fresh") == [a]
    assert client.delete(f"/api/v1/experiments/{a}/labels/fresh").status_code == 200
    assert _ids(client, label="fresh") == []
    # A better validation of another trial makes it the search's representative.
    trials = client.get(f"/api/v1/experiments/{grid}/trials").json()["trials"]
    worst = max(trials, key=lambda t: t["best_validation"] or 0)
    _validate(ctx, worst["id"], 0.01, batches=20)
    row = client.get(
        "/api/v1/experiments",
        params={"fields": "hparams,best_searcher_metric,best_trial_id", "searcher": "grid"},
    ).json()["experiments"][0]
    assert row["best_searcher_metric"] == 0.01 and row["best_trial_id"] == worst["id"]
    assert row["hparams"] == {
        "global_batch_size": 8,
        "lr": worst["hparams"]["lr"],
        "opt.kind": "adam",
    }
    # A worse one changes nothing.
    _validate(ctx, _trials(client, grid)[0], 0.001 + 0.5, batches=20)
    assert _ids(client, best_metric="loss<=0.01") == [grid]
    # Deleted experiments leave the index with their rows.
    assert client.post(f"/api/v1/experiments/{d}/kill").status_code == 200
    assert client.delete(f"/api/v1/experiments/{d}").status_code in (200, 202, 204)
    assert _ids(client, hp="lr>=0.05") == []


def test_only_visible_workspaces_are_searched(tmp_path, db_url: str) -> None:
    """Under RBAC a Viewer of workspace "team" finds only team's experiments, and the
    total counts only those: filtered in SQL, nothing leaks through counts."""
    config = MasterConfig(
        data_dir=str(tmp_path), port=18080, db_url=db_url, security={"authz": {"type": "rbac"}}
    )
    with TestClient(create_app(config, run_loop=False)) as client:
        sign_in(client)
        places = {}
        for ws_name in ("team", "private"):
            ws = client.post("/api/v1/workspaces", json={"name": ws_name}).json()["workspace"]
            proj = client.post(
                f"/api/v1/workspaces/{ws['id']}/projects",
                json={"name": "p", "workspace_id": ws["id"]},
            )
            assert proj.status_code in (200, 201), proj.text
            places[ws_name] = (ws["id"], proj.json()["project"]["id"])
        made = {
            ws_name: [
                _create(
                    client, _config(f"{ws_name}-{i}", 0.01, "adam", ["tuned"]), project_id=str(p)
                )
                for i in range(2)
            ]
            for ws_name, (_ws, p) in places.items()
        }
        r = client.post("/api/v1/users", json={"username": "eve", "password": "pw"})
        assert r.status_code == 201, r.text
        viewer = ROLES_BY_NAME["viewer"].id
        r = client.post(
            "/api/v1/roles/add-assignments",
            json={
                "user_role_assignments": [
                    {
                        "user_id": r.json()["user"]["id"],
                        "role_assignment": {
                            "role": {"role_id": viewer},
                            "scope_workspace_id": places["team"][0],
                        },
                    }
                ],
                "group_role_assignments": [],
            },
        )
        assert r.status_code == 200, r.text
        assert sorted(_ids(client, hp="lr=0.01")) == sorted(made["team"] + made["private"])
        eve = TestClient(client.app)
        sign_in(eve, "eve", "pw")
        page = eve.get("/api/v1/experiments", params={"fields": "id", "hp": "lr=0.01"}).json()
        assert sorted(e["id"] for e in page["experiments"]) == sorted(made["team"])
        assert page["total"] == 2
        page = eve.get(
            "/api/v1/experiments",
            params={"fields": "id", "workspace_id": places["private"][0], "label": "tuned"},
        ).json()
        assert page == {"experiments": [], "total": 0}


def test_parse_condition_and_hparam_rows() -> None:
    assert parse_condition(" lr >= 1e-3 ", "hp").value == pytest.approx(0.001)
    assert parse_condition("opt.kind=adam", "hp").value == "adam"
    assert parse_condition("x=nan", "hp").value == "nan"  # not a number to compare
    with pytest.raises(BadRequest):
        parse_condition("lr", "hp")
    assert hparam_rows({"b": {"c": 1, "d": [1, 2]}, "a": False, "e": None, "f": {}}) == [
        ("a", None, "false"),
        ("b.c", 1.0, None),
        ("b.d", None, "[1, 2]"),
        ("f", None, "{}"),
    ]


def test_migration_0022_indexes_existing_experiments(empty_db_url: str, tmp_path) -> None:
    """A database at the previous head gets its experiments indexed by 0022 (searcher
    columns, labels, the best trial and its hyperparameters), and 0022 downgrades."""
    import json

    from alembic import command
    from alembic.config import Config as AlembicConfig
    from sqlalchemy import text

    from dauntless.master.db import Database
    from dauntless.master.db.engine import MIGRATIONS_DIR

    db = Database(empty_db_url)
    cfg = AlembicConfig()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.attributes["engine"] = db.engine
    command.upgrade(cfg, "0014")
    config = {
        **_config("old", 0.5, "adam", ["legacy", "legacy"]),
        "searcher": {"name": "random", "metric": "acc", "smaller_is_better": False},
    }
    with db.engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO experiments (name, state, archived, owner, config, "
                "original_config, seed, searcher_shutdown, progress, start_time, project_id) "
                "VALUES ('old', 'COMPLETED', :f, 'determined', :c, '', 0, :f, 1, 0, 1)"
            ),
            {"c": json.dumps(config), "f": False},
        )
        for i, (lr, acc) in enumerate([(0.1, 0.5), (0.2, 0.9), (0.3, None)]):
            conn.execute(
                text(
                    "INSERT INTO trials (experiment_id, request_id, state, hparams, seed, "
                    "restarts, run_id, total_batches, searcher_closed, best_validation, "
                    "start_time) VALUES (1, :r, 'COMPLETED', :h, 0, 0, 0, 0, :f, :b, 0)"
                ),
                {"r": f"r{i}", "h": json.dumps({"lr": lr, "o": {"k": i}}), "f": False, "b": acc},
            )
    command.upgrade(cfg, "0022")
    with db.engine.connect() as conn:
        row = conn.execute(
            text(
                "SELECT searcher_name, searcher_metric, smaller_is_better, "
                "best_searcher_metric, best_trial_id FROM experiments"
            )
        ).one()
        assert tuple(row) == ("random", "acc", False, 0.9, 2)
        hps = conn.execute(
            text("SELECT name, num_value FROM experiment_hparams ORDER BY name")
        ).all()
        assert [tuple(h) for h in hps] == [("lr", 0.2), ("o.k", 1.0)]
        labels = conn.execute(text("SELECT label FROM experiment_labels")).scalars().all()
        assert labels == ["legacy"]
    command.downgrade(cfg, "0014")
    with db.engine.connect() as conn:
        assert conn.execute(text("SELECT COUNT(*) FROM trials")).scalar() == 3
        assert conn.execute(text("SELECT name FROM experiments")).scalar() == "old"
    db.dispose()
