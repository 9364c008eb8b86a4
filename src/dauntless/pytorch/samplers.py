"""Samplers that make a training data stream reproducible and resumable.

Source: the product document on the PyTorch API (seed 003, "Customize a Reproducible
Dataset") and Determined's ``pytorch.samplers`` behaviour (reference §3.5). The intended
chain for training is::

    shuffle -> repeat -> shard -> batch -> skip

- shuffle first, with a seeded shuffle, so the order depends only on the seed;
- repeat when training (never when validating), after the shuffle, so every pass is
  reshuffled and the stream never ends;
- shard after the repeat, so each of ``num_workers`` replicas sees a disjoint slice even
  across epoch boundaries;
- skip last, once, to resume after the batches already trained.

Each class wraps a sampler (an iterable of record indices) or a batch sampler (an
iterable of lists of indices) and is itself one, so they compose with torch's
``BatchSampler`` and ``DataLoader(batch_sampler=...)``.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Sized
from typing import Any

import numpy as np
from torch.utils.data import Sampler

__all__ = [
    "DistributedBatchSampler",
    "DistributedSampler",
    "RepeatBatchSampler",
    "RepeatSampler",
    "ReproducibleShuffleBatchSampler",
    "ReproducibleShuffleSampler",
    "SkipBatchSampler",
    "SkipSampler",
]


def _inner_len(inner: Any, cls: str) -> int:
    if not isinstance(inner, Sized):
        raise TypeError(f"{cls} needs a sampler with a length; {type(inner).__name__} has none")
    return len(inner)


def _check_iterable(inner: Any, name: str) -> None:
    if not isinstance(inner, Iterable):
        raise TypeError(f"{name} must be iterable, got {type(inner).__name__}")


class _Shuffle(Sampler):
    def __init__(self, inner: Iterable[Any], seed: int) -> None:
        _check_iterable(inner, "sampler")
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
            raise TypeError(f"seed must be an int, got {type(seed).__name__}")
        if not 0 <= int(seed) < 2**32:
            raise ValueError(f"seed must be in [0, 2**32), got {seed}")
        self.inner = inner
        self.seed = int(seed)
        self._rng = np.random.RandomState(self.seed)

    def __len__(self) -> int:
        return _inner_len(self.inner, type(self).__name__)

    def __iter__(self) -> Iterator[Any]:
        items = list(self.inner)
        # Python ints index datasets faster than numpy's (and a list beats a generator).
        order = self._rng.permutation(len(items)).tolist()
        return iter([items[i] for i in order])


class ReproducibleShuffleSampler(_Shuffle):
    """Shuffle the records of a sampler with a seeded generator.

    One ``numpy.random.RandomState(seed)`` is made at construction; each pass
    (``iter``) materialises the inner sampler and yields it in a fresh permutation, so
    successive epochs differ, and the same seed gives the same sequence of epochs.

    Args:
        sampler: an iterable of record indices (e.g. ``SequentialSampler(dataset)``).
        seed: in [0, 2**32).

    Raises:
        TypeError: if ``sampler`` is not iterable or ``seed`` not an int.
        ValueError: if ``seed`` is out of range.
    """


class ReproducibleShuffleBatchSampler(_Shuffle):
    """Shuffle whole batches of a batch sampler with a seeded generator.

    Same rules as :class:`ReproducibleShuffleSampler`, on batches; prefer shuffling
    records when you can, which mixes better.

    Args:
        batch_sampler: an iterable of batches (lists of indices).
        seed: in [0, 2**32).
    """

    def __init__(self, batch_sampler: Iterable[list[int]], seed: int) -> None:
        super().__init__(batch_sampler, seed)


class _Repeat(Sampler):
    def __init__(self, inner: Iterable[Any]) -> None:
        _check_iterable(inner, "sampler")
        self.inner = inner

    def __len__(self) -> int:
        return _inner_len(self.inner, type(self).__name__)

    def __iter__(self) -> Iterator[Any]:
        while True:
            empty = True
            for item in self.inner:
                empty = False
                yield item
            if empty:
                raise ValueError(
                    f"{type(self).__name__}: the inner sampler yielded nothing, so "
                    "repeating it would never produce a record"
                )


class RepeatSampler(_Repeat):
    """Iterate a sampler forever, pass after pass (training only).

    Each pass calls ``iter`` on the inner sampler again, so a shuffling sampler inside
    reshuffles every epoch. ``len()`` is the inner length (one epoch).

    Args:
        sampler: a sized iterable of record indices.

    Raises:
        TypeError: if ``sampler`` is not iterable.
        ValueError: (while iterating) if a pass yields nothing.
    """


class RepeatBatchSampler(_Repeat):
    """Iterate a batch sampler forever; see :class:`RepeatSampler`.

    Args:
        batch_sampler: a sized iterable of batches.
    """

    def __init__(self, batch_sampler: Iterable[list[int]]) -> None:
        super().__init__(batch_sampler)


class _Shard(Sampler):
    def __init__(self, inner: Iterable[Any], num_workers: int, rank: int) -> None:
        _check_iterable(inner, "sampler")
        if isinstance(num_workers, bool) or not isinstance(num_workers, int) or num_workers < 1:
            raise ValueError(f"num_workers must be an int >= 1, got {num_workers!r}")
        if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < num_workers:
            raise ValueError(f"rank must be an int in [0, num_workers={num_workers}), got {rank!r}")
        self.inner = inner
        self.num_workers = num_workers
        self.rank = rank

    def __len__(self) -> int:
        n = _inner_len(self.inner, type(self).__name__)
        return n // self.num_workers + (1 if n % self.num_workers > self.rank else 0)

    def __iter__(self) -> Iterator[Any]:
        return itertools.islice(self.inner, self.rank, None, self.num_workers)


class DistributedSampler(_Shard):
    """Keep every ``num_workers``-th record, starting at ``rank``.

    Element ``i`` of the inner stream goes to the worker with ``i % num_workers ==
    rank``, so the shards of all workers are disjoint and together cover the stream.
    Unlike torch's ``DistributedSampler`` it neither shuffles nor pads.
    ``len() = L // num_workers + (1 if L % num_workers > rank else 0)`` for an inner
    length ``L``.

    Args:
        sampler: an iterable of record indices.
        num_workers: number of replicas (>= 1).
        rank: this replica, in [0, num_workers).

    Raises:
        ValueError: if ``num_workers`` or ``rank`` is out of range.
    """


class DistributedBatchSampler(_Shard):
    """Keep every ``num_workers``-th batch, starting at ``rank``; see
    :class:`DistributedSampler`.

    Args:
        batch_sampler: an iterable of batches.
        num_workers: number of replicas (>= 1).
        rank: this replica, in [0, num_workers).
    """

    def __init__(self, batch_sampler: Iterable[list[int]], num_workers: int, rank: int) -> None:
        super().__init__(batch_sampler, num_workers, rank)


class _Skip(Sampler):
    def __init__(self, inner: Iterable[Any], skip: int) -> None:
        _check_iterable(inner, "sampler")
        if isinstance(skip, bool) or not isinstance(skip, int) or skip < 0:
            raise ValueError(f"skip must be an int >= 0, got {skip!r}")
        self.inner = inner
        self.skip = skip

    def __len__(self) -> int:
        return _inner_len(self.inner, type(self).__name__)

    def __iter__(self) -> Iterator[Any]:
        return itertools.islice(self.inner, self.skip, None)


class SkipSampler(_Skip):
    """Drop the first ``skip`` records of a sampler, once.

    Put it after the repeat so that the skip happens once, not every epoch. ``len()`` is
    the inner length (one epoch), as a repeated stream has no end to shorten.

    Args:
        sampler: an iterable of record indices.
        skip: records to drop (>= 0).

    Raises:
        ValueError: if ``skip`` is negative.
    """


class SkipBatchSampler(_Skip):
    """Drop the first ``skip`` batches of a batch sampler, once; see :class:`SkipSampler`.

    Prefer this to :class:`SkipSampler`: training progress is counted in batches, so the
    number to skip is exactly the batches already trained.

    Args:
        batch_sampler: an iterable of batches.
        skip: batches to drop (>= 0).
    """

    def __init__(self, batch_sampler: Iterable[list[int]], skip: int) -> None:
        super().__init__(batch_sampler, skip)
