"""Exceptions raised by the client: master answers, unreachable masters, bad contexts.

:class:`ClientError`, :class:`APIError` and :class:`MasterUnreachableError` are the one
error hierarchy of every client of the master (:mod:`dauntless._http`); the client adds
what only it raises.
"""

from __future__ import annotations

from dauntless._http import APIError, ClientError, MasterUnreachableError


class AuthenticationError(APIError):
    """No valid credentials for the master: a token was refused (HTTP 401) and signing in
    again was not possible (wrong password, no password and no terminal to ask on, or a
    ``DET_USER_TOKEN`` the master refuses). ``detail`` says what to do."""

    def __init__(self, detail: str) -> None:
        super().__init__(401, detail)


class ContextError(ClientError, ValueError):
    """The context directory cannot be packed (missing, not a directory, unreadable)."""


class ContextTooLargeError(ContextError):
    """The context directory is larger than the master accepts.

    Attributes:
        size: the measured size in bytes (the sum of file sizes, or the compressed size).
        limit: the limit in bytes.
        what: which size was measured: ``"files"`` or ``"compressed"``.
    """

    def __init__(self, path: str, size: int, limit: int, what: str) -> None:
        self.size = size
        self.limit = limit
        self.what = what
        kind = "the files in it add up to" if what == "files" else "its compressed archive is"
        super().__init__(
            f"the context directory {path} is too large: {kind} {_mib(size)} "
            f"({size} bytes), over the limit of {_mib(limit)} ({limit} bytes). Move data "
            "sets out of the context (load them in the data loader instead) or list large "
            "files in a .detignore file"
        )


__all__ = [
    "APIError",
    "AuthenticationError",
    "ClientError",
    "ContextError",
    "ContextTooLargeError",
    "MasterUnreachableError",
]


def _mib(n: int) -> str:
    return f"{n / (1024 * 1024):.1f} MiB"
