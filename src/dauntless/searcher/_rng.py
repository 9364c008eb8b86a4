"""The experiment RNG: numpy's legacy MT19937 ``RandomState``, its JSON state, and the
per-trial draws (request id, trial seed).

Determined seeds one RNG per experiment from the experiment seed, a port of this same
generator (reference §2.1); per created trial it draws the hyperparameters, then 16 bytes
for a version-4 UUID (four 32-bit words, little-endian), then the trial seed.
"""

from __future__ import annotations

import uuid
from typing import Any

import numpy as np

MAX_EXPERIMENT_SEED = 2**32 - 1
_KEY_WORDS = 624


def new_rng(seed: int) -> np.random.RandomState:
    """The experiment RNG for an experiment seed.

    Args:
        seed: the experiment seed, ``0..2**32-1`` (Determined assigns ``0..2**31-1``).

    Raises:
        TypeError: if ``seed`` is not an int.
        ValueError: if it is out of range.
    """
    if not isinstance(seed, (int, np.integer)) or isinstance(seed, bool):
        raise TypeError(f"seed must be an int, got {type(seed).__name__}")
    if not 0 <= int(seed) <= MAX_EXPERIMENT_SEED:
        raise ValueError(f"seed must be in 0..{MAX_EXPERIMENT_SEED}, got {seed}")
    return np.random.RandomState(int(seed))


def check_rng(rng: Any) -> np.random.RandomState:
    """Return ``rng`` if it is a ``numpy.random.RandomState``, else raise TypeError."""
    if not isinstance(rng, np.random.RandomState):
        raise TypeError(f"rng must be a numpy.random.RandomState, got {type(rng).__name__}")
    return rng


def rng_to_json(rng: np.random.RandomState) -> dict[str, Any]:
    """The RNG's full state as JSON data (624 key words, position, Gaussian cache)."""
    _name, key, pos, has_gauss, cached = rng.get_state(legacy=True)
    return {
        "key": [int(k) for k in key],
        "pos": int(pos),
        "has_gauss": int(has_gauss),
        "cached_gaussian": float(cached),
    }


def rng_from_json(data: Any) -> np.random.RandomState:
    """Rebuild an RNG from :func:`rng_to_json` output.

    Raises:
        ValueError: if ``data`` is not a valid MT19937 state.
    """
    try:
        key = np.array(data["key"], dtype=np.uint32)
        state = (
            "MT19937",
            key,
            int(data["pos"]),
            int(data["has_gauss"]),
            float(data["cached_gaussian"]),
        )
    except (KeyError, TypeError, ValueError, OverflowError) as exc:
        raise ValueError(f"invalid RNG state in searcher snapshot: {exc}") from None
    if key.shape != (_KEY_WORDS,) or not 0 <= state[2] <= _KEY_WORDS:
        raise ValueError(
            f"invalid RNG state in searcher snapshot: expected {_KEY_WORDS} key words and "
            f"a position in 0..{_KEY_WORDS}"
        )
    rng = np.random.RandomState()
    rng.set_state(state)
    return rng


def draw_request_id(rng: np.random.RandomState) -> str:
    """A version-4 UUID string from four 32-bit draws (little-endian words)."""
    words = rng.randint(0, 2**32, size=4, dtype=np.uint32)
    return str(uuid.UUID(bytes=words.astype("<u4").tobytes(), version=4))


def draw_trial_seed(rng: np.random.RandomState) -> int:
    """A trial seed in ``0..2**31-1``."""
    return int(rng.randint(0, 2**31))
