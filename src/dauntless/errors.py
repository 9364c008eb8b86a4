"""Exception classes of the model-definition API, under Determined's names
(``determined.errors``) so that code catching them keeps working."""

from __future__ import annotations

from typing import Any


class InternalException(Exception):
    """A bug in the platform, not in the user's code.

    Args:
        message: what went wrong.
    """

    def __init__(self, message: str) -> None:
        self.message = f"Internal error: {message}. Please report it to the Dauntless developers."
        super().__init__(self.message)

    def __str__(self) -> str:
        return self.message


class InvalidExperimentException(BaseException):
    """The experiment cannot run as defined (a ``BaseException``, as in Determined, so
    that a broad ``except Exception`` in user code does not swallow it).

    Args:
        message: why.
    """

    def __init__(self, message: str) -> None:
        super().__init__(message)


class InvalidDataTypeException(InvalidExperimentException):
    """A value of the wrong type was given to the API.

    Args:
        type: the offending type.
        message: what was expected.
    """

    def __init__(self, type: type, message: str) -> None:  # noqa: A002 - Determined's name
        super().__init__(f"Invalid data type ({type.__name__}): {message}.")


class InvalidConfigurationException(InvalidExperimentException):
    """The experiment config cannot be used.

    Args:
        config: the config (as a dict).
        message: what is wrong with it.
    """

    def __init__(self, config: dict[str, Any], message: str) -> None:
        super().__init__(f"Invalid configuration ({config}): {message}.")


class WorkerError(Exception):
    """A worker process failed for an unknown reason."""


class WorkerFinishedGracefully(Exception):
    """A worker process ended normally while others were still running."""


class SkipWorkloadException(Exception):
    """Raised by a trial to say that the current phase can be skipped."""


__all__ = [
    "InternalException",
    "InvalidConfigurationException",
    "InvalidDataTypeException",
    "InvalidExperimentException",
    "SkipWorkloadException",
    "WorkerError",
    "WorkerFinishedGracefully",
]
