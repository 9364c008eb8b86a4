"""Checkpoint garbage collection: which checkpoints a GC policy keeps.

Pure: the master gathers checkpoints and their validation metrics, this module decides.

Rule (Determined's, reference §7.4): each checkpoint is joined to the validation its trial
reported at the same ``total_batches``. Ranks start at 1:

- ``experiment_rank``: by searcher metric over every checkpoint of the experiment;
- ``trial_rank``: by searcher metric within its trial;
- ``trial_order_rank``: by ``total_batches``, newest first, within its trial.

A checkpoint is deleted iff ``((experiment_rank > save_experiment_best and trial_rank >
save_trial_best) or it has no validation) and trial_order_rank > save_trial_latest``.
Ties in the metric rank the older checkpoint (fewer batches) first.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class GCPolicy:
    """How many checkpoints to keep (non-negative counts)."""

    save_experiment_best: int = 0
    save_trial_best: int = 1
    save_trial_latest: int = 1

    def __post_init__(self) -> None:
        for name in ("save_experiment_best", "save_trial_best", "save_trial_latest"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"{name} must be an int >= 0, got {value!r}")


@dataclass(frozen=True)
class CheckpointFacts:
    """What GC needs to know of one checkpoint.

    Attributes:
        uuid: the checkpoint's id.
        trial_id: its trial.
        total_batches: batches trained when it was taken.
        metric: the searcher metric of the validation at the same ``total_batches``, or
            None if there was none (or it was not a finite number).
    """

    uuid: str
    trial_id: int
    total_batches: int
    metric: float | None


def checkpoints_to_delete(
    checkpoints: Iterable[CheckpointFacts], policy: GCPolicy, smaller_is_better: bool
) -> set[str]:
    """The uuids that ``policy`` does not keep (see the module docstring for the rule).

    Args:
        checkpoints: the experiment's live (not yet deleted) checkpoints.
        policy: the counts to keep.
        smaller_is_better: direction of the searcher metric.

    Returns:
        The uuids to delete.
    """
    items = list(checkpoints)
    sign = 1.0 if smaller_is_better else -1.0

    def metric_key(c: CheckpointFacts) -> tuple[float, int, str]:
        return (sign * float(c.metric), c.total_batches, c.uuid)  # type: ignore[arg-type]

    with_metric = [c for c in items if c.metric is not None and math.isfinite(c.metric)]
    exp_rank = {c.uuid: i + 1 for i, c in enumerate(sorted(with_metric, key=metric_key))}
    trial_rank: dict[str, int] = {}
    order_rank: dict[str, int] = {}
    by_trial: dict[int, list[CheckpointFacts]] = {}
    for c in items:
        by_trial.setdefault(c.trial_id, []).append(c)
    for group in by_trial.values():
        ranked = sorted((c for c in group if c.uuid in exp_rank), key=metric_key)
        trial_rank.update({c.uuid: i + 1 for i, c in enumerate(ranked)})
        newest = sorted(group, key=lambda c: (-c.total_batches, c.uuid))
        order_rank.update({c.uuid: i + 1 for i, c in enumerate(newest)})
    doomed = set()
    for c in items:
        if c.uuid in exp_rank:
            by_metric = (
                exp_rank[c.uuid] > policy.save_experiment_best
                and trial_rank[c.uuid] > policy.save_trial_best
            )
        else:
            by_metric = True
        if by_metric and order_rank[c.uuid] > policy.save_trial_latest:
            doomed.add(c.uuid)
    return doomed
