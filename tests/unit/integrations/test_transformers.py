"""``dauntless.integrations.transformers.DetCallback`` with a real ``transformers.Trainer``
(a tiny BERT built from a config, random tokens) over the in-memory backend: the metric
mapping, checkpoint upload, preemption, exact resume through
``resume_from_checkpoint``, and the searcher-length checks."""

from __future__ import annotations

import json

import pytest
import torch

transformers = pytest.importorskip("transformers", reason="the transformers extra is not installed")

from dauntless.integrations.transformers import DetCallback, get_ds_config_path_from_args  # noqa: E402

SEARCHER = {"name": "single", "metric": "eval_loss"}


class Tokens(torch.utils.data.Dataset):
    def __init__(self, n: int, seed: int) -> None:
        g = torch.Generator().manual_seed(seed)
        self.ids = torch.randint(0, 16, (n, 8), generator=g)
        self.labels = (self.ids[:, 0] > 7).long()

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.ids[i], "labels": self.labels[i]}


def _args(out, max_steps: int = 6) -> transformers.TrainingArguments:
    return transformers.TrainingArguments(
        output_dir=str(out),
        max_steps=max_steps,
        per_device_train_batch_size=8,
        learning_rate=0.01,
        eval_strategy="steps",
        eval_steps=2,
        save_strategy="steps",
        save_steps=2,
        logging_steps=2,
        report_to="none",
        use_cpu=True,
        seed=0,
        disable_tqdm=True,
    )


def _train(ctx, out, **kwargs) -> tuple[transformers.Trainer, DetCallback]:
    args = _args(out)
    cb = DetCallback(ctx, args, **kwargs)
    torch.manual_seed(0)
    config = transformers.BertConfig(
        vocab_size=16,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=8,
        num_labels=2,
    )
    trainer = transformers.Trainer(
        model=transformers.BertForSequenceClassification(config),
        args=args,
        train_dataset=Tokens(40, 0),
        eval_dataset=Tokens(16, 1),
        callbacks=[cb],
    )
    trainer.train(resume_from_checkpoint=args.resume_from_checkpoint)
    return trainer, cb


def test_metrics_checkpoints_preemption_and_exact_resume(make_context, tmp_path):
    ctx, backend = make_context(SEARCHER)
    full, _ = _train(ctx, tmp_path / "full", user_data={"note": "x"})
    assert [r.steps_completed for r in backend.metrics("validation")] == [2, 4, 6]
    val = backend.metrics("validation")[-1].metrics
    assert "eval_loss" in val and val["batches"] == 6 and "eval_runtime" not in val
    training = backend.metrics("training")
    assert [r.steps_completed for r in training][:3] == [2, 4, 6]
    assert "loss" in training[0].metrics and "epoch" not in training[0].metrics
    assert [c.steps_completed for c in backend.checkpoints] == [2, 4, 6]
    resources = backend.checkpoints[-1].resources
    assert "checkpoint-6/trainer_state.json" in resources
    assert "checkpoint-6/my_data.json" in resources

    ctx2, backend2 = make_context(SEARCHER)
    backend2.request_preemption()
    _train(ctx2, tmp_path / "preempted")
    assert [c.steps_completed for c in backend2.checkpoints] == [2]

    ctx3, backend3 = make_context(SEARCHER, latest=backend2.checkpoints[-1].uuid)
    resumed, cb = _train(ctx3, tmp_path / "resumed")
    uuid = backend2.checkpoints[-1].uuid
    assert cb.args.resume_from_checkpoint == str(
        tmp_path / "resumed" / f"dauntless-{uuid}" / "checkpoint-2"
    )
    assert [c.steps_completed for c in backend3.checkpoints] == [4, 6]
    a, b = full.model.state_dict(), resumed.model.state_dict()
    for k in a:
        assert torch.equal(a[k], b[k]), k
    meta = json.loads(
        (tmp_path / "ckpts" / backend3.checkpoints[-1].uuid / "metadata.json").read_text()
    )
    assert meta["steps_completed"] == 6 and meta["trial_id"] == 1


def test_resume_from_the_last_step_reports_and_uploads_nothing(make_context, tmp_path):
    """A trial that saved its last step (6; 5 batches an epoch, so mid-epoch) and lost its
    agent before exiting resumes from that checkpoint: Hugging Face trains a 7th step
    before it checks max_steps, and the callback neither reports nor uploads it."""
    ctx, backend = make_context(SEARCHER)
    _train(ctx, tmp_path / "full")
    ctx2, backend2 = make_context(SEARCHER, latest=backend.checkpoints[-1].uuid)
    trainer, cb = _train(ctx2, tmp_path / "again")
    assert trainer.state.global_step == 7  # Hugging Face's extra step
    uuid = backend.checkpoints[-1].uuid
    assert cb.args.resume_from_checkpoint == str(
        tmp_path / "again" / f"dauntless-{uuid}" / "checkpoint-6"
    )
    assert backend2.checkpoints == []
    assert backend2.metrics("training") == [] and backend2.metrics("validation") == []


def test_resume_ignores_saves_of_another_run_in_output_dir(make_context, tmp_path):
    """``output_dir`` already holds a later save of another run (a reused path): the
    resume still starts from the trial's own checkpoint (step 2) and trains on to 6."""
    ctx, backend = make_context(SEARCHER)
    _train(ctx, tmp_path / "other")  # leaves checkpoint-2, -4, -6 in "other"
    ctx2, backend2 = make_context(SEARCHER)
    backend2.request_preemption()
    _train(ctx2, tmp_path / "preempted")
    ctx3, backend3 = make_context(SEARCHER, latest=backend2.checkpoints[-1].uuid)
    trainer, _ = _train(ctx3, tmp_path / "other")
    assert [c.steps_completed for c in backend3.checkpoints] == [4, 6]
    assert [r.steps_completed for r in backend3.metrics("validation")] == [4, 6]


def test_filter_metrics_keeps_the_searcher_metric(make_context, tmp_path):
    ctx, backend = make_context(SEARCHER)
    _train(ctx, tmp_path / "out", filter_metrics=["loss"])
    assert set(backend.metrics("validation")[-1].metrics) == {"eval_loss", "batches", "epochs"}


@pytest.mark.parametrize(
    "searcher, message",
    [
        ({"name": "single", "metric": "eval_loss", "max_length": 6}, "bare int"),
        ({"name": "single", "metric": "eval_loss", "max_length": {"batches": 7}}, "does not match"),
        (
            {
                "name": "adaptive_asha",
                "metric": "eval_loss",
                "time_metric": "batches",
                "max_time": 5,
            },
            "max_time 5",
        ),
    ],
)
def test_length_disagreeing_with_the_config_is_refused(make_context, tmp_path, searcher, message):
    ctx, _ = make_context(searcher)
    with pytest.raises(ValueError, match=message):
        DetCallback(ctx, _args(tmp_path))


def test_missing_searcher_metric_is_named(make_context, tmp_path):
    ctx, _ = make_context({"name": "single", "metric": "eval_f1"})
    with pytest.raises(ValueError, match="eval_f1"):
        _train(ctx, tmp_path / "out")


def test_deepspeed_config_path_from_args():
    assert get_ds_config_path_from_args(["--deepspeed", "ds.json", "--x"]) == "ds.json"
    assert get_ds_config_path_from_args(["--deepspeed=a.json"]) == "a.json"
    assert get_ds_config_path_from_args(["--lr", "1"]) is None
