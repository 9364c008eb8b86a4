"""Bit-identical parameter checks for the exact-resume integration tests, with what a
failure needs to be diagnosed: how far each parameter is off, the checkpoints each
experiment recorded (which run wrote them, at which batch) and the trials' logs."""

from __future__ import annotations

from typing import Any

import torch


def _checkpoint_history(cluster: Any, exp_id: int) -> str:
    rows = cluster.api(f"/experiments/{exp_id}/checkpoints")["checkpoints"]
    return "\n".join(
        f"  {c['uuid']} batches={c['total_batches']} state={c['state']} "
        f"allocation={c.get('allocation_id')}"
        for c in sorted(rows, key=lambda c: (c["total_batches"], c["uuid"]))
    )


def assert_identical_params(
    actual: dict[str, torch.Tensor],
    expected: dict[str, torch.Tensor],
    cluster: Any,
    exp_ids: tuple[int, ...],
) -> None:
    """Fail unless every parameter of ``actual`` equals ``expected`` bit for bit.

    Args:
        actual: the resumed run's model state dict.
        expected: the uninterrupted run's.
        cluster: the test cluster whose experiments produced ``actual`` (for the logs).
        exp_ids: those experiments' ids.

    Raises:
        AssertionError: the keys differ, or a parameter differs; the message gives each
            differing parameter's count of unequal elements and largest absolute
            difference, the experiments' checkpoints and the trial logs.
    """
    assert actual.keys() == expected.keys()
    diffs = []
    for name in actual:
        a, b = actual[name], expected[name]
        if not torch.equal(a, b):
            unequal = int((a != b).sum())
            worst = float((a.double() - b.double()).abs().max())
            diffs.append(f"{name}: {unequal} of {a.numel()} elements, max |diff| {worst:.3e}")
    if not diffs:
        return
    report = ["parameters differ from the uninterrupted run:", *diffs]
    for exp_id in exp_ids:
        report.append(
            f"checkpoints of experiment {exp_id}:\n{_checkpoint_history(cluster, exp_id)}"
        )
    report.append(cluster.dump_logs(exp_ids))
    raise AssertionError("\n".join(report))
