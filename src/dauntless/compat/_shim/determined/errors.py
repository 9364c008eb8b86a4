"""``determined.errors``: the exception classes Determined's user code catches or raises."""

from dauntless.errors import *  # noqa: F403
from dauntless.errors import __all__  # noqa: F401
