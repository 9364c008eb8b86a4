"""Fixtures for the searcher tests: building experiment configs and driving searchers."""

from __future__ import annotations

from collections import deque
from typing import Any

import pytest

from dauntless.config import ExperimentConfig, parse_experiment_config
from dauntless.searcher import (
    Close,
    Create,
    ExitedReason,
    Operation,
    Searcher,
    Shutdown,
    ValidateAfter,
    operation_to_json,
)


def build_config(
    searcher: dict[str, Any], hyperparameters: dict[str, Any] | None = None, **extra: Any
) -> ExperimentConfig:
    raw: dict[str, Any] = {"searcher": {"metric": "loss", **searcher}}
    raw["hyperparameters"] = hyperparameters or {}
    raw.update(extra)
    return parse_experiment_config(raw)


@pytest.fixture
def make_config():
    """``make_config(searcher_dict, hyperparameters=None, **top_level_fields)``."""
    return build_config


class Master:
    """A minimal stand-in for the master: applies operations in order the way the real
    one does (``on_trial_created`` right after ``Create``) and remembers what it saw."""

    def __init__(self, searcher: Searcher) -> None:
        self.searcher = searcher
        self.log: list[dict[str, Any]] = []
        self.targets: dict[str, int] = {}
        self.closing: list[str] = []
        self.created: list[Create] = []
        self.shutdown: Shutdown | None = None

    def apply(self, ops: list[Operation]) -> list[Operation]:
        seen: list[Operation] = []
        queue = deque(ops)
        while queue:
            op = queue.popleft()
            seen.append(op)
            self.log.append(operation_to_json(op))
            if isinstance(op, Create):
                assert self.shutdown is None
                self.created.append(op)
                queue.extend(self.searcher.on_trial_created(op.request_id))
            elif isinstance(op, ValidateAfter):
                self.targets[op.request_id] = op.length
            elif isinstance(op, Close):
                self.targets.pop(op.request_id, None)
                self.closing.append(op.request_id)
            elif isinstance(op, Shutdown):
                assert self.shutdown is None, "Shutdown returned twice"
                self.shutdown = op
        return seen

    def start(self) -> list[Operation]:
        return self.apply(self.searcher.initial_operations())

    def validate(self, request_id: str, metric: float) -> list[Operation]:
        length = self.targets[request_id]
        return self.apply(self.searcher.on_validation_completed(request_id, metric, length))

    def close(self, request_id: str) -> list[Operation]:
        self.closing.remove(request_id)
        return self.apply(self.searcher.on_trial_closed(request_id))

    def exit_early(self, request_id: str, reason: ExitedReason) -> list[Operation]:
        """As the real master does: the early exit, then the close, ops concatenated."""
        self.targets.pop(request_id, None)
        if request_id in self.closing:
            self.closing.remove(request_id)
        ops = self.searcher.on_trial_exited_early(request_id, reason)
        ops += self.searcher.on_trial_closed(request_id)
        return self.apply(ops)


@pytest.fixture
def master_for():
    """``master_for(searcher) -> Master``."""
    return Master
