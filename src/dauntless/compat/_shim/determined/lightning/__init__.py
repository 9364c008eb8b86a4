"""``determined.lightning``: :mod:`dauntless.integrations.lightning` (needs
``dauntless[lightning]``). Determined 0.38 had only an experimental ``DetLogger`` here;
it is here, and Dauntless's ``DeterminedCallback`` reports metrics, checkpoints, resumes
and preempts."""

from dauntless.integrations.lightning import DeterminedCallback, DetLogger  # noqa: F401

__all__ = ["DetLogger", "DeterminedCallback"]
