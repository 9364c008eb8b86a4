"""``python -m dauntless.cli``: the same as ``det``."""

import sys

from .main import main

sys.exit(main())
