"""``dauntless.experimental`` (Determined's ``determined.experimental``): a quick check of a
trial class before submitting it. Determined's SDK (``determined.experimental.client``)
is :mod:`dauntless.sdk`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["test_one_batch"]


def test_one_batch(
    trial_class: type | None = None,
    config: Mapping[str, Any] | None = None,
    *,
    hparams: Mapping[str, Any] | None = None,
) -> Any:
    """Build ``trial_class`` locally, train one batch, validate one batch, checkpoint.

    The Trainer's ``test_mode`` in local mode (no master; checkpoints go to the local
    default directory).

    Args:
        trial_class: a :class:`dauntless.pytorch.PyTorchTrial` subclass.
        config: an experiment config (dict); its constant hyperparameters are used when
            ``hparams`` is None.
        hparams: hyperparameter values.

    Returns:
        The trial object after the test.

    Raises:
        ValueError: when no trial class is given.
        TypeError: when ``trial_class`` is not a PyTorchTrial subclass.
        Any error of the trial's code.
    """
    from dauntless import pytorch

    if trial_class is None:
        raise ValueError("test_one_batch needs trial_class (a PyTorchTrial subclass)")
    if not isinstance(trial_class, type) or not issubclass(trial_class, pytorch.PyTorchTrial):
        raise TypeError(f"trial_class must be a PyTorchTrial subclass, got {trial_class!r}")
    with pytorch.init(hparams=hparams, exp_conf=dict(config) if config else None) as context:
        trial = trial_class(context)
        pytorch.Trainer(trial, context).fit(max_length=pytorch.Batch(1), test_mode=True)
    return trial
