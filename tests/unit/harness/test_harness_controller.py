"""The training loop against the in-memory LocalBackend: periods, checkpoints, resume."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from harness_toy_trial import RECORDS, ToyTrial, make_dataset, toy_config, toy_info

import dauntless
from dauntless.config import parse_experiment_config
from dauntless.core import Context, DistributedContext, LocalBackend, SearcherAnswer
from dauntless.pytorch import PyTorchTrial, PyTorchTrialContext, Reducer
from dauntless.pytorch._controller import RunResult, _TrialController
from dauntless.pytorch._settings import LoopSettings
from dauntless.pytorch._state import STATE_KEYS, seed_all
from dauntless.storage import DirectoryStorageManager

HERE = Path(__file__).resolve().parent


def run_toy(
    storage,
    lengths,
    *,
    trial_cls=ToyTrial,
    backend=None,
    latest=None,
    **overrides: Any,
):
    """Build and run a ToyTrial the way the harness does; returns (result, backend, trial)."""
    config = toy_config(str(storage), **overrides)
    steps = 0
    if latest is not None:
        steps = json.loads((storage / latest / "metadata.json").read_text())["steps_completed"]
    info = toy_info(config, latest_checkpoint=latest, steps_completed=steps)
    seed_all(info.trial_seed)
    context = PyTorchTrialContext(info)
    trial = trial_cls(context)
    backend = backend or LocalBackend(lengths)
    core = Context(
        info,
        backend=backend,
        storage=DirectoryStorageManager(storage),
        searcher_poll_interval=0.0,
    )
    result = _TrialController(trial, context, core, code_dir=HERE).run()
    return result, backend, trial


def steps(reports):
    return [r.steps_completed for r in reports]


def test_one_training_report_per_period_with_averaged_values(tmp_path):
    result, backend, _ = run_toy(tmp_path, [12, 20])
    assert result is RunResult.COMPLETED
    training = backend.metrics("training")
    # scheduling_unit 5: every 5 batches, plus the end of each operation (12).
    assert steps(training) == [5, 10, 12, 15, 20]
    assert [len(r.batch_metrics) for r in training] == [5, 5, 2, 3, 5]
    # batch_idx is reported per batch, so its period average is known exactly.
    assert [r.metrics["batch_idx"] for r in training] == [2.0, 7.0, 10.5, 13.0, 17.0]
    for r in training:
        losses = [b["loss"] for b in r.batch_metrics]
        assert r.metrics["loss"] == pytest.approx(sum(losses) / len(losses))
        assert r.metrics["batches"] == r.steps_completed
        assert r.metrics["epochs"] == r.steps_completed // (RECORDS // 8)  # completed ones
    # Progress goes out at most every 10 seconds, and when the trial is done.
    assert backend.progress == pytest.approx([5 / 20, 20 / 20])


def test_validates_every_period_and_at_each_operation_end(tmp_path):
    _, backend, _ = run_toy(tmp_path, [12, 20])
    validation = backend.metrics("validation")
    assert steps(validation) == [10, 12, 20]
    by_step = {r.steps_completed: r.metrics for r in validation}
    assert backend.completed_operations == [
        (12, by_step[12]["validation_loss"]),
        (20, by_step[20]["validation_loss"]),
    ]
    assert by_step[20]["batches"] == 20 and by_step[20]["epochs"] == 2  # of 2.5 trained
    # Training improves this easy regression.
    assert by_step[20]["validation_loss"] < by_step[10]["validation_loss"]


def test_validation_is_the_record_weighted_mean_over_batches(tmp_path):
    # 64 validation records in batches of 24, 24, 16: the weighted mean of per-batch
    # means is the mean over all records.
    _, backend, trial = run_toy(tmp_path, [20])
    x, y = make_dataset(1).tensors
    trial.model.eval()
    with torch.no_grad():
        expected = torch.nn.functional.mse_loss(trial.model(x), y).item()
    final = backend.metrics("validation")[-1].metrics["validation_loss"]
    assert final == pytest.approx(expected, rel=1e-6)


def test_periodic_checkpoints_and_a_final_one_at_close(tmp_path):
    _, backend, _ = run_toy(
        tmp_path, [20], checkpoint_policy="none", min_checkpoint_period={"batches": 4}
    )
    assert [c.steps_completed for c in backend.checkpoints] == [4, 8, 12, 16, 20]
    _, backend, _ = run_toy(tmp_path / "b", [12, 20], checkpoint_policy="none")
    assert [c.steps_completed for c in backend.checkpoints] == [20]


@pytest.mark.parametrize("policy", ["all", "best"])
def test_checkpoint_policy_after_validations(tmp_path, policy):
    _, backend, _ = run_toy(
        tmp_path,
        [4, 8, 12, 16, 20],
        checkpoint_policy=policy,
        min_validation_period={"batches": 0},
    )
    validation = backend.metrics("validation")
    assert steps(validation) == [4, 8, 12, 16, 20]
    if policy == "all":
        expected = [4, 8, 12, 16, 20]
    else:
        best, expected = float("inf"), []
        for r in validation:
            if r.metrics["validation_loss"] < best:
                best = r.metrics["validation_loss"]
                expected.append(r.steps_completed)
        if expected[-1] != 20:
            expected.append(20)  # un-checkpointed progress is saved when the trial closes
    assert [c.steps_completed for c in backend.checkpoints] == expected


def test_checkpoint_has_the_documented_layout_and_loads(tmp_path):
    _, backend, trial = run_toy(tmp_path, [20], checkpoint_policy="none")
    (ckpt,) = backend.checkpoints
    directory = tmp_path / ckpt.uuid
    assert sorted(p.name for p in directory.iterdir()) == [
        "code",
        "load_data.json",
        "metadata.json",
        "state-dict.pth",
    ]
    files = {
        p.relative_to(directory).as_posix(): p.stat().st_size
        for p in directory.rglob("*")
        if p.is_file()
    }
    assert ckpt.resources == files
    # The model definition travels with the checkpoint (without byte-code caches).
    assert (directory / "code" / "harness_toy_trial.py").read_text() == (
        HERE / "harness_toy_trial.py"
    ).read_text()
    assert not any("__pycache__" in name for name in files)
    load_data = json.loads((directory / "load_data.json").read_text())
    assert load_data["trial_cls_spec"] == "harness_toy_trial:ToyTrial"
    assert load_data["trial_type"] == "PyTorchTrial" and load_data["is_trainer"] is False
    assert load_data["hparams"] == {"global_batch_size": 8, "lr": 0.01}
    assert load_data["experiment_config"]["name"] == "toy"
    state = torch.load(directory / "state-dict.pth", weights_only=True)
    assert set(state) == set(STATE_KEYS)
    assert state["trial_state"]["batches_trained"] == 20
    assert state["trial_state"]["epochs_trained"] == 2
    assert state["trial_state"]["trial_id"] == 3
    assert state["callbacks"] == {}
    assert set(state["rng_state"]) >= {"cpu_rng_state", "np_rng_state", "random_rng_state"}
    (model_sd,) = state["models_state_dict"]
    for name, tensor in trial.model.state_dict().items():
        assert torch.equal(model_sd[name], tensor)
    assert len(state["optimizers_state_dict"]) == 1
    assert state["lr_schedulers_state_dict"][0]["last_epoch"] == 2
    meta = json.loads((directory / "metadata.json").read_text())
    assert meta == ckpt.metadata
    assert meta["steps_completed"] == 20 and meta["format"] == "pickle"
    assert meta["framework"] == f"torch-{torch.__version__}"
    assert meta["dauntless_version"] == dauntless.__version__
    assert (meta["experiment_id"], meta["trial_id"]) == (2, 3)
    assert meta["hparams"] == {"global_batch_size": 8, "lr": 0.01}


def _assert_same_state(a: ToyTrial, b: ToyTrial) -> None:
    for (name, ta), (_, tb) in zip(
        a.model.state_dict().items(), b.model.state_dict().items(), strict=True
    ):
        assert torch.equal(ta, tb), f"parameter {name} differs"
    sa, sb = a.optimizer.state_dict()["state"], b.optimizer.state_dict()["state"]
    for key in sa:
        assert torch.equal(sa[key]["momentum_buffer"], sb[key]["momentum_buffer"])
    assert a.scheduler.state_dict() == b.scheduler.state_dict()


def test_resume_after_preemption_matches_an_uninterrupted_run(tmp_path):
    _, straight, reference = run_toy(tmp_path / "a", [20])

    backend = LocalBackend([20])

    class PreemptedToy(ToyTrial):
        def train_batch(self, batch, epoch_idx, batch_idx):
            if batch_idx == 6:
                backend.request_preemption()
            return super().train_batch(batch, epoch_idx, batch_idx)

    result, _, _ = run_toy(tmp_path / "b", [20], trial_cls=PreemptedToy, backend=backend)
    assert result is RunResult.PREEMPTED
    # The signal is seen right after the batch in progress (batch 7): checkpoint, stop.
    (ckpt,) = backend.checkpoints
    assert ckpt.steps_completed == 7 and backend.completed_operations == []
    assert steps(backend.metrics("training")) == [5]

    result, resumed_backend, resumed = run_toy(tmp_path / "b", [20], latest=ckpt.uuid)
    assert result is RunResult.COMPLETED
    _assert_same_state(reference, resumed)
    # It continued at batch 7 and saw exactly the batches the uninterrupted run saw; the
    # period 6..10 was carried in the checkpoint, so the reports are the same too.
    assert steps(resumed_backend.metrics("training")) == [10, 15, 20]
    assert [(r.metrics, r.batch_metrics) for r in resumed_backend.metrics("training")] == [
        (r.metrics, r.batch_metrics) for r in straight.metrics("training")[1:]
    ]
    assert (
        resumed_backend.metrics("validation")[-1].metrics
        == straight.metrics("validation")[-1].metrics
    )


def test_resume_from_a_mid_period_checkpoint_after_a_crash(tmp_path):
    _, _, reference = run_toy(tmp_path / "a", [20], min_checkpoint_period={"batches": 4})

    class CrashingToy(ToyTrial):
        def train_batch(self, batch, epoch_idx, batch_idx):
            if batch_idx == 9:
                raise RuntimeError("agent lost")
            return super().train_batch(batch, epoch_idx, batch_idx)

    backend = LocalBackend([20])
    with pytest.raises(RuntimeError, match="agent lost"):
        run_toy(
            tmp_path / "b",
            [20],
            trial_cls=CrashingToy,
            backend=backend,
            min_checkpoint_period={"batches": 4},
        )
    latest = backend.checkpoints[-1]
    assert latest.steps_completed == 8
    _, _, resumed = run_toy(
        tmp_path / "b", [20], latest=latest.uuid, min_checkpoint_period={"batches": 4}
    )
    assert resumed.context.get_initial_batch() == 8
    _assert_same_state(reference, resumed)


def test_stop_requested_by_the_trial_checkpoints_and_stops(tmp_path):
    class StoppingToy(ToyTrial):
        def train_batch(self, batch, epoch_idx, batch_idx):
            if batch_idx == 2:
                self.context.set_stop_requested(True)
            return super().train_batch(batch, epoch_idx, batch_idx)

    result, backend, _ = run_toy(tmp_path, [20], trial_cls=StoppingToy)
    assert result is RunResult.PREEMPTED
    assert [c.steps_completed for c in backend.checkpoints] == [3]


def test_preemption_right_after_completing_an_operation(tmp_path):
    backend = LocalBackend([10, 20])
    original = backend.complete_operation

    def complete_then_preempt(*args):
        original(*args)
        backend.request_preemption()

    backend.complete_operation = complete_then_preempt
    result, _, _ = run_toy(tmp_path, None, backend=backend)
    assert result is RunResult.PREEMPTED
    assert backend.completed_operations[0][0] == 10 and len(backend.completed_operations) == 1
    assert [c.steps_completed for c in backend.checkpoints] == [10]


def test_preemption_while_waiting_for_the_next_operation(tmp_path):
    class WaitingSearcher(LocalBackend):
        """After the first operation the searcher has nothing new, then preempts."""

        def __init__(self):
            super().__init__([10])
            self.waits = 0

        def get_searcher_operation(self, trial_id):
            if not self.completed_operations:
                return super().get_searcher_operation(trial_id)
            self.waits += 1
            if self.waits == 3:
                self.request_preemption()
            return SearcherAnswer(length=None, completed=False)

    backend = WaitingSearcher()
    result, _, _ = run_toy(tmp_path, None, backend=backend, checkpoint_policy="none")
    assert result is RunResult.PREEMPTED
    assert backend.waits == 3
    assert [c.steps_completed for c in backend.checkpoints] == [10]


def test_missing_searcher_metric_names_the_metric_and_the_reported_keys(tmp_path):
    searcher = {"name": "single", "metric": "accuracy", "max_length": {"batches": 20}}
    with pytest.raises(ValueError, match=r"'accuracy'.*\['batches', 'epochs', 'validation_loss'\]"):
        run_toy(tmp_path, [20], searcher=searcher)


def test_invalid_hp_ends_the_trial_early(tmp_path):
    class PickyToy(ToyTrial):
        def train_batch(self, batch, epoch_idx, batch_idx):
            if batch_idx == 3:
                raise dauntless.InvalidHP("lr too large")
            return super().train_batch(batch, epoch_idx, batch_idx)

    result, backend, _ = run_toy(tmp_path, [20], trial_cls=PickyToy)
    assert result is RunResult.INVALID_HP
    assert backend.early_exits == ["INVALID_HP"]
    assert [c.steps_completed for c in backend.checkpoints] == [3]


def test_train_batch_may_return_a_loss_tensor_but_not_other_types(tmp_path):
    class TensorToy(ToyTrial):
        def train_batch(self, batch, epoch_idx, batch_idx):
            return super().train_batch(batch, epoch_idx, batch_idx)["loss"]

    _, backend, _ = run_toy(tmp_path, [5], trial_cls=TensorToy)
    assert set(backend.metrics("training")[0].metrics) == {"loss", "batches", "epochs"}

    class ListToy(ToyTrial):
        def train_batch(self, batch, epoch_idx, batch_idx):
            return [1.0]

    with pytest.raises(TypeError, match="dict of metrics or a loss tensor"):
        run_toy(tmp_path / "b", [5], trial_cls=ListToy)


def test_full_dataset_evaluation_and_per_metric_reducers(tmp_path):
    class FullToy(ToyTrial):
        evaluate_batch = PyTorchTrial.evaluate_batch

        def evaluate_full_dataset(self, data_loader):
            assert isinstance(data_loader, torch.utils.data.DataLoader)
            n = sum(len(batch[0]) for batch in data_loader)
            return {"validation_loss": 0.5, "records": n}

    _, backend, _ = run_toy(tmp_path, [5], trial_cls=FullToy)
    assert backend.metrics("validation")[-1].metrics["records"] == RECORDS

    class SumToy(ToyTrial):
        def evaluate_batch(self, batch, batch_idx):
            return {"validation_loss": 1.0, "records": len(batch[0]), "first": batch_idx}

        def evaluation_reducer(self):
            return {"validation_loss": Reducer.AVG, "records": Reducer.SUM, "first": Reducer.MIN}

    _, backend, _ = run_toy(tmp_path / "b", [5], trial_cls=SumToy)
    metrics = backend.metrics("validation")[-1].metrics
    assert (metrics["records"], metrics["first"], metrics["validation_loss"]) == (RECORDS, 0, 1.0)


def test_controller_rejects_unusable_trials(tmp_path):
    config = toy_config(str(tmp_path))
    info = toy_info(config)
    core = Context(info, backend=LocalBackend([5]), storage=DirectoryStorageManager(tmp_path))

    class NoOptimizer(ToyTrial):
        def __init__(self, context):
            self.context = context
            context.wrap_model(torch.nn.Linear(4, 1))

    context = PyTorchTrialContext(info)
    with pytest.raises(ValueError, match="wrap at least one model"):
        _TrialController(NoOptimizer(context), context, core)

    context = PyTorchTrialContext(info, distributed=DistributedContext(rank=0, size=2))
    with pytest.raises(RuntimeError, match="needs a torch.distributed process group"):
        ToyTrial(context)

    class BothEvaluations(ToyTrial):
        def evaluate_full_dataset(self, data_loader):
            return {"validation_loss": 0.0}

    context = PyTorchTrialContext(info)
    with pytest.raises(ValueError, match="exactly one of evaluate_batch and evaluate_full"):
        _TrialController(BothEvaluations(context), context, core)

    class TorchLoaderToy(ToyTrial):
        def build_training_data_loader(self):
            return torch.utils.data.DataLoader(make_dataset(0), batch_size=8)

    context = PyTorchTrialContext(info)
    with pytest.raises(ValueError, match="disable_dataset_reproducibility_checks"):
        _TrialController(TorchLoaderToy(context), context, core).run()


def test_loop_settings_convert_epochs_and_records_to_batches():
    config = parse_experiment_config(
        toy_config(
            "/tmp",
            records_per_epoch=100,
            min_validation_period={"epochs": 2},
            min_checkpoint_period={"records": 50},
            searcher={"name": "single", "metric": "m", "max_length": {"epochs": 3}},
            perform_initial_validation=True,
        )
    )
    s = LoopSettings.from_config(config, global_batch_size=8)
    assert (s.validation_period, s.checkpoint_period, s.max_length) == (25, 6, 37)
    assert (s.reporting_period, s.searcher_metric, s.initial_validation) == (5, "m", True)
    with pytest.raises(ValueError, match="checkpoint_policy"):
        LoopSettings(checkpoint_policy="sometimes")  # type: ignore[arg-type]
