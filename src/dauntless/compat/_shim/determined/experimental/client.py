"""``determined.experimental.client``: Determined's SDK, :mod:`dauntless.sdk`."""

from dauntless.sdk import *  # noqa: F403
from dauntless.sdk import __all__  # noqa: F401
