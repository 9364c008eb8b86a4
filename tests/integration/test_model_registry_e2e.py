"""End to end (issue 31 acceptance): a real master, agent and trial process. The trial's
Core API script sets its status and metadata and stores a checkpoint of random bytes;
``det model`` registers it as a version; ``det checkpoint delete`` is refused naming
the version; checkpoint GC with nothing to keep and the experiment's deletion leave it;
``det checkpoint download`` then gives the bytes back intact; deleting the version
releases (deletes) it.
"""

from __future__ import annotations

import hashlib
import json
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

SCRIPT = textwrap.dedent(
    """
    import os
    from dauntless import core

    with core.init() as ctx:
        ctx.train.set_status("training")
        ctx.train.set_metadata({"data": {"version": 1}, "owner": "ml"})
        ctx.train.set_metadata({"data": {"rows": 10}})
        assert ctx.train.get_metadata() == {"data": {"version": 1, "rows": 10}, "owner": "ml"}
        for op in ctx.searcher.operations():
            ctx.train.report_validation_metrics(op.length, {"loss": 0.5})
            with ctx.checkpoint.store_path({"steps_completed": op.length}) as (path, uuid):
                (path / "weights.bin").write_bytes(os.urandom(300_000))
            ctx.train.set_status("checkpointed")
            op.report_completed(0.5)
    """
)

CONFIG = """
name: registry-e2e
entrypoint: python3 train.py
hyperparameters: {{}}
searcher: {{name: single, metric: loss, max_length: {{batches: 1}}}}
checkpoint_storage: {{type: shared_fs, host_path: {storage}}}
max_restarts: 0
"""


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_registered_checkpoint_survives_gc_and_experiment_delete(cluster_factory, tmp_path):
    cluster = cluster_factory(f"sqlite:///{tmp_path}/master.db")
    cluster.start_master()
    cluster.start_agent()
    context = tmp_path / "context"
    context.mkdir()
    (context / "train.py").write_text(SCRIPT)
    storage = tmp_path / "storage"
    config = tmp_path / "config.yaml"
    config.write_text(CONFIG.format(storage=storage))
    out = cluster.det("experiment", "create", str(config), str(context)).stdout
    exp_id = int(out.split("Created experiment")[1].split()[0])
    body = cluster.wait_experiment(exp_id, timeout=120)
    assert body["experiment"]["state"] == "COMPLETED", cluster.dump_logs(exp_id)

    # Scope 3: the trial's status and metadata, shown by the CLI.
    (trial,) = body["trials"]
    assert trial["runner_state"] == "checkpointed"
    assert trial["metadata"] == {"data": {"version": 1, "rows": 10}, "owner": "ml"}
    described = cluster.det("trial", "describe", str(trial["id"])).stdout
    assert "checkpointed" in described and '"owner": "ml"' in described
    uuid = trial["latest_checkpoint"]
    stored = storage / uuid / "weights.bin"
    digest = _sha(stored)

    # Checkpoint metadata after the fact, before it is registered.
    out = cluster.det("checkpoint", "metadata", "add", uuid, '{"note": "best"}').stdout
    assert json.loads(out)["note"] == "best"

    # Register it; the CLI shows the model and its version.
    cluster.det("model", "create", "digits", "--description", "the best", "--label", "prod")
    out = cluster.det("model", "register-version", "digits", uuid, "--json").stdout
    assert json.loads(out)["model_version"] == 1
    listed = cluster.det("model", "list").stdout
    assert "digits" in listed and "prod" in listed
    described = cluster.det("model", "describe", "digits").stdout
    assert uuid in described and "the best" in described

    # Refusals name the version; GC and the experiment's deletion leave the files.
    r = cluster.det("checkpoint", "delete", uuid, "--yes", check=False)
    assert r.returncode != 0 and "digits (model #1), version 1" in r.stderr, r.stderr
    r = cluster.det("checkpoint", "metadata", "add", uuid, '{"x": 1}', check=False)
    assert r.returncode != 0 and "registered" in r.stderr
    cluster.det(
        "experiment", "set", "gc-policy", str(exp_id), "--save-experiment-best", "0",
        "--save-trial-best", "0", "--save-trial-latest", "0", "--yes",
    )  # fmt: skip
    assert stored.is_file()
    cluster.det("experiment", "delete", str(exp_id), "--yes")
    r = cluster.det("experiment", "describe", str(exp_id), check=False)
    assert r.returncode != 0
    assert stored.is_file()

    # Download the version's checkpoint: intact.
    target = tmp_path / "download"
    cluster.det("checkpoint", "download", uuid, "-o", str(target))
    assert _sha(target / "weights.bin") == digest
    version = json.loads(cluster.det("model", "describe", "digits", "--json").stdout)
    assert version["model_version"]["checkpoint"]["metadata"]["note"] == "best"

    # Deleting the version releases the checkpoint: nothing else keeps it, so it goes.
    cluster.det("model", "delete-version", "digits", "1", "--yes")
    assert not (storage / uuid).exists()
    cluster.det("model", "delete", "digits", "--yes")
    assert "digits" not in cluster.det("model", "list").stdout
