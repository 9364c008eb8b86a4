"""A queued command is provisioning demand: a pool with a provider and no agents must
launch an instance for it, as it does for a pending trial."""

from __future__ import annotations

from fastapi.testclient import TestClient

from dauntless.config import MasterConfig
from dauntless.master.app import create_app
from dauntless.master.models import tasks
from dauntless.master.testing import sign_in


def test_queued_tasks_count_as_pending_demand(tmp_path):
    config = MasterConfig.model_validate(
        {
            "data_dir": str(tmp_path),
            "port": 18080,
            "resource_pools": [
                {
                    "pool_name": "default",
                    "provider": {
                        "type": "local",
                        "instance_type": {"slots": 2},
                        "max_instances": 2,
                        "work_dir": str(tmp_path / "instances"),
                    },
                },
                {"pool_name": "other"},
            ],
        }
    )
    app = create_app(config, run_loop=False)
    with TestClient(app) as client:
        sign_in(client)
        ctx = app.state.ctx
        prov = app.state.provisioners.pools[0]
        ctx.write(tasks.create_task, "COMMAND", "determined", {"resources": {"slots": 1}}, "true")
        ctx.write(tasks.create_task, "SHELL", "determined", {"resources": {"slots": 0}})
        other = {"resources": {"resource_pool": "other"}}
        ctx.write(tasks.create_task, "COMMAND", "determined", other, "true")
        with ctx.db.read() as s:
            assert sorted(prov._pending_slots(s)) == [0, 1]
