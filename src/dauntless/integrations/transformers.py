"""Hugging Face Transformers on the platform: :class:`DetCallback` (Determined 0.38's
``det.transformers.DetCallback``, same arguments and behaviour).

::

    with core.init(distributed=...) as core_context:
        det_callback = DetCallback(core_context, training_args)
        trainer = transformers.Trainer(..., args=training_args, callbacks=[det_callback])
        trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint)

- metrics: each ``on_log`` reports the logged values; names starting ``eval_`` are
  validation metrics, ``test_`` ones are not reported, the others are training metrics.
  ``epoch`` and names ending ``_runtime``, ``_per_second`` or ``_compilation_time`` are
  dropped, ``batches`` (``state.global_step``) and ``epochs`` (``state.epoch``) added;
  with ``filter_metrics`` only names containing one of its strings (and the searcher's
  metric and time metric) are kept. One report per step and kind.
- checkpoints: each Hugging Face save (``save_steps`` / ``save_strategy``) is uploaded
  to the platform's checkpoint storage as ``checkpoint-<global_step>/`` (model, optimizer,
  scheduler, trainer state and every rank's RNG state), with ``user_data`` as
  ``checkpoint-<step>/my_data.json``;
- resume: the constructor downloads the trial's latest checkpoint into
  ``<args.output_dir>/dauntless-<uuid>/`` and sets ``args.resume_from_checkpoint`` to the
  ``checkpoint-<step>`` inside (never to a save already in ``output_dir``: that may be
  another run's); Hugging Face's resume then skips the batches already trained (the
  data order is restored);
- preemption (pause, an ASHA stop) is checked at each ``on_log``: training stops after a
  save; at the last epoch's end a save (and, unless preempted, an evaluation) is forced
  when the step has none yet;
- a resume from a checkpoint of the last step (the trial saved its end, then lost its
  agent before it exited): Hugging Face's loop trains one more step before it checks
  ``max_steps``; that step is neither reported nor uploaded, so the trial ends with
  the checkpoint and metrics of its last step;
- the searcher: the trial's length is the script's (``--max_steps`` or
  ``--num_train_epochs``); the constructor refuses a config whose ``searcher.max_length``
  or ASHA ``max_time`` disagrees with it (ValueError naming both).

Multi-process runs: start the script with ``python3 -m dauntless.launch.torch_distributed
-- python3 train.py ...`` (the torchrun environment that ``transformers``/``accelerate``
read) and give ``core.init`` ``DistributedContext.from_torch_distributed()``.
"""

from __future__ import annotations

import json
import logging
import re
import shutil
from pathlib import Path
from typing import Any

import transformers
from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from dauntless import core

from ._common import Progress, float_metrics, searcher_config

logger = logging.getLogger("dauntless.integrations.transformers")

_DROPPED_SUFFIXES = ("_runtime", "_per_second", "_compilation_time")
_ASHA = ("adaptive_asha", "async_halving")
_CHECKPOINT_DIR = re.compile(r"^checkpoint-(\d+)$")


class DetCallback(TrainerCallback):
    """A ``transformers.TrainerCallback`` reporting to the platform.

    Every rank builds it (before ``trainer.train``) and adds it to its ``Trainer``.

    Args:
        core_context: the Core API context of this process.
        args: the ``TrainingArguments`` the ``Trainer`` uses; ``resume_from_checkpoint``
            is set on it when there is a checkpoint to resume from.
        filter_metrics: report only metrics whose names contain one of these strings
            (the searcher's metric and time metric always); None: all.
        user_data: a JSON-ready dict written into every checkpoint as ``my_data.json``.

    Raises:
        TypeError: for arguments of the wrong type.
        ValueError: if the experiment config's training length disagrees with ``args``
            (a legacy int ``searcher.max_length``, a ``max_length`` or ASHA ``max_time``
            other than ``args.max_steps`` / ``args.num_train_epochs``).
    """

    def __init__(
        self,
        core_context: core.Context,
        args: TrainingArguments,
        filter_metrics: list[str] | None = None,
        user_data: dict[str, Any] | None = None,
    ) -> None:
        super().__init__()
        if not isinstance(core_context, core.Context):
            raise TypeError(
                f"core_context must be a dauntless.core.Context, got {type(core_context).__name__}"
            )
        if not isinstance(args, TrainingArguments):
            raise TypeError(f"args must be TrainingArguments, got {type(args).__name__}")
        if user_data is not None and not isinstance(user_data, dict):
            raise TypeError(f"user_data must be a dict, got {type(user_data).__name__}")
        self.core_context = core_context
        self.args = args
        self.user_data = user_data
        searcher = searcher_config(core_context)
        self.searcher_metric: str | None = searcher.get("metric")
        self.time_metric: str | None = searcher.get("time_metric")
        self.filter_metrics = None
        if filter_metrics is not None:
            self.filter_metrics = [
                *filter_metrics,
                *(m for m in (self.searcher_metric, self.time_metric) if m),
            ]
        self._check_length(searcher, args)
        self._last_reported: dict[str, int] = {}
        self._last_saved: int | None = None
        self._last_evaluated: int | None = None
        self._preempted = False
        self._resumed_at_end = False
        self._progress = Progress(core_context)
        self._load_latest(args)

    # ------------------------------------------------------------------ set-up

    @staticmethod
    def _check_length(searcher: dict[str, Any], args: TrainingArguments) -> None:
        unit, length = (
            ("batches", int(args.max_steps))
            if args.max_steps and args.max_steps > 0
            else ("epochs", args.num_train_epochs)
        )
        max_length = searcher.get("max_length")
        if isinstance(max_length, int) and not isinstance(max_length, bool):
            raise ValueError(
                f"searcher.max_length is a bare int ({max_length}): it must name its unit, "
                f"e.g. max_length: {{{unit}: {length}}} to match the training arguments"
            )
        if isinstance(max_length, dict):
            if max_length.get(unit) != length:
                raise ValueError(
                    f"searcher.max_length {max_length} does not match the training length "
                    f"of the TrainingArguments ({unit}: {length}, from "
                    f"{'--max_steps' if unit == 'batches' else '--num_train_epochs'})"
                )
        if searcher.get("name") in _ASHA and searcher.get("time_metric") in ("batches", "epochs"):
            if searcher["time_metric"] != unit or searcher.get("max_time") != length:
                raise ValueError(
                    f"searcher.max_time {searcher.get('max_time')} "
                    f"({searcher['time_metric']}) does not match the training length of "
                    f"the TrainingArguments ({unit}: {length})"
                )

    def _load_latest(self, args: TrainingArguments) -> None:
        # The trial's latest checkpoint (the cluster info's ``latest_checkpoint``).
        latest = self.core_context.trial.latest_checkpoint
        if latest is None:
            return
        if getattr(args, "overwrite_output_dir", False):
            logger.warning("not resuming from checkpoint %s: overwrite_output_dir is set", latest)
            return
        # A directory of its own: output_dir may hold saves of another run with the same
        # name (a reused path), which must not be mistaken for this checkpoint's.
        out = Path(args.output_dir or "trainer_output") / f"dauntless-{latest}"
        self.core_context.checkpoint.download(
            latest, out, download_mode=core.DownloadMode.LocalWorkersShareDownload
        )
        steps = [
            int(m.group(1))
            for p in out.iterdir()
            if p.is_dir() and (m := _CHECKPOINT_DIR.match(p.name))
        ]
        if not steps:
            raise FileNotFoundError(
                f"checkpoint {latest} holds no checkpoint-<step> directory: it was not "
                "written by DetCallback"
            )
        args.resume_from_checkpoint = str(out / f"checkpoint-{max(steps)}")
        logger.info("resuming from %s (checkpoint %s)", args.resume_from_checkpoint, latest)

    def on_train_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        """Notice a resume from a checkpoint of the last step (see the module's notes)."""
        if state.max_steps and 0 < state.max_steps <= state.global_step:
            self._resumed_at_end = True
            logger.info(
                "the checkpoint is of the last step (%d of %d): Hugging Face trains one more "
                "step before it stops; that step is not reported or checkpointed",
                state.global_step,
                state.max_steps,
            )
            self._progress.report(1.0)

    # ------------------------------------------------------------------ metrics

    def on_log(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        logs: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        """Report the logged metrics, then check for preemption (every rank calls)."""
        if self._resumed_at_end:
            return
        if logs and self.core_context.distributed.is_chief:
            train, val = self._split(logs)
            step = state.global_step
            if train:
                self._report("training", step, train, state)
            if val:
                self._report("validation", step, val, state)
        if state.max_steps and state.max_steps > 0:
            self._progress.report(state.global_step / state.max_steps)
        if not self._preempted and self.core_context.preempt.should_preempt():
            logger.info("preempted at batch %d: saving and stopping", state.global_step)
            self._preempted = True
            control.should_training_stop = True
            control.should_save = True

    def _split(self, logs: dict[str, Any]) -> tuple[dict[str, float], dict[str, float]]:
        train: dict[str, float] = {}
        val: dict[str, float] = {}
        for name, value in float_metrics(logs).items():
            if name == "epoch" or name.endswith(_DROPPED_SUFFIXES) or name.startswith("test_"):
                continue
            if self.filter_metrics is not None and not any(f in name for f in self.filter_metrics):
                continue
            (val if name.startswith("eval_") else train)[name] = value
        return train, val

    def _report(self, kind: str, step: int, metrics: dict[str, float], state: TrainerState) -> None:
        if self._last_reported.get(kind) == step:
            return
        metrics.setdefault("batches", float(step))
        metrics.setdefault("epochs", float(state.epoch or 0.0))
        if kind == "validation":
            missing = [
                m for m in (self.searcher_metric, self.time_metric) if m and m not in metrics
            ]
            if missing:
                raise ValueError(
                    f"the evaluation metrics {sorted(metrics)} lack {missing} (the experiment "
                    "config's searcher.metric / time_metric; Hugging Face prefixes evaluation "
                    "metrics with eval_, e.g. eval_loss)"
                )
            self.core_context.train.report_validation_metrics(step, metrics)
        else:
            self.core_context.train.report_training_metrics(step, metrics)
        self._last_reported[kind] = step

    def on_evaluate(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        """Remember that this step was evaluated."""
        self._last_evaluated = state.global_step

    # ------------------------------------------------------------------ checkpoints

    def on_save(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        """Upload ``checkpoint-<global_step>`` to the platform (every rank calls)."""
        if self._resumed_at_end:
            return
        step = state.global_step
        source = Path(args.output_dir or "trainer_output") / f"checkpoint-{step}"
        dist = self.core_context.distributed
        if dist.size > 1:
            dist.allgather(None)  # every rank has written its part of the save
        if self.user_data is not None and dist.is_chief and source.is_dir():
            (source / "my_data.json").write_text(json.dumps(self.user_data))
        meta = {
            "steps_completed": step,
            "trial_id": self.core_context.trial.trial_id,
            "framework": f"transformers {transformers.__version__}",
        }
        with self.core_context.checkpoint.store_path(meta, shard=True) as (path, _):
            if dist.is_chief:
                if not source.is_dir():
                    raise FileNotFoundError(f"the Trainer saved no {source}")
                shutil.copytree(source, path / source.name)
        self._last_saved = step

    def on_epoch_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        """At the last epoch's end (or after a preemption): make sure the final step is
        saved, and evaluated unless preempted."""
        if self._resumed_at_end:
            return
        last_epoch = state.epoch is not None and state.epoch >= args.num_train_epochs
        done = (
            self._preempted
            or last_epoch
            or (state.max_steps > 0 and state.global_step >= state.max_steps)
        )
        if not done:
            return
        if self._last_saved != state.global_step:
            control.should_save = True
        if (
            not self._preempted
            and getattr(args, "eval_strategy", getattr(args, "evaluation_strategy", "no")) != "no"
            and self._last_evaluated != state.global_step
        ):
            control.should_evaluate = True
        if not self._preempted:
            self._progress.report(1.0)

    def on_train_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        """Log where training ended."""
        logger.info(
            "training %s at batch %d",
            "preempted" if self._preempted else "ended",
            state.global_step,
        )


def get_ds_config_path_from_args(args: list[str]) -> str | None:
    """The DeepSpeed config path of a ``--deepspeed PATH`` (or ``--deepspeed=PATH``)
    command-line argument, or None (Determined's helper of the same name).

    Args:
        args: the script's arguments (``sys.argv[1:]``).
    """
    for i, arg in enumerate(args):
        if arg == "--deepspeed" and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith("--deepspeed="):
            return arg.split("=", 1)[1]
    return None


__all__ = ["DetCallback", "get_ds_config_path_from_args"]
