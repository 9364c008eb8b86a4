"""``determined.keras``: :mod:`dauntless.integrations.keras` (needs ``dauntless[keras]``)."""

from dauntless.integrations.keras import DeterminedCallback  # noqa: F401

__all__ = ["DeterminedCallback"]
