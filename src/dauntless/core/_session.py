"""A small JSON-over-HTTP session to the master, with retries for transient failures."""

from __future__ import annotations

import random
import ssl
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import httpx

from dauntless._auth import session_token_headers
from dauntless._http import APIError, MasterUnreachableError, RetryPolicy, internal_client
from dauntless._tls import (
    CERT_FILE_ENV,
    cert_file_from_env,
    default_ssl_context,
    describe_cert_error,
    is_cert_verify_error,
    make_verify,
)


class Session:
    """JSON requests to the master's REST API, retried by the clients' one policy.

    Connection errors, timeouts and the answers of :data:`~dauntless._http.RETRY_STATUSES`
    are retried up to ``max_attempts`` times in all, with the exponential backoff of
    :class:`~dauntless._http.RetryPolicy` (delay caps ``backoff_initial * 2**(k-1)``,
    at most ``backoff_max``). Other 4xx answers are not retried. Every harness route of
    docs/protocol.md is safe to repeat (metrics are idempotent on ``(trial, group,
    steps_completed)``, the others set state), so POSTs are retried too.

    Args:
        master_url: base URL, e.g. ``http://127.0.0.1:8080``; paths are appended to it.
        timeout: seconds to wait for connect, read and write of each attempt.
        max_attempts: attempts per request in all (>= 1).
        backoff_initial: seconds; the first backoff cap (> 0).
        backoff_max: seconds; the largest backoff cap (>= backoff_initial).
        transport: an httpx transport (for example ``httpx.MockTransport`` or an ASGI
            transport); the default opens real connections.
        sleep: the function used to wait between attempts (seconds).
        rng: the random source of the jitter.

    Raises:
        ValueError: if a number is out of range, ``master_url`` is not http(s), or
            ``DET_MASTER_CERT_FILE`` names no readable CA bundle.
    """

    def __init__(
        self,
        master_url: str,
        *,
        timeout: float = 30.0,
        max_attempts: int = 10,
        backoff_initial: float = 0.5,
        backoff_max: float = 20.0,
        transport: httpx.BaseTransport | None = None,
        sleep: Callable[[float], None] = time.sleep,
        rng: random.Random | None = None,
    ) -> None:
        if not isinstance(master_url, str) or not master_url.startswith(("http://", "https://")):
            raise ValueError(f"master_url must be an http:// or https:// URL, got {master_url!r}")
        if timeout <= 0:
            raise ValueError(f"timeout must be > 0 seconds, got {timeout}")
        if not isinstance(max_attempts, int) or max_attempts < 1:
            raise ValueError(f"max_attempts must be an int >= 1, got {max_attempts!r}")
        if backoff_initial <= 0 or backoff_max < backoff_initial:
            raise ValueError(
                "need 0 < backoff_initial <= backoff_max, got "
                f"backoff_initial={backoff_initial}, backoff_max={backoff_max}"
            )
        self.master_url = master_url.rstrip("/")
        self.timeout = timeout
        self.max_attempts = max_attempts
        self.backoff_initial = backoff_initial
        self.backoff_max = backoff_max
        self._sleep = sleep
        self._rng = rng or random.Random()
        #: The retry policy of this session (and of the lite clients made from it).
        self.policy = RetryPolicy(
            attempts=max_attempts,
            backoff=backoff_initial,
            max_backoff=backoff_max,
            repeatable=True,
            sleep=sleep,
            rng=self._rng,
        )
        self._transport = transport
        # An HTTPS master's certificate is checked against DET_MASTER_CERT_FILE (the CA
        # bundle the agent hands its tasks), else the system's trust store.
        # The trial's credential: the session token its agent put in DET_SESSION_TOKEN
        # (docs/protocol.md, "Authentication"); none outside a cluster task.
        self.auth_headers: dict[str, str] = session_token_headers()
        self._verify = make_verify(cert_file_from_env())
        # Made at the first request through httpx (:attr:`_client`): a trial on a real
        # master sends every request through a LiteClient and never needs it.
        self._httpx: httpx.Client | None = None
        self._httpx_lock = threading.Lock()
        self._closed = False

    @property
    def _client(self) -> httpx.Client:
        """The httpx client of :meth:`request`, made on first use (about 3 ms of CPU).

        Raises:
            RuntimeError: the session is closed (as httpx raises for a closed client).
        """
        client = self._httpx
        if client is None:
            with self._httpx_lock:
                if self._closed:
                    raise RuntimeError("cannot send a request: the session is closed")
                if self._httpx is None:
                    self._httpx = internal_client(
                        base_url=self.master_url,
                        timeout=self.timeout,
                        transport=self._transport,
                        # The defaults are built once per process (default_ssl_context).
                        verify=default_ssl_context() if self._verify is True else self._verify,
                        headers=self.auth_headers,
                    )
                client = self._httpx
        return client

    def clone(self, *, timeout: float | None = None, max_attempts: int | None = None) -> Session:
        """A new session to the same master with its own connections.

        A background thread (the preemption long poll) uses its own clone so that a
        request it keeps open never holds up the training loop's requests.

        Args:
            timeout: seconds per attempt; this session's when None.
            max_attempts: attempts per request; this session's when None.

        Returns:
            A new :class:`Session` with the same URL, transport, backoff and sleep.

        Raises:
            ValueError: if a number is out of range (see the class).
        """
        return Session(
            self.master_url,
            timeout=self.timeout if timeout is None else timeout,
            max_attempts=self.max_attempts if max_attempts is None else max_attempts,
            backoff_initial=self.backoff_initial,
            backoff_max=self.backoff_max,
            transport=self._transport,
            sleep=self._sleep,
        )

    def ssl_context(self) -> ssl.SSLContext:
        """The TLS settings of this session for other HTTP clients of an https master:
        trusting ``DET_MASTER_CERT_FILE`` when set (no verification for ``noverify``),
        else the CA bundle this session's own httpx client trusts
        (:func:`~dauntless._tls.default_ssl_context`, built once per process), so that
        every client of the session trusts the same certificates."""
        if isinstance(self._verify, ssl.SSLContext):
            return self._verify
        if self._verify is False:
            ctx = ssl.create_default_context()
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
            return ctx
        return default_ssl_context()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the underlying connections; later requests raise ``RuntimeError``."""
        with self._httpx_lock:
            self._closed = True
            client = self._httpx
        if client is not None:
            client.close()

    def backoff(self, retry: int) -> float:
        """Seconds to sleep before retry number ``retry`` (1-based); see the policy."""
        return self.policy.delay(retry)

    def get(
        self, path: str, params: Mapping[str, Any] | None = None, *, timeout: float | None = None
    ) -> Any:
        """GET ``path`` and return the decoded JSON answer (see :meth:`request`)."""
        return self.request("GET", path, params=params, timeout=timeout)

    def post(self, path: str, json: Any = None) -> Any:
        """POST a JSON body to ``path`` and return the decoded answer (see :meth:`request`)."""
        return self.request("POST", path, json=json)

    def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        json: Any = None,
        timeout: float | None = None,
    ) -> Any:
        """Send one request, retrying transient failures.

        Args:
            method: ``GET``, ``POST``, ...
            path: the route, e.g. ``/api/v1/trials/3/metrics``.
            params: query parameters.
            json: the JSON body (None sends no body).
            timeout: seconds for this request's attempts (a long poll needs more than
                the session's default); the session's timeout when None.

        Returns:
            The decoded JSON answer, or None for an empty body.

        Raises:
            APIError: for a 4xx answer, a 5xx one on the last attempt, or a success
                answer whose body is not JSON.
            MasterUnreachableError: if the last attempt failed to connect or timed out.
        """

        def send() -> httpx.Response:
            if timeout is None:
                return self._client.request(method, path, params=params, json=json)
            return self._client.request(method, path, params=params, json=json, timeout=timeout)

        try:
            resp = self.policy.call(
                send,
                retry_error=lambda exc: (
                    isinstance(exc, httpx.TransportError)
                    and self.policy.retryable_error(method, exc, sent=True)
                ),
                retry_result=lambda r: self.policy.retryable_status(method, r.status_code),
            )
        except httpx.TransportError as exc:
            raise _unreachable(self.master_url, method, path, self.max_attempts, exc) from exc
        if resp.status_code >= 400:
            raise APIError(resp.status_code, _detail(resp), method=method, path=path)
        return _json_body(method, path, resp)


def _unreachable(
    master_url: str, method: str, path: str, attempts: int, exc: BaseException
) -> MasterUnreachableError:
    """The error for a request that got no answer (``exc``, after ``attempts``)."""
    if is_cert_verify_error(exc):
        reason = describe_cert_error(
            master_url, exc, f"the agent's --master-cert-file ({CERT_FILE_ENV})"
        )
        return MasterUnreachableError(master_url, reason, message=f"{method} {path}: {reason}")
    return MasterUnreachableError(
        master_url,
        repr(exc),
        message=f"{method} {path}: master {master_url} unreachable after {attempts} "
        f"attempts: {exc!r}",
    )


def _json_body(method: str, path: str, resp: httpx.Response) -> Any:
    if not resp.content:
        return None
    try:
        return resp.json()
    except ValueError:
        raise APIError(
            resp.status_code,
            f"the answer is not JSON: {resp.text[:200]!r}",
            method=method,
            path=path,
        ) from None


def _detail(resp: httpx.Response) -> str:
    try:
        body = resp.json()
    except ValueError:
        return resp.text.strip()[:500] or resp.reason_phrase
    if isinstance(body, dict) and "detail" in body:
        return str(body["detail"])
    return str(body)[:500]
