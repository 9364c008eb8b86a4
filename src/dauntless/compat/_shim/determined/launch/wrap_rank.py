"""``python -m determined.launch.wrap_rank``: runs :mod:`dauntless.launch.wrap_rank`."""

import sys

from dauntless.launch.wrap_rank import main, resolve_rank  # noqa: F401

if __name__ == "__main__":
    sys.exit(main())
