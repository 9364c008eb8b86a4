"""``python -m dauntless.compat``: print the directory to put on ``PYTHONPATH`` so that
``import determined`` resolves to Dauntless (see :mod:`dauntless.compat`)."""

from dauntless.compat import SHIM_PATH

print(SHIM_PATH)
