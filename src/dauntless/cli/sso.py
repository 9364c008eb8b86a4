"""``det auth``: single sign-on through the master's OpenID Connect provider
(Determined's ``det auth login [-p PROVIDER] [--headless]`` and ``list-providers``).

``login`` follows RFC 8252 (OAuth for native apps): it listens on a free port of
127.0.0.1, opens the master's sign-in address in a browser with ``relayState=cli``, that
port and the PKCE challenge (RFC 7636) of a verifier only this process knows; after the
provider, and the user's click on the master's "Sign in the CLI" button, the master sends
the browser to ``http://127.0.0.1:PORT/?code=...``, and the CLI
trades the one-time code and its verifier for a login session
(``POST /api/v1/auth/sso/exchange``), saved like ``det user login``'s. No token travels in
a URL. ``--headless`` (or no browser) prints the address to open elsewhere and asks for
the ``http://127.0.0.1...`` address the browser ends on (it does not load there: copy it
from the address bar).
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import http.server
import secrets
import sys
import threading
import urllib.parse
import webbrowser
from collections.abc import Callable
from typing import Any

from dauntless.client import Session

from ._util import exit_with_error, note, open_session, write_line

HEADLESS_PORT = 49176
"""The loopback port named in a headless sign-in (Determined's CLI redirect port); nothing
listens there: the user copies the address."""

WAIT_SECONDS = 300.0
"""How long ``login`` waits for the browser to come back (seconds)."""


def pkce_pair() -> tuple[str, str]:
    """A PKCE verifier (64 URL-safe characters) and its S256 challenge:
    ``BASE64URL(SHA256(verifier))`` without padding (RFC 7636 §4.2)."""
    verifier = secrets.token_urlsafe(48)
    digest = hashlib.sha256(verifier.encode("ascii")).digest()
    return verifier, base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def _providers(session: Session) -> list[dict[str, Any]]:
    info = session.request("GET", "/master", auth=False).json()
    return list(info.get("sso_providers") or [])


def _pick(providers: list[dict[str, Any]], name: str | None) -> dict[str, Any]:
    if not providers:
        exit_with_error("this master offers no single sign-on provider (its oidc config)")
    if name is None:
        if len(providers) > 1:
            names = ", ".join(p["name"] for p in providers)
            exit_with_error(f"several providers; name one with -p ({names})")
        return providers[0]
    found = [p for p in providers if str(p["name"]).lower() == name.lower()]
    if not found:
        names = ", ".join(p["name"] for p in providers)
        exit_with_error(f"no provider {name!r} on this master (it has: {names})")
    return found[0]


def _code_of(url: str) -> str | None:
    """The ``code`` query parameter of the address the browser ended on."""
    values = urllib.parse.parse_qs(urllib.parse.urlsplit(url.strip()).query).get("code")
    return values[0] if values else None


class _Catch:
    """The code the browser brought to the loopback port, once it came."""

    def __init__(self) -> None:
        self.code: str | None = None
        self.done = threading.Event()


def _handler(catch: _Catch) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the http.server hook's name
            code = _code_of(self.path)
            if code is None:
                self.send_error(404)
                return
            body = b"<!doctype html><p>Signed in. You can close this window.</p>"
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            catch.code = code
            catch.done.set()

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            return  # the browser's request is not worth a line on stderr

    return Handler


def _wait_for_browser(url_of_port: Callable[[int], str]) -> str:
    """Serve a free loopback port until the browser brings a code; returns it."""
    catch = _Catch()
    with http.server.HTTPServer(("127.0.0.1", 0), _handler(catch)) as server:
        port = int(server.server_address[1])
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        url = url_of_port(port)
        opened = webbrowser.open(url)
        lead = (
            "Your browser should open the sign-in page; if it did not, open: "
            if opened
            else "Open this address in a browser on this machine to sign in: "
        )
        write_line(lead + url)
        sys.stdout.flush()
        finished = catch.done.wait(WAIT_SECONDS)
        server.shutdown()
    if not finished or catch.code is None:
        exit_with_error(f"no sign-in came back within {int(WAIT_SECONDS)} s; run it again")
    return catch.code


def _login(args: argparse.Namespace) -> int:
    with open_session(args, login=False) as session:
        provider = _pick(_providers(session), args.provider)
        verifier, challenge = pkce_pair()

        def url_of_port(port: int) -> str:
            query = urllib.parse.urlencode(
                {"relayState": "cli", "cli_port": port, "cli_challenge": challenge}
            )
            return f"{provider['sso_url']}?{query}"

        if args.headless:
            write_line(f"Open this address in a browser to sign in: {url_of_port(HEADLESS_PORT)}")
            write_line(
                "The browser then ends on an address starting with "
                f"http://127.0.0.1:{HEADLESS_PORT}/?code= that does not load: copy it here."
            )
            sys.stdout.flush()
            line = sys.stdin.readline() if sys.stdin is not None else ""
            code = _code_of(line)
            if code is None:
                exit_with_error("that address holds no ?code=...; run `det auth login` again")
        else:
            code = _wait_for_browser(url_of_port)
        answer = session.request(
            "POST",
            "/auth/sso/exchange",
            json={"code": code, "code_verifier": verifier},
            auth=False,
        ).json()
        user = session.adopt_token(str(answer["token"]))
    write_line(f"Signed in as user '{user.get('username')}' through {provider['name']}.")
    return 0


def _list_providers(args: argparse.Namespace) -> int:
    with open_session(args, login=False) as session:
        providers = _providers(session)
    if not providers:
        note("This master offers no single sign-on provider.")
        return 0
    write_line("Available providers: " + ", ".join(p["name"] for p in providers) + ".")
    return 0


def register(subparsers: Any, common: argparse.ArgumentParser) -> None:
    """Add the ``auth`` command group."""
    group = subparsers.add_parser(
        "auth", help="single sign-on through the master's identity provider", parents=[common]
    )
    sub = group.add_subparsers(dest="auth_command", metavar="COMMAND", required=True)
    p = sub.add_parser("login", help="sign in through the identity provider", parents=[common])
    p.add_argument(
        "-p", "--provider", default=None, help="the provider (needed when the master has several)"
    )
    p.add_argument(
        "--headless",
        action="store_true",
        help="print the address to open elsewhere and paste back where the browser ended",
    )
    p.set_defaults(func=_login)
    p = sub.add_parser(
        "list-providers", help="list the master's single sign-on providers", parents=[common]
    )
    p.set_defaults(func=_list_providers)


__all__ = ["pkce_pair", "register"]
