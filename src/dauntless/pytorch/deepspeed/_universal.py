"""Restoring a DeepSpeed checkpoint onto another number of data-parallel ranks.

ZeRO (stages 1-3) partitions the optimizer's state (stage 3 the weights too) over the
data-parallel ranks, one ``*zero_pp_rank_<dp>_mp_rank_<mp>_optim_states.pt`` file per
rank, and ``DeepSpeedEngine.load_checkpoint`` refuses those partitions on another number
of ranks (``ZeRORuntimeException``: "Automatic adjustment of ZeRO's optimizer state
partitioning with a new world size is not currently supported"). DeepSpeed's documented
route is its *universal checkpoint* (DeepSpeed docs, "Universal Checkpointing";
``deepspeed/checkpoint/ds_to_universal.py``): the partitions are merged into one file per
parameter and optimizer state (``zero/<param>/{fp32,exp_avg,exp_avg_sq}.pt``), which an
engine of any layout loads when its config has ``checkpoint: {load_universal: true}``.

The controller (:mod:`._controller`) does that here, in the trial's processes: when a
checkpoint's ZeRO partitions were written by another number of ranks than the trial has,
each machine's first rank converts the engine's DeepSpeed checkpoint (tag ``model<i>``)
with ``ds_to_universal`` into a temporary directory (one conversion per checkpoint and
machine, in-process), every rank loads it with the engine's ``load_universal_checkpoint``
switched on for that one call, and the directory is removed once every rank has loaded.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import logging
import re
import shutil
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from dauntless.core import DistributedContext

logger = logging.getLogger("dauntless.pytorch.deepspeed")

_OPTIM_FILE = re.compile(r"^(?:bf16_)?zero_pp_rank_(\d+)_mp_rank_00_optim_states\.pt$")
_ZERO3_MODEL_FILE = re.compile(r"^zero_pp_rank_\d+_mp_rank_00_model_states\.pt$")

TEMP_PREFIX = "dauntless-ds-universal-"
"""The name prefix of the temporary directories conversions write (in the system's
temporary directory, ``TMPDIR``)."""


@dataclasses.dataclass(frozen=True)
class Layout:
    """How a DeepSpeed checkpoint (or engine) partitions its state.

    Attributes:
        family: ``"none"`` (no ZeRO: every rank holds the whole optimizer), ``"zero"``
            (stages 1 and 2: optimizer state and gradients partitioned) or ``"zero3"``
            (stage 3: the weights partitioned too).
        dp_world_size: the number of data-parallel ranks the state is partitioned over;
            None for ``"none"`` (the state does not depend on it).
    """

    family: str
    dp_world_size: int | None

    def describe(self) -> str:
        """The layout in words, for log lines and errors."""
        if self.family == "none":
            return "without ZeRO"
        stage = "stage 3" if self.family == "zero3" else "stage 1 or 2"
        return f"ZeRO {stage} on {self.dp_world_size} data-parallel rank(s)"


def saved_layout(tag_dir: Path) -> Layout:
    """The layout of the DeepSpeed checkpoint in ``tag_dir`` (the directory of one tag,
    e.g. ``<checkpoint>/model0``), read from its file names alone.

    Raises:
        FileNotFoundError: if ``tag_dir`` is not a directory.
    """
    if not tag_dir.is_dir():
        raise FileNotFoundError(f"no DeepSpeed checkpoint directory at {tag_dir}")
    names = [p.name for p in tag_dir.iterdir()]
    ranks = {int(m.group(1)) for m in map(_OPTIM_FILE.match, names) if m is not None}
    if not ranks:
        return Layout("none", None)
    family = "zero3" if any(_ZERO3_MODEL_FILE.match(n) for n in names) else "zero"
    return Layout(family, len(ranks))


def engine_layout(engine: Any) -> Layout:
    """The layout a ``DeepSpeedEngine`` would save: its ZeRO stage and its (sequence)
    data-parallel world size, the number DeepSpeed checks at load."""
    stage = int(engine.zero_optimization_stage())
    if stage == 0:
        return Layout("none", None)
    size = getattr(engine, "seq_dp_world_size", None) or engine.dp_world_size
    return Layout("zero3" if stage >= 3 else "zero", int(size))


def needs_conversion(saved: Layout, engine: Layout) -> bool:
    """Whether a checkpoint of layout ``saved`` must go through the universal checkpoint
    to give an engine of layout ``engine`` its optimizer state: both partition with ZeRO
    over different numbers of ranks."""
    return (
        saved.family != "none"
        and engine.family != "none"
        and saved.dp_world_size != engine.dp_world_size
    )


class ConversionError(RuntimeError):
    """A DeepSpeed checkpoint could not be converted to a universal checkpoint (raised by
    :func:`universal_copies` on every rank before any rank loads)."""


_ADAM_STATE = frozenset({"exp_avg", "exp_avg_sq"})


def check_convertible(tag_dir: Path) -> None:
    """Refuse an optimizer state ``ds_to_universal`` cannot carry: DeepSpeed 0.19's
    conversion extracts Adam's ``exp_avg`` and ``exp_avg_sq`` (and ``step``) of each
    ZeRO partition and nothing else, so an optimizer with other state (SGD's
    ``momentum_buffer``, AMSGrad's ``max_exp_avg_sq``) would fail or lose it.

    Reads the first rank's optimizer partition.

    Raises:
        RuntimeError: naming the optimizer state's keys, if they are not Adam's.
    """
    import torch

    first = sorted(p for p in tag_dir.iterdir() if _OPTIM_FILE.match(p.name))[0]
    saved = torch.load(first, map_location="cpu", weights_only=False)["optimizer_state_dict"]
    # Stages 1-2 keep the torch optimizer's state under base_optimizer_state, stage 3
    # under optimizer_state_dict.
    inner = saved.get("base_optimizer_state") or saved.get("optimizer_state_dict") or {}
    states = inner.get("state") or {}
    entries = states.values() if isinstance(states, dict) else states
    keys = set().union(*(set(e) for e in entries)) - {"step"} if entries else set()
    if keys != _ADAM_STATE:
        raise RuntimeError(
            "DeepSpeed's universal checkpoint carries the optimizer state of Adam-like "
            f"optimizers only (exp_avg, exp_avg_sq); this checkpoint's is {sorted(keys)}"
        )


def convert_to_universal(tag_dir: Path, output_dir: Path) -> float:
    """Convert one tag's DeepSpeed checkpoint into a universal checkpoint with DeepSpeed's
    ``ds_to_universal`` (in this process: one worker for extraction and merging).

    Args:
        tag_dir: the DeepSpeed checkpoint of one tag (``<checkpoint>/model0``).
        output_dir: where the universal checkpoint goes (``<root>/model0``); it must not
            exist. ``ds_to_universal`` also writes ``<root>/latest_universal``.

    Returns:
        The seconds the conversion took.

    Raises:
        RuntimeError: if the optimizer state is not Adam's (:func:`check_convertible`)
            or ``ds_to_universal`` fails; the message names the exception and ends with
            the last lines it printed.
    """
    from deepspeed.checkpoint import ds_to_universal

    args = argparse.Namespace(
        input_folder=str(tag_dir),
        output_folder=str(output_dir),
        num_extract_workers=1,  # no process pool: the trial's process converts
        num_merge_workers=1,
        keep_temp_folder=False,
        strict=True,
        # Engines of plain torch modules record no universal_checkpoint_info; DeepSpeed's
        # own option adds the version marker it asks for.
        inject_missing_state=True,
    )
    printed = io.StringIO()
    start = time.monotonic()
    try:
        check_convertible(tag_dir)
        with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(printed):
            ds_to_universal.main(args)
    except Exception as exc:  # ds_to_universal checks with assert, too
        tail = "\n".join(printed.getvalue().splitlines()[-8:])
        raise RuntimeError(
            f"DeepSpeed's ds_to_universal could not convert {tag_dir} into a universal "
            f"checkpoint: {type(exc).__name__}: {exc}"
            + (f"\nits output ended:\n{tail}" if tail else "")
        ) from exc
    logger.debug("ds_to_universal printed:\n%s", printed.getvalue())
    return time.monotonic() - start


def _bytes_under(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _check_free_space(tag_dirs: Sequence[Path], temp_root: Path) -> None:
    """Refuse a conversion that would not fit: the universal copy holds each parameter's
    fp32 weights and optimizer state once more, and the conversion's fragments once again
    until it ends, so twice the checkpoint's size is asked for."""
    needed = 2 * sum(_bytes_under(d) for d in tag_dirs)
    free = shutil.disk_usage(temp_root).free
    if free < needed:
        raise RuntimeError(
            f"converting the DeepSpeed checkpoint needs about {needed / 2**20:.0f} MiB in "
            f"{temp_root} (twice its size) and {free / 2**20:.0f} MiB are free: point TMPDIR "
            "at a larger disk, or restore it with the number of slots that saved it"
        )


@contextlib.contextmanager
def universal_copies(
    checkpoint: Path, tags: Sequence[str], distributed: DistributedContext, *, reason: str
) -> Iterator[Path]:
    """Universal checkpoints of ``tags`` of the DeepSpeed checkpoint at ``checkpoint``:
    the root directory holding ``<tag>/`` for each, on every rank. A collective: every
    rank calls it with the same arguments.

    Each machine's first rank converts (:func:`convert_to_universal`) into a new
    directory under the system's temporary directory and removes it when the block ends:
    after every rank left the block, or at once if the block raised.

    Args:
        checkpoint: the platform checkpoint's directory (holding ``model0/``...).
        tags: the DeepSpeed tags to convert.
        distributed: the trial's process layout.
        reason: why, for the log line (e.g. the two layouts).

    Yields:
        The root directory of the universal copies.

    Raises:
        ConversionError: on every rank, if a machine's conversion failed (naming why) or
            its temporary directory lacks the space.
    """
    root: Path | None = None
    error: str | None = None
    if distributed.is_local_chief:
        try:
            temp_root = Path(tempfile.gettempdir())
            _check_free_space([checkpoint / t for t in tags], temp_root)
            root = Path(tempfile.mkdtemp(prefix=TEMP_PREFIX, dir=temp_root))
            logger.info(
                "restoring DeepSpeed checkpoint %s: %s; converting it to DeepSpeed's "
                "universal checkpoint in %s",
                checkpoint.name,
                reason,
                root,
            )
            seconds = sum(convert_to_universal(checkpoint / t, root / t) for t in tags)
            logger.info("converted %s (%s) in %.1f s", checkpoint.name, ", ".join(tags), seconds)
        except Exception as exc:  # told to every rank below, then raised
            error = str(exc) if isinstance(exc, RuntimeError) else f"{type(exc).__name__}: {exc}"
    shared = distributed.broadcast_local(None if root is None else str(root))
    errors = [e for e in distributed.allgather(error) if e is not None]
    try:
        if errors:
            raise ConversionError(
                f"the DeepSpeed checkpoint {checkpoint.name} could not be restored ({reason}): "
                f"{errors[0]}"
            )
        yield Path(shared)
        distributed.allgather_local(None)  # every rank of this machine has loaded
    finally:
        if root is not None:
            shutil.rmtree(root, ignore_errors=True)


@contextlib.contextmanager
def loading_universal(engine: Any, universal: bool) -> Iterator[None]:
    """Set the engine's ``checkpoint.load_universal`` to ``universal`` for one load (the
    layout of what is loaded decides, not the config the engine was built with)."""
    config = engine._config
    before = config.load_universal_checkpoint
    config.load_universal_checkpoint = universal
    try:
        yield
    finally:
        config.load_universal_checkpoint = before


__all__ = [
    "TEMP_PREFIX",
    "ConversionError",
    "Layout",
    "check_convertible",
    "convert_to_universal",
    "engine_layout",
    "loading_universal",
    "needs_conversion",
    "saved_layout",
    "universal_copies",
]
