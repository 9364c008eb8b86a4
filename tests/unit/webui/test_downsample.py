"""M4 downsampling of metric series: what it keeps, and that folding points in
incrementally gives exactly what one pass over all points gives."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dauntless.master.metric_series import M4Series, m4, m4_indices


def _brute_m4(x: np.ndarray, y: np.ndarray, width: int) -> set[tuple[int, float]]:
    """Per bucket: first, last, earliest min, earliest max (x ascending, unique x)."""
    keep = set()
    for b in np.unique(x // width):
        idx = np.flatnonzero(x // width == b)
        keep.add((int(x[idx[0]]), float(y[idx[0]])))
        keep.add((int(x[idx[-1]]), float(y[idx[-1]])))
        lo = idx[np.argmin(y[idx])]
        hi = idx[np.argmax(y[idx])]
        keep.add((int(x[lo]), float(y[lo])))
        keep.add((int(x[hi]), float(y[hi])))
    return keep


series = st.integers(1, 400).flatmap(
    lambda n: st.tuples(
        st.lists(st.integers(0, 5000), min_size=n, max_size=n, unique=True),
        st.lists(st.floats(-1e3, 1e3, allow_nan=False), min_size=n, max_size=n),
    )
)


@settings(max_examples=60, deadline=None)
@given(series, st.sampled_from([1, 2, 8, 64, 1024]))
def test_m4_keeps_first_last_min_max_of_each_bucket(data, width):
    xs, ys = data
    x, y = np.array(xs, dtype=np.int64), np.array(ys)
    order = np.argsort(x)
    kx, ky = m4(x, y, width)
    assert list(kx) == sorted(kx)
    assert set(zip(kx.tolist(), ky.tolist(), strict=True)) == _brute_m4(x[order], y[order], width)
    assert kx.size <= 4 * np.unique(x // width).size


@settings(max_examples=40, deadline=None)
@given(series, st.integers(1, 6), st.randoms(use_true_random=False))
def test_incremental_summary_equals_one_pass(data, chunks, rnd):
    xs, ys = data
    pairs = list(zip(xs, ys, strict=True))
    rnd.shuffle(pairs)  # reports may arrive in any order
    summary = M4Series(cap_buckets=16)
    step = max(1, len(pairs) // chunks)
    for i in range(0, len(pairs), step):
        part = pairs[i : i + step]
        summary.extend([p[0] for p in part], [p[1] for p in part])
    x, y = np.array(xs, dtype=np.int64), np.array(ys)
    ex, ey = m4(x, y, summary.width)
    assert summary.x.tolist() == ex.tolist()
    assert summary.y.tolist() == ey.tolist()
    assert summary.raw_points == len(xs)
    assert np.unique(summary.x // summary.width).size <= 16
    assert summary.width == 1 or np.unique(x // (summary.width // 2)).size > 16


def test_points_fit_max_points_and_keep_extremes():
    rng = np.random.default_rng(0)
    x = np.arange(10, 100_010, 10)  # 10,000 reports, one every 10 batches
    y = np.cumsum(rng.normal(size=x.size))
    y[4321] = 500.0  # one spike
    summary = M4Series()
    summary.extend(x, y)
    for max_points in (8, 100, 400, 1024):
        px, py = summary.points(max_points)
        assert 0 < px.size <= max_points
        assert py.max() == 500.0 and py.min() == y.min()
        assert px[0] == 10 and px[-1] == 100_000
    small = M4Series()
    small.extend([3, 1, 2], [0.3, 0.1, 0.2])
    px, py = small.points(8)
    assert px.tolist() == [1, 2, 3] and py.tolist() == [0.1, 0.2, 0.3]


def test_non_finite_values_are_dropped():
    s = M4Series()
    s.extend([1, 2, 3, 4], [0.5, float("nan"), float("inf"), 0.25])
    assert s.x.tolist() == [1, 4]
    assert s.raw_points == 2


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="width"):
        m4_indices(np.arange(3), np.zeros(3), 0)
    with pytest.raises(ValueError, match="one length"):
        m4(np.arange(3), np.zeros(2), 1)
    with pytest.raises(ValueError, match="cap_buckets"):
        M4Series(cap_buckets=0)
    with pytest.raises(ValueError, match="max_points"):
        M4Series().points(3)
    with pytest.raises(ValueError, match="one length"):
        M4Series().extend([1, 2], [1.0])
