"""The one HTTP layer of the master's clients: the SDK and CLI (``dauntless.client``), the
Core API inside trials (``dauntless.core``, its httpx session and its ``http.client``
lite client), the agent and the launcher.

It holds what they share:

- one error hierarchy: :class:`ClientError`, with :class:`APIError` (the master answered
  an error status) and :class:`MasterUnreachableError` (no answer could be had);
- one retry policy, :class:`RetryPolicy`: which failures are worth another attempt,
  how many attempts, and the delay before each (exponential backoff with "equal jitter"),
  applied by one loop, :meth:`RetryPolicy.call`.

TLS is set up in :mod:`dauntless._tls` (one option, ``DET_MASTER_CERT_FILE``), which every
client uses to build its ``verify`` / SSL context.

The clients' own requests log at DEBUG only (:func:`internal_client`): httpx logs every
request at INFO, and a trial whose code calls ``logging.basicConfig(level=logging.INFO)``
(as Determined's tutorials do) would otherwise show one line per metrics report or
checkpoint of the harness among its own (issue 38).

The retry loop is written here rather than taken from a library: tenacity, the usual
choice, costs about 100 ms to import on the machines this was measured on (it imports
asyncio, and tornado where that is installed), and this module is on the path of every
trial's start (``import dauntless.core``); urllib3's ``Retry`` drives only urllib3, which
none of these clients use. The loop needs to see both exceptions and answers, and takes its
``sleep`` from the caller so that tests and the agent (which waits on its stop event)
control the waiting. This module imports nothing beyond the standard library and
:mod:`dauntless._tls`.
"""

from __future__ import annotations

import contextvars
import logging
import random
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from dauntless._tls import is_cert_verify_error

if TYPE_CHECKING:
    import httpx

#: Answers worth another attempt: a master that is (re)starting behind a proxy (502, 503,
#: 504) or failed on one request (500).
RETRY_STATUSES = frozenset({500, 502, 503, 504})
#: Methods that may be sent again after a request reached the master (RFC 9110 9.2.2).
IDEMPOTENT_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "PUT", "DELETE"})

R = TypeVar("R")


class ClientError(Exception):
    """Base class of every error a client of the master raises on purpose."""


class APIError(ClientError):
    """The master answered a request with an error status.

    Attributes:
        status: the HTTP status code (400 bad input, 401 no valid credentials, 403 not
            allowed, 404 no such object, 409 illegal state transition, 413 too large,
            5xx a master bug or a master that is not up).
        status_code: the same as ``status``.
        detail: the master's one-line message (``detail`` of the error body), or the
            answer's text.
        errors: the field errors of the body, each ``{"field": str, "message": str}``;
            empty when the master named none.
        method, path: the request that failed, when the client gave them (the message
            then names them).
    """

    def __init__(
        self,
        status: int,
        detail: str,
        errors: list[dict[str, str]] | None = None,
        *,
        method: str | None = None,
        path: str | None = None,
    ) -> None:
        self.status = status
        self.detail = detail
        self.errors = list(errors or [])
        self.method = method
        self.path = path
        if method and path:
            super().__init__(f"{method} {path} answered {status}: {detail}")
        else:
            super().__init__(f"HTTP {status}: {detail}")

    @property
    def status_code(self) -> int:
        """The HTTP status code (an alias of ``status``)."""
        return self.status

    @classmethod
    def from_body(
        cls,
        status: int,
        body: Any,
        fallback: str,
        *,
        method: str | None = None,
        path: str | None = None,
    ) -> APIError:
        """Build the error from a decoded error body.

        Understands the protocol's ``{"detail": str, "errors": [{field, message}]}`` and
        FastAPI's request-validation shape ``{"detail": [{"loc": [...], "msg": str}]}``.

        Args:
            status: the HTTP status code.
            body: the decoded JSON body, or None when the body was not JSON.
            fallback: the message to use when the body carries none (for example the
                response text or reason phrase).
            method, path: the request, named in the message when given.

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
            elif raw_detail is not None:
                detail = str(raw_detail)
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
        return cls(status, detail, errors, method=method, path=path)


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


class MasterUnreachableError(ClientError, ConnectionError):
    """No answer could be had from the master (connection refused, reset or timed out, or
    its TLS certificate failed verification), after the retries allowed.

    Attributes:
        master_url: the base URL that was tried.
        reason: a short description of the last failure (for example
            ``"connection refused"``).

    Args:
        master_url: see above.
        reason: see above.
        message: the whole message, when the caller words it itself; by default
            ``could not reach the master at <url> (<reason>)``.
    """

    def __init__(self, master_url: str, reason: str, *, message: str | None = None) -> None:
        self.master_url = master_url
        self.reason = reason
        super().__init__(message or f"could not reach the master at {master_url} ({reason})")


class RetryPolicy:
    """How requests to the master are retried: the one policy of every client.

    A request is sent up to ``attempts`` times in all (None: until it succeeds, for the
    agent, whose master may be down for long). Before retry ``k`` (1-based) the caller
    sleeps a delay drawn uniformly from ``[d/2, d]`` with
    ``d = min(max_backoff, backoff * 2**(k-1))`` seconds ("equal jitter": M. Brooker,
    "Exponential Backoff And Jitter", AWS Architecture Blog, 2015).

    What is retried (:meth:`retryable_status`, and the caller's ``retry_error``): a
    failure to connect (nothing was sent) always; a failure after sending, and the
    answers of :data:`RETRY_STATUSES`, when the request may be repeated (an idempotent
    method, or a client whose every route is safe to repeat: ``repeatable``).

    Args:
        attempts: attempts per request in all (>= 1), or None for no limit.
        backoff: seconds; the first delay's cap (>= 0).
        max_backoff: seconds; the largest delay cap (>= ``backoff``).
        repeatable: every request of this client may be sent again (the harness routes
            of docs/protocol.md are: metrics are idempotent on ``(trial, group,
            steps_completed)``, the other routes set state).
        sleep: waits between attempts (seconds); tests pass a recorder, the agent its
            stop event's ``wait``.
        rng: the random source of the jitter.

    Raises:
        ValueError: if a number is out of range (the message names it).
    """

    # A plain class rather than a dataclass: @dataclass generates code at import time,
    # and this module is imported on every trial's start.
    def __init__(
        self,
        attempts: int | None = 5,
        backoff: float = 0.25,
        max_backoff: float = 4.0,
        repeatable: bool = False,
        sleep: Callable[[float], Any] = time.sleep,
        rng: random.Random | None = None,
    ) -> None:
        if attempts is not None and (
            isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 1
        ):
            raise ValueError(f"attempts must be an int >= 1 or None, got {attempts!r}")
        if not 0 <= backoff <= max_backoff:
            raise ValueError(
                f"need 0 <= backoff <= max_backoff, got backoff={backoff}, "
                f"max_backoff={max_backoff}"
            )
        self.attempts = attempts
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.repeatable = repeatable
        self.sleep = sleep
        self.rng = rng if rng is not None else random.Random()

    def __repr__(self) -> str:
        return (
            f"RetryPolicy(attempts={self.attempts}, backoff={self.backoff}, "
            f"max_backoff={self.max_backoff}, repeatable={self.repeatable})"
        )

    def delay(self, retry: int) -> float:
        """Seconds to wait before retry number ``retry`` (1-based), with equal jitter."""
        cap = min(self.max_backoff, self.backoff * 2 ** min(retry - 1, 64))
        return cap / 2 + self.rng.uniform(0, cap / 2)

    def may_resend(self, method: str) -> bool:
        """Whether a request that reached the master may be sent again."""
        return self.repeatable or method.upper() in IDEMPOTENT_METHODS

    def retryable_status(self, method: str, status: int) -> bool:
        """Whether an answer with ``status`` to a ``method`` request is worth a retry."""
        return status in RETRY_STATUSES and self.may_resend(method)

    def retryable_error(self, method: str, exc: BaseException, *, sent: bool) -> bool:
        """Whether a request that failed with ``exc`` (no answer) is worth a retry.

        Args:
            method: the request's method.
            exc: the failure.
            sent: whether the request may have reached the master (False when the
                connection could not even be opened).

        A failed certificate verification is never retried: it is not transient.
        """
        if is_cert_verify_error(exc):
            return False
        return not sent or self.may_resend(method)

    def call(
        self,
        send: Callable[[], R],
        *,
        retry_error: Callable[[Exception], bool],
        retry_result: Callable[[R], bool] = lambda _: False,
        stopped: Callable[[], bool] = lambda: False,
    ) -> R:
        """Call ``send`` until it succeeds or the policy gives up.

        Args:
            send: one attempt; returns an answer or raises.
            retry_error: whether an exception of ``send`` is worth another attempt.
            retry_result: whether an answer is worth another attempt (a 503, say).
            stopped: checked before each retry; when true the last outcome stands.

        Returns:
            The first answer not to be retried, or the last one when the attempts are
            spent.

        Raises:
            Exception: what ``send`` raised last, when it is not retried or the attempts
                are spent.
        """
        retry = 0
        while True:
            last = self.attempts is not None and retry + 1 >= self.attempts
            try:
                result = send()
            except Exception as exc:
                if last or stopped() or not retry_error(exc):
                    raise
            else:
                if last or stopped() or not retry_result(result):
                    return result
            retry += 1
            self.sleep(self.delay(retry))


#: The loggers of the HTTP library under the clients whose records above DEBUG are ours to
#: lower: httpx logs each request at INFO (``HTTP Request: POST ... "HTTP/1.1 200 OK"``);
#: httpcore, under it, logs at DEBUG only.
LIBRARY_LOGGERS = ("httpx",)

#: True while one of our clients sends a request (in this thread or task).
_SENDING: contextvars.ContextVar[bool] = contextvars.ContextVar("dauntless_sending", default=False)


class _OwnRequestsAtDebug(logging.Filter):
    """Lowers to DEBUG the INFO records that a library logs while one of our clients sends
    a request, and drops them unless their logger is enabled for DEBUG.

    A filter on the library's logger runs before any handler sees the record, so a
    handler of the root logger set up by ``logging.basicConfig(level=logging.INFO)``
    never gets it, while ``level=logging.DEBUG`` shows it as a DEBUG line. Requests that
    user code sends with httpx itself keep their INFO records.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        if not _SENDING.get() or not logging.DEBUG < record.levelno < logging.WARNING:
            return True
        record.levelno = logging.DEBUG
        record.levelname = logging.getLevelName(logging.DEBUG)
        return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)


_FILTER = _OwnRequestsAtDebug()
_CLIENT_CLASS: type[httpx.Client] | None = None


def internal_client(**kwargs: Any) -> httpx.Client:
    """An ``httpx.Client`` for talking to the master whose requests log at DEBUG only.

    The client marks every request it sends (``send``, which ``get``, ``post``,
    ``request`` and ``stream`` go through), and a filter on the loggers of
    :data:`LIBRARY_LOGGERS`, installed once, lowers the INFO records emitted meanwhile
    to DEBUG (see :class:`_OwnRequestsAtDebug`). httpx is imported on the first call,
    not with this module.

    Args:
        **kwargs: ``httpx.Client``'s arguments (``base_url``, ``timeout``, ``verify``,
            ``transport``, ``headers``...).

    Returns:
        The client (an ``httpx.Client`` subclass; close it as any other).
    """
    global _CLIENT_CLASS
    if _CLIENT_CLASS is None:
        import httpx

        class _InternalClient(httpx.Client):
            def send(self, request: httpx.Request, **kw: Any) -> httpx.Response:
                token = _SENDING.set(True)
                try:
                    return super().send(request, **kw)
                finally:
                    _SENDING.reset(token)

        for name in LIBRARY_LOGGERS:
            logger = logging.getLogger(name)
            if _FILTER not in logger.filters:
                logger.addFilter(_FILTER)
        _CLIENT_CLASS = _InternalClient
    return _CLIENT_CLASS(**kwargs)


__all__ = [
    "IDEMPOTENT_METHODS",
    "LIBRARY_LOGGERS",
    "RETRY_STATUSES",
    "APIError",
    "ClientError",
    "MasterUnreachableError",
    "RetryPolicy",
    "internal_client",
]
