"""``determined.core``: :mod:`dauntless.core`."""

from dauntless.core import *  # noqa: F403
from dauntless.core import __all__  # noqa: F401
