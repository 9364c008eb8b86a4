"""Importing a trial class named ``module:Class`` from a directory."""

from __future__ import annotations

import importlib
import os
import sys

from ._trial import PyTorchTrial


def load_trial_class(entrypoint: str, context_dir: str | None = None) -> type[PyTorchTrial]:
    """Import the trial class an entrypoint names.

    Args:
        entrypoint: ``module:Class`` (``Class`` may be dotted for a nested class), e.g.
            ``model_def:DigitsTrial``.
        context_dir: directory put first on ``sys.path`` so that the module is found
            there (the task's work dir); the current directory when None.

    Returns:
        The class, a subclass of :class:`~dauntless.pytorch.PyTorchTrial`.

    Raises:
        ValueError: if ``entrypoint`` is not of the form ``module:Class``.
        ImportError: if the module cannot be imported.
        AttributeError: if the module has no such class.
        TypeError: if the object is not a PyTorchTrial subclass.
    """
    if not isinstance(entrypoint, str):
        raise ValueError(f"entrypoint must be 'module:Class', got {entrypoint!r}")
    module_name, sep, qualname = entrypoint.partition(":")
    if not sep or not module_name or not qualname:
        raise ValueError(f"entrypoint must be 'module:Class', got {entrypoint!r}")
    path = os.path.abspath(context_dir or os.getcwd())
    if path not in sys.path:
        sys.path.insert(0, path)
    module = importlib.import_module(module_name)
    obj: object = module
    for part in qualname.split("."):
        if not hasattr(obj, part):
            raise AttributeError(
                f"entrypoint {entrypoint!r}: module {module_name!r} has no {qualname!r}"
            )
        obj = getattr(obj, part)
    if not isinstance(obj, type) or not issubclass(obj, PyTorchTrial):
        raise TypeError(
            f"entrypoint {entrypoint!r} must name a subclass of "
            f"dauntless.pytorch.PyTorchTrial, got {obj!r}"
        )
    return obj


def class_spec(cls: type) -> str:
    """The ``module:QualName`` that :func:`load_trial_class` imports ``cls`` by."""
    return f"{cls.__module__}:{cls.__qualname__}"
