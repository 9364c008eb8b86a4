"""Issue 37 scope 2: the trial tokens the master remembers (AuthService) are not kept
after they went stale, so ended trials' tokens do not fill the memory up to its bound."""

from __future__ import annotations

from dauntless.master.auth_memory import TRIAL_TOKENS_KEPT_STALE, drop_stale_trial_tokens

MAX_AGE = 5.0


def remembered(n: int, read_at: float) -> dict[str, tuple[object, ...]]:
    return {f"digest-{read_at}-{i}": ("who", f"alloc-{i}", 1, read_at) for i in range(n)}


def test_stale_tokens_are_dropped_once_enough_are_kept():
    tokens = remembered(TRIAL_TOKENS_KEPT_STALE, read_at=100.0)  # stale at 105.0
    fresh = remembered(3, read_at=103.0)
    tokens.update(fresh)
    drop_stale_trial_tokens(tokens, now=105.0, max_age=MAX_AGE, max_items=2048)
    assert tokens == fresh


def test_few_tokens_are_left_alone():
    tokens = remembered(TRIAL_TOKENS_KEPT_STALE - 1, read_at=0.0)
    drop_stale_trial_tokens(tokens, now=1000.0, max_age=MAX_AGE, max_items=2048)
    assert len(tokens) == TRIAL_TOKENS_KEPT_STALE - 1


def test_fresh_tokens_past_the_bound_are_cleared():
    tokens = remembered(TRIAL_TOKENS_KEPT_STALE + 10, read_at=100.0)
    drop_stale_trial_tokens(tokens, now=101.0, max_age=MAX_AGE, max_items=TRIAL_TOKENS_KEPT_STALE)
    assert tokens == {}
    tokens = remembered(TRIAL_TOKENS_KEPT_STALE + 10, read_at=100.0)
    drop_stale_trial_tokens(tokens, now=101.0, max_age=MAX_AGE, max_items=2048)
    assert len(tokens) == TRIAL_TOKENS_KEPT_STALE + 10
