"""Launchers that start a task's ranks (``python -m dauntless.launch.torch_distributed``),
the counterpart of Determined's ``determined.launch``."""
