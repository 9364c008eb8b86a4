"""Every field of Determined's experiment config (reference §1, incl. §1.1-§1.5) is
acted on, refused at create with a message naming it, or accepted with a warning.

Each row of FIELDS names a field, an example value and its outcome:

- ``acted``: the master accepts it with no warning about it, and the named test shows
  the effect (the test must exist; rows marked ``here`` are tested in this file);
- ``refused``: create answers 400 with an error whose field is the row's field (or its
  parent, for a union tag) and whose message contains the row's words;
- ``warned``: create answers 201 and a warning that starts with the field's path.

Fields that belong to other issues keep today's behaviour, written down here so that
the developers of those issues update their row.

Every create goes through one in-process master (ASGI), as ``det experiment create``
would.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from fastapi.testclient import TestClient

from dauntless.config import FIELD_RULES, MasterConfig
from dauntless.master import loop
from dauntless.master.app import create_app
from dauntless.master.testing import model_def_tarball, sign_in

ROOT = Path(__file__).resolve().parents[3]

BASE = {
    "entrypoint": "python3 train.py",
    "hyperparameters": {"global_batch_size": 8},
    "searcher": {"name": "single", "metric": "loss"},
}

ASHA = {"name": "adaptive_asha", "metric": "loss", "max_trials": 4, "max_time": 8}

# (field, value patch (merged into BASE), outcome, evidence / expected words)
FIELDS: list[tuple[str, dict, str, str]] = [
    # -- top level (§1)
    ("name", {"name": "x"}, "acted", "here::test_name_description_labels_are_kept"),
    ("description", {"description": "d"}, "acted", "here::test_name_description_labels_are_kept"),
    (
        "entrypoint",
        {},
        "acted",
        "tests/unit/harness/test_harness_entrypoint.py::test_load_trial_class_checks_the_entrypoint",
    ),
    (
        "hyperparameters",
        {},
        "acted",
        "tests/unit/searcher/test_space.py::test_sample_follows_sorted_keys_and_documented_draws",
    ),
    (
        "searcher",
        {},
        "acted",
        "tests/unit/searcher/test_searcher_038.py::test_no_max_length_gives_no_operations",
    ),
    (
        "checkpoint_storage",
        {"checkpoint_storage": {"save_trial_best": 2}},
        "acted",
        "tests/unit/master/test_compat038_api.py::test_checkpoint_storage_without_type_takes_the_default",
    ),
    (
        "checkpoint_policy",
        {"checkpoint_policy": "all"},
        "acted",
        "tests/unit/harness/test_harness_controller.py::test_checkpoint_policy_after_validations",
    ),
    ("records_per_epoch", {"records_per_epoch": 64}, "warned", "legacy Keras"),
    ("min_validation_period", {"min_validation_period": {"batches": 5}}, "warned", "deprecated"),
    ("min_checkpoint_period", {"min_checkpoint_period": {"batches": 5}}, "warned", "deprecated"),
    (
        "perform_initial_validation",
        {"perform_initial_validation": True},
        "acted",
        "tests/unit/harness/test_harness_controller.py::test_loop_settings_convert_epochs_and_records_to_batches",
    ),
    ("scheduling_unit", {"scheduling_unit": 7}, "warned", "deprecated"),
    (
        "max_restarts",
        {"max_restarts": 2},
        "acted",
        "tests/unit/master/test_api.py::test_failed_trial_restarts_then_errors",
    ),
    (
        "reproducibility.experiment_seed",
        {"reproducibility": {"experiment_seed": 3}},
        "acted",
        "tests/unit/searcher/test_simulate.py::test_same_seed_same_search",
    ),
    (
        "data",
        {"data": {"k": 1}},
        "acted",
        "tests/unit/harness/test_harness_context.py::test_trial_facts",
    ),
    (
        "workspace",
        {"workspace": "Uncategorized", "project": "Uncategorized"},
        "acted",
        "tests/unit/master/test_workspaces.py::test_config_workspace_and_project_place_the_experiment",
    ),
    (
        "project",
        {"workspace": "Uncategorized", "project": "Uncategorized"},
        "acted",
        "tests/unit/master/test_workspaces.py::test_config_workspace_and_project_place_the_experiment",
    ),
    ("labels", {"labels": ["a"]}, "acted", "here::test_name_description_labels_are_kept"),
    ("debug", {"debug": True}, "acted", "here::test_debug_turns_on_debug_logging"),
    (
        "log_policies",
        {"log_policies": [{"name": "x", "pattern": "y"}]},
        "acted",
        "tests/unit/master/test_task_policies.py::test_cancel_retries_log_policy_makes_a_failure_final_and_failure_is_recorded",
    ),
    (
        "retention_policy",
        {"retention_policy": {"log_retention_days": 3}},
        "acted",
        "tests/unit/master/test_master_ops.py::test_log_retention_deletes_old_trial_logs_in_batches",
    ),
    (
        "preemption_timeout",
        {"preemption_timeout": 60},
        "acted",
        "tests/unit/master/test_task_policies.py::test_trial_ignoring_a_pause_is_killed_after_preemption_timeout",
    ),
    ("integrations.pachyderm", {"integrations": {"pachyderm": {"a": 1}}}, "warned", "Pachyderm"),
    (
        "integrations.webhooks",
        {"integrations": {"webhooks": {"webhook_id": [1]}}},
        "acted",
        "tests/unit/master/test_webhooks.py::test_specific_webhooks_fire_only_for_experiments_naming_them",
    ),
    ("pbs", {"pbs": {"slots_per_node": 1}}, "warned", "PBS"),
    ("slurm", {"slurm": {"gpu_type": "a"}}, "warned", "Slurm"),
    ("tensorboard_storage", {"tensorboard_storage": {"type": "shared_fs"}}, "warned", "ignores"),
    ("security", {"security": {"kerberos": {"config_file": "/k"}}}, "warned", "ignores"),
    ("data_layer", {"data_layer": {"type": "shared_fs"}}, "warned", "ignores"),
    ("internal", {"internal": {"x": 1}}, "warned", "ignores"),
    # -- hyperparameters (§1.1)
    (
        "hyperparameters.<const>",
        {"hyperparameters": {"global_batch_size": 8, "a": [1, 2]}},
        "acted",
        "tests/unit/searcher/test_space.py::test_grid_points_cartesian_first_name_slowest_nested_expanded",
    ),
    (
        "hyperparameters.<int>",
        {
            "hyperparameters": {
                "global_batch_size": 8,
                "a": {"type": "int", "minval": 1, "maxval": 3},
            }
        },
        "acted",
        "tests/unit/searcher/test_space.py::test_sample_follows_sorted_keys_and_documented_draws",
    ),
    (
        "hyperparameters.<double>",
        {
            "hyperparameters": {
                "global_batch_size": 8,
                "a": {"type": "double", "minval": 0, "maxval": 1},
            }
        },
        "acted",
        "tests/unit/searcher/test_space.py::test_sample_follows_sorted_keys_and_documented_draws",
    ),
    (
        "hyperparameters.<log>",
        {
            "hyperparameters": {
                "global_batch_size": 8,
                "a": {"type": "log", "base": 10, "minval": -2, "maxval": -1},
            }
        },
        "acted",
        "tests/unit/searcher/test_space.py::test_grid_log_axis",
    ),
    (
        "hyperparameters.<categorical>",
        {
            "hyperparameters": {
                "global_batch_size": 8,
                "a": {"type": "categorical", "vals": [1, "x"]},
            }
        },
        "acted",
        "tests/unit/searcher/test_space.py::test_sample_follows_sorted_keys_and_documented_draws",
    ),
    (
        "hyperparameters.<nested>",
        {
            "hyperparameters": {
                "global_batch_size": 8,
                "n": {"a": {"type": "int", "minval": 1, "maxval": 2}},
            }
        },
        "acted",
        "tests/unit/searcher/test_space.py::test_grid_points_cartesian_first_name_slowest_nested_expanded",
    ),
    (
        "hyperparameters.<other type>",
        {"hyperparameters": {"a": {"type": "weird"}}},
        "refused",
        "type",
    ),
    (
        "hyperparameters.global_batch_size",
        {},
        "acted",
        "tests/unit/harness/test_harness_context.py::test_trial_facts",
    ),
    # -- searcher (§1.2)
    (
        "searcher.metric",
        {},
        "acted",
        "tests/unit/searcher/test_searcher_038.py::test_asha_038_stops_from_metrics_and_replaces",
    ),
    (
        "searcher.smaller_is_better",
        {"searcher": {"name": "single", "metric": "loss", "smaller_is_better": False}},
        "acted",
        "tests/unit/searcher/test_searcher_038.py::test_asha_038_larger_is_better",
    ),
    (
        "searcher.source_trial_id",
        {"searcher": {"name": "single", "metric": "loss", "source_trial_id": 4242}},
        "refused",
        "no trial 4242",
    ),
    (
        "searcher.source_checkpoint_uuid",
        {"searcher": {"name": "single", "metric": "loss", "source_checkpoint_uuid": "nope"}},
        "refused",
        "no completed checkpoint",
    ),
    (
        "searcher.max_length",
        {"searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 5}}},
        "warned",
        "deprecated",
    ),
    (
        "searcher.name=random",
        {"searcher": {"name": "random", "metric": "loss", "max_trials": 2}},
        "acted",
        "tests/unit/searcher/test_simulate.py::test_random_ten_thousand_trials",
    ),
    (
        "searcher.max_trials",
        {"searcher": {"name": "random", "metric": "loss", "max_trials": 2}},
        "acted",
        "tests/unit/searcher/test_simulate.py::test_random_ten_thousand_trials",
    ),
    (
        "searcher.max_concurrent_trials",
        {"searcher": {"name": "grid", "metric": "loss", "max_concurrent_trials": 1}},
        "acted",
        "tests/unit/searcher/test_basic.py::test_grid_trials_pop_from_the_end",
    ),
    (
        "searcher.name=adaptive_asha",
        {"searcher": {**ASHA, "time_metric": "batches"}},
        "acted",
        "tests/unit/searcher/test_searcher_038.py::test_asha_038_stops_from_metrics_and_replaces",
    ),
    (
        "searcher.time_metric",
        {"searcher": {**ASHA, "time_metric": "my_metric"}},
        "acted",
        "tests/unit/searcher/test_searcher_038.py::test_asha_038_metric_errors_name_the_metric",
    ),
    (
        "searcher.max_time",
        {"searcher": {**ASHA, "time_metric": "epochs"}},
        "acted",
        "tests/unit/searcher/test_searcher_038.py::test_simulate_and_preview_cover_038_asha",
    ),
    (
        "searcher.mode",
        {"searcher": {**ASHA, "time_metric": "epochs", "mode": "conservative"}},
        "acted",
        "tests/unit/searcher/test_asha.py::test_reference_example",
    ),
    (
        "searcher.divisor",
        {"searcher": {**ASHA, "time_metric": "epochs", "divisor": 2}},
        "acted",
        "tests/unit/searcher/test_asha.py::test_reference_example",
    ),
    (
        "searcher.max_rungs",
        {"searcher": {**ASHA, "time_metric": "epochs", "max_rungs": 2}},
        "acted",
        "tests/unit/searcher/test_asha.py::test_reference_example",
    ),
    (
        "searcher.bracket_rungs",
        {"searcher": {**ASHA, "time_metric": "epochs", "bracket_rungs": [2]}},
        "acted",
        "tests/unit/searcher/test_searcher_038.py::test_asha_038_stops_from_metrics_and_replaces",
    ),
    (
        "searcher.stop_once",
        {"searcher": {**ASHA, "time_metric": "epochs", "stop_once": True}},
        "warned",
        "deprecated",
    ),
    (
        "searcher.name=async_halving",
        {
            "searcher": {
                "name": "async_halving",
                "metric": "loss",
                "num_rungs": 2,
                "max_trials": 2,
                "max_time": 4,
                "time_metric": "epochs",
            }
        },
        "acted",
        "tests/unit/searcher/test_searcher_038.py::test_async_halving_one_bracket_both_modes",
    ),
    (
        "searcher.name=custom",
        {"searcher": {"name": "custom", "metric": "loss", "unit": "batches"}},
        "acted",
        "tests/unit/searcher/test_search_beyond.py::test_remote_custom_search_acknowledges_events_once",
    ),
    (
        "searcher.name=adaptive",
        {"searcher": {"name": "adaptive", "metric": "loss"}},
        "refused",
        "removed in Determined 0.38",
    ),
    (
        "searcher.name=adaptive_simple",
        {"searcher": {"name": "adaptive_simple", "metric": "loss"}},
        "refused",
        "removed in Determined 0.38",
    ),
    (
        "searcher.name=sync_halving",
        {"searcher": {"name": "sync_halving", "metric": "loss"}},
        "refused",
        "removed in Determined 0.38",
    ),
    # -- checkpoint_storage (§1.3)
    (
        "checkpoint_storage.save_experiment_best",
        {"checkpoint_storage": {"save_experiment_best": 1}},
        "acted",
        "tests/unit/master/test_lifecycle.py::test_gc_rule_experiment_best_and_zeros",
    ),
    (
        "checkpoint_storage.save_trial_best",
        {"checkpoint_storage": {"save_trial_best": 2}},
        "acted",
        "tests/unit/master/test_lifecycle.py::test_gc_policy_and_delete",
    ),
    (
        "checkpoint_storage.save_trial_latest",
        {"checkpoint_storage": {"save_trial_latest": 2}},
        "acted",
        "tests/unit/master/test_lifecycle.py::test_gc_policy_and_delete",
    ),
    (
        "checkpoint_storage.type=shared_fs",
        {"checkpoint_storage": {"type": "shared_fs", "host_path": "/tmp", "storage_path": "ck"}},
        "acted",
        "tests/unit/harness/test_harness_storage.py::test_build_storage_from_config",
    ),
    (
        "checkpoint_storage.propagation",
        {
            "checkpoint_storage": {
                "type": "shared_fs",
                "host_path": "/tmp",
                "propagation": "rshared",
            }
        },
        "refused",
        "container",
    ),
    (
        "checkpoint_storage.container_path",
        {"checkpoint_storage": {"type": "shared_fs", "host_path": "/tmp", "container_path": "/c"}},
        "warned",
        "legacy",
    ),
    (
        "checkpoint_storage.checkpoint_path",
        {"checkpoint_storage": {"type": "shared_fs", "host_path": "/tmp", "checkpoint_path": "/c"}},
        "warned",
        "legacy",
    ),
    (
        "checkpoint_storage.tensorboard_path",
        {
            "checkpoint_storage": {
                "type": "shared_fs",
                "host_path": "/tmp",
                "tensorboard_path": "/c",
            }
        },
        "warned",
        "legacy",
    ),
    (
        "checkpoint_storage.type=directory",
        {"checkpoint_storage": {"type": "directory", "container_path": "/tmp/ck"}},
        "acted",
        "tests/unit/harness/test_harness_storage.py::test_build_storage_from_config",
    ),
    (
        "checkpoint_storage.type=s3",
        {"checkpoint_storage": {"type": "s3", "bucket": "b"}},
        "acted",
        "tests/integration/test_object_storage_e2e.py::test_checkpoints_in_object_store",
    ),
    (
        "checkpoint_storage.type=gcs",
        {"checkpoint_storage": {"type": "gcs", "bucket": "b"}},
        "acted",
        "tests/integration/test_object_storage_e2e.py::test_checkpoints_in_object_store",
    ),
    (
        "checkpoint_storage.type=azure",
        {
            "checkpoint_storage": {
                "type": "azure",
                "container": "c",
                "account_url": "http://127.0.0.1:1/a",
            }
        },
        "acted",
        "tests/integration/test_object_storage_e2e.py::test_checkpoints_in_object_store",
    ),
    # -- resources (§1.4)
    (
        "resources.slots_per_trial",
        {"resources": {"slots_per_trial": 1}},
        "acted",
        "tests/unit/master/test_api.py::test_distributed_allocation_spans_agents_and_fails_together",
    ),
    (
        "resources.resource_pool",
        {"resources": {"resource_pool": "default"}},
        "acted",
        "tests/unit/master/test_api.py::test_agent_and_slot_switches_and_pools",
    ),
    (
        "resources.priority",
        {"resources": {"priority": 10}},
        "acted",
        "tests/unit/master/test_api.py::test_agent_and_slot_switches_and_pools",
    ),
    (
        "resources.weight",
        {"resources": {"weight": 2}},
        "acted",
        "tests/unit/scheduler/test_scheduler_fair_share.py",
    ),
    (
        "resources.max_slots",
        {"resources": {"max_slots": 2}},
        "acted",
        "tests/unit/master/test_api.py::test_agent_and_slot_switches_and_pools",
    ),
    (
        "resources.shm_size",
        {"resources": {"shm_size": "4G"}},
        "acted",
        "tests/unit/agent/test_process_runtime.py::test_fields_a_process_cannot_honour_are_warned_about",
    ),
    (
        "resources.devices",
        {"resources": {"devices": ["/dev/x:/dev/x"]}},
        "acted",
        "tests/unit/agent/test_container_runtime.py::test_docker_run_command_line_is_exact",
    ),
    (
        "resources.is_single_node",
        {"resources": {"is_single_node": True}},
        "refused",
        "cannot honour",
    ),
    ("resources.slots", {"resources": {"slots": 2}}, "refused", "slots_per_trial"),
    ("resources.native_parallel", {"resources": {"native_parallel": True}}, "warned", "legacy"),
    ("resources.agent_label", {"resources": {"agent_label": "x"}}, "warned", "legacy"),
    # -- environment and bind_mounts (§1.4; issue 23 owns the container fields)
    (
        "environment.environment_variables",
        {"environment": {"environment_variables": ["A=1"]}},
        "acted",
        "here::test_environment_variables_reach_the_task",
    ),
    (
        "environment.image",
        {"environment": {"image": "img"}},
        "acted",
        "tests/unit/master/test_environments.py::test_images_are_placed_only_on_container_agents",
    ),
    (
        "environment.force_pull_image",
        {"environment": {"force_pull_image": True}},
        "acted",
        "tests/unit/agent/test_container_runtime.py::test_docker_lifecycle_pull_start_kill_cleanup",
    ),
    (
        "environment.registry_auth",
        {"environment": {"registry_auth": {"username": "u"}}},
        "acted",
        "tests/unit/agent/test_container_runtime.py::test_podman_pull_uses_an_auth_file_and_failures_are_reported",
    ),
    (
        "environment.add_capabilities",
        {"environment": {"add_capabilities": ["X"]}},
        "acted",
        "tests/unit/agent/test_container_runtime.py::test_docker_run_command_line_is_exact",
    ),
    (
        "environment.drop_capabilities",
        {"environment": {"drop_capabilities": ["X"]}},
        "acted",
        "tests/unit/agent/test_container_runtime.py::test_docker_run_command_line_is_exact",
    ),
    ("environment.pod_spec", {"environment": {"pod_spec": {"spec": {}}}}, "refused", "Kubernetes"),
    ("environment.ports", {"environment": {"ports": {"p": 8000}}}, "refused", "not exposed"),
    (
        "environment.proxy_ports",
        {"environment": {"proxy_ports": [{"proxy_port": 8000}]}},
        "refused",
        "proxy",
    ),
    (
        "bind_mounts",
        {"bind_mounts": [{"host_path": "/a", "container_path": "/b"}]},
        "acted",
        "tests/unit/agent/test_process_runtime.py::test_bind_mount_is_visible_read_only_and_private",
    ),
    # -- optimizations and profiling (§1.5)
    (
        "optimizations.aggregation_frequency",
        {"optimizations": {"aggregation_frequency": 2}},
        "warned",
        "deprecated",
    ),
    (
        "optimizations.average_aggregated_gradients",
        {"optimizations": {"average_aggregated_gradients": False}},
        "warned",
        "deprecated",
    ),
    (
        "optimizations.average_training_metrics",
        {"optimizations": {"average_training_metrics": False}},
        "warned",
        "ignores",
    ),
    (
        "optimizations.gradient_compression",
        {"optimizations": {"gradient_compression": True}},
        "warned",
        "ignores",
    ),
    (
        "optimizations.mixed_precision",
        {"optimizations": {"mixed_precision": "O1"}},
        "warned",
        "ignores",
    ),
    (
        "optimizations.tensor_fusion_threshold",
        {"optimizations": {"tensor_fusion_threshold": 32}},
        "warned",
        "ignores",
    ),
    (
        "optimizations.tensor_fusion_cycle_time",
        {"optimizations": {"tensor_fusion_cycle_time": 2}},
        "warned",
        "ignores",
    ),
    (
        "optimizations.auto_tune_tensor_fusion",
        {"optimizations": {"auto_tune_tensor_fusion": True}},
        "warned",
        "ignores",
    ),
    (
        "optimizations.grad_updates_size_file",
        {"optimizations": {"grad_updates_size_file": "f"}},
        "warned",
        "ignores",
    ),
    (
        "profiling.enabled",
        {"profiling": {"enabled": True}},
        "acted",
        "tests/integration/test_profiling.py::test_profiled_trial_shows_system_metrics",
    ),
    (
        "profiling.begin_on_batch",
        {"profiling": {"begin_on_batch": 3}},
        "acted",
        "tests/unit/core_api/test_profiler.py::test_profiling_begin_and_end_batches_bound_the_timed_batches",
    ),
    (
        "profiling.end_after_batch",
        {"profiling": {"end_after_batch": 9}},
        "acted",
        "tests/unit/core_api/test_profiler.py::test_profiling_begin_and_end_batches_bound_the_timed_batches",
    ),
    (
        "profiling.sync_timings",
        {"profiling": {"sync_timings": False}},
        "acted",
        "tests/unit/core_api/test_profiler.py::test_context_takes_the_profiling_section_of_the_config",
    ),
]


def _merge(base: dict, patch: dict) -> dict:
    out = dict(base)
    for key, value in patch.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


@pytest.fixture(scope="module")
def master(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("master")
    app = create_app(MasterConfig(data_dir=str(tmp), port=18080), run_loop=False)
    with TestClient(app) as client:
        sign_in(client)
        yield client, app.state.ctx


def _create(client, config: dict):
    files = {"context": ("context.tar.gz", model_def_tarball(), "application/gzip")}
    return client.post(
        "/api/v1/experiments",
        data={"config": yaml.safe_dump(config), "activate": "false"},
        files=files,
    )


def _path(field: str) -> str:
    return field.split("=")[0].split(".<")[0]


@pytest.mark.parametrize(
    ("field", "patch", "outcome", "expect"), FIELDS, ids=[f[0] for f in FIELDS]
)
def test_field(master, field, patch, outcome, expect):
    client, _ = master
    r = _create(client, _merge(BASE, patch))
    path = _path(field)
    if outcome == "refused":
        assert r.status_code == 400, r.text
        errors = r.json()["errors"]
        hit = [
            e
            for e in errors
            if e["field"] == path
            or path.startswith(e["field"] + ".")
            or e["field"].startswith(path)
        ]
        assert hit, errors
        assert any(expect in e["message"] for e in hit), errors
        return
    assert r.status_code == 201, r.text
    warnings = r.json()["warnings"]
    mine = [w for w in warnings if w.split(":")[0] == path]
    if outcome == "warned":
        assert mine and expect in mine[0], warnings
        return
    assert outcome == "acted"
    assert not mine, warnings
    where, _, name = expect.partition("::")
    if where == "here":
        assert name in globals(), f"no test {name} in this file"
        return
    source = (ROOT / where).read_text()
    assert not name or re.search(rf"^def {name}\(", source, re.M), f"{expect} does not exist"


def test_every_rule_has_a_row_and_every_row_a_known_outcome():
    rows = {_path(f) for f, _, _, _ in FIELDS}
    missing = [r.path for r in FIELD_RULES if r.path not in rows]
    assert not missing, f"FIELD_RULES entries without a row here: {missing}"
    assert {o for _, _, o, _ in FIELDS} == {"acted", "refused", "warned"}
    by_path = {r.path: r.kind for r in FIELD_RULES}
    for field, _, outcome, _ in FIELDS:
        if _path(field) in by_path:
            assert by_path[_path(field)] == outcome, field


def test_name_description_labels_are_kept(master):
    client, _ = master
    config = _merge(BASE, {"name": "nm", "description": "dsc", "labels": ["a", "b"]})
    exp = _create(client, config).json()["experiment"]
    got = client.get(f"/api/v1/experiments/{exp['id']}").json()["experiment"]
    assert got["name"] == "nm" and got["description"] == "dsc"
    assert got["config"]["labels"] == ["a", "b"]


def test_environment_variables_reach_the_task(master):
    client, ctx = master
    config = _merge(BASE, {"environment": {"environment_variables": ["MY_VAR=42"]}})
    exp = _create(client, config).json()["experiment"]
    client.post(f"/api/v1/experiments/{exp['id']}/activate")
    client.post("/api/v1/agents", json={"id": "env-agent", "slots": [{"id": "c0", "type": "cpu"}]})
    loop.schedule_pass(ctx)
    starts = client.post("/api/v1/agents/env-agent/heartbeat", json={"running": []}).json()
    spec = next(s for s in starts["start"] if s["experiment_id"] == exp["id"])
    assert spec["env"]["MY_VAR"] == "42"
    client.post(f"/api/v1/experiments/{exp['id']}/kill")


def test_debug_turns_on_debug_logging(tmp_path):
    import logging

    from dauntless.core import Context, LocalBackend, TrialInfo
    from dauntless.storage import DirectoryStorageManager

    logger = logging.getLogger("dauntless")
    before = logger.level
    try:
        info = TrialInfo(
            trial_id=1,
            experiment_id=1,
            trial_seed=0,
            hparams={},
            config=_merge(BASE, {"debug": True}),
        )
        Context(
            info,
            backend=LocalBackend([1]),
            storage=DirectoryStorageManager(str(tmp_path)),
        )
        assert logger.level == logging.DEBUG
    finally:
        logger.setLevel(before)
