"""One validation pass of a PyTorchTrial: batches, reducers, metrics.

Reduction follows reference §3.6: each process reduces its batches' values per metric
(``Reducer.AVG`` weighted by batch length), then the per-process results are combined
(AVG weighted by each process's records).
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable
from typing import Any

import torch

from dauntless.core import DistributedContext

from ._data import DataLoader
from ._device import to_device
from ._reducer import Reducer, reduce_values
from ._trial import PyTorchTrial


def takes_batch_idx(trial: PyTorchTrial) -> bool:
    """Whether the trial's ``evaluate_batch`` accepts a ``batch_idx`` argument."""
    params = inspect.signature(trial.evaluate_batch).parameters.values()
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(positional) >= 2 or any(p.kind is p.VAR_POSITIONAL for p in params)


def validation_loader(loader: Any, distributed: DistributedContext, sharded: bool) -> Iterable[Any]:
    """The iterable a validation pass reads: one pass, sharded across processes when
    ``sharded`` (``evaluate_batch``), whole on the chief otherwise (full dataset)."""
    if isinstance(loader, DataLoader):
        if sharded:
            return loader.get_data_loader(num_replicas=distributed.size, rank=distributed.rank)
        return loader.get_data_loader()
    return loader


def evaluate_batches(
    trial: PyTorchTrial,
    loader: Iterable[Any],
    device: torch.device | None,
    *,
    limit: int | None = None,
) -> tuple[list[dict[str, Any]], list[int]]:
    """Run ``evaluate_batch`` over a loader.

    Args:
        trial: the trial.
        loader: the batches (already sharded).
        device: where to move each batch; None leaves them as they are.
        limit: stop after this many batches (test mode); all when None.

    Returns:
        ``(outputs, weights)``: each batch's metrics dict and its length in records.

    Raises:
        TypeError: if ``evaluate_batch`` returns something other than a dict.
        ValueError: if two batches return different metric names.
    """
    with_idx = takes_batch_idx(trial)
    outputs: list[dict[str, Any]] = []
    weights: list[int] = []
    for idx, raw in enumerate(loader):
        if limit is not None and idx >= limit:
            break
        batch = to_device(raw, device) if device is not None else raw
        if with_idx:
            out = trial.evaluate_batch(batch, idx)
        else:
            out = trial.evaluate_batch(batch)  # type: ignore[call-arg]
        if not isinstance(out, dict):
            raise TypeError(f"evaluate_batch must return a dict, got {type(out).__name__}")
        if outputs and out.keys() != outputs[0].keys():
            raise ValueError(
                "evaluate_batch must return the same metric names for every batch: "
                f"{sorted(outputs[0])} then {sorted(out)}"
            )
        outputs.append(out)
        weights.append(trial.get_batch_length(raw))
    return outputs, weights


def _reducer_for(reducers: Any, name: str) -> Reducer:
    if isinstance(reducers, Reducer):
        return reducers
    if isinstance(reducers, dict) and isinstance(reducers.get(name), Reducer):
        return reducers[name]
    raise ValueError(
        f"evaluation_reducer() gives no Reducer for metric {name!r}: return one Reducer, "
        "or a dict with one per metric evaluate_batch returns"
    )


def reduce_outputs(
    outputs: list[dict[str, Any]],
    weights: list[int],
    reducers: Any,
    distributed: DistributedContext,
) -> dict[str, Any]:
    """Reduce per-batch metrics to one value each, within and then across processes.

    Args:
        outputs: this process's per-batch metric dicts (may be empty on a process whose
            shard is empty, but not on all).
        weights: each batch's length in records.
        reducers: what ``evaluation_reducer()`` returned.
        distributed: the process layout (a collective with several processes).

    Returns:
        ``{metric: value}``.

    Raises:
        ValueError: if no process evaluated a batch, a metric has no reducer, or a
            per-metric reducer dict names metrics evaluate_batch did not return.
    """
    local: dict[str, tuple[Any, float]] = {}
    if outputs:
        names = list(outputs[0])
        if isinstance(reducers, dict):
            extra = sorted(set(reducers) - set(names))
            if extra:
                raise ValueError(
                    f"evaluation_reducer() names metrics evaluate_batch does not return: {extra}"
                )
        for name in names:
            reducer = _reducer_for(reducers, name)
            value = reduce_values([o[name] for o in outputs], weights, reducer)
            local[name] = (value, float(sum(weights)))
    gathered = [part for part in distributed.allgather(local) if part]
    if not gathered:
        raise ValueError("the validation data loader yielded no batches")
    if len(gathered) == 1:
        return {name: value for name, (value, _) in gathered[0].items()}
    result: dict[str, Any] = {}
    for name in gathered[0]:
        reducer = _reducer_for(reducers, name)
        values = [part[name][0] for part in gathered]
        totals = [part[name][1] for part in gathered]
        result[name] = reduce_values(values, totals, reducer)
    return result
