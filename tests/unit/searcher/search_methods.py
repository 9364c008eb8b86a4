"""A small custom search method used by the custom-searcher tests (unit and e2e).

Random search written against :mod:`dauntless.searcher.custom`: ``MAX_TRIALS`` trials of
``LENGTH`` units, ``CONCURRENT`` at a time, hyperparameters drawn from a
``random.Random`` seeded with the experiment seed whose state is saved with the method,
so a restarted master continues the same sequence.
"""

from __future__ import annotations

import random

from dauntless.searcher.custom import Close, Create, SearchMethod, Shutdown, ValidateAfter

MAX_TRIALS = 3
CONCURRENT = 1
LENGTH = 10


class SeededRandom(SearchMethod):
    """Random search over ``lr`` (log-uniform) and ``hidden_size``, keeping its RNG."""

    def __init__(self) -> None:
        self.rng: random.Random | None = None
        self.created = 0

    def _new(self) -> list:
        if self.rng is None:
            self.rng = random.Random(self.experiment_seed)
        self.created += 1
        rid = f"trial-{self.created}"
        hparams = {
            "global_batch_size": 32,
            "lr": 10 ** self.rng.uniform(-3.0, -1.5),
            "hidden_size": self.rng.randint(16, 64),
            "dropout": 0.0,
            "optimizer": "adam",
        }
        return [Create(rid, hparams), ValidateAfter(rid, LENGTH)]

    def initial_operations(self, searcher_state):
        ops = []
        for _ in range(CONCURRENT):
            ops += self._new()
        return ops

    def on_trial_created(self, searcher_state, request_id):
        return []

    def on_validation_completed(self, searcher_state, request_id, metric, train_length):
        return [Close(request_id)]

    def on_trial_closed(self, searcher_state, request_id):
        if self.created < MAX_TRIALS:
            return self._new()
        if len(searcher_state.trials_closed) >= MAX_TRIALS:
            return [Shutdown()]
        return []

    def on_trial_exited_early(self, searcher_state, request_id, exited_reason):
        return []

    def progress(self, searcher_state):
        return len(searcher_state.trials_closed) / MAX_TRIALS

    def save_method_state(self):
        return {
            "created": self.created,
            "rng": None if self.rng is None else _rng_json(self.rng),
        }

    def load_method_state(self, state):
        self.created = state["created"]
        if state["rng"] is not None:
            version, internal, gauss = state["rng"]
            self.rng = random.Random()
            self.rng.setstate((version, tuple(internal), gauss))


def _rng_json(rng: random.Random) -> list:
    version, internal, gauss = rng.getstate()
    return [version, list(internal), gauss]


class Broken(SeededRandom):
    """Raises on the first validation: the experiment must fail, the master go on."""

    def on_validation_completed(self, searcher_state, request_id, metric, train_length):
        raise RuntimeError("this search method is broken on purpose")
