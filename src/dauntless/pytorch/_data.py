"""``DataLoader``: torch's DataLoader, with a reproducible, resumable training stream."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.utils import data as torch_data

from . import samplers


class DataLoader:
    """A drop-in for ``torch.utils.data.DataLoader`` that the trial harness can resume.

    It takes torch's arguments and applies torch's rules to them, but builds the torch
    loader only when asked, through :meth:`get_data_loader`, so that the harness can
    wrap its batch sampler for training: **repeat** (never run out), **shard** (one slice
    per replica), **skip** (the batches already trained). With ``shuffle=True`` records
    are shuffled by a :class:`~dauntless.pytorch.samplers.ReproducibleShuffleSampler`
    (fresh order each epoch, determined by one seed), not by torch's ``RandomSampler``,
    so a resumed trial sees exactly the batches an uninterrupted one would.

    Iterating the loader itself (``for batch in loader``) gives one unsharded pass, like
    torch's. A user-given ``sampler`` or ``batch_sampler`` is kept as is: its order is
    then the user's to make reproducible (see :mod:`dauntless.pytorch.samplers`).

    Args:
        dataset: a map-style dataset (``__getitem__`` and ``__len__``).
        batch_size: records per batch (the per-slot batch size), or None with
            ``batch_sampler``.
        shuffle: shuffle records, reproducibly (see above).
        sampler, batch_sampler, num_workers, collate_fn, pin_memory, drop_last, timeout,
            worker_init_fn, multiprocessing_context, generator, prefetch_factor,
            persistent_workers, pin_memory_device, in_order: as for torch's DataLoader.
            ``generator``, if given, also fixes the shuffle seed
            (``generator.initial_seed()``).

    Raises:
        TypeError: for an ``IterableDataset`` (not resumable by index), or a dataset
            without ``__len__``.
        ValueError: for the combinations torch rejects (``batch_sampler`` with
            ``batch_size``/``shuffle``/``sampler``/``drop_last``; ``sampler`` with
            ``shuffle``; ``batch_size=None`` without ``batch_sampler``), a non-positive
            ``batch_size`` or a negative ``num_workers``.
    """

    def __init__(
        self,
        dataset: torch_data.Dataset,
        batch_size: int | None = 1,
        shuffle: bool | None = None,
        sampler: torch_data.Sampler | None = None,
        batch_sampler: torch_data.Sampler | None = None,
        num_workers: int = 0,
        collate_fn: Callable[[list[Any]], Any] | None = None,
        pin_memory: bool = False,
        drop_last: bool = False,
        timeout: float = 0,
        worker_init_fn: Callable[[int], None] | None = None,
        multiprocessing_context: Any = None,
        generator: torch.Generator | None = None,
        *,
        prefetch_factor: int | None = None,
        persistent_workers: bool = False,
        pin_memory_device: str = "",
        in_order: bool = True,
    ) -> None:
        if isinstance(dataset, torch_data.IterableDataset):
            raise TypeError(
                "dauntless.pytorch.DataLoader needs a map-style dataset (indexable, with "
                "__len__): an IterableDataset cannot be resumed at a batch"
            )
        if not hasattr(dataset, "__getitem__") or not hasattr(dataset, "__len__"):
            raise TypeError(
                f"dataset must define __getitem__ and __len__, got {type(dataset).__name__}"
            )
        if not isinstance(num_workers, int) or num_workers < 0:
            raise ValueError(f"num_workers must be an int >= 0, got {num_workers!r}")
        if batch_sampler is not None:
            if batch_size != 1 or shuffle or sampler is not None or drop_last:
                raise ValueError(
                    "batch_sampler option is mutually exclusive with batch_size, shuffle, "
                    "sampler, and drop_last"
                )
            batch_size = None
            drop_last = False
        elif batch_size is None:
            raise ValueError(
                "batch_size=None (no automatic batching) is not supported: give a "
                "batch_size or a batch_sampler"
            )
        elif not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
        if sampler is not None and shuffle:
            raise ValueError("sampler option is mutually exclusive with shuffle")

        self.dataset = dataset
        self.batch_size = batch_size
        self.shuffle = bool(shuffle)
        self.sampler = sampler
        self.drop_last = drop_last
        self.num_workers = num_workers
        self.collate_fn = collate_fn
        self.pin_memory = pin_memory
        self.timeout = timeout
        self.worker_init_fn = worker_init_fn
        self.multiprocessing_context = multiprocessing_context
        self.generator = generator
        self.prefetch_factor = prefetch_factor
        self.persistent_workers = persistent_workers
        self.pin_memory_device = pin_memory_device
        self.in_order = in_order
        self._user_batch_sampler = batch_sampler

    def __len__(self) -> int:
        """Batches in one unsharded pass."""
        return len(self._batch_sampler(seed=0))

    def __iter__(self) -> Iterator[Any]:
        """One unsharded pass, like iterating torch's DataLoader."""
        return iter(self.get_data_loader())

    def _batch_sampler(self, seed: int | None) -> Any:
        if self._user_batch_sampler is not None:
            return self._user_batch_sampler
        if self.sampler is not None:
            sampler = self.sampler
        else:
            sampler = torch_data.SequentialSampler(self.dataset)
            if self.shuffle:
                sampler = samplers.ReproducibleShuffleSampler(sampler, self._shuffle_seed(seed))
        assert self.batch_size is not None  # None only with a batch_sampler (returned above)
        return torch_data.BatchSampler(sampler, self.batch_size, self.drop_last)

    def _shuffle_seed(self, seed: int | None) -> int:
        if self.generator is not None:
            return self.generator.initial_seed() % 2**32
        if seed is not None:
            return seed % 2**32
        # Standalone use: draw from torch's global generator, as torch's RandomSampler does.
        return int(torch.randint(0, 2**32 - 1, (), dtype=torch.int64).item())

    def get_data_loader(
        self,
        repeat: bool = False,
        skip: int = 0,
        num_replicas: int = 1,
        rank: int = 0,
        seed: int | None = None,
    ) -> torch_data.DataLoader:
        """Build the torch loader, wrapping the batch sampler for the harness.

        The batch sampler is wrapped in order: repeat (if ``repeat``), shard (if
        ``num_replicas > 1``), skip (if ``skip > 0``). Sharding by batches after the
        repeat means replica ``r`` trains batches ``r, r + W, r + 2W, ...`` of the
        repeated stream, so its ``k``-th batch is the same however often it resumed.

        Args:
            repeat: iterate forever (training).
            skip: batches to drop from the start of this replica's stream (the batches
                already trained).
            num_replicas: replicas sharing the stream (>= 1).
            rank: this replica, in [0, num_replicas).
            seed: the shuffle seed when ``shuffle=True`` and no ``generator`` was given
                (the harness passes the trial seed); None draws one from torch's global
                generator.

        Returns:
            A ``torch.utils.data.DataLoader`` over the wrapped batch sampler.

        Raises:
            ValueError: if ``skip``, ``num_replicas`` or ``rank`` is out of range.
        """
        batch_sampler: Any = self._batch_sampler(seed)
        if repeat:
            batch_sampler = samplers.RepeatBatchSampler(batch_sampler)
        if num_replicas != 1 or rank != 0:
            batch_sampler = samplers.DistributedBatchSampler(batch_sampler, num_replicas, rank)
        if skip:
            batch_sampler = samplers.SkipBatchSampler(batch_sampler, skip)
        kwargs: dict[str, Any] = {}
        if self.num_workers > 0:
            kwargs["prefetch_factor"] = self.prefetch_factor
            kwargs["persistent_workers"] = self.persistent_workers
        # Passed only when set: older torch releases lack these arguments.
        if self.pin_memory_device:
            kwargs["pin_memory_device"] = self.pin_memory_device
        if not self.in_order:
            kwargs["in_order"] = self.in_order
        return torch_data.DataLoader(
            self.dataset,
            batch_sampler=batch_sampler,
            num_workers=self.num_workers,
            collate_fn=self.collate_fn,
            pin_memory=self.pin_memory,
            timeout=self.timeout,
            worker_init_fn=self.worker_init_fn,
            multiprocessing_context=self.multiprocessing_context,
            generator=self.generator,
            **kwargs,
        )


def repeat_torch_loader(loader: torch_data.DataLoader) -> Iterator[Any]:
    """Iterate a plain torch loader pass after pass, forever (training without checks).

    Raises:
        ValueError: (while iterating) if a pass yields no batch.
    """
    while True:
        empty = True
        for batch in loader:
            empty = False
            yield batch
        if empty:
            raise ValueError("the training data loader yielded no batches")
