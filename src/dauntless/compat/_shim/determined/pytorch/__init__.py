"""``determined.pytorch``: :mod:`dauntless.pytorch`."""

from dauntless.pytorch import *  # noqa: F403
from dauntless.pytorch import (
    __all__,  # noqa: F401
    samplers,  # noqa: F401
)
