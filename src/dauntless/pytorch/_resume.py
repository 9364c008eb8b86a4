"""Saving and restoring a PyTorchTrial's whole training state (exact resume).

A checkpoint's ``state-dict.pth`` holds, besides the wrapped objects' state dicts and
the callbacks' states, what an exact resume needs (ARCHITECTURE.md, "Trial execution"):
the Python, numpy and torch RNG states and a ``trial_state`` with the batch counters,
the shuffle seed, the training metrics of the reporting period in progress and the
last validation. The data position is the batch count: the training stream is rebuilt
with the same seed and skips the batches already trained.

With several processes only the chief writes the checkpoint; it gathers every rank's RNG
state and pending training metrics into ``trial_state["ranks"]`` first, so that a run
with the same number of ranks resumes each rank exactly. The weights are the unwrapped
modules' (no DDP ``module.`` prefix), and ``pending_metrics`` holds the period's metrics
averaged across ranks: a checkpoint resumes with any number of ranks (with another
number, every rank takes the chief's RNG state).

Models wrapped with FSDP make sharded checkpoints (:mod:`._sharded`): the models' and
optimizers' state goes through ``torch.distributed.checkpoint`` (every rank writes its
shards), ``state-dict.pth`` keeps the rest; they restore on any number of ranks.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

import dauntless
from dauntless.storage import FileSystemStorageManager

from ._callback import PyTorchCallback
from ._checkpoint import (
    CODE_DIR,
    STATE_FILE,
    find_state_file,
    load_model_weights,
    load_state,
    model_states,
    optimizer_states,
    scheduler_states,
    unwrap,
    write_load_data,
)
from ._reducer import average_across_ranks, window_scalars
from ._sharded import is_sharded, load_sharded, save_sharded
from ._state import get_rng_state, set_rng_state

if TYPE_CHECKING:
    from dauntless.core import Context

    from ._code import CodeSnapshot
    from ._context import PyTorchTrialContext
    from ._settings import LoopSettings
    from ._trial import PyTorchTrial

logger = logging.getLogger("dauntless.pytorch")


class _StateMixin:
    """Checkpoint writing and reading of :class:`~._controller._TrialController`."""

    trial: PyTorchTrial
    context: PyTorchTrialContext
    core: Context
    settings: LoopSettings
    callbacks: dict[str, PyTorchCallback]
    is_trainer: bool
    batches_trained: int
    best_validation: float | None
    shuffle_seed: int
    _epoch_len: int
    _window: list[dict[str, Any]]
    _last_validation: tuple[int, dict[str, Any]] | None
    _last_checkpoint_batches: int | None
    _code: CodeSnapshot | None

    def _call(self, hook: str, *args: Any) -> None:
        raise NotImplementedError  # abstract

    def _report_training(self, target: int) -> None:
        raise NotImplementedError  # abstract

    # ------------------------------------------------------------------ reading

    def _storage_dirs(self) -> tuple[Path, ...]:
        storage = self.core.checkpoint.storage
        if isinstance(storage, FileSystemStorageManager):
            return (storage.base_path,)
        return ()

    def _read_checkpoint(self, uuid: str) -> dict[str, Any]:
        """Load a checkpoint's state and take its counters if it is this trial's."""
        ctx = self.context
        with self.core.checkpoint.restore_path(uuid) as path:
            state = load_state(find_state_file(path), map_location=ctx.device)
            trial_state = state.get("trial_state")
            same = (
                isinstance(trial_state, dict)
                and trial_state.get("trial_id") == self.core.trial.trial_id
                and isinstance(trial_state.get("batches_trained"), int)
            )
            sharded = state.get("sharded")
            if isinstance(sharded, dict):
                # Loaded here, while the path exists; every rank reads its shards.
                _check_counts("models", int(sharded.get("models", 0)), len(ctx.models))
                saved_optimizers = int(sharded.get("optimizers", 0))
                if same:
                    _check_counts("optimizers", saved_optimizers, len(ctx.optimizers))
                self._load_shards(
                    Path(path),
                    same=same,
                    with_optimizers=0 < saved_optimizers == len(ctx.optimizers),
                )
                state["_sharded_loaded"] = True
        logger.info("restored checkpoint %s from %s", uuid, self.core.checkpoint.storage)
        if not state.get("_sharded_loaded"):
            _check_counts("models", len(model_states(state)), len(ctx.models))
        state["_same_trial"] = same
        if same and isinstance(trial_state, dict):
            self.batches_trained = int(trial_state["batches_trained"])
            self.best_validation = trial_state.get("best_validation")
            self._last_checkpoint_batches = self.batches_trained
            seed = trial_state.get("shuffle_seed")
            if isinstance(seed, int):
                self.shuffle_seed = seed
            last = trial_state.get("last_validation")
            if isinstance(last, dict) and isinstance(last.get("metrics"), dict):
                self._last_validation = (int(last["batches"]), dict(last["metrics"]))
        else:
            logger.info("checkpoint %s is another trial's: starting from its weights", uuid)
        ctx._current_batch = self.batches_trained
        ctx._initial_batch = self.batches_trained
        return state

    def _apply_state(self, state: dict[str, Any]) -> None:
        """Apply a state read by :meth:`_read_checkpoint` (after the data are built)."""
        same = bool(state.pop("_same_trial", False))
        self._call("on_checkpoint_load_start", state)
        ctx = self.context
        sharded = bool(state.pop("_sharded_loaded", False))
        if not sharded:
            for model, sd in zip(ctx.models, model_states(state), strict=True):
                load_model_weights(model, sd)
        groups: tuple[tuple[str, list[Any], Sequence[Any]], ...] = (
            *(() if sharded else (("optimizers", optimizer_states(state), ctx.optimizers),)),
            ("LR schedulers", scheduler_states(state), ctx.lr_schedulers),
        )
        for what, saved, objects in groups:
            if not saved and not same:
                continue
            _check_counts(what, len(saved), len(objects))
            for obj, sd in zip(objects, saved, strict=True):
                obj.load_state_dict(sd)
        scaler_state = state.get("scaler_state_dict")
        if ctx._scaler is not None and scaler_state is not None:
            ctx._scaler.load_state_dict(scaler_state)
        saved_callbacks = state.get("callbacks") or {}
        for name, callback in self.callbacks.items():
            if name in saved_callbacks:
                callback.load_state_dict(saved_callbacks[name])
        if same:
            rng = state.get("rng_state")
            pending = state["trial_state"].get("pending_metrics") or []
            ranks = state["trial_state"].get("ranks")
            dist = ctx.distributed
            if isinstance(ranks, list) and len(ranks) == dist.size:
                # The same layout: each rank resumes its own random streams and metrics.
                rng = ranks[dist.rank].get("rng_state", rng)
                pending = ranks[dist.rank].get("pending_metrics", pending)
            if rng is not None:
                set_rng_state(rng)
            self._window = [dict(m) for m in pending]

    # ------------------------------------------------------------------ writing

    def _checkpoint_if_stale(self) -> None:
        if self._last_checkpoint_batches == self.batches_trained:
            return
        if self._last_checkpoint_batches is None and self.batches_trained == 0:
            return
        self._save_checkpoint()

    def _flush_and_checkpoint(self) -> None:
        """Checkpoint before stopping; a period's training metrics that custom training
        reducers cover are reported first (their state cannot be saved)."""
        if self._window and any(w.for_training for w in self.context._reducers):
            self._report_training(self.batches_trained)
        self._checkpoint_if_stale()

    def _state_dict(self) -> dict[str, Any]:
        """The checkpoint's state; a collective with several ranks (the chief's copy
        holds every rank's part)."""
        ctx = self.context
        last = self._last_validation
        pending = window_scalars(self._window)
        rank_parts = None
        if ctx.distributed.size > 1:
            rank_parts = ctx.distributed.gather(
                {"rng_state": get_rng_state(), "pending_metrics": pending}
            )
            if rank_parts is not None:
                pending = average_across_ranks([p["pending_metrics"] for p in rank_parts])
        sharded = self._sharded()
        state: dict[str, Any] = {
            # Sharded models' and optimizers' state is written by save_sharded instead.
            "models_state_dict": [] if sharded else [unwrap(m).state_dict() for m in ctx.models],
            "optimizers_state_dict": [] if sharded else [o.state_dict() for o in ctx.optimizers],
            "lr_schedulers_state_dict": [s.state_dict() for s in ctx.lr_schedulers],
            "callbacks": {name: cb.state_dict() for name, cb in self.callbacks.items()},
            "rng_state": get_rng_state(),
            "trial_state": {
                "batches_trained": self.batches_trained,
                "epochs_trained": self.batches_trained // self._epoch_len,
                "trial_id": self.core.trial.trial_id,
                "best_validation": self.best_validation,
                "shuffle_seed": self.shuffle_seed,
                "pending_metrics": pending,
                "last_validation": (
                    None if last is None else {"batches": last[0], "metrics": last[1]}
                ),
            },
        }
        if rank_parts is not None:
            state["trial_state"]["ranks"] = rank_parts
        if ctx._scaler is not None:
            state["scaler_state_dict"] = ctx._scaler.state_dict()
        return state

    _shard_format = "torch.distributed.checkpoint"
    """The ``format`` a sharded checkpoint's metadata names."""
    _trial_type = "PyTorchTrial"
    """``load_data.json``'s ``trial_type``: the trial API that wrote the checkpoint."""

    def _sharded(self) -> bool:
        """Whether the trial's checkpoints are sharded (a model is wrapped by FSDP)."""
        return any(is_sharded(m) for m in self.context.models)

    def _save_shards(self, path: Path) -> dict[str, int]:
        """Write every rank's shards of the models and optimizers into checkpoint
        directory ``path`` (a collective); returns the counts recorded in the state
        (``{"models": n, "optimizers": m}``)."""
        ctx = self.context
        return save_sharded(path, ctx.models, ctx.optimizers)

    def _load_shards(self, path: Path, *, same: bool, with_optimizers: bool) -> None:
        """Load the shards :meth:`_save_shards` wrote in ``path`` (a collective).

        Args:
            path: the checkpoint directory.
            same: whether the checkpoint is this trial's (an exact resume) rather than
                another's (a warm start).
            with_optimizers: whether the optimizers' state is loaded too.
        """
        ctx = self.context
        load_sharded(path, ctx.models, ctx.optimizers, with_optimizers=with_optimizers)

    def _save_checkpoint(self) -> str:
        """Write a checkpoint (the chief) and return its uuid (on every rank)."""
        ctx = self.context
        info = self.core.trial
        state = self._state_dict()
        self._call("on_checkpoint_save_start", state)
        dist = ctx.distributed
        if self._sharded():
            return self._save_sharded_checkpoint(state)
        if not dist.is_chief:
            uuid = str(dist.broadcast(None))
            self._last_checkpoint_batches = self.batches_trained
            self._call("on_checkpoint_upload_end", uuid)
            return uuid
        metadata = {
            "steps_completed": self.batches_trained,
            "framework": f"torch-{torch.__version__}",
            "format": "pickle",
            "dauntless_version": dauntless.__version__,
            "experiment_id": info.experiment_id,
            "trial_id": info.trial_id,
            "hparams": info.hparams,
        }
        # With an object store the upload runs in the background while training goes on
        # (one at a time); the run waits for it before it ends (_controller.run).
        with self.core.checkpoint.store_path(metadata, background=True) as (path, uuid):
            torch.save(state, path / STATE_FILE)
            write_load_data(path, ctx, self.trial, self.is_trainer, self._trial_type)
            if self._code is not None and self._code.files:
                self._code.copy_to(path / CODE_DIR)
            for callback in self.callbacks.values():
                callback.on_checkpoint_write_end(str(path))
                if type(callback).on_checkpoint_end is not PyTorchCallback.on_checkpoint_end:
                    callback.on_checkpoint_end(str(path))
        if dist.size > 1:
            dist.broadcast(uuid)
        self._last_checkpoint_batches = self.batches_trained
        self._call("on_checkpoint_upload_end", uuid)
        ctx._sync_tensorboard()
        logger.info("checkpoint %s saved at batch %d", uuid, self.batches_trained)
        return uuid

    def _save_sharded_checkpoint(self, state: dict[str, Any]) -> str:
        """Every rank writes its shards (DCP) into one checkpoint; the chief adds
        ``state-dict.pth`` and the rest. Needs a file-system checkpoint storage."""
        ctx = self.context
        info = self.core.trial
        metadata = {
            "steps_completed": self.batches_trained,
            "framework": f"torch-{torch.__version__}",
            "format": self._shard_format,
            "dauntless_version": dauntless.__version__,
            "experiment_id": info.experiment_id,
            "trial_id": info.trial_id,
            "hparams": info.hparams,
        }
        with self.core.checkpoint.store_path(metadata, shard=True) as (path, uuid):
            state["sharded"] = self._save_shards(path)
            if ctx.distributed.is_chief:
                torch.save(state, path / STATE_FILE)
                write_load_data(path, ctx, self.trial, self.is_trainer, self._trial_type)
                if self._code is not None and self._code.files:
                    self._code.copy_to(path / CODE_DIR)
                for callback in self.callbacks.values():
                    callback.on_checkpoint_write_end(str(path))
        self._last_checkpoint_batches = self.batches_trained
        self._call("on_checkpoint_upload_end", uuid)
        if ctx.distributed.is_chief:
            ctx._sync_tensorboard()
        logger.info("sharded checkpoint %s saved at batch %d", uuid, self.batches_trained)
        return uuid


def _check_counts(what: str, saved: int, wrapped: int) -> None:
    if saved != wrapped:
        raise ValueError(
            f"the checkpoint holds {saved} {what} but the trial wrapped {wrapped}: wrap the "
            "same objects, in the same order, as the run that saved it"
        )
