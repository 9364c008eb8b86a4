"""The training loop's per-batch metrics: what it keeps per batch (``batch_row``), how a
reporting period's values become floats (``window_scalars``) and their means
(``mean_of_batches``), checked against the per-value definition (``scalar_or_none``)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from dauntless.pytorch._reducer import (
    batch_row,
    mean_of_batches,
    scalar_or_none,
    window_scalars,
)

_MAKERS = {
    "float": lambda x: x,
    "int": lambda x: int(x * 10),
    "none": lambda x: None,
    "f32": lambda x: torch.tensor(x, dtype=torch.float32),
    "f64": lambda x: torch.tensor(x, dtype=torch.float64),
    "i64": lambda x: torch.tensor(int(x * 10)),
    "bool": lambda x: torch.tensor(x > 0),
    "grad": lambda x: torch.tensor(x, requires_grad=True) * 2,
    "one": lambda x: torch.tensor([x]),
    "vector": lambda x: torch.tensor([x, x]),
    "complex": lambda x: torch.tensor(complex(x, 1.0)),
    "numpy": lambda x: np.float32(x),
    "array": lambda x: np.array([x, 1.0]),
}

values = st.tuples(st.sampled_from(sorted(_MAKERS)), st.floats(-1e6, 1e6, width=32))
names = st.sampled_from(["loss", "accuracy", "lr", "grad_norm"])


def _reference_window(window):
    """window_scalars by its definition: each value on its own, names in first-seen order."""
    order = list(dict.fromkeys(n for m in window for n in m))
    return [{n: scalar_or_none(m[n]) for n in order if n in m} for m in window]


def _reference_mean(rows):
    sums, counts = {}, {}
    for row in rows:
        for name, value in row.items():
            sums.setdefault(name, 0.0)
            counts.setdefault(name, 0)
            s = scalar_or_none(value)
            if s is not None:
                sums[name] += s
                counts[name] += 1
    return {n: (sums[n] / counts[n] if counts[n] else None) for n in sorted(sums)}


def _same(a, b):
    """Equal, NaN-aware, and with the same key order."""
    assert [list(r) for r in a] == [list(r) for r in b]
    for ra, rb in zip(a, b, strict=True):
        for k in ra:
            x, y = ra[k], rb[k]
            assert (x is None and y is None) or x == y or (x != x and y != y), (k, x, y)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.dictionaries(names, values, min_size=1, max_size=4), min_size=1, max_size=12),
    st.booleans(),
)
def test_window_scalars_and_batch_rows_agree_with_the_definition(raw, same_names):
    if same_names:  # the training loop's common case: every batch reports the same names
        keys = list(raw[0])
        raw = [{k: m.get(k, raw[0][k]) for k in keys} for m in raw]
    window = [{k: _MAKERS[kind](x) for k, (kind, x) in m.items()} for m in raw]
    expected = _reference_window(window)
    _same(window_scalars(window), expected)
    kept = [batch_row(m) for m in window]
    for row, m in zip(kept, window, strict=True):
        assert list(row) == list(m)
        for v in row.values():
            assert not (isinstance(v, torch.Tensor) and v.requires_grad), "graph kept alive"
    _same(window_scalars(kept), expected)
    _same([mean_of_batches(expected)], [_reference_mean(expected)])
    _same([mean_of_batches(window)], [_reference_mean(window)])


def test_cpu_scalars_become_floats_at_once_and_others_wait_for_the_report():
    loss = torch.tensor(0.25, requires_grad=True) * 2
    row = batch_row(
        {
            "loss": loss,
            "n": torch.tensor(3),
            "ok": torch.tensor(True),
            "z": torch.tensor(1 + 2j),
            "v": torch.ones(2, requires_grad=True) * 1,
            "s": "text",
        }
    )
    assert row["loss"] == 0.5 and type(row["loss"]) is float
    assert row["n"] == 3.0 and type(row["n"]) is float and row["ok"] == 1.0
    assert row["z"] is None
    assert isinstance(row["v"], torch.Tensor) and not row["v"].requires_grad
    assert row["s"] == "text"
    assert window_scalars([row]) == [
        {"loss": 0.5, "n": 3.0, "ok": 1.0, "z": None, "v": None, "s": None}
    ]


def test_means_add_values_in_batch_order():
    # 1e16 + 1 + 1 - 1e16: the order of the additions decides the result (2.0 or 0.0);
    # the mean is the one a left-to-right sum gives, whichever path computes it.
    rows = [{"x": 1e16}, {"x": 1.0}, {"x": 1.0}, {"x": -1e16}]
    expected = (((1e16 + 1.0) + 1.0) - 1e16) / 4
    assert mean_of_batches(rows) == {"x": expected}
    assert mean_of_batches([*rows, {"y": 1.0}])["x"] == expected
    assert mean_of_batches([]) == {}


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_accelerator_metrics_are_read_in_one_copy_per_metric():
    window = [
        batch_row({"loss": torch.tensor(float(i), device="cuda", requires_grad=True) * 1})
        for i in range(5)
    ]
    assert all(isinstance(m["loss"], torch.Tensor) and not m["loss"].requires_grad for m in window)
    assert window_scalars(window) == [{"loss": float(i)} for i in range(5)]
