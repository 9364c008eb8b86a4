"""dauntless.pytorch.DataLoader: torch's arguments, a reproducible resumable stream."""

from __future__ import annotations

import itertools

import pytest
import torch
from torch.utils.data import DataLoader as TorchDataLoader
from torch.utils.data import IterableDataset, TensorDataset

from dauntless.pytorch import DataLoader


def dataset(n=10):
    return TensorDataset(torch.arange(n))


def ids(batches):
    return [b[0].tolist() for b in batches]


def test_unshuffled_iteration_matches_torch():
    ours = DataLoader(dataset(), batch_size=3)
    theirs = TorchDataLoader(dataset(), batch_size=3)
    assert ids(ours) == ids(theirs)
    assert len(ours) == len(theirs) == 4
    assert len(DataLoader(dataset(), batch_size=3, drop_last=True)) == 3


def test_training_stream_repeats_and_skip_resumes_at_the_same_batch():
    loader = DataLoader(dataset(), batch_size=4, shuffle=True)
    full = ids(itertools.islice(loader.get_data_loader(repeat=True, seed=11), 9))
    # 3 batches per epoch: each epoch is a permutation of all records, reshuffled.
    epochs = [sorted(i for b in full[k : k + 3] for i in b) for k in (0, 3, 6)]
    assert epochs == [list(range(10))] * 3
    assert full[0:3] != full[3:6]
    for skip in (1, 3, 5):
        resumed = loader.get_data_loader(repeat=True, skip=skip, seed=11)
        assert ids(itertools.islice(resumed, 9 - skip)) == full[skip:]
    # A fresh loader built the same way (a restarted process) gives the same stream.
    again = DataLoader(dataset(), batch_size=4, shuffle=True)
    assert ids(itertools.islice(again.get_data_loader(repeat=True, seed=11), 9)) == full


def test_shuffle_seed_comes_from_the_generator_when_one_is_given():
    a = DataLoader(
        dataset(), batch_size=10, shuffle=True, generator=torch.Generator().manual_seed(3)
    )
    b = DataLoader(
        dataset(), batch_size=10, shuffle=True, generator=torch.Generator().manual_seed(3)
    )
    assert ids(a.get_data_loader(seed=1)) == ids(b.get_data_loader(seed=2))
    assert ids(a.get_data_loader(seed=1)) != [list(range(10))]


def test_sharded_replicas_take_alternate_batches_of_the_repeated_stream():
    loader = DataLoader(dataset(), batch_size=2, shuffle=True)
    full = ids(itertools.islice(loader.get_data_loader(repeat=True, seed=4), 12))
    for rank in (0, 1):
        shard = loader.get_data_loader(repeat=True, num_replicas=2, rank=rank, seed=4)
        assert ids(itertools.islice(shard, 6)) == full[rank::2]
    skipped = loader.get_data_loader(repeat=True, num_replicas=2, rank=1, skip=2, seed=4)
    assert ids(itertools.islice(skipped, 4)) == full[1::2][2:]


def test_validation_stream_is_one_pass_without_repeat():
    loader = DataLoader(dataset(5), batch_size=2)
    assert ids(loader.get_data_loader()) == [[0, 1], [2, 3], [4]]


def test_user_batch_sampler_is_kept():
    loader = DataLoader(dataset(6), batch_sampler=[[5, 4], [0]])
    assert ids(loader) == [[5, 4], [0]]
    assert ids(itertools.islice(loader.get_data_loader(repeat=True, skip=1), 3)) == [
        [0],
        [5, 4],
        [0],
    ]


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"batch_sampler": [[0]], "batch_size": 2}, "mutually exclusive"),
        ({"batch_sampler": [[0]], "shuffle": True}, "mutually exclusive"),
        ({"sampler": [0, 1], "shuffle": True}, "mutually exclusive"),
        ({"batch_size": None}, "batch_size=None"),
        ({"batch_size": 0}, "positive int"),
        ({"num_workers": -1}, "num_workers"),
    ],
)
def test_rejects_what_torch_rejects(kwargs, match):
    with pytest.raises(ValueError, match=match):
        DataLoader(dataset(), **kwargs)


def test_rejects_iterable_datasets():
    class Stream(IterableDataset):
        def __iter__(self):
            return iter(range(3))

    with pytest.raises(TypeError, match="map-style"):
        DataLoader(Stream())
