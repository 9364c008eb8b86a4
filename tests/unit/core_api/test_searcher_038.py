"""``core.searcher.operations()`` as in Determined 0.38: the master's operations only for
≤0.37 configs; otherwise one operation from a deprecated ``max_length``, or a clear error
naming both places a length can be set."""

from __future__ import annotations

import pytest

from dauntless.core import LocalBackend
from dauntless.core._context import _own_length
from dauntless.core._searcher import SearcherContext


def _config(searcher, entrypoint="python3 train.py"):
    return {"entrypoint": entrypoint, "searcher": {"metric": "loss", **searcher}}


def test_own_length_from_the_config():
    # ≤0.37: the master hands out operations.
    assert _own_length(_config({"name": "single", "max_length": {"batches": 5}})) is False
    # 0.38 without any length.
    assert _own_length(_config({"name": "single"})) is None
    asha = {"name": "adaptive_asha", "max_trials": 2, "max_time": 3, "time_metric": "epochs"}
    assert _own_length(_config(asha)) is None
    # 0.38 ASHA with a deprecated max_length too: the shim's one operation.
    assert _own_length(_config({**asha, "max_length": {"batches": 40}})) == 40


def test_operations_without_any_length_name_both_places():
    backend = LocalBackend([5], searcher_metric="loss")
    ctx = SearcherContext(backend, 1, own_length=None)
    with pytest.raises(RuntimeError, match=r"searcher\.max_length.*own code|own code.*max_length"):
        next(iter(ctx.operations()))


def test_operations_shim_yields_one_operation_without_asking_the_master():
    backend = LocalBackend([99], searcher_metric="loss")
    ctx = SearcherContext(backend, 1, own_length=40)
    ops = []
    for op in ctx.operations():
        ops.append(op.length)
        op.report_progress(20)
        op.report_completed(0.5)
    assert ops == [40]
    assert backend.completed_operations == []  # the master is not told
    with pytest.raises(RuntimeError, match="not completed"):
        for _op in SearcherContext(backend, 1, own_length=3).operations():
            pass
