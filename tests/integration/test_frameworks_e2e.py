"""End to end: the framework integrations (issue 32) on one real local cluster.

One master and one agent of 2 slots serve every test of the module (the master declares
an agent lost after 3 s, for the agent-kill test). Each framework's example
(``examples/<framework>``) runs as a script entrypoint; the tests change only its
hyperparameters and resources. What is checked, per framework:

- metrics reach the master (``det trial describe``'s source, the trial's metrics);
- pause at a checkpoint and activate: training resumes where it stopped, and the final
  weights equal those of an uninterrupted run (the examples are deterministic on CPU);
- SIGKILL of the agent: the trial restarts from its latest checkpoint;
- ASHA stops trials early; a 2-slot data-parallel run (gloo) completes.

Keras has no 2-slot test: Keras 3's torch backend has no data-parallel training (its
``keras.distribution`` is JAX and TensorFlow only); the callback warns about
``slots_per_trial`` above 1 (tests/unit/integrations/test_keras.py).
"""

from __future__ import annotations

import importlib.util
import signal
import time
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]

pytest.importorskip("lightning", reason="the lightning extra is not installed")


@pytest.fixture(scope="module")
def cluster(module_cluster_factory, tmp_path_factory):
    """One master and one 2-slot agent for the whole module."""
    c = module_cluster_factory(f"sqlite:///{tmp_path_factory.mktemp('fw')}/master.db")
    c.start_master(agent_timeout=3.0)
    c.start_agent("fw-agent-0", slots=2)
    return c


def _create(cluster, tmp: Path, example: str, config: str, **changes) -> int:
    """Create an experiment of ``examples/<example>/<config>`` with ``changes`` applied
    (``hyperparameters`` merged, other sections replaced)."""
    body = yaml.safe_load((REPO / "examples" / example / config).read_text())
    for key, value in changes.items():
        if key == "hyperparameters":
            body["hyperparameters"].update(value)
        else:
            body[key] = value
    path = tmp / f"{example}-{config}"
    path.write_text(yaml.safe_dump(body))
    out = cluster.det("experiment", "create", str(path), str(REPO / "examples" / example)).stdout
    return int(out.split("Created experiment")[1].split()[0])


def _wait_batches(cluster, exp_id: int, at_least: int, timeout: float = 120) -> dict:
    deadline = time.time() + cluster.deadline(timeout)
    while time.time() < deadline:
        trials = cluster.api(f"/experiments/{exp_id}")["trials"]
        if trials and trials[0]["total_batches"] >= at_least:
            return trials[0]
        time.sleep(0.05)
    raise AssertionError(f"trial did not reach {at_least} batches:\n{cluster.dump_logs(exp_id)}")


def _completed(cluster, exp_id: int) -> dict:
    body = cluster.wait_experiment(exp_id)
    assert body["experiment"]["state"] == "COMPLETED", cluster.dump_logs(exp_id)
    return body


def _checkpoint(cluster, trial: dict) -> dict:
    return cluster.api(f"/checkpoints/{trial['latest_checkpoint']}")["checkpoint"]


def _identical(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), f"parameter {k} differs"


def _pause_once_started(cluster, exp_id: int) -> dict:
    """Pause the experiment (the CLI) as soon as its trial holds a slot, before its first
    checkpoint, and wait until the trial has checkpointed and exited; its trial.

    Pausing this early leaves the whole run as margin: the trial stops at its first
    preemption check (an epoch's end, a log step), wherever the pause lands."""
    deadline = time.time() + cluster.deadline(120)
    while not any(s["allocation_id"] for a in cluster.api("/agents")["agents"] for s in a["slots"]):
        assert time.time() < deadline, cluster.dump_logs(exp_id)
        time.sleep(0.05)
    return _pause_until_checkpointed(cluster, exp_id)


def _pause_until_checkpointed(cluster, exp_id: int) -> dict:
    """Pause the experiment (the CLI) and wait until its trial has checkpointed and
    exited (no slot holds an allocation); its trial."""
    cluster.det("experiment", "pause", str(exp_id))
    deadline = time.time() + cluster.deadline(60)
    while cluster.api(f"/experiments/{exp_id}")["experiment"]["state"] != "PAUSED":
        assert time.time() < deadline, cluster.dump_logs(exp_id)
        time.sleep(0.1)
    while True:  # the trial checkpoints and exits
        (trial,) = cluster.api(f"/experiments/{exp_id}")["trials"]
        if trial["latest_checkpoint"] and not any(
            s["allocation_id"] for a in cluster.api("/agents")["agents"] for s in a["slots"]
        ):
            return trial
        assert time.time() < deadline, cluster.dump_logs(exp_id)
        time.sleep(0.1)


def _kill_agent_after_first_checkpoint(cluster, exp_id: int, new_agent: str) -> None:
    """SIGKILL the agent once the trial has a checkpoint; start ``new_agent`` (2 slots)."""
    deadline = time.time() + cluster.deadline(120)
    while not cluster.api(f"/experiments/{exp_id}")["trials"][0]["latest_checkpoint"]:
        assert time.time() < deadline, cluster.dump_logs(exp_id)
        time.sleep(0.05)
    cluster.stop(cluster.agents["fw-agent-0"], sig=signal.SIGKILL)
    cluster.start_agent(new_agent, slots=2)
    cluster.agents["fw-agent-0"] = cluster.agents[new_agent]


def _asha_lengths(cluster, tmp: Path, example: str, metric: str) -> list[int]:
    """Run ``examples/<example>/adaptive.yaml`` as an aggressive ASHA of 4 trials over
    64 batches with rungs at 16 and 64 (2 at a time); the trials' lengths in batches,
    sorted, once every trial has COMPLETED."""
    exp_id = _create(
        cluster,
        tmp,
        example,
        "adaptive.yaml",
        searcher={
            "name": "adaptive_asha",
            "metric": metric,
            "smaller_is_better": True,
            "max_trials": 4,
            "max_time": 64,
            "time_metric": "batches",
            "divisor": 4,
            "max_rungs": 2,
            "mode": "aggressive",
            "max_concurrent_trials": 2,
        },
    )
    body = _completed(cluster, exp_id)
    lengths = sorted(t["total_batches"] for t in body["trials"])
    assert len(lengths) == 4 and all(t["state"] == "COMPLETED" for t in body["trials"])
    return lengths


def _training_batches_run_on(cluster, trial: dict, last: int) -> None:
    """The trial's training reports never repeat a batch count (no batch redone) and end
    at ``last``."""
    training = cluster.api(f"/trials/{trial['id']}/metrics", group="training")["metrics"]
    batches = [m["total_batches"] for m in training]
    assert batches == sorted(set(batches)) and batches[-1] == last, batches


# ---------------------------------------------------------------------- Lightning

LIGHTNING_LONG = {"max_steps": 600, "val_every": 200}


def _lightning_weights(cluster, trial: dict) -> tuple[dict[str, torch.Tensor], int]:
    ckpt = _checkpoint(cluster, trial)
    state = torch.load(
        Path(ckpt["storage_path"]) / "lightning.ckpt", map_location="cpu", weights_only=False
    )
    return state["state_dict"], state["global_step"]


@pytest.fixture(scope="module")
def lightning_baseline(cluster, tmp_path_factory):
    """The uninterrupted 600-batch run: its trial."""
    tmp = tmp_path_factory.mktemp("lightning-base")
    exp_id = _create(cluster, tmp, "lightning", "const.yaml", hyperparameters=LIGHTNING_LONG)
    (trial,) = _completed(cluster, exp_id)["trials"]
    return trial


def test_lightning_reports_metrics_and_checkpoints(cluster, lightning_baseline):
    trial = lightning_baseline
    assert trial["total_batches"] == 600
    validation = cluster.api(f"/trials/{trial['id']}/metrics", group="validation")["metrics"]
    assert [m["total_batches"] for m in validation] == [200, 400, 600]
    assert {"val_loss", "val_accuracy", "batches", "epochs"} <= set(validation[-1]["values"])
    assert validation[-1]["values"]["val_accuracy"] > 0.9
    training = cluster.api(f"/trials/{trial['id']}/metrics", group="training")["metrics"]
    assert [m["total_batches"] for m in training] == list(range(10, 601, 10))
    assert training[-1]["values"]["loss"] < training[0]["values"]["loss"]
    described = cluster.det("trial", "describe", str(trial["id"]), "--metrics").stdout
    assert "val_loss" in described
    ckpt = _checkpoint(cluster, trial)
    assert ckpt["total_batches"] == 600
    assert {"lightning.ckpt", "det_state.json", "metadata.json"} <= set(ckpt["resources"])
    assert _lightning_weights(cluster, trial)[1] == 600


def test_lightning_pause_activate_resumes_exactly(cluster, lightning_baseline, tmp_path):
    exp_id = _create(cluster, tmp_path, "lightning", "const.yaml", hyperparameters=LIGHTNING_LONG)
    _wait_batches(cluster, exp_id, 50)
    trial = _pause_until_checkpointed(cluster, exp_id)
    paused_at = _checkpoint(cluster, trial)["total_batches"]
    assert 50 <= paused_at < 600, "the pause came after the run ended: make it longer"
    cluster.det("experiment", "activate", str(exp_id))
    (trial,) = _completed(cluster, exp_id)["trials"]
    assert trial["restarts"] == 0
    weights, step = _lightning_weights(cluster, trial)
    assert step == 600
    _identical(weights, _lightning_weights(cluster, lightning_baseline)[0])


def test_lightning_agent_sigkill_resumes_from_latest_checkpoint(
    cluster, lightning_baseline, tmp_path
):
    exp_id = _create(cluster, tmp_path, "lightning", "const.yaml", hyperparameters=LIGHTNING_LONG)
    # After the first validation's checkpoint (batch 200), kill the agent.
    deadline = time.time() + cluster.deadline(120)
    while not cluster.api(f"/experiments/{exp_id}")["trials"][0]["latest_checkpoint"]:
        assert time.time() < deadline, cluster.dump_logs(exp_id)
        time.sleep(0.05)
    cluster.stop(cluster.agents["fw-agent-0"], sig=signal.SIGKILL)
    cluster.start_agent("fw-agent-1", slots=2)
    cluster.agents["fw-agent-0"] = cluster.agents["fw-agent-1"]
    (trial,) = _completed(cluster, exp_id)["trials"]
    assert trial["restarts"] == 1
    weights, step = _lightning_weights(cluster, trial)
    assert step == 600
    _identical(weights, _lightning_weights(cluster, lightning_baseline)[0])


def test_lightning_asha_stops_trials_early(cluster, tmp_path):
    lengths = _asha_lengths(cluster, tmp_path, "lightning", "val_loss")
    # The example validates at the rungs (every 64 / 4 = 16 batches) and the callback waits for
    # ASHA's decision on each validation: every trial ends at a rung, the first (16
    # batches) or the top (64), and at least one was stopped at the first.
    assert set(lengths) <= {16, 64} and lengths[0] == 16 and lengths[-1] == 64, lengths


def test_lightning_ddp_on_two_slots(cluster, tmp_path):
    exp_id = _create(
        cluster,
        tmp_path,
        "lightning",
        "const.yaml",
        hyperparameters={"max_steps": 60, "val_every": 30},
        resources={"slots_per_trial": 2},
    )
    (trial,) = _completed(cluster, exp_id)["trials"]
    assert trial["total_batches"] == 60
    validation = cluster.api(f"/trials/{trial['id']}/metrics", group="validation")["metrics"]
    assert [m["total_batches"] for m in validation] == [30, 60]
    logs = "\n".join(
        line["log"] for line in cluster.api(f"/trials/{trial['id']}/logs", limit=10000)["logs"]
    )
    assert "[rank=1]" in logs
    assert _lightning_weights(cluster, trial)[1] == 60


# ---------------------------------------------------------------------- Transformers


needs_transformers = pytest.mark.skipif(
    importlib.util.find_spec("transformers") is None,
    reason="the transformers extra is not installed",
)


@pytest.fixture(scope="module")
def transformers_baseline(cluster, tmp_path_factory):
    """The example's uninterrupted 60-batch run on one slot: its trial."""
    tmp = tmp_path_factory.mktemp("transformers-base")
    exp_id = _create(cluster, tmp, "transformers", "const.yaml")
    (trial,) = _completed(cluster, exp_id)["trials"]
    return trial


def _transformers_weights(cluster, trial: dict) -> tuple[dict[str, torch.Tensor], int]:
    """The model weights of the trial's latest checkpoint (Hugging Face's
    ``checkpoint-<step>/model.safetensors``) and its batches."""
    from safetensors.torch import load_file

    ckpt = _checkpoint(cluster, trial)
    step = ckpt["total_batches"]
    path = Path(ckpt["storage_path"]) / f"checkpoint-{step}" / "model.safetensors"
    return load_file(str(path)), step


@needs_transformers
def test_transformers_single_slot_and_ddp_on_two_slots(cluster, transformers_baseline, tmp_path):
    """The example on 1 slot and on 2 (gloo DDP through the platform's launcher): the
    Trainer's metrics reach the master under Hugging Face's names, and each save is a
    platform checkpoint holding ``checkpoint-<step>``."""
    two = _create(cluster, tmp_path, "transformers", "const.yaml", resources={"slots_per_trial": 2})
    (two_trial,) = _completed(cluster, two)["trials"]
    for trial, ranks in ((transformers_baseline, 1), (two_trial, 2)):
        assert trial["total_batches"] == 60
        validation = cluster.api(f"/trials/{trial['id']}/metrics", group="validation")["metrics"]
        assert [m["total_batches"] for m in validation] == [20, 40, 60]
        assert {"eval_loss", "eval_accuracy", "batches", "epochs"} <= set(validation[-1]["values"])
        training = cluster.api(f"/trials/{trial['id']}/metrics", group="training")["metrics"]
        assert [m["total_batches"] for m in training] == [10, 20, 30, 40, 50, 60]
        ckpt = _checkpoint(cluster, trial)
        assert ckpt["total_batches"] == 60
        assert "checkpoint-60/trainer_state.json" in ckpt["resources"]
        if ranks == 2:
            assert "checkpoint-60/rng_state_1.pth" in ckpt["resources"]
    described = cluster.det(
        "trial", "describe", str(transformers_baseline["id"]), "--metrics"
    ).stdout
    assert "eval_loss" in described


@needs_transformers
def test_transformers_pause_activate_resumes_exactly(cluster, transformers_baseline, tmp_path):
    """Paused, the Trainer saves at its next log step and exits; activated, Hugging Face's
    resume (model, optimizer, scheduler, RNG states, the data order with the trained
    batches skipped) ends with the uninterrupted run's weights: dropout draws from the
    restored RNG, so CPU training is deterministic here."""
    exp_id = _create(cluster, tmp_path, "transformers", "const.yaml")
    trial = _pause_once_started(cluster, exp_id)
    paused_at = _checkpoint(cluster, trial)["total_batches"]
    assert 10 <= paused_at < 60, "the pause came after the run ended"
    cluster.det("experiment", "activate", str(exp_id))
    (trial,) = _completed(cluster, exp_id)["trials"]
    assert trial["restarts"] == 0
    _training_batches_run_on(cluster, trial, 60)
    weights, step = _transformers_weights(cluster, trial)
    assert step == 60
    _identical(weights, _transformers_weights(cluster, transformers_baseline)[0])


@needs_transformers
def test_transformers_agent_sigkill_resumes_from_latest_checkpoint(
    cluster, transformers_baseline, tmp_path
):
    """SIGKILL of the agent after the first save (batch 20): the trial restarts on a new
    agent from its latest checkpoint and ends with the uninterrupted run's weights.

    The agents let an orphaned trial run on for 10 s, so the killed run often finishes
    its last save (batch 60) before the master restarts the trial: the restart then
    resumes from the last step, where Hugging Face trains one step more than
    ``max_steps``, and the callback must not report or upload it (61 here once)."""
    exp_id = _create(cluster, tmp_path, "transformers", "const.yaml")
    _kill_agent_after_first_checkpoint(cluster, exp_id, "fw-agent-3")
    (trial,) = _completed(cluster, exp_id)["trials"]
    assert trial["restarts"] == 1
    weights, step = _transformers_weights(cluster, trial)
    assert step == 60
    _identical(weights, _transformers_weights(cluster, transformers_baseline)[0])


@needs_transformers
def test_transformers_asha_stops_trials_early(cluster, tmp_path):
    """The example's adaptive.yaml (ASHA over lr, 64 batches, a rung at 16): a trial ASHA
    stops ends at the log or evaluation step after the decision, before 64; the best
    trains to 64."""
    exp_id = _create(cluster, tmp_path, "transformers", "adaptive.yaml")
    body = _completed(cluster, exp_id)
    lengths = sorted(t["total_batches"] for t in body["trials"])
    assert len(lengths) == 4 and all(t["state"] == "COMPLETED" for t in body["trials"])
    assert 16 <= lengths[0] < 64 and lengths[-1] == 64, lengths
    for trial in body["trials"]:
        validation = cluster.api(f"/trials/{trial['id']}/metrics", group="validation")["metrics"]
        assert validation[0]["total_batches"] == 16 and "eval_loss" in validation[0]["values"]


# ---------------------------------------------------------------------- Keras


@pytest.mark.skipif(
    importlib.util.find_spec("keras") is None, reason="the keras extra is not installed"
)
def test_keras_asha_stops_trials_early(cluster, tmp_path):
    """Keras's example under ASHA (time_metric epochs): every trial reports its epochs'
    metrics and checkpoints; the ones ASHA stops end at the 2-epoch rung."""
    exp_id = _create(cluster, tmp_path, "keras", "adaptive.yaml")
    body = _completed(cluster, exp_id)
    lengths = sorted(t["total_batches"] for t in body["trials"])
    per_epoch = 45  # 1,438 training images at 32 a batch
    # Every trial ends at a rung: the first (2 epochs), where the callback waited for
    # ASHA's decision on the epoch's validation, or the top (8 epochs).
    assert len(lengths) == 4 and lengths[-1] == 8 * per_epoch, lengths
    assert set(lengths) <= {2 * per_epoch, 8 * per_epoch} and lengths[0] == 2 * per_epoch, lengths
    trial = body["trials"][0]
    validation = cluster.api(f"/trials/{trial['id']}/metrics", group="validation")["metrics"]
    assert {"loss", "accuracy", "epochs", "batches"} <= set(validation[0]["values"])
    assert {"model_checkpoint.weights.h5", "optimizer.npz"} <= set(
        _checkpoint(cluster, trial)["resources"]
    )


KERAS_LONG = {"epochs": 12}
"""The Keras example for 12 epochs of 45 batches, a checkpoint after each."""

needs_keras = pytest.mark.skipif(
    importlib.util.find_spec("keras") is None, reason="the keras extra is not installed"
)


def _keras_state(cluster, trial: dict) -> tuple[dict[str, np.ndarray], int]:
    """Every array of the trial's latest checkpoint, the model's weights (Keras's
    ``.weights.h5``) and the optimizer's variables (``optimizer.npz``), by name; its
    batches."""
    import h5py

    ckpt = _checkpoint(cluster, trial)
    root = Path(ckpt["storage_path"])
    arrays: dict[str, np.ndarray] = {}
    with h5py.File(root / "model_checkpoint.weights.h5", "r") as f:
        f.visititems(
            lambda name, obj: (
                arrays.__setitem__(name, obj[()]) if isinstance(obj, h5py.Dataset) else None
            )
        )
    with np.load(root / "optimizer.npz") as stored:
        arrays.update({f"optimizer/{k}": stored[k] for k in stored.files})
    return arrays, ckpt["total_batches"]


def _keras_identical(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> None:
    assert a.keys() == b.keys() and len(a) > 2, sorted(a)
    for k in a:
        assert np.array_equal(a[k], b[k]), f"{k} differs"


@pytest.fixture(scope="module")
def keras_baseline(cluster, tmp_path_factory):
    """The Keras example's uninterrupted 12-epoch run: its trial."""
    tmp = tmp_path_factory.mktemp("keras-base")
    exp_id = _create(cluster, tmp, "keras", "const.yaml", hyperparameters=KERAS_LONG)
    (trial,) = _completed(cluster, exp_id)["trials"]
    assert trial["total_batches"] == 12 * 45
    return trial


@needs_keras
def test_keras_pause_activate_resumes_exactly(cluster, keras_baseline, tmp_path):
    """Paused, the callback checkpoints at the epoch's end (weights, optimizer, epoch)
    and stops; activated, it continues after that epoch with no batch redone and ends
    with the uninterrupted run's weights and optimizer state (the example feeds the
    epochs in a fixed order, so CPU training is deterministic)."""
    exp_id = _create(cluster, tmp_path, "keras", "const.yaml", hyperparameters=KERAS_LONG)
    trial = _pause_once_started(cluster, exp_id)
    paused_at = _checkpoint(cluster, trial)["total_batches"]
    assert paused_at % 45 == 0 and 45 <= paused_at < 12 * 45, paused_at
    cluster.det("experiment", "activate", str(exp_id))
    (trial,) = _completed(cluster, exp_id)["trials"]
    assert trial["restarts"] == 0
    _training_batches_run_on(cluster, trial, 12 * 45)
    state, step = _keras_state(cluster, trial)
    assert step == 12 * 45
    _keras_identical(state, _keras_state(cluster, keras_baseline)[0])


@needs_keras
def test_keras_agent_sigkill_resumes_from_latest_checkpoint(cluster, keras_baseline, tmp_path):
    """SIGKILL of the agent after the first epoch's checkpoint: the trial restarts on a
    new agent from its latest checkpoint and ends with the uninterrupted run's state (the
    orphaned run may finish its epochs within the agents' 10 s grace; the restart then
    continues after its last epoch, with nothing left to train)."""
    exp_id = _create(cluster, tmp_path, "keras", "const.yaml", hyperparameters=KERAS_LONG)
    _kill_agent_after_first_checkpoint(cluster, exp_id, "fw-agent-4")
    (trial,) = _completed(cluster, exp_id)["trials"]
    assert trial["restarts"] == 1
    state, step = _keras_state(cluster, trial)
    assert step == 12 * 45
    _keras_identical(state, _keras_state(cluster, keras_baseline)[0])


# ---------------------------------------------------------------------- DeepSpeed


@pytest.mark.skipif(
    importlib.util.find_spec("deepspeed") is None,
    reason="the deepspeed extra is not installed (pip install --no-build-isolation "
    "'dauntless[deepspeed]')",
)
def test_deepspeed_trial_zero2_on_two_slots(cluster, tmp_path):
    """The DeepSpeed example (a DeepSpeedTrial, ZeRO stage 2) on 2 slots: the harness
    starts one rank per slot, DeepSpeed joins their gloo group on its CPU accelerator,
    validations reach the master and the checkpoint holds DeepSpeed's own files."""
    exp_id = _create(
        cluster,
        tmp_path,
        "deepspeed",
        "const.yaml",
        hyperparameters={"zero_stage": 2, "micro_batch_size": 8},
        searcher={
            "name": "single",
            "metric": "validation_loss",
            "smaller_is_better": True,
            "max_length": {"batches": 40},
        },
        min_validation_period={"batches": 20},
        min_checkpoint_period={"batches": 40},
        resources={"slots_per_trial": 2},
    )
    (trial,) = _completed(cluster, exp_id)["trials"]
    assert trial["total_batches"] == 40
    validation = cluster.api(f"/trials/{trial['id']}/metrics", group="validation")["metrics"]
    assert [m["total_batches"] for m in validation] == [20, 40]
    assert {"validation_loss", "accuracy"} <= set(validation[-1]["values"])
    ckpt = _checkpoint(cluster, trial)
    assert ckpt["total_batches"] == 40
    files = set(ckpt["resources"])
    assert "state-dict.pth" in files and "model0/mp_rank_00_model_states.pt" in files, files
    # ZeRO stage 2 partitions the optimizer: one shard per rank.
    assert {f for f in files if "optim_states" in f} == {
        "model0/zero_pp_rank_0_mp_rank_00_optim_states.pt",
        "model0/zero_pp_rank_1_mp_rank_00_optim_states.pt",
    }, files
    logs = "\n".join(
        line["log"] for line in cluster.api(f"/trials/{trial['id']}/logs", limit=10000)["logs"]
    )
    assert "[rank=1]" in logs
    # The 2-rank ZeRO-2 checkpoint warm-starts a trial on 1 slot: its optimizer
    # partitions are for 2 ranks, and DeepSpeed's universal checkpoint carries Adam's
    # state only (the example trains with SGD and momentum), so the trial says why and
    # loads the module weights (an Adam checkpoint's optimizer state comes along:
    # tests/unit/integrations/test_deepspeed_universal.py). After 10 more batches the
    # validation loss is near the 2-slot run's last (0.94 at batch 40) and far below a
    # fresh model's after 20 batches (1.9).
    (tmp_path / "warm").mkdir()
    warm = _create(
        cluster,
        tmp_path / "warm",
        "deepspeed",
        "const.yaml",
        hyperparameters={"zero_stage": 2, "micro_batch_size": 8},
        searcher={
            "name": "single",
            "metric": "validation_loss",
            "smaller_is_better": True,
            "max_length": {"batches": 10},
            "source_checkpoint_uuid": trial["latest_checkpoint"],
        },
        min_validation_period={"batches": 10},
    )
    (warm_trial,) = _completed(cluster, warm)["trials"]
    validation = cluster.api(f"/trials/{warm_trial['id']}/metrics", group="validation")["metrics"]
    assert [m["total_batches"] for m in validation] == [10]
    assert validation[0]["values"]["validation_loss"] < 1.2, validation
    logs = "\n".join(
        line["log"] for line in cluster.api(f"/trials/{warm_trial['id']}/logs", limit=10000)["logs"]
    )
    assert "Adam-like optimizers only" in logs and "momentum_buffer" in logs, logs[-3000:]
    assert "loading the modules' weights only" in logs, logs[-3000:]


DEEPSPEED_LONG = {
    "hyperparameters": {"zero_stage": 2, "micro_batch_size": 16},
    "searcher": {
        "name": "single",
        "metric": "validation_loss",
        "smaller_is_better": True,
        "max_length": {"batches": 400},
    },
    "scheduling_unit": 10,
    # The same seed in every experiment: the same initial weights and data order.
    "reproducibility": {"experiment_seed": 7},
    "min_validation_period": {"batches": 100},
    "min_checkpoint_period": {"batches": 100},
}
"""The DeepSpeed example on one slot, ZeRO stage 2: 400 batches of 16 digits, a
validation and a checkpoint every 100, training metrics every 10 batches, a fixed seed."""

needs_deepspeed = pytest.mark.skipif(
    importlib.util.find_spec("deepspeed") is None,
    reason="the deepspeed extra is not installed (pip install --no-build-isolation "
    "'dauntless[deepspeed]')",
)


def _deepspeed_weights(cluster, trial: dict) -> tuple[dict[str, torch.Tensor], int]:
    """The module weights of the trial's latest checkpoint (DeepSpeed's own model states
    file of engine 0: ZeRO stages 1 and 2 keep whole parameters there) and its batches."""
    ckpt = _checkpoint(cluster, trial)
    state = torch.load(
        Path(ckpt["storage_path"]) / "model0" / "mp_rank_00_model_states.pt",
        map_location="cpu",
        weights_only=False,
    )
    return state["module"], ckpt["total_batches"]


@pytest.fixture(scope="module")
def deepspeed_baseline(cluster, tmp_path_factory):
    """The uninterrupted 400-batch DeepSpeed run: its trial."""
    tmp = tmp_path_factory.mktemp("deepspeed-base")
    exp_id = _create(cluster, tmp, "deepspeed", "const.yaml", **DEEPSPEED_LONG)
    (trial,) = _completed(cluster, exp_id)["trials"]
    assert trial["total_batches"] == 400
    return trial


@needs_deepspeed
def test_deepspeed_pause_activate_resumes_exactly(cluster, deepspeed_baseline, tmp_path):
    """Paused after its first training report, the DeepSpeedTrial checkpoints (DeepSpeed's
    ZeRO-2 files) and exits; activated, it resumes from that checkpoint with no batch
    redone (the training metrics' batch counts run on without a repeat) and ends with
    the weights of the uninterrupted run."""
    exp_id = _create(cluster, tmp_path, "deepspeed", "const.yaml", **DEEPSPEED_LONG)
    _wait_batches(cluster, exp_id, 10)
    trial = _pause_until_checkpointed(cluster, exp_id)
    paused_at = _checkpoint(cluster, trial)["total_batches"]
    assert 10 <= paused_at < 400, "the pause came after the run ended: make it longer"
    cluster.det("experiment", "activate", str(exp_id))
    (trial,) = _completed(cluster, exp_id)["trials"]
    assert trial["restarts"] == 0
    training = cluster.api(f"/trials/{trial['id']}/metrics", group="training")["metrics"]
    batches = [m["total_batches"] for m in training]
    assert batches == sorted(set(batches)) and batches[-1] == 400, batches
    weights, step = _deepspeed_weights(cluster, trial)
    assert step == 400
    _identical(weights, _deepspeed_weights(cluster, deepspeed_baseline)[0])


@needs_deepspeed
def test_deepspeed_agent_sigkill_resumes_from_latest_checkpoint(
    cluster, deepspeed_baseline, tmp_path
):
    """SIGKILL of the agent after the first checkpoint (batch 100): the trial restarts on a
    new agent from that checkpoint and ends with the uninterrupted run's weights."""
    exp_id = _create(cluster, tmp_path, "deepspeed", "const.yaml", **DEEPSPEED_LONG)
    deadline = time.time() + cluster.deadline(120)
    while not cluster.api(f"/experiments/{exp_id}")["trials"][0]["latest_checkpoint"]:
        assert time.time() < deadline, cluster.dump_logs(exp_id)
        time.sleep(0.05)
    cluster.stop(cluster.agents["fw-agent-0"], sig=signal.SIGKILL)
    cluster.start_agent("fw-agent-2", slots=2)
    cluster.agents["fw-agent-0"] = cluster.agents["fw-agent-2"]
    (trial,) = _completed(cluster, exp_id)["trials"]
    assert trial["restarts"] == 1
    weights, step = _deepspeed_weights(cluster, trial)
    assert step == 400
    _identical(weights, _deepspeed_weights(cluster, deepspeed_baseline)[0])


@needs_deepspeed
def test_deepspeed_asha_stops_trials_early(cluster, tmp_path):
    """The example's adaptive.yaml (ASHA over lr, hidden size and ZeRO stage 1-3) cut to
    64 batches (a rung at 16): the DeepSpeedTrial trains to each rung the searcher hands
    out, so every trial ends at a rung, and ASHA stops at least one at the first."""
    lengths = _asha_lengths(cluster, tmp_path, "deepspeed", "validation_loss")
    assert set(lengths) <= {16, 64} and lengths[0] == 16 and lengths[-1] == 64, lengths
