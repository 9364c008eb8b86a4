"""``determined.pytorch.samplers``: :mod:`dauntless.pytorch.samplers`."""

from dauntless.pytorch.samplers import *  # noqa: F403
