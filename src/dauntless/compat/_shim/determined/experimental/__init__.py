"""``determined.experimental``: :mod:`dauntless.experimental`."""

from dauntless.experimental import *  # noqa: F403
from dauntless.experimental import __all__  # noqa: F401
