"""Entrypoints that run inside a task process.

``python -m dauntless.exec.harness`` runs a ``PyTorchTrial`` named by the experiment's
``entrypoint`` (``module:Class``), talking to the master per docs/protocol.md.
"""

__all__: list[str] = []
