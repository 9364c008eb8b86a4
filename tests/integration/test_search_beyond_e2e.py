"""Issue 35 end to end: a TPE, an NSGA-II, a PBT and a custom (in-master) search each
complete on the digits example, on one local cluster whose master is SIGKILLed once
while all four are mid-search, and each ends with the trials an uninterrupted search
would have made.

"Uninterrupted" is checked against the same searcher code driven in-process
(``dauntless.searcher.simulate``) with the same experiment seed and the metrics the
cluster's trials reported. That is an honest equivalent of a second, uninterrupted
cluster run: every search runs one trial at a time (``max_concurrent_trials: 1``; PBT's
round decisions do not depend on the order of a round's reports), so the searcher sees
the same events in the same order either way, and digits training on CPU gives the same
metrics for the same hyperparameters and trial seed (tests/integration/
test_master_restart_e2e.py). A restart that lost, repeated or reordered a sampler
observation would change a later proposal, whose metric the cluster never reported: the
simulation then fails to find it (or makes other trials).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import time
from pathlib import Path

import pytest

from dauntless.config import parse_experiment_config
from dauntless.searcher import simulate

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]
METHODS = REPO / "tests" / "unit" / "searcher" / "search_methods.py"

COMMON = """
entrypoint: model_def:DigitsTrial
data: {validation_fraction: 0.2, split_seed: 0}
records_per_epoch: 1438
scheduling_unit: 5
max_restarts: 0
"""
HPARAMS = """
hyperparameters:
  global_batch_size: 32
  lr: {type: log, base: 10, minval: -3.0, maxval: -1.5}
  hidden_size: {type: int, minval: 16, maxval: 64}
  dropout: 0.0
  optimizer: adam
"""
CONFIGS = {
    "tpe": f"""name: e2e-tpe
{COMMON}{HPARAMS}
searcher:
  name: tpe
  metric: accuracy
  smaller_is_better: false
  max_trials: 4
  max_concurrent_trials: 1
  max_length: {{batches: 8}}
  sampler_options: {{n_startup_trials: 2}}
reproducibility: {{experiment_seed: 11}}
""",
    "nsgaii": f"""name: e2e-nsgaii
{COMMON}{HPARAMS}
searcher:
  name: nsgaii
  metrics: [{{name: accuracy, smaller_is_better: false}}, {{name: validation_loss}}]
  max_trials: 3
  max_concurrent_trials: 1
  max_length: {{batches: 8}}
  sampler_options: {{population_size: 2}}
reproducibility: {{experiment_seed: 12}}
""",
    "pbt": f"""name: e2e-pbt
{COMMON}
# Clones load their parents' weights: only hyperparameters that keep the model's shapes
# may vary (hidden_size is constant here).
hyperparameters:
  global_batch_size: 32
  lr: {{type: log, base: 10, minval: -3.0, maxval: -1.5}}
  hidden_size: 32
  dropout: {{type: double, minval: 0.0, maxval: 0.3}}
  optimizer: adam
searcher:
  name: pbt
  metric: accuracy
  smaller_is_better: false
  population_size: 2
  num_rounds: 2
  length_per_round: {{batches: 6}}
  replace_function: {{truncate_fraction: 0.5}}
  explore_function: {{resample_probability: 0.2, perturb_factor: 0.2}}
reproducibility: {{experiment_seed: 13}}
""",
    "custom": f"""name: e2e-custom
{COMMON}
hyperparameters:
  global_batch_size: 32
searcher:
  name: custom
  metric: accuracy
  smaller_is_better: false
  method: search_methods:SeededRandom
reproducibility: {{experiment_seed: 14}}
""",
}


@pytest.fixture(scope="module")
def context_dir(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("digits_search")
    shutil.copy(REPO / "examples" / "digits" / "model_def.py", d / "model_def.py")
    shutil.copy(METHODS, d / "search_methods.py")
    for name, text in CONFIGS.items():
        (d / f"{name}.yaml").write_text(text)
    return d


def _create(cluster, context_dir: Path, name: str) -> int:
    out = cluster.det("experiment", "create", str(context_dir / f"{name}.yaml"), str(context_dir))
    match = re.search(r"Created experiment (\d+)", out.stdout)
    assert match, out.stdout
    return int(match.group(1))


def _completed_trials(cluster, exp_ids) -> int:
    return sum(
        t["state"] == "COMPLETED"
        for e in exp_ids
        for t in cluster.api(f"/experiments/{e}")["trials"]
    )


def _seeded_random():
    """The custom search method class, loaded from its file (as the master loads it)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("e2e_search_methods", METHODS)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.SeededRandom


def _key(hparams: dict, batches: int) -> str:
    return json.dumps([hparams, batches], sort_keys=True)


def _reported(cluster, trials) -> dict[str, dict]:
    """(hparams, batches) -> the validation metrics the cluster's trial reported there."""
    out = {}
    for t in trials:
        for m in cluster.api(f"/trials/{t['id']}/metrics", group="validation")["metrics"]:
            out[_key(t["hparams"], m["total_batches"])] = m["values"]
    return out


def _uninterrupted(config_text: str, seed: int, reported: dict[str, dict], method=None):
    config = parse_experiment_config(config_text)

    def objective(hparams, batches, _trial_seed):
        values = reported[_key(hparams, batches)]  # KeyError: a trial the cluster never ran
        return {"accuracy": values["accuracy"], "validation_loss": values["validation_loss"]}

    return simulate(config, objective, seed, method=method)


def test_searches_survive_a_master_sigkill(cluster_factory, tmp_path, context_dir):
    config = tmp_path / "master.yaml"
    config.write_text("custom_searchers: {in_master: all}\n")
    cluster = cluster_factory(f"sqlite:///{tmp_path}/master.db")
    cluster.master_args = ["--config-file", str(config)]
    cluster.start_master()
    cluster.start_agent(slots=4)
    exp_ids = {name: _create(cluster, context_dir, name) for name in CONFIGS}
    ids = tuple(exp_ids.values())

    # SIGKILL the master once all four searches have results and none has ended.
    until = time.time() + cluster.deadline(180)
    while _completed_trials(cluster, ids) < 4:
        assert time.time() < until, cluster.dump_logs(ids)
        time.sleep(0.2)
    states = [cluster.api(f"/experiments/{e}")["experiment"]["state"] for e in ids]
    # All four are mid-search here on a quiet machine; on a loaded one the short PBT
    # search may be over already (its final check below still holds, its restart is
    # then not exercised).
    assert states.count("ACTIVE") >= 3 and "ERROR" not in states, states
    assert cluster.master is not None
    os.kill(cluster.master.pid, signal.SIGKILL)
    cluster.master.wait(timeout=30)
    time.sleep(0.5)
    cluster.start_master()

    for name, exp_id in exp_ids.items():
        body = cluster.wait_experiment(exp_id, timeout=240)
        assert body["experiment"]["state"] == "COMPLETED", cluster.dump_logs(exp_id)
        trials = sorted(body["trials"], key=lambda t: t["id"])
        assert all(t["state"] == "COMPLETED" for t in trials), trials
        method = _seeded_random() if name == "custom" else None
        seed = body["experiment"]["seed"]
        sim = _uninterrupted(CONFIGS[name], seed, _reported(cluster, trials), method)
        assert [t.hparams for t in sim.trials] == [t["hparams"] for t in trials], name
        assert [t.seed for t in sim.trials] == [t["seed"] for t in trials], name

    pbt = sorted(cluster.api(f"/experiments/{exp_ids['pbt']}")["trials"], key=lambda t: t["id"])
    clones = [t for t in pbt if t["parent_id"] is not None]
    assert len(clones) == 1 and all(c["warm_start_checkpoint"] for c in clones)
    out = cluster.det("experiment", "describe", str(exp_ids["pbt"])).stdout
    assert "Lineage" in out, out
    out = cluster.det("experiment", "describe", str(exp_ids["nsgaii"])).stdout
    assert re.search(r"Pareto front \(\d+ of 3 trials\)", out), out
