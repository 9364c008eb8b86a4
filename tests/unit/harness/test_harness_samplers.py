"""Samplers: shuffle, repeat, shard, skip; and their composition."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.data import BatchSampler, SequentialSampler

from dauntless.pytorch import samplers


def take(it, n):
    return list(itertools.islice(iter(it), n))


@settings(max_examples=60, deadline=None)
@given(length=st.integers(0, 50), workers=st.integers(1, 7))
def test_shards_are_disjoint_cover_the_stream_and_have_the_documented_length(length, workers):
    base = list(range(length))
    shards = [list(samplers.DistributedSampler(base, workers, r)) for r in range(workers)]
    flat = sorted(i for shard in shards for i in shard)
    assert flat == base
    for r, shard in enumerate(shards):
        assert shard == base[r::workers]
        assert len(samplers.DistributedSampler(base, workers, r)) == len(shard)
    assert sum(len(s) for s in shards) == length


def test_batch_shards_keep_whole_batches_round_robin():
    batches = list(BatchSampler(SequentialSampler(range(10)), 3, drop_last=False))
    shard = list(samplers.DistributedBatchSampler(batches, num_workers=2, rank=1))
    assert shard == [[3, 4, 5], [9]]
    assert len(samplers.DistributedBatchSampler(batches, 2, 1)) == 2


@pytest.mark.parametrize("workers,rank", [(0, 0), (2, 2), (2, -1), (1.5, 0)])
def test_shard_rejects_bad_layout(workers, rank):
    with pytest.raises(ValueError, match="num_workers|rank"):
        samplers.DistributedSampler(range(4), workers, rank)


def test_skip_drops_the_first_items_once_and_keeps_the_inner_length():
    repeated = samplers.RepeatSampler(range(4))
    skipped = samplers.SkipSampler(repeated, 6)
    assert take(skipped, 6) == [2, 3, 0, 1, 2, 3]
    assert len(skipped) == 4
    assert list(samplers.SkipBatchSampler([[0], [1], [2]], 2)) == [[2]]
    with pytest.raises(ValueError, match="skip"):
        samplers.SkipSampler(range(3), -1)


def test_repeat_iterates_forever_and_rejects_an_empty_inner_sampler():
    assert take(samplers.RepeatBatchSampler([[0, 1], [2]]), 5) == [[0, 1], [2], [0, 1], [2], [0, 1]]
    assert len(samplers.RepeatSampler(range(3))) == 3
    with pytest.raises(ValueError, match="yielded nothing"):
        take(samplers.RepeatSampler([]), 1)


def test_shuffle_is_reproducible_per_seed_and_reshuffles_each_pass():
    a = samplers.ReproducibleShuffleSampler(range(20), seed=7)
    b = samplers.ReproducibleShuffleSampler(range(20), seed=7)
    c = samplers.ReproducibleShuffleSampler(range(20), seed=8)
    a1, a2 = list(a), list(a)
    assert a1 == list(b) and a2 == list(b)
    assert sorted(a1) == list(range(20)) and sorted(a2) == list(range(20))
    assert a1 != a2, "each pass (epoch) should be a new permutation"
    assert a1 != list(c)
    assert len(a) == 20


def test_batch_shuffle_permutes_whole_batches():
    batches = [[0, 1], [2, 3], [4, 5], [6]]
    out = list(samplers.ReproducibleShuffleBatchSampler(batches, seed=3))
    assert sorted(out) == sorted(batches)
    assert out == list(samplers.ReproducibleShuffleBatchSampler(batches, seed=3))


@pytest.mark.parametrize("seed", [-1, 2**32, "1"])
def test_shuffle_rejects_bad_seeds(seed):
    with pytest.raises((ValueError, TypeError), match="seed"):
        samplers.ReproducibleShuffleSampler(range(3), seed)


def test_chain_shuffle_repeat_shard_batch_skip_resumes_at_any_batch():
    def chain(skip, rank):
        s = samplers.ReproducibleShuffleSampler(SequentialSampler(range(10)), seed=5)
        s = samplers.RepeatSampler(s)
        s = samplers.DistributedSampler(s, num_workers=2, rank=rank)
        b = BatchSampler(s, 2, drop_last=False)
        return samplers.SkipBatchSampler(b, skip)

    for rank in (0, 1):
        full = take(chain(0, rank), 12)
        for skip in (1, 4, 7):
            assert take(chain(skip, rank), 12 - skip) == full[skip:]
    # Two ranks together see each record exactly once per epoch (10 records, 5 per rank).
    firsts = [[i for batch in take(chain(0, r), 3) for i in batch][:5] for r in (0, 1)]
    assert sorted(firsts[0] + firsts[1]) == list(range(10))
