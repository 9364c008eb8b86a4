"""OpenID Connect single sign-on (issue 30 scope 4; the ``oidc`` block of the master
config, Determined's names): the master is a confidential client of the identity
provider, using the authorization code flow with PKCE (RFC 7636) and a nonce.

The protocol is Authlib's (``authlib.integrations``: discovery, the authorization URL,
the code exchange over ``httpx2``, and the ID token's signature and claims checked
against the provider's keys with ``joserfc``); this module only keeps what happens
between the steps.

**Browser sign-in** (the WebUI): ``GET /oidc/sso`` makes a state, a nonce and a PKCE
verifier, remembers them in memory for :data:`PENDING_SECONDS` (bounded by
:data:`MAX_PENDING`), binds the sign-in to the browser with a random value in the
``dauntless_sso`` cookie (so a callback URL made for someone else's sign-in cannot sign a
victim in: login CSRF, RFC 6749 §10.12), and redirects to the provider.
``GET /oidc/callback`` checks the state and the cookie, exchanges the code, validates the
ID token, reads the user's claims (ID token, then the userinfo endpoint for claims it
lacks), and signs the user in.

**CLI sign-in** (``det auth login``, RFC 8252's loopback redirect): the CLI listens on a
port of 127.0.0.1 and opens ``/oidc/sso?relayState=cli&cli_port=P&cli_challenge=C``,
where ``C`` is the S256 challenge of a verifier only the CLI knows. After the provider,
the master asks the user to confirm that the CLI on this computer signs in (a button:
a link that starts someone else's CLI sign-in must not complete unseen when the provider
signs the user in silently), then redirects the browser to
``http://127.0.0.1:P/?code=X`` (always that host: no open redirect) with a one-time code
valid :data:`CLI_CODE_SECONDS`; the CLI trades code and verifier for a login session at
``POST /api/v1/auth/sso/exchange``. The session token never appears in a URL, and a code
seen by another local process is useless without the verifier.

A master restart forgets sign-ins in progress: the user starts again.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import importlib.util
import logging
import secrets
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from dauntless.config import OIDCConfig

log = logging.getLogger("dauntless.master.sso")

SSO_PATH = "/oidc/sso"
CALLBACK_PATH = "/oidc/callback"
BINDING_COOKIE = "dauntless_sso"
PENDING_SECONDS = 600.0
"""How long a sign-in may take at the provider (seconds)."""
MAX_PENDING = 10_000
"""Sign-ins in progress remembered at most (``/oidc/sso`` is open to anyone)."""
CLI_CODE_SECONDS = 120.0
"""How long the CLI has to trade its one-time code (seconds)."""
METADATA_SECONDS = 3600.0
"""How long the provider's discovery document and keys are reused (seconds)."""
HTTP_TIMEOUT = 10.0
"""Seconds the master waits for the provider on each request."""


class SsoError(Exception):
    """A sign-in that failed; ``status`` is the HTTP answer (401, 403, 502 ...)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Pending:
    """A sign-in waiting for the provider's callback."""

    nonce: str
    code_verifier: str
    binding_hash: str
    relay: str  # "webui" or "cli"
    cli_port: int | None
    cli_challenge: str | None
    created: float


@dataclass(frozen=True)
class Identity:
    """Who the provider says signed in.

    Attributes:
        username: the ``authentication_claim``'s value.
        display_name: the ``display_name_attribute_name`` claim, or None.
        groups: the ``groups_attribute_name`` claim's names (empty without one).
        subject: the provider's ``sub``.
    """

    username: str
    display_name: str | None
    groups: tuple[str, ...]
    subject: str


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def s256_challenge(verifier: str) -> str:
    """The PKCE S256 challenge of ``verifier`` (RFC 7636 §4.2), by Authlib."""
    from authlib.oauth2.rfc7636 import create_s256_code_challenge

    return str(create_s256_code_challenge(verifier))


def _client_secret(config: OIDCConfig) -> str:
    if config.client_secret is not None:
        return config.client_secret.get_secret_value()
    path = config.client_secret_file or ""
    try:
        with open(path, encoding="utf-8") as f:
            value = f.readline().strip()
    except OSError as exc:
        raise ValueError(f"oidc.client_secret_file: cannot read {path!r}: {exc}") from None
    if not value:
        raise ValueError(f"oidc.client_secret_file: {path!r} is empty")
    return value


def claim_strings(value: Any, limit: int = 1000) -> tuple[str, ...]:
    """A claim's group names: a list of strings, or one string (comma- or space-separated
    names are kept as one name, as providers send them in lists); others are ignored."""
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list):
        return ()
    names = [v.strip() for v in value[:limit] if isinstance(v, str) and 0 < len(v.strip()) <= 256]
    return tuple(dict.fromkeys(names))


@functools.cache
def _app_class() -> type:
    """Authlib's synchronous OpenID Connect client app over ``httpx2`` (imported on first
    use: the ``sso`` extra)."""
    from authlib.integrations.base_client import BaseApp
    from authlib.integrations.base_client.sync_app import OAuth2Mixin
    from authlib.integrations.base_client.sync_openid import OpenIDMixin
    from authlib.integrations.httpx_client import OAuth2Client

    class App(OAuth2Mixin, OpenIDMixin, BaseApp):  # type: ignore[misc]
        client_cls = OAuth2Client

    return App


def check_installed() -> None:
    """Raise ``RuntimeError`` naming the extra to install when Authlib is missing."""
    for module in ("authlib", "httpx2", "joserfc"):
        if importlib.util.find_spec(module) is None:
            raise RuntimeError(
                f"oidc.enabled needs the {module} package: pip install 'dauntless[sso]'"
            )


class OIDCClient:
    """The master's side of OpenID Connect sign-in (see the module).

    Args:
        config: the ``oidc`` block (enabled).
        clock: seconds since the epoch.

    Raises:
        ValueError: the client secret file cannot be read.
        RuntimeError: Authlib is not installed (the ``sso`` extra).
    """

    def __init__(self, config: OIDCConfig, clock: Callable[[], float] = time.time) -> None:
        check_installed()
        self.config = config
        self.clock = clock
        self._secret = _client_secret(config)
        self._lock = threading.Lock()
        self._pending: dict[str, Pending] = {}
        self._cli_codes: dict[str, tuple[int, str, float]] = {}
        self._held: dict[str, tuple[int, str, Pending, float]] = {}
        self._app: Any = None
        self._app_made = 0.0

    @property
    def redirect_uri(self) -> str:
        """Where the provider sends the browser back."""
        return self.config.idp_recipient_url + CALLBACK_PATH

    def provider_info(self) -> dict[str, Any]:
        """This provider as ``GET /master``'s ``sso_providers`` lists it."""
        return {
            "name": self.config.provider,
            "sso_url": self.config.idp_recipient_url + SSO_PATH,
            "type": "OIDC",
            "always_redirect": self.config.always_redirect,
        }

    def _oauth_app(self) -> Any:
        """Authlib's client app, remade every :data:`METADATA_SECONDS` (fresh discovery
        and keys)."""
        from authlib.integrations.base_client import FrameworkIntegration

        now = time.monotonic()
        with self._lock:
            if self._app is None or now - self._app_made > METADATA_SECONDS:
                scopes = ["openid", "email", "profile"]
                if not self.config.exclude_groups_scope:
                    scopes.append("groups")
                self._app = _app_class()(
                    FrameworkIntegration("oidc"),
                    name="oidc",
                    client_id=self.config.client_id,
                    client_secret=self._secret,
                    server_metadata_url=(
                        self.config.idp_sso_url + "/.well-known/openid-configuration"
                    ),
                    client_kwargs={
                        "scope": " ".join(scopes),
                        "code_challenge_method": "S256",
                        "timeout": HTTP_TIMEOUT,
                    },
                )
                self._app_made = now
            return self._app

    # ------------------------------------------------------------------ step 1

    def begin(
        self, relay: str, cli_port: int | None = None, cli_challenge: str | None = None
    ) -> tuple[str, str]:
        """Start a sign-in: the provider's authorization URL to redirect to, and the
        binding value to set in the ``dauntless_sso`` cookie.

        Raises:
            SsoError: 503 when too many sign-ins are in progress; 502 when the provider's
                discovery document cannot be read.
        """
        now = self.clock()
        with self._lock:
            if len(self._pending) >= MAX_PENDING:
                self._expire(now)
            if len(self._pending) >= MAX_PENDING:
                raise SsoError(503, "too many sign-ins in progress; try again in a minute")
        try:
            rv = self._oauth_app().create_authorization_url(self.redirect_uri)
        except Exception as exc:  # httpx2 errors, a bad discovery document
            log.warning("single sign-on: cannot reach the provider: %s", exc)
            raise SsoError(502, f"the identity provider could not be reached: {exc}") from None
        binding = secrets.token_urlsafe(32)
        with self._lock:
            self._pending[rv["state"]] = Pending(
                nonce=rv["nonce"],
                code_verifier=rv["code_verifier"],
                binding_hash=_sha256(binding),
                relay=relay,
                cli_port=cli_port,
                cli_challenge=cli_challenge,
                created=now,
            )
        return str(rv["url"]), binding

    def _expire(self, now: float) -> None:
        for state in [k for k, p in self._pending.items() if now - p.created > PENDING_SECONDS]:
            del self._pending[state]
        for code in [k for k, c in self._cli_codes.items() if c[2] <= now]:
            del self._cli_codes[code]
        for confirm in [k for k, h in self._held.items() if h[3] <= now]:
            del self._held[confirm]

    # ------------------------------------------------------------------ step 2

    def finish(self, params: Mapping[str, str], binding: str | None) -> tuple[Identity, Pending]:
        """Complete a sign-in from the callback's query: who signed in, and the sign-in
        it completes.

        Raises:
            SsoError: 401 for an unknown, expired or foreign sign-in, a provider's error
                answer or an invalid ID token; 403 when a claim the config names is
                missing; 502 when the provider cannot be reached.
        """
        if params.get("error"):
            detail = params.get("error_description") or params["error"]
            raise SsoError(401, f"the identity provider refused the sign-in: {detail}"[:500])
        state, code = params.get("state") or "", params.get("code") or ""
        now = self.clock()
        with self._lock:
            pending = self._pending.pop(state, None)
        if pending is None or now - pending.created > PENDING_SECONDS:
            raise SsoError(401, "this sign-in is unknown or took too long; start it again")
        if binding is None or not hmac.compare_digest(_sha256(binding), pending.binding_hash):
            raise SsoError(401, "this sign-in was started in another browser; start it again here")
        if not code:
            raise SsoError(401, "the identity provider sent no authorization code")
        return self._identity(code, pending), pending

    def _identity(self, code: str, pending: Pending) -> Identity:
        from authlib.integrations.base_client import OAuthError
        from joserfc.errors import JoseError

        app = self._oauth_app()
        try:
            token = app.fetch_access_token(
                redirect_uri=self.redirect_uri, code=code, code_verifier=pending.code_verifier
            )
            issuer = app.load_server_metadata().get("issuer")
            claims = dict(
                app.parse_id_token(
                    token,
                    nonce=pending.nonce,
                    claims_options={
                        "iss": {"essential": True, "value": issuer},
                        "aud": {"essential": True, "value": self.config.client_id},
                    },
                )
                or {}
            )
            if not claims:
                raise SsoError(401, "the identity provider sent no ID token")
            if app.load_server_metadata().get("userinfo_endpoint"):
                extra = dict(app.userinfo(token=token))
                if extra.get("sub") != claims.get("sub"):
                    raise SsoError(401, "the userinfo answer is about another subject")
                for key, value in extra.items():
                    claims.setdefault(key, value)
        except SsoError:
            raise
        except (OAuthError, JoseError) as exc:
            raise SsoError(401, f"the sign-in could not be verified: {exc}"[:500]) from None
        except Exception as exc:  # httpx2 transport errors, a malformed answer
            log.warning("single sign-on: the code exchange failed: %r", exc)
            raise SsoError(502, f"the identity provider could not be reached: {exc}") from None
        return self._identity_of(claims)

    def _identity_of(self, claims: Mapping[str, Any]) -> Identity:
        name_claim = self.config.authentication_claim
        username = claims.get(name_claim)
        if not isinstance(username, str) or not username.strip():
            raise SsoError(
                403,
                f"the identity provider sent no {name_claim!r} claim (oidc.authentication_claim)",
            )
        display = None
        if self.config.display_name_attribute_name:
            value = claims.get(self.config.display_name_attribute_name)
            display = value.strip()[:256] if isinstance(value, str) and value.strip() else None
        groups: tuple[str, ...] = ()
        if self.config.groups_attribute_name:
            groups = claim_strings(claims.get(self.config.groups_attribute_name))
        return Identity(
            username=username.strip(),
            display_name=display,
            groups=groups,
            subject=str(claims.get("sub", "")),
        )

    # ------------------------------------------------------------------ the CLI

    def hold_cli_sign_in(self, user_id: int, username: str, pending: Pending) -> str:
        """Keep a finished CLI sign-in until the user confirms it in the browser (the
        page of :func:`~dauntless.master.routes_sso.sso_callback`); returns the id the
        confirmation names. Without the click a link that starts a CLI sign-in (someone
        else's challenge, a port someone else listens on) and a provider that signs the
        user in silently would hand a session to whoever listens."""
        confirm = secrets.token_urlsafe(24)
        with self._lock:
            self._expire(self.clock())
            self._held[_sha256(confirm)] = (
                user_id,
                username,
                pending,
                self.clock() + PENDING_SECONDS,
            )
        return confirm

    def confirm_cli_sign_in(self, confirm: str, binding: str | None) -> tuple[str, int]:
        """The one-time code and loopback port of a held CLI sign-in the user confirmed
        in the browser that began it.

        Raises:
            SsoError: 401 for an unknown, used or expired confirmation, or another
                browser.
        """
        with self._lock:
            held = self._held.pop(_sha256(confirm), None)
        if held is None or held[3] <= self.clock():
            raise SsoError(
                401, "this sign-in is unknown, used or expired; run det auth login again"
            )
        user_id, _, pending, _ = held
        if binding is None or not hmac.compare_digest(_sha256(binding), pending.binding_hash):
            raise SsoError(401, "this sign-in was started in another browser")
        if pending.cli_port is None or pending.cli_challenge is None:
            raise SsoError(400, "this sign-in was not started by det auth login")
        return self.issue_cli_code(user_id, pending.cli_challenge), pending.cli_port

    def issue_cli_code(self, user_id: int, challenge: str) -> str:
        """A one-time code the CLI trades, with the verifier of ``challenge``, for a
        login session of ``user_id``."""
        code = secrets.token_urlsafe(32)
        with self._lock:
            self._expire(self.clock())
            self._cli_codes[_sha256(code)] = (
                user_id,
                challenge,
                self.clock() + CLI_CODE_SECONDS,
            )
        return code

    def redeem_cli_code(self, code: str, verifier: str) -> int:
        """The user a CLI code was issued to (the code is used up).

        Raises:
            SsoError: 401 for an unknown, used or expired code, or a verifier that does
                not match the challenge the sign-in began with.
        """
        with self._lock:
            found = self._cli_codes.pop(_sha256(code), None)
        if found is None or found[2] <= self.clock():
            raise SsoError(401, "the sign-in code is invalid, used or expired; sign in again")
        user_id, challenge, _ = found
        if not hmac.compare_digest(s256_challenge(verifier), challenge):
            raise SsoError(401, "the code verifier does not match this sign-in")
        return user_id


__all__ = [
    "BINDING_COOKIE",
    "CALLBACK_PATH",
    "SSO_PATH",
    "Identity",
    "OIDCClient",
    "Pending",
    "SsoError",
    "claim_strings",
    "s256_challenge",
]
