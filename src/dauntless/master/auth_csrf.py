"""Cross-site request forgery (CSRF) protection of cookie-authenticated requests
(docs/protocol.md, "Authentication").

The WebUI signs in with the HttpOnly ``dauntless_token`` cookie, which the browser sends
with every request to the master, including requests another page makes it send (a
form posted from another site, a same-site page such as one served on another port of
the same host). So every state-changing request (a method other than GET, HEAD and
OPTIONS) that authenticates by that cookie must also carry the header
``X-CSRF-Token: <token>``, where the token is bound to the login session: an HMAC-SHA256
of a fixed label keyed by the session's own token (RFC 2104), which only a holder of the
session token can compute. A page of another origin can neither read the cookie nor
the token (``GET /api/v1/auth/csrf`` answers no other origin: the master sends no CORS
headers) nor send a custom header without a CORS preflight that the master never
grants. Requests that present ``Authorization: Bearer`` (the CLI, the SDK, trials) or
the cluster secret (agents) carry no ambient credential and need no token.

This is OWASP's "synchronizer token" pattern with a token derived from the session
instead of stored beside it (the master keeps only the SHA-256 of session tokens).
"""

from __future__ import annotations

import hashlib
import hmac

from starlette.requests import HTTPConnection

from dauntless._auth import CLUSTER_SECRET_HEADER, COOKIE_NAME

from .auth_access import forbidden

CSRF_HEADER = "X-CSRF-Token"
"""The header that carries the CSRF token of a cookie-authenticated request."""

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
"""Methods that change nothing and need no CSRF token."""

_LABEL = b"dauntless csrf token v1"


def csrf_token(session_token: str) -> str:
    """The CSRF token of a login session: HMAC-SHA256 (hex) of a fixed label keyed by
    the session's token."""
    return hmac.new(session_token.encode(), _LABEL, hashlib.sha256).hexdigest()


def cookie_credential(conn: HTTPConnection) -> str | None:
    """The session token a request authenticates with by cookie, or None when it
    presents a header credential (bearer token, cluster secret) or no cookie."""
    if conn.headers.get("authorization") or conn.headers.get(CLUSTER_SECRET_HEADER):
        return None
    return conn.cookies.get(COOKIE_NAME) or None


def check_csrf(conn: HTTPConnection, method: str) -> None:
    """Refuse a cookie-authenticated state-changing request without its CSRF token.

    Args:
        conn: the request.
        method: its HTTP method.

    Raises:
        HTTPException: 403 naming the header and where to get the token.
    """
    if method.upper() in SAFE_METHODS:
        return
    token = cookie_credential(conn)
    if token is None:
        return
    sent = conn.headers.get(CSRF_HEADER, "")
    if not hmac.compare_digest(sent.encode(), csrf_token(token).encode()):
        raise forbidden(
            f"a request signed in by the session cookie that changes something needs the "
            f"{CSRF_HEADER} header of its session (GET /api/v1/auth/csrf); scripts send "
            "'Authorization: Bearer <token>' instead"
        )


__all__ = ["CSRF_HEADER", "SAFE_METHODS", "check_csrf", "cookie_credential", "csrf_token"]
