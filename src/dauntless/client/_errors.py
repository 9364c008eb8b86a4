"""Exceptions raised by the client: master answers, unreachable masters, bad contexts."""

from __future__ import annotations

from typing import Any


class ClientError(Exception):
    """Base class of every error the client raises on purpose."""


class APIError(ClientError):
    """The master answered a request with an error status.

    Attributes:
        status: the HTTP status code (400 bad input, 404 no such object, 409 illegal state
            transition, 413 context too large, 5xx a master bug).
        detail: the master's one-line message (``detail`` of the error body).
        errors: the field errors of the body, each ``{"field": str, "message": str}``;
            empty when the master named none.
    """

    def __init__(self, status: int, detail: str, errors: list[dict[str, str]] | None = None):
        self.status = status
        self.detail = detail
        self.errors = list(errors or [])
        super().__init__(f"HTTP {status}: {detail}")

    @classmethod
    def from_body(cls, status: int, body: Any, fallback: str) -> APIError:
        """Build the error from a decoded error body.

        Understands the protocol's ``{"detail": str, "errors": [{field, message}]}`` and
        FastAPI's request-validation shape ``{"detail": [{"loc": [...], "msg": str}]}``.

        Args:
            status: the HTTP status code.
            body: the decoded JSON body, or None when the body was not JSON.
            fallback: the message to use when the body carries none (for example the
                response text or reason phrase).

        Returns:
            The error.
        """
        detail: str = fallback
        errors: list[dict[str, str]] = []
        if isinstance(body, dict):
            raw_detail = body.get("detail")
            if isinstance(raw_detail, str) and raw_detail:
                detail = raw_detail
            elif isinstance(raw_detail, list):
                detail = "the request was invalid"
                errors.extend(_fastapi_errors(raw_detail))
            raw_errors = body.get("errors")
            if isinstance(raw_errors, list):
                for item in raw_errors:
                    if isinstance(item, dict):
                        errors.append(
                            {
                                "field": str(item.get("field") or ""),
                                "message": str(item.get("message") or ""),
                            }
                        )
        return cls(status, detail, errors)


def _fastapi_errors(items: list[Any]) -> list[dict[str, str]]:
    out = []
    for item in items:
        if not isinstance(item, dict):
            out.append({"field": "", "message": str(item)})
            continue
        loc = [str(p) for p in item.get("loc", [])]
        if loc and loc[0] in ("body", "query", "path", "header", "form"):
            loc = loc[1:]
        out.append({"field": ".".join(loc), "message": str(item.get("msg", ""))})
    return out


class AuthenticationError(APIError):
    """No valid credentials for the master: a token was refused (HTTP 401) and signing in
    again was not possible (wrong password, no password and no terminal to ask on, or a
    ``DET_USER_TOKEN`` the master refuses). ``detail`` says what to do."""

    def __init__(self, detail: str) -> None:
        super().__init__(401, detail)


class MasterUnreachableError(ClientError):
    """No connection to the master could be made, after the retries allowed.

    Attributes:
        master_url: the base URL that was tried.
        reason: a short description of the last failure (for example
            ``"connection refused"``).
    """

    def __init__(self, master_url: str, reason: str) -> None:
        self.master_url = master_url
        self.reason = reason
        super().__init__(f"could not reach the master at {master_url} ({reason})")


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


def _mib(n: int) -> str:
    return f"{n / (1024 * 1024):.1f} MiB"
