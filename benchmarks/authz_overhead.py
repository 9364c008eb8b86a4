"""What RBAC costs ``GET /api/v1/experiments`` (issue 30): the same request as an admin and
as a user whose roles let them see the same experiments.

Builds an in-process master (the real FastAPI app, its scheduling loop off) under
``security.authz.type: rbac`` on SQLite in a temporary directory (or ``--db-url``), with
``--workspaces`` workspaces of one project each, ``--experiments`` experiments spread
over them (one created through the API, the rest copies of its rows with one trial each,
so every view reads what a real one does), and ``--assignments`` role assignments: the
measured user holds Viewer on every workspace (so both callers get the same
experiments: the difference is the permission work, not the page), other users the rest.

Then it times ``--reads`` requests of each caller through the ASGI test client (no
network), alternating them so both see the same machine, after a warm-up. Printed: p50
and p95 milliseconds of each, the ratio of the p95s (target <= 1.2), the process's CPU
seconds and the load average.

Usage::

    python benchmarks/authz_overhead.py [--experiments 500] [--workspaces 10]
        [--assignments 50] [--reads 300] [--limit 100] [--db-url URL]
"""

from __future__ import annotations

import argparse
import os
import resource
import tempfile
import time

from argon2 import PasswordHasher
from fastapi.testclient import TestClient
from sqlalchemy import insert, select

from dauntless.config import MasterConfig
from dauntless.master import auth_secrets
from dauntless.master.app import create_app
from dauntless.master.db import ExperimentRow, TrialRow
from dauntless.master.testing import bearer, login, model_def_tarball

CONFIG = """
name: authz
entrypoint: model_def:Trial
hyperparameters: {global_batch_size: 8}
searcher: {name: single, metric: loss, max_length: {batches: 10}}
"""


def _p(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * (len(values) - 1) + 0.5))]


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _build(client: TestClient, app: object, args: argparse.Namespace) -> tuple[str, str]:
    admin = bearer(login(client))

    def post(path: str, body: object) -> dict:
        r = client.post(path, headers=admin, json=body)
        assert r.status_code in (200, 201), r.text
        return r.json()

    ws_ids, project_ids = [], []
    for i in range(args.workspaces):
        ws = post("/api/v1/workspaces", {"name": f"ws-{i}"})["workspace"]["id"]
        ws_ids.append(ws)
        project_ids.append(
            post(f"/api/v1/workspaces/{ws}/projects", {"name": "p"})["project"]["id"]
        )
    r = client.post(
        "/api/v1/experiments",
        headers=admin,
        data={"config": CONFIG, "project_id": str(project_ids[0]), "activate": "false"},
        files={"context": ("c.tar.gz", model_def_tarball(), "application/gzip")},
    )
    assert r.status_code == 201, r.text
    db = app.state.ctx.db  # type: ignore[attr-defined]
    with db.write() as s:
        exp = s.get(ExperimentRow, r.json()["experiment"]["id"])
        trial = s.scalars(select(TrialRow).where(TrialRow.experiment_id == exp.id)).first()
        cols = {c.name: getattr(exp, a.key) for a in ExperimentRow.__mapper__.column_attrs
                for c in a.columns}  # fmt: skip
        tcols = {c.name: getattr(trial, a.key) for a in TrialRow.__mapper__.column_attrs
                 for c in a.columns}  # fmt: skip
        for i in range(1, args.experiments):
            row = {k: v for k, v in cols.items() if k != "id"}
            row["project_id"] = project_ids[i % len(project_ids)]
            row["name"] = f"authz {i}"
            new_id = s.execute(insert(ExperimentRow.__table__).values(**row)).inserted_primary_key[
                0
            ]
            t = {k: v for k, v in tcols.items() if k != "id"}
            t["experiment_id"] = new_id
            s.execute(insert(TrialRow.__table__).values(**t))
    # The measured user: Viewer on every workspace; the other assignments to others.
    users = []
    n_others = max(0, args.assignments - args.workspaces)
    for i in range(1 + (n_others + 1) // 2):
        name = f"user{i}"
        r = client.post("/api/v1/users", headers=admin, json={"username": name, "password": "pw"})
        assert r.status_code == 201, r.text
        users.append(r.json()["user"]["id"])
    items = [
        {"user_id": users[0], "role_assignment": {"role": {"role_id": 4}, "scope_workspace_id": ws}}
        for ws in ws_ids
    ]
    for k in range(n_others):
        items.append(
            {
                "user_id": users[1 + k // 2],
                "role_assignment": {
                    "role": {"role_id": 5 if k % 2 else 4},
                    "scope_workspace_id": ws_ids[k % len(ws_ids)],
                },
            }
        )
    post("/api/v1/roles/add-assignments", {"user_role_assignments": items})
    return admin["Authorization"], bearer(login(client, "user0", "pw"))["Authorization"]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--experiments", type=int, default=500)
    p.add_argument("--workspaces", type=int, default=10)
    p.add_argument("--assignments", type=int, default=50)
    p.add_argument("--reads", type=int, default=300)
    p.add_argument("--limit", type=int, default=100, help="the page size asked for")
    p.add_argument("--db-url", default=None, help="a database URL (default: SQLite in a temp dir)")
    args = p.parse_args()
    auth_secrets._hasher = PasswordHasher(time_cost=1, memory_cost=8, parallelism=1)
    print(f"load average before: {open('/proc/loadavg').read().strip()}")
    with tempfile.TemporaryDirectory(prefix="dauntless-authz-") as tmp:
        config = MasterConfig(
            data_dir=tmp, port=18080, db_url=args.db_url, security={"authz": {"type": "rbac"}}
        )
        app = create_app(config, run_loop=False)
        with TestClient(app) as client:
            t0 = time.perf_counter()
            admin, user = _build(client, app, args)
            print(
                f"built {args.experiments} experiments, {args.workspaces} workspaces, "
                f"{args.assignments} role assignments in {time.perf_counter() - t0:.1f} s"
            )
            params = {"limit": args.limit}
            times: dict[str, list[float]] = {"admin": [], "rbac": []}
            cpu: dict[str, float] = {"admin": 0.0, "rbac": 0.0}
            counts = {}
            for i in range(args.reads + 20):
                for who, header in (("admin", admin), ("rbac", user)):
                    c0, w0 = _cpu(), time.perf_counter()
                    r = client.get(
                        "/api/v1/experiments", params=params, headers={"Authorization": header}
                    )
                    wall, used = time.perf_counter() - w0, _cpu() - c0
                    assert r.status_code == 200, r.text
                    counts[who] = r.json()["total"]
                    if i >= 20:  # warm-up done
                        times[who].append(wall * 1000)
                        cpu[who] += used
            assert counts["admin"] == counts["rbac"] == args.experiments, counts
            for who in ("admin", "rbac"):
                print(
                    f"{who:5s}: p50 {_p(times[who], 0.5):7.2f} ms  p95 {_p(times[who], 0.95):7.2f} ms"
                    f"  CPU {cpu[who]:.2f} s for {args.reads} requests"
                    f" (page of {args.limit} of {counts[who]})"
                )
            ratio = _p(times["rbac"], 0.95) / _p(times["admin"], 0.95)
            print(f"p95 ratio rbac/admin: {ratio:.3f} (target <= 1.2)")
            print(f"CPU ratio rbac/admin: {cpu['rbac'] / max(cpu['admin'], 1e-9):.3f}")
    print(
        f"process CPU seconds: {_cpu():.1f}; load average after: {open('/proc/loadavg').read().strip()}"
    )
    print(f"cores: {os.cpu_count()}")


if __name__ == "__main__":
    main()
