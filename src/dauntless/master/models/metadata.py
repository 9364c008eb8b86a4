"""Metadata and status set after the fact (issue 31 scope 3): a trial's metadata
(``core.train.set_metadata`` / ``get_metadata``), the status its code sets
(``core.train.set_status``), and a checkpoint's metadata edited once it is stored.
Rows only; the caller's write session commits.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from ..db import CheckpointRow
from ..errors import BadRequest, NotFound
from . import registered, trials

MAX_STATUS = 256
"""The longest status a trial may set, in characters."""


def merge(base: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """``base`` with ``new`` merged in: objects present in both are merged key by key
    (recursively), any other value of ``new`` replaces ``base``'s."""
    out = dict(base)
    for key, value in new.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


def set_trial_status(s: Session, trial_id: int, status: str) -> None:
    """Set the status the trial's code reports (``core.train.set_status``; shown by the
    CLI and WebUI while it runs).

    Raises:
        NotFound: no such trial. BadRequest: over :data:`MAX_STATUS` characters.
    """
    if len(status) > MAX_STATUS:
        raise BadRequest("status too long", [("metadata.state", f"at most {MAX_STATUS}")])
    trial, _exp = trials.get_trial(s, trial_id)
    trial.runner_state = status


def merge_trial_metadata(s: Session, trial_id: int, metadata: dict[str, Any]) -> dict[str, Any]:
    """Merge ``metadata`` into the trial's (:func:`merge`); the metadata after.

    Raises:
        NotFound: no such trial.
    """
    trial, _exp = trials.get_trial(s, trial_id)
    trial.meta = merge(trial.meta or {}, metadata)
    return trial.meta


def read_trial_metadata(s: Session, trial_id: int) -> dict[str, Any]:
    """The trial's metadata (``{}`` when none was set).

    Raises:
        NotFound: no such trial.
    """
    trial, _exp = trials.get_trial(s, trial_id)
    return dict(trial.meta or {})


def set_checkpoint_metadata(s: Session, uuid: str, metadata: dict[str, Any]) -> dict[str, Any]:
    """Replace a checkpoint's metadata (the SDK's ``add_metadata``/``remove_metadata``
    read, change and send it whole, as Determined's do); the metadata after.

    Raises:
        NotFound: no such checkpoint. Conflict: a model version names it (its versions
            keep the metadata it was registered with), naming them.
    """
    ckpt = s.get(CheckpointRow, uuid)
    if ckpt is None:
        raise NotFound(f"checkpoint {uuid} not found")
    registered.refuse_registered(s, uuid, "have its metadata changed")
    ckpt.meta = dict(metadata)
    return ckpt.meta
