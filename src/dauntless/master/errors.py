"""The master's domain errors, which the app's exception handlers turn into HTTP answers.

They live in this leaf module (it imports nothing of the master) so that every module of
``master/`` (the model functions, the loop, the routes) can raise them without an import
circle.
"""

from __future__ import annotations

MAX_CONTEXT_BYTES = 95 * 1024 * 1024
"""Largest accepted context directory tarball, in bytes (Determined's limit, seed 001);
a larger one is answered 413."""


class NotFound(LookupError):
    """The named object does not exist (the API answers 404)."""


class BadRequest(ValueError):
    """The request is invalid (the API answers 400); ``errors`` lists (field, message).

    Args:
        message: the one-line ``detail``.
        errors: ``(field, message)`` pairs naming the offending fields; none by default.
    """

    def __init__(self, message: str, errors: list[tuple[str, str]] | None = None) -> None:
        super().__init__(message)
        self.errors = errors or []


class TooLarge(BadRequest):
    """The upload is larger than a limit (the API answers 413); ``errors`` as
    :class:`BadRequest`'s."""


class Conflict(Exception):
    """The request conflicts with the object's state (the API answers 409)."""


class Forbidden(PermissionError):
    """The caller may not do this to this object (the API answers 403); the message
    names the rule."""


__all__ = ["MAX_CONTEXT_BYTES", "BadRequest", "Conflict", "Forbidden", "NotFound", "TooLarge"]
