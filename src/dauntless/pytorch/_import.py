"""Importing a trial class named ``module:Class`` from a directory."""

from __future__ import annotations

import importlib
import os
import sys

from ._trial import PyTorchTrial


class EntrypointError(ValueError):
    """The experiment's ``entrypoint`` names no usable trial class: a config mistake,
    reported as one line (no traceback)."""


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
        EntrypointError: if ``entrypoint`` is not of the form ``module:Class``, its module
            is not in the directory, the module has no such class, or the object is not
            a PyTorchTrial subclass (each a ValueError).
        Exception: whatever importing the module raises from its own code (an error of
            the model definition, such as a missing dependency).
    """
    if not isinstance(entrypoint, str):
        raise EntrypointError(f"entrypoint must be 'module:Class', got {entrypoint!r}")
    module_name, sep, qualname = entrypoint.partition(":")
    if not sep or not module_name or not qualname:
        raise EntrypointError(f"entrypoint must be 'module:Class', got {entrypoint!r}")
    path = os.path.abspath(context_dir or os.getcwd())
    if path not in sys.path:
        sys.path.insert(0, path)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name != module_name.split(".")[0] and exc.name != module_name:
            raise  # the model definition imports something that is missing
        raise EntrypointError(
            f"entrypoint {entrypoint!r}: no module {module_name!r} in the model "
            f"definition directory {path}"
        ) from None
    obj: object = module
    for part in qualname.split("."):
        if not hasattr(obj, part):
            classes = sorted(
                name
                for name, value in vars(module).items()
                if isinstance(value, type)
                and issubclass(value, PyTorchTrial)
                and value is not PyTorchTrial
            )
            raise EntrypointError(
                f"entrypoint {entrypoint!r}: module {module_name!r} has no {qualname!r}"
                + (f"; its trial classes: {', '.join(classes)}" if classes else "")
            )
        obj = getattr(obj, part)
    if not isinstance(obj, type) or not issubclass(obj, PyTorchTrial):
        raise EntrypointError(
            f"entrypoint {entrypoint!r} must name a subclass of "
            f"dauntless.pytorch.PyTorchTrial, got {obj!r}"
        )
    return obj


def class_spec(cls: type) -> str:
    """The ``module:QualName`` that :func:`load_trial_class` imports ``cls`` by."""
    return f"{cls.__module__}:{cls.__qualname__}"
