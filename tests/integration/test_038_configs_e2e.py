"""End to end: Determined 0.38-style configs on a real local cluster.

No ``searcher.max_length``: the trial's own code decides how long it trains; ASHA with
``time_metric``/``max_time`` on ``epochs`` and on a user metric stops trials from their
reported validation metrics through the preemption path. Three Core API experiments and
one Trainer experiment run side by side on one agent with four slots and must complete;
``det experiment continue`` and ``det experiment fork`` act on the finished one.
"""

from __future__ import annotations

import re
import textwrap
import time

import pytest

pytestmark = pytest.mark.integration

# A 0.38 Core API script: its own loop, its own length; validation metrics carry the
# time metrics ASHA may use (epochs, and a user metric "samples_seen"); it stops when the
# master says so (preemption path) and resumes from its checkpoint.
CORE_SCRIPT = textwrap.dedent(
    """
    import json
    import time

    import dauntless
    from dauntless import core

    BATCHES_PER_EPOCH = 4

    info = dauntless.get_cluster_info()
    hp = info.trial.hparams
    total = int(hp["epochs"]) * BATCHES_PER_EPOCH
    with core.init() as ctx:
        batches, w = 0, 0.0
        if info.latest_checkpoint:
            with ctx.checkpoint.restore_path(info.latest_checkpoint) as path:
                state = json.loads((path / "state.json").read_text())
            batches, w = state["batches"], state["w"]

        def save():
            with ctx.checkpoint.store_path({"steps_completed": batches}) as (path, _):
                (path / "state.json").write_text(json.dumps({"batches": batches, "w": w}))

        while batches < total:
            w += float(hp["lr"])
            batches += 1
            time.sleep(0.05)
            if batches % BATCHES_PER_EPOCH == 0:
                ctx.train.report_validation_metrics(
                    batches,
                    {
                        "loss": 1.0 / (1.0 + w),
                        "epochs": batches // BATCHES_PER_EPOCH,
                        "samples_seen": batches * 10,
                    },
                )
            if ctx.preempt.should_preempt():
                save()
                raise SystemExit(0)
        save()
    """
)

# A 0.38 Trainer script: fit(max_length=...) decides the length, no searcher.max_length.
TRAINER_SCRIPT = textwrap.dedent(
    """
    import torch

    import dauntless
    from dauntless import pytorch as det_torch


    class Trial(det_torch.PyTorchTrial):
        def __init__(self, context):
            self.context = context
            self.model = context.wrap_model(torch.nn.Linear(1, 1))
            self.opt = context.wrap_optimizer(torch.optim.SGD(self.model.parameters(), lr=0.1))

        def _data(self):
            x = torch.ones(16, 1)
            return det_torch.DataLoader(torch.utils.data.TensorDataset(x, 2 * x), batch_size=4)

        def build_training_data_loader(self):
            return self._data()

        def build_validation_data_loader(self):
            return self._data()

        def train_batch(self, batch, epoch_idx, batch_idx):
            x, y = batch
            loss = torch.nn.functional.mse_loss(self.model(x), y)
            self.context.backward(loss)
            self.context.step_optimizer(self.opt)
            return {"loss": loss}

        def evaluate_batch(self, batch):
            x, y = batch
            return {"validation_loss": torch.nn.functional.mse_loss(self.model(x), y).item()}


    with det_torch.init() as context:
        det_torch.Trainer(Trial(context), context).fit(
            max_length=det_torch.Batch(12),
            validation_period=det_torch.Batch(6),
            latest_checkpoint=dauntless.get_cluster_info().latest_checkpoint,
        )
    """
)

SINGLE = """
name: core-038-single
entrypoint: python3 train.py
hyperparameters: {lr: 0.5, epochs: 3}
searcher: {name: single, metric: loss}
max_restarts: 0
"""

ASHA = """
name: core-038-asha-{time_metric}
entrypoint: python3 train.py
hyperparameters:
  epochs: 4
  lr: {{type: double, minval: 0.01, maxval: 2.0}}
searcher:
  name: adaptive_asha
  metric: loss
  max_trials: 4
  time_metric: {time_metric}
  max_time: {max_time}
  divisor: 2
  mode: aggressive
  max_rungs: 2
  max_concurrent_trials: 2
reproducibility: {{experiment_seed: 3}}
max_restarts: 0
"""

TRAINER = """
name: trainer-038
entrypoint: python3 train.py
hyperparameters: {global_batch_size: 4}
searcher: {name: single, metric: validation_loss}
max_restarts: 0
"""


def _create(cluster, tmp_path, name, config, script):
    ctx = tmp_path / name
    ctx.mkdir()
    (ctx / "train.py").write_text(script)
    (ctx / "config.yaml").write_text(config)
    out = cluster.det("experiment", "create", str(ctx / "config.yaml"), str(ctx))
    match = re.search(r"Created experiment (\d+)", out.stdout)
    assert match, out.stdout + out.stderr
    return int(match.group(1)), out.stderr


def test_038_configs_run_to_completion(cluster_factory, tmp_path):
    cluster = cluster_factory(f"sqlite:///{tmp_path}/master.db")
    cluster.start_master()
    cluster.start_agent(slots=4)
    t0 = time.time()
    single, warned = _create(cluster, tmp_path, "single", SINGLE, CORE_SCRIPT)
    # A clean 0.38 config gets no config warnings.
    assert not [line for line in warned.splitlines() if line.startswith("Warning: ")], warned
    epochs, _ = _create(
        cluster, tmp_path, "epochs", ASHA.format(time_metric="epochs", max_time=4), CORE_SCRIPT
    )
    user, _ = _create(
        cluster,
        tmp_path,
        "user",
        ASHA.format(time_metric="samples_seen", max_time=160),
        CORE_SCRIPT,
    )
    trainer, _ = _create(cluster, tmp_path, "trainer", TRAINER, TRAINER_SCRIPT)

    body = cluster.wait_experiment(single, timeout=240)
    assert body["experiment"]["state"] == "COMPLETED", cluster.dump_logs(single)
    (trial,) = body["trials"]
    assert trial["state"] == "COMPLETED" and trial["total_batches"] == 12  # its own length

    # det experiment continue: the one-trial experiment becomes ACTIVE and its trial
    # resumes from its checkpoint (at its own length already: it exits at once).
    out = cluster.det("experiment", "continue", str(single))
    assert f"Continued experiment {single}" in out.stdout
    body = cluster.wait_experiment(single, timeout=240)
    assert body["experiment"]["state"] == "COMPLETED", cluster.dump_logs(single)
    assert body["trials"][0]["total_batches"] == 12
    # det experiment fork: a new experiment from its config with an override, and its code.
    out = cluster.det(
        "experiment", "fork", str(single), "--config", "hyperparameters.lr=0.25", "--paused"
    )
    match = re.search(r"Created experiment (\d+) \(forked from (\d+)\)", out.stdout)
    assert match and int(match.group(2)) == single, out.stdout + out.stderr
    assert not [line for line in out.stderr.splitlines() if line.startswith("Warning: ")]
    forked = cluster.api(f"/experiments/{match.group(1)}")["experiment"]
    assert forked["state"] == "PAUSED"
    assert forked["config"]["hyperparameters"]["lr"] == {"type": "const", "val": 0.25}

    for exp_id in (epochs, user):
        body = cluster.wait_experiment(exp_id, timeout=240)
        assert body["experiment"]["state"] == "COMPLETED", cluster.dump_logs(exp_id)
        trials = body["trials"]
        assert len(trials) == 4 and all(t["state"] == "COMPLETED" for t in trials)
        # Rungs at 2 and 4 epochs (80 and 160 samples). A larger lr gives a lower loss:
        # the largest is the best at every rung and trains to the end; trials worse
        # than the rung's best so far are stopped early (before 16 batches).
        best = max(trials, key=lambda t: t["hparams"]["lr"])
        assert best["total_batches"] == 16, trials
        stopped = [t for t in trials if t["total_batches"] < 16]
        assert stopped and all(t["searcher_closed"] for t in stopped), trials

    body = cluster.wait_experiment(trainer, timeout=240)
    assert body["experiment"]["state"] == "COMPLETED", cluster.dump_logs(trainer)
    (trial,) = body["trials"]
    assert trial["total_batches"] == 12
    vals = cluster.api(f"/trials/{trial['id']}/metrics", group="validation")["metrics"]
    assert [m["total_batches"] for m in vals] == [6, 12]
    print(f"\nfour 0.38 experiments completed {time.time() - t0:.1f} s after creation")
