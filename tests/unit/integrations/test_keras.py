"""``dauntless.integrations.keras.DeterminedCallback`` on Keras 3's torch backend, in
process over the in-memory backend: metrics, checkpoints, preemption at an epoch's end,
and exact resume (weights and optimizer) equal to an uninterrupted run."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

os.environ.setdefault("KERAS_BACKEND", "torch")
keras = pytest.importorskip("keras", reason="the keras extra is not installed")

from dauntless.integrations.keras import DeterminedCallback  # noqa: E402

SEARCHER = {"name": "single", "metric": "loss"}

# Keras's h5 writer converts torch-backed variables with np.asarray(copy=False), which
# NumPy 2 warns about (Keras's code, not ours).
pytestmark = pytest.mark.filterwarnings(
    "ignore:__array__ implementation doesn't accept a copy keyword:DeprecationWarning"
)


def _data() -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(96, 8)).astype("float32")
    y = (x[:, 0] + x[:, 1] > 0).astype("int64")
    return x[:64], y[:64], x[64:], y[64:]


def _fit(ctx, epochs: int, checkpoint: str | None = None, **kwargs) -> keras.Model:
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [keras.Input((8,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(2)]
    )
    model.compile(
        optimizer=keras.optimizers.Adam(0.01),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    x, y, xv, yv = _data()
    cb = DeterminedCallback(ctx, checkpoint=checkpoint, continue_id="t1", **kwargs)
    model.fit(
        x,
        y,
        batch_size=16,
        epochs=epochs,
        shuffle=False,
        validation_data=(xv, yv),
        callbacks=[cb],
        verbose=0,
    )
    return model


def _equal(a: keras.Model, b: keras.Model) -> None:
    for wa, wb in zip(a.get_weights(), b.get_weights(), strict=True):
        np.testing.assert_array_equal(wa, wb)


def test_reports_checkpoints_and_resumes_exactly_after_preemption(make_context, tmp_path):
    ctx, backend = make_context(SEARCHER)
    full = _fit(ctx, epochs=3, train_metrics_report_period=2)
    assert [r.steps_completed for r in backend.metrics("validation")] == [4, 8, 12]
    val = backend.metrics("validation")[-1].metrics
    assert {"loss", "accuracy", "batches", "epochs"} <= set(val) and val["epochs"] == 3
    assert [r.steps_completed for r in backend.metrics("training")] == [2, 4, 6, 8, 10, 12]
    assert [c.steps_completed for c in backend.checkpoints] == [4, 8, 12]
    assert {"model_checkpoint.weights.h5", "optimizer.npz", "det_state.json"} <= set(
        backend.checkpoints[-1].resources
    )

    # Preempted: stops at the end of epoch 1 with a checkpoint of 4 batches.
    ctx2, backend2 = make_context(SEARCHER)
    backend2.request_preemption()
    _fit(ctx2, epochs=3)
    assert [c.steps_completed for c in backend2.checkpoints] == [4]
    uuid = backend2.checkpoints[-1].uuid
    state = json.loads((tmp_path / "ckpts" / uuid / "det_state.json").read_text())
    assert state == {"continue_id": "t1", "epoch": 0, "steps_completed": 4}

    # Resumed: epochs 2 and 3 only, ending where the uninterrupted run ended.
    ctx3, backend3 = make_context(SEARCHER)
    resumed = _fit(ctx3, epochs=3, checkpoint=uuid)
    assert [r.steps_completed for r in backend3.metrics("validation")] == [8, 12]
    _equal(resumed, full)


def test_other_continue_id_only_warm_starts(make_context, tmp_path):
    ctx, backend = make_context(SEARCHER)
    _fit(ctx, epochs=1)
    uuid = backend.checkpoints[-1].uuid
    ctx2, backend2 = make_context(SEARCHER)
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [keras.Input((8,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(2)]
    )
    model.compile(
        optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    )
    x, y, _, _ = _data()
    cb = DeterminedCallback(ctx2, checkpoint=uuid, continue_id="another")
    model.fit(x, y, batch_size=16, epochs=1, shuffle=False, callbacks=[cb], verbose=0)
    assert [c.steps_completed for c in backend2.checkpoints] == [4]  # from epoch 0 again


def test_refuses_bad_arguments_and_missing_searcher_metric(make_context):
    ctx, _ = make_context({"name": "single", "metric": "val_f1"})
    with pytest.raises(ValueError, match="train_metrics_report_period"):
        DeterminedCallback(ctx, None, 1, train_metrics_report_period=0)
    with pytest.raises(ValueError, match="checkpoint_epochs"):
        DeterminedCallback(ctx, None, 1, checkpoint_epochs=-1)
    with pytest.raises(TypeError, match="core_context"):
        DeterminedCallback(object(), None, 1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="val_f1"):
        _fit(ctx, epochs=1)


def test_checkpoint_files_load_into_a_fresh_model(make_context, tmp_path):
    ctx, backend = make_context(SEARCHER)
    model = _fit(ctx, epochs=1)
    path = Path(tmp_path / "ckpts" / backend.checkpoints[-1].uuid)
    fresh = keras.Sequential(
        [keras.Input((8,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(2)]
    )
    fresh.load_weights(path / "model_checkpoint.weights.h5")
    _equal(fresh, model)


def test_several_slots_on_the_torch_backend_are_warned_about(tmp_path, caplog):
    """Keras's torch backend cannot train data-parallel: ``resources.slots_per_trial``
    above 1 is named in a warning; 1 slot warns nothing."""
    from dauntless import core
    from dauntless.storage import DirectoryStorageManager

    for slots, warned in ((2, True), (1, False)):
        trial = core.TrialInfo(
            trial_id=1,
            experiment_id=1,
            trial_seed=0,
            hparams={},
            config={"searcher": SEARCHER, "resources": {"slots_per_trial": slots}},
        )
        ctx = core.Context(
            trial, backend=core.LocalBackend([1]), storage=DirectoryStorageManager(str(tmp_path))
        )
        caplog.clear()
        with caplog.at_level("WARNING", logger="dauntless.integrations.keras"):
            DeterminedCallback(ctx, checkpoint=None, continue_id=1)
        ctx.close()
        assert ("resources.slots_per_trial is 2" in caplog.text) is warned, caplog.text
