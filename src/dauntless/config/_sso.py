"""Master config for access tokens' lifespans, OpenID Connect single sign-on (``oidc``) and
the audit trail (``audit``): Determined's names where it has them (reference §2.7, §3,
§9.2). Pure: nothing here reads a file or the network.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

INFINITE_LIFESPAN_DAYS = 106_751
"""What a lifespan of ``-1`` ("no limit") means, in days: Determined clamps it to the
largest Go ``time.Duration`` (about 292 years), 106,751 days."""

DAY_SECONDS = 86_400.0

_GO_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")
_GO_UNITS = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,
    "μs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}


def parse_go_duration(text: str) -> float:
    """Seconds in a Go ``time.Duration`` string (``"720h"``, ``"1h30m"``, ``"90s"``,
    ``"1.5h"``), the form Determined's ``POST /api/v1/tokens`` takes as ``lifespan``.

    Hand-written because no maintained Python library parses Go's grammar (a sign, then
    one or more decimal numbers each followed by a unit ``ns``, ``us``/``µs``, ``ms``,
    ``s``, ``m`` or ``h``; ``"0"`` alone; the ``time.ParseDuration`` documentation) and
    Python's own duration parsers take other forms; it is one regular expression.

    Returns:
        The duration in seconds; negative for a leading ``-``.

    Raises:
        ValueError: the text is not a Go duration; the message quotes it.
    """
    s = text.strip()
    sign = -1.0 if s.startswith("-") else 1.0
    body = s[1:] if s[:1] in "+-" else s
    if body == "0":
        return 0.0
    if not body or len(body) > 64:
        raise ValueError(f"not a duration such as '720h' or '1h30m': {text!r}")
    pos, total = 0, 0.0
    while pos < len(body):
        m = _GO_DURATION.match(body, pos)
        if m is None:
            raise ValueError(f"not a duration such as '720h' or '1h30m': {text!r}")
        total += float(m.group(1)) * _GO_UNITS[m.group(2)]
        pos = m.end()
    return sign * total


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def days_or_infinite(days: int) -> float:
    """Seconds in a lifespan of ``days`` days, ``-1`` meaning no limit
    (:data:`INFINITE_LIFESPAN_DAYS`)."""
    return (INFINITE_LIFESPAN_DAYS if days == -1 else days) * DAY_SECONDS


def check_lifespan_days(name: str, days: int) -> int:
    """``days`` when it is ``-1`` (no limit) or ≥ 1.

    Raises:
        ValueError: naming ``name`` for 0 or another negative number.
    """
    if days == -1 or days >= 1:
        return days
    raise ValueError(f"{name} must be -1 (no limit) or at least 1 day, got {days}")


class OIDCConfig(_Strict):
    """Single sign-on through an OpenID Connect provider (``oidc``; Determined's names).

    Attributes:
        enabled: offer sign-in through the provider (WebUI button, ``det auth login``).
        provider: the provider's display name ("Okta", "Keycloak"); ``det auth login -p``
            matches it, case-insensitively.
        idp_recipient_url: the master's own URL as users' browsers reach it
            (``https://det.example.com``); the provider redirects back to
            ``<idp_recipient_url>/oidc/callback``, which must be registered with it.
        idp_sso_url: the provider's issuer URL; its settings are read from
            ``<idp_sso_url>/.well-known/openid-configuration``.
        client_id, client_secret: the master's client registration at the provider
            (the secret in this file or in ``client_secret_file``, never on a command line).
        client_secret_file: a file holding the client secret (first line), read at start.
        authentication_claim: the claim that names the user (default ``email``); it
            becomes the Dauntless username.
        scim_authentication_attribute: accepted for Determined's configs; Dauntless has
            no SCIM server, so the master warns that it is not used.
        auto_provision_users: create a user (``remote``: SSO only, no password) at its
            first sign-in; when False an admin must create it first with
            ``det user create NAME --remote``.
        groups_attribute_name: the claim holding the user's group names (empty: no
            groups are read).
        display_name_attribute_name: the claim copied into the user's display name at
            each sign-in (empty: left alone).
        always_redirect: the WebUI sends signed-out users straight to the provider
            instead of showing its sign-in form.
        exclude_groups_scope: do not ask for the ``groups`` scope (for providers that
            refuse unknown scopes and put groups in the token anyway).
    """

    enabled: bool = False
    provider: str = Field(default="OIDC", min_length=1, max_length=64)
    idp_recipient_url: str = ""
    idp_sso_url: str = ""
    client_id: str = ""
    client_secret: SecretStr | None = None
    client_secret_file: str | None = None
    authentication_claim: str = Field(default="email", min_length=1, max_length=128)
    scim_authentication_attribute: str = "userName"
    auto_provision_users: bool = False
    groups_attribute_name: str = Field(default="", max_length=128)
    display_name_attribute_name: str = Field(default="", max_length=128)
    always_redirect: bool = False
    exclude_groups_scope: bool = False

    @field_validator("idp_recipient_url", "idp_sso_url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        if value and urlsplit(value).scheme not in ("http", "https"):
            raise ValueError(f"expected an http(s) URL, got {value!r}")
        return value.rstrip("/")

    @model_validator(mode="after")
    def _complete_when_enabled(self) -> OIDCConfig:
        if not self.enabled:
            return self
        missing = [
            f"oidc.{name}"
            for name in ("idp_recipient_url", "idp_sso_url", "client_id")
            if not getattr(self, name)
        ]
        if self.client_secret is None and self.client_secret_file is None:
            missing.append("oidc.client_secret (or oidc.client_secret_file)")
        if missing:
            raise ValueError("oidc.enabled needs " + ", ".join(missing))
        if self.client_secret is not None and self.client_secret_file is not None:
            raise ValueError("give oidc.client_secret or oidc.client_secret_file, not both")
        return self

    def warnings(self) -> list[str]:
        """Fields that are accepted but change nothing, with the reason (the master logs
        them at start)."""
        out = []
        if self.enabled and "scim_authentication_attribute" in self.model_fields_set:
            out.append(
                "oidc.scim_authentication_attribute is not used: Dauntless has no SCIM server"
            )
        return out


class AuditConfig(_Strict):
    """The audit trail (``audit``; Determined has no open counterpart).

    Attributes:
        retention_days: rows older than this many days are removed (checked hourly); the
            chain head at the cut is kept as a signed retention checkpoint, so the rows
            that remain still verify. ``-1`` (default) keeps every row.
    """

    retention_days: int = -1

    @field_validator("retention_days")
    @classmethod
    def _days(cls, value: int) -> int:
        return check_lifespan_days("audit.retention_days", value)
