"""Single sign-on routes (OpenID Connect; :mod:`dauntless.master.sso` has the flow).

| route | who | answer |
|---|---|---|
| ``GET /oidc/sso?relayState=webui\\|cli&cli_port=&cli_challenge=`` | anyone | 302 to the identity provider, and the ``dauntless_sso`` cookie binding the sign-in to this browser; 404 when single sign-on is off |
| ``GET /oidc/callback?code&state`` | the provider's redirect | WebUI: the ``dauntless_token`` cookie and a page that opens the UI; CLI: a page asking to confirm the CLI's sign-in; an error page (401, 403, 502) otherwise |
| ``POST /oidc/cli-confirm`` | that page's button (form ``confirm``) | 302 to ``http://127.0.0.1:<cli_port>/?code=<one-time code>``; 401 page for an unknown or used confirmation, or another browser |
| ``POST /api/v1/auth/sso/exchange`` | the CLI | ``{code, code_verifier}`` -> ``{"token", "user"}`` (a login session); 401 for a bad code or verifier |
| ``GET /api/v1/users/{id}/sso-groups`` | the user, or an admin | ``{"groups": [name]}``: what the provider's group claim said at the latest sign-in |

``GET /api/v1/master`` lists the provider in ``sso_providers`` (``[{name, sso_url, type,
always_redirect}]``), as Determined's does.
"""

from __future__ import annotations

import html
from typing import Any

from fastapi import APIRouter, Form, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from pydantic import BaseModel, ConfigDict, Field

from dauntless._auth import COOKIE_NAME

from .api_spec import DbId, ErrorBody
from .audit_http import audit_note
from .auth import AuthService, forbidden
from .models import sso_users, users
from .models.sso_users import SsoRefused
from .responses import tokens as RT
from .routes_auth import user_view
from .sso import BINDING_COOKIE, PENDING_SECONDS, OIDCClient, SsoError

router = APIRouter()


def _html(description: str) -> dict[str, Any]:
    return {"description": description, "content": {"text/html": {"schema": {"type": "string"}}}}


_ERROR_PAGES = {
    400: _html("A bad request (the page says why)"),
    401: _html("The sign-in failed or could not be verified"),
    403: _html("The provider's user may not sign in here"),
    404: _html("Single sign-on is not configured"),
    502: _html("The identity provider could not be reached"),
    503: _html("Too many sign-ins in progress"),
}

CHALLENGE_PATTERN = r"^[A-Za-z0-9_-]{43}$"
"""A PKCE S256 challenge: 32 bytes, base64url without padding (RFC 7636 §4.2)."""


class ExchangeBody(BaseModel):
    """Body of ``POST /api/v1/auth/sso/exchange``."""

    model_config = ConfigDict(extra="forbid")

    code: str = Field(min_length=1, max_length=256)
    code_verifier: str = Field(min_length=43, max_length=128, pattern=r"^[A-Za-z0-9._~-]+$")


def _client(request: Request) -> OIDCClient:
    client: OIDCClient | None = getattr(request.app.state, "sso", None)
    if client is None:
        raise SsoError(404, "single sign-on is not configured on this master (oidc.enabled)")
    return client


def _page(
    status: int,
    title: str,
    text: str,
    refresh: str | None = None,
    form: tuple[str, str, str] | None = None,
) -> HTMLResponse:
    """A small HTML page (the callback's answers are seen in a browser); ``form``:
    (action, the hidden ``confirm`` value, the button's label) of a POST button."""
    meta = f'<meta http-equiv="refresh" content="0;url={html.escape(refresh)}">' if refresh else ""
    button = ""
    if form is not None:
        action, value, label = (html.escape(x) for x in form)
        button = (
            f"<form method='post' action='{action}'><input type='hidden' name='confirm' "
            f"value='{value}'><button id='cli-confirm' type='submit'>{label}</button></form>"
        )
    body = (
        f"<!doctype html><html><head><meta charset='utf-8'>{meta}<title>{html.escape(title)}"
        f"</title></head><body><h1>{html.escape(title)}</h1><p>{html.escape(text)}</p>"
        f"{button}<p><a href='/'>Open Dauntless</a></p></body></html>"
    )
    return HTMLResponse(body, status_code=status, headers={"Cache-Control": "no-store"})


def _session_cookie(resp: Response, request: Request, auth: AuthService, token: str) -> None:
    """Set the WebUI's session cookie as ``POST /auth/login`` does."""
    resp.set_cookie(
        COOKIE_NAME,
        token,
        max_age=int(auth.token_lifespan),
        path="/",
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )


@router.get(
    "/oidc/sso",
    status_code=302,
    response_class=RedirectResponse,
    responses={k: v for k, v in _ERROR_PAGES.items() if k in (400, 404, 502, 503)},
)
def sso_begin(
    request: Request,
    relay_state: str = Query("webui", alias="relayState", pattern="^(webui|cli)$"),
    cli_port: int | None = Query(None, ge=1024, le=65535),
    cli_challenge: str | None = Query(None, pattern=CHALLENGE_PATTERN),
) -> Response:
    """Start signing in at the identity provider (the WebUI's button, or ``det auth
    login``, which passes ``relayState=cli`` with its loopback port and PKCE challenge)."""
    try:
        client = _client(request)
        if relay_state == "cli" and (cli_port is None or cli_challenge is None):
            raise SsoError(400, "relayState=cli needs cli_port and cli_challenge")
        url, binding = client.begin(relay_state, cli_port, cli_challenge)
    except SsoError as exc:
        return _page(exc.status, "Single sign-on failed", str(exc))
    resp = RedirectResponse(url, status_code=302, headers={"Cache-Control": "no-store"})
    resp.set_cookie(
        BINDING_COOKIE,
        binding,
        max_age=int(PENDING_SECONDS),
        path="/oidc",
        httponly=True,
        samesite="lax",  # sent on the provider's top-level redirect back to the callback
        secure=request.url.scheme == "https",
    )
    return resp


@router.get(
    "/oidc/callback",
    response_class=HTMLResponse,
    responses={
        200: _html("Signed in: a page that opens the UI, or asks to confirm the CLI's sign-in"),
        **{k: v for k, v in _ERROR_PAGES.items() if k != 503},
    },
)
def sso_callback(request: Request) -> Response:
    """Where the identity provider sends the browser back (see the module)."""
    auth: AuthService = request.app.state.auth
    params = {k: v[:4096] for k, v in request.query_params.items()}
    try:
        client = _client(request)
        identity, pending = client.finish(params, request.cookies.get(BINDING_COOKIE))
        audit_note(request, username=identity.username, target=f"single sign-on ({pending.relay})")
        with auth.db.write() as s:
            user = sso_users.sso_user(
                s,
                identity.username,
                identity.display_name,
                client.config.auto_provision_users,
                auth.clock(),
            )
            if client.config.groups_attribute_name:
                sso_users.sync_sso_groups(s, user.id, identity.groups, auth.clock())
            user_id, username = user.id, user.username
        audit_note(request, user_id=user_id)
    except SsoRefused as exc:
        return _page(403, "Single sign-on refused", str(exc))
    except SsoError as exc:
        return _page(exc.status, "Single sign-on failed", str(exc))
    if pending.relay == "cli" and pending.cli_port is not None and pending.cli_challenge:
        confirm = client.hold_cli_sign_in(user_id, username, pending)
        return _page(
            200,
            "Sign in the Dauntless CLI?",
            f"The Dauntless CLI on this computer (listening on port {pending.cli_port}) asks "
            f"to sign in as {username}. Continue only if you have just run det auth login.",
            form=("/oidc/cli-confirm", confirm, "Sign in the CLI"),
        )
    else:
        # A page that opens the UI rather than a 302: the provider's redirect was a
        # cross-site navigation, and a SameSite=Strict cookie set on it is sent only on
        # the next same-site one.
        resp = _page(200, "Signed in", f"Signed in as {username}; opening Dauntless ...", "/?sso=1")
        _session_cookie(resp, request, auth, auth.create_session(user_id))
    resp.delete_cookie(BINDING_COOKIE, path="/oidc")
    return resp


@router.post(
    "/oidc/cli-confirm",
    status_code=302,
    response_class=RedirectResponse,
    responses={
        400: {"model": ErrorBody, "description": "No confirm field"},
        401: _ERROR_PAGES[401],
        404: _ERROR_PAGES[404],
    },
)
def sso_cli_confirm(request: Request, confirm: str = Form(max_length=64)) -> Response:
    """The user confirmed a CLI sign-in (the callback's button): 302 to the CLI's
    loopback port with a one-time code."""
    try:
        code, port = _client(request).confirm_cli_sign_in(
            confirm, request.cookies.get(BINDING_COOKIE)
        )
    except SsoError as exc:
        return _page(exc.status, "Single sign-on failed", str(exc))
    resp = RedirectResponse(
        f"http://127.0.0.1:{port}/?code={code}",
        status_code=302,
        headers={"Cache-Control": "no-store"},
    )
    resp.delete_cookie(BINDING_COOKIE, path="/oidc")
    return resp


@router.post("/api/v1/auth/sso/exchange", response_model=RT.SsoExchangeOut)
def sso_exchange(body: ExchangeBody, request: Request) -> JSONResponse:
    """Trade the one-time code of a CLI sign-in and its PKCE verifier for a login
    session (``det auth login``)."""
    auth: AuthService = request.app.state.auth
    try:
        user_id = _client(request).redeem_cli_code(body.code, body.code_verifier)
    except SsoError as exc:
        audit_note(request, target="single sign-on (cli code)")
        return JSONResponse({"detail": str(exc)}, status_code=exc.status)
    with auth.db.read() as s:
        user = users.read_user(s, user_id)
    audit_note(request, user_id=user.id, username=user.username, target="single sign-on (cli)")
    if not user.active:
        raise forbidden(f"user {user.username} is deactivated; an admin may activate it")
    return JSONResponse({"token": auth.create_session(user.id), "user": user_view(user)})


@router.get("/api/v1/users/{user_id}/sso-groups", response_model=RT.SsoGroupsOut)
def get_sso_groups(user_id: DbId, request: Request) -> dict[str, Any]:
    """The groups the identity provider's claim named at the user's latest sign-in (the
    permission table lets the user themself, or a holder of ADMINISTRATE_USER, call it)."""
    with request.app.state.auth.db.read() as s:
        users.read_user(s, user_id)
        return {"groups": sso_users.read_sso_groups(s, user_id)}


def sso_providers(request: Request) -> list[dict[str, Any]]:
    """``GET /master``'s ``sso_providers``: the configured provider, if any."""
    client: OIDCClient | None = getattr(request.app.state, "sso", None)
    return [client.provider_info()] if client is not None else []


__all__ = ["router", "sso_providers"]
