"""Properties of the samplers and the DataLoader's training stream (hypothesis)."""

from __future__ import annotations

import itertools

import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.data import BatchSampler, SequentialSampler, TensorDataset

from dauntless.pytorch import DataLoader, samplers

SEEDS = st.integers(0, 2**32 - 1)


def take(iterable, n):
    return list(itertools.islice(iter(iterable), n))


def batches(length, batch_size, drop_last=False):
    return BatchSampler(SequentialSampler(range(length)), batch_size, drop_last)


@settings(max_examples=50, deadline=None)
@given(
    length=st.integers(1, 60), batch_size=st.integers(1, 9), workers=st.integers(1, 6), seed=SEEDS
)
def test_shards_of_a_shuffled_epoch_are_disjoint_and_cover_the_data(
    length, batch_size, workers, seed
):
    shuffled = list(samplers.ReproducibleShuffleSampler(range(length), seed))
    record_shards = [
        list(samplers.DistributedSampler(shuffled, workers, r)) for r in range(workers)
    ]
    flat = [i for shard in record_shards for i in shard]
    assert len(flat) == len(set(flat)) == length and set(flat) == set(range(length))
    batch_list = list(batches(length, batch_size))
    batch_shards = [
        list(samplers.DistributedBatchSampler(batch_list, workers, r)) for r in range(workers)
    ]
    records = sorted(i for shard in batch_shards for b in shard for i in b)
    assert records == list(range(length))
    for r, shard in enumerate(batch_shards):
        assert len(samplers.DistributedBatchSampler(batch_list, workers, r)) == len(shard)


@settings(max_examples=50, deadline=None)
@given(
    length=st.integers(1, 40),
    batch_size=st.integers(1, 8),
    skip=st.integers(0, 30),
    seed=SEEDS,
    drop_last=st.booleans(),
)
def test_skip_after_repeat_equals_dropping_the_first_batches(
    length, batch_size, skip, seed, drop_last
):
    if drop_last and length < batch_size:
        length = batch_size

    def stream():
        records = samplers.ReproducibleShuffleSampler(range(length), seed)
        return samplers.RepeatBatchSampler(BatchSampler(records, batch_size, drop_last))

    want = take(stream(), skip + 10)[skip:]
    assert take(samplers.SkipBatchSampler(stream(), skip), 10) == want
    # The same through the DataLoader the harness resumes with.
    loader = DataLoader(
        TensorDataset(torch.arange(length)),
        batch_size=batch_size,
        shuffle=True,
        drop_last=drop_last,
    )
    full = [b[0].tolist() for b in take(loader.get_data_loader(repeat=True, seed=seed), skip + 5)]
    resumed = [
        b[0].tolist() for b in take(loader.get_data_loader(repeat=True, skip=skip, seed=seed), 5)
    ]
    assert resumed == full[skip:]


@settings(max_examples=50, deadline=None)
@given(length=st.integers(20, 80), seed=SEEDS, other=SEEDS)
def test_same_seed_same_order_another_seed_another_order(length, seed, other):
    first = list(samplers.ReproducibleShuffleSampler(range(length), seed))
    again = list(samplers.ReproducibleShuffleSampler(range(length), seed))
    assert first == again and sorted(first) == list(range(length))
    if other != seed:
        assert list(samplers.ReproducibleShuffleSampler(range(length), other)) != first
    shuffled_batches = list(
        samplers.ReproducibleShuffleBatchSampler(list(batches(length, 1)), seed)
    )
    assert shuffled_batches == list(
        samplers.ReproducibleShuffleBatchSampler(list(batches(length, 1)), seed)
    )


@settings(max_examples=50, deadline=None)
@given(length=st.integers(12, 50), seed=SEEDS, epochs=st.integers(2, 5))
def test_each_epoch_of_a_repeated_shuffle_is_a_new_permutation(length, seed, epochs):
    stream = take(
        samplers.RepeatSampler(samplers.ReproducibleShuffleSampler(range(length), seed)),
        length * epochs,
    )
    per_epoch = [stream[e * length : (e + 1) * length] for e in range(epochs)]
    for epoch in per_epoch:
        assert sorted(epoch) == list(range(length))
    for a, b in itertools.pairwise(per_epoch):
        assert a != b
    # Reproducible: the same seed gives the same sequence of epochs.
    again = take(
        samplers.RepeatSampler(samplers.ReproducibleShuffleSampler(range(length), seed)),
        length * epochs,
    )
    assert again == stream
