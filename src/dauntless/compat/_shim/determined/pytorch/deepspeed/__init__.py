"""``determined.pytorch.deepspeed``: :mod:`dauntless.pytorch.deepspeed`."""

from dauntless.pytorch.deepspeed import *  # noqa: F403
from dauntless.pytorch.deepspeed import __all__  # noqa: F401
