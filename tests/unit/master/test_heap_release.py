"""The master loop's release of free C heap memory (issue 37: bounded master memory)."""

from __future__ import annotations

import ctypes

import pytest

from dauntless.master import loop


@pytest.mark.skipif(loop._MALLOC_TRIM is None, reason="the C library has no malloc_trim")
def test_release_free_heap_returns_freed_pages_of_the_heap():
    libc = ctypes.CDLL(None)
    libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    # 64 KB blocks stay in the heap (below glibc's 128 KB mmap threshold); the last one
    # stays allocated, so freeing the others cannot shrink the heap from its top: only
    # malloc_trim hands their pages back.
    blocks = [libc.malloc(64 * 1024) for _ in range(256)]
    assert all(blocks)
    for block in blocks[:-1]:
        libc.free(block)
    try:
        assert loop.release_free_heap() is True
    finally:
        libc.free(blocks[-1])


def test_limit_heap_arenas_refuses_a_count_below_one():
    with pytest.raises(ValueError, match="arenas must be >= 1, got 0"):
        loop.limit_heap_arenas(0)


@pytest.mark.skipif(loop._MALLOC_TRIM is None, reason="not glibc")
def test_limit_heap_arenas_is_accepted_by_glibc():
    assert loop.limit_heap_arenas(8) is True
