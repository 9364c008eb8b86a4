"""The digits example trains to its target accuracy in-process, without a master.

How fast it trains is a speed target, measured in benchmarks/ (``harness_overhead.py``
times the digits model through the harness, ``per_batch_python_cost.py`` its per-batch
cost), not asserted here: this test must hold on a loaded machine.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from dauntless.config import parse_experiment_config
from dauntless.core import Context, LocalBackend, TrialInfo
from dauntless.exec.harness import load_trial_class
from dauntless.pytorch import PyTorchTrialContext
from dauntless.pytorch._controller import RunResult, _TrialController
from dauntless.pytorch._settings import LoopSettings
from dauntless.pytorch._state import seed_all
from dauntless.storage import DirectoryStorageManager

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "digits"


def test_digits_example_reaches_its_accuracy(tmp_path):
    raw = yaml.safe_load((EXAMPLE / "legacy-const.yaml").read_text())
    raw["checkpoint_storage"] = {"type": "directory", "container_path": str(tmp_path)}
    config = parse_experiment_config(raw)
    assert config.is_trial_class() and config.searcher.metric == "accuracy"
    hparams = {k: v.val for k, v in config.hyperparameters.items()}
    info = TrialInfo(
        trial_id=1, experiment_id=1, trial_seed=20240601, hparams=hparams, config=config.to_json()
    )

    seed_all(info.trial_seed)
    trial_cls = load_trial_class(str(config.entrypoint), str(EXAMPLE))
    context = PyTorchTrialContext(info)
    trial = trial_cls(context)
    # records_per_epoch in legacy-const.yaml is the size of the training split.
    assert len(trial.train_set) == config.records_per_epoch
    assert len(trial.train_set) + len(trial.val_set) == 1797

    settings = LoopSettings.from_config(config, context.get_global_batch_size())
    backend = LocalBackend([settings.max_length])
    core = Context(info, backend=backend, storage=DirectoryStorageManager(tmp_path))
    assert _TrialController(trial, context, core, settings).run() is RunResult.COMPLETED

    validation = backend.metrics("validation")
    epochs = config.searcher.max_length.epochs
    assert len(validation) == epochs + 1  # every epoch, plus the operation's end
    ((length, metric),) = backend.completed_operations
    assert length == settings.max_length == 1438 * epochs // 32
    assert metric == validation[-1].metrics["accuracy"] >= 0.95, validation[-1].metrics
    assert validation[-1].metrics["validation_loss"] < validation[0].metrics["validation_loss"]
    assert backend.checkpoints[-1].steps_completed == length
