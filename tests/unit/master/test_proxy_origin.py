"""Task services on an origin of their own, and CSRF (issue 29 scope 4), against a real
master served on two ports (dauntless.master.testing.serve) and a real HTTP/WebSocket
server standing in for a notebook's service (the task's own process reports it as
notebooks do: POST /tasks/{id}/service with its session token).

* On the master's origin a bearer token is forwarded; the master's cookie gets a 303
  to the proxy origin with a one-time ticket for a GET, and 403 for anything else.
* On the proxy origin the ticket becomes the proxy origin's own cookie; requests from
  another origin, a used ticket, no credential, the API's paths are refused; the
  service never sees or sets a dauntless_* cookie and gets its own origin.
* Logging out of the master ends the proxy session.
* A WebSocket without credentials is answered 401 (an HTTP answer, as documented).
* Cookie-authenticated changes of the API need X-CSRF-Token; bearer calls do not.
* With task_proxy.domain each task has a host name of its own.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest
import uvicorn
import websockets
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket

from dauntless.config import TaskProxyConfig
from dauntless.master.body_limits import MAX_JSON_BODY_BYTES
from dauntless.master.testing import LiveMaster, bearer, login, register_agent, serve, wait_for

PAGE = "<html><body><script>window.evil = true</script>task page</body></html>"


def _service_app() -> Starlette:
    """The stand-in service: a page that tries to set the master's cookie, an echo of
    the request headers, and a WebSocket echo."""

    async def page(request: Request) -> HTMLResponse:
        resp = HTMLResponse(PAGE)
        resp.set_cookie("dauntless_token", "planted-by-the-task", path="/")
        resp.set_cookie("svc", "1", path="/")
        return resp

    async def echo(request: Request) -> JSONResponse:
        return JSONResponse({k: v for k, v in request.headers.items()})

    async def ws_echo(ws: WebSocket) -> None:
        await ws.accept()
        await ws.send_text(json.dumps({"origin": ws.headers.get("origin")}))
        await ws.close()

    return Starlette(
        routes=[
            Route("/proxy/{tid}/page", page),
            Route("/proxy/{tid}/echo", echo, methods=["GET", "POST"]),
            WebSocketRoute("/proxy/{tid}/ws", ws_echo),
        ]
    )


@dataclass
class World:
    """The master, bob's notebook (its id and service token), and credentials made once
    (each sign-in costs an argon2 check): bob's and the admin's bearer tokens, and a
    browser-like client signed in as the admin by cookie (``X-Test-CSRF`` holds its
    CSRF token, kept aside)."""

    master: LiveMaster
    task_id: str
    owner_token: str
    service_token: str
    admin_token: str
    admin_browser: httpx.Client
    owner_browser: httpx.Client


def _start_service() -> tuple[uvicorn.Server, threading.Thread, int]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(_service_app(), log_level="error", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    wait_for("the stand-in service to listen", lambda: server.started)
    return server, thread, port


def _world(master: LiveMaster, port: int) -> World:
    """User bob's notebook, placed on a registered agent, whose service (the stand-in
    on ``port``) is reported by the task's own session token."""
    app = master.app
    with httpx.Client(base_url=master.url, timeout=30) as c:
        admin = login(c, "admin")
        r = c.post(
            "/api/v1/users", json={"username": "bob", "password": "pw"}, headers=bearer(admin)
        )
        assert r.status_code == 201, r.text
        bob = login(c, "bob", "pw")
        agent = register_agent(c, app, {"id": "a1", "slots": [{"id": "cpu0", "type": "cpu"}]})
        r = c.post("/api/v1/notebooks", data={}, headers=bearer(bob))
        assert r.status_code == 201, r.text
        task_id = r.json()["task"]["id"]

        def handed_over() -> dict | None:
            start = c.post(
                "/api/v1/agents/a1/heartbeat", json={"running": []}, headers=agent
            ).json()["start"]
            return start[0] if start else None

        spec = wait_for("the notebook to be handed to the agent", handed_over)
        env = spec["env"]
        r = c.post(
            f"/api/v1/tasks/{task_id}/service",
            json={"addr": "127.0.0.1", "port": port},
            headers=bearer(env["DET_SESSION_TOKEN"]),
        )
        assert r.status_code == 200, r.text
    browser = _sign_in_browser(master, "admin")
    owner = _sign_in_browser(master, "bob", "pw")
    return World(master, task_id, bob, env["DAUNTLESS_SERVICE_TOKEN"], admin, browser, owner)


@pytest.fixture(scope="module")
def service() -> Iterator[int]:
    server, thread, port = _start_service()
    yield port
    server.should_exit = True
    thread.join(10)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory, service: int) -> Iterator[World]:
    with serve(str(tmp_path_factory.mktemp("proxy-master"))) as master:
        yield _world(master, service)


def _sign_in_browser(master: LiveMaster, username: str, password: str = "") -> httpx.Client:
    """A client holding the master's cookie only, as a signed-in browser does."""
    c = httpx.Client(base_url=master.url, timeout=30, follow_redirects=False)
    r = c.post("/api/v1/auth/login", json={"username": username, "password": password})
    assert r.status_code == 200, r.text
    c.headers["X-Test-CSRF"] = r.json()["csrf_token"]  # kept aside, not sent as the header
    return c


def _open_through_ticket(w: World, browser: httpx.Client, path: str) -> httpx.Client:
    """Follow the master's 303 and the ticket's 303 as a browser does; returns a client
    holding the proxy origin's cookie."""
    r = browser.get(f"/proxy/{w.task_id}/{path}")
    assert r.status_code == 303, r.text
    location = r.headers["location"]
    assert location.startswith(f"{w.master.proxy_url}/proxy-auth?ticket=")
    proxy = httpx.Client(base_url=w.master.proxy_url, timeout=30, follow_redirects=False)
    r = proxy.get(location[len(w.master.proxy_url) :])
    assert r.status_code == 303 and r.headers["location"] == f"/proxy/{w.task_id}/{path}"
    cookie = r.headers["set-cookie"]
    assert cookie.startswith("dauntless_proxy=") and f"Path=/proxy/{w.task_id}/" in cookie
    assert "HttpOnly" in cookie and "samesite=strict" in cookie.lower()
    # The ticket was used: a second try is refused.
    again = httpx.get(w.master.proxy_url + location[len(w.master.proxy_url) :])
    assert again.status_code == 403 and "used already or has expired" in again.text
    return proxy


def test_master_origin_redirects_browsers_and_forwards_bearers(world: World) -> None:
    w = world
    # Bearer (the CLI): forwarded on the master's origin, with the service's own token.
    r = httpx.get(f"{w.master.url}/proxy/{w.task_id}/echo", headers=bearer(w.owner_token))
    assert r.status_code == 200
    seen = r.json()
    assert seen["authorization"] == f"token {w.service_token}"
    assert "dauntless_" not in seen.get("cookie", "")
    # The master's cookie: no service on the master's origin, only the way to it.
    owner = w.owner_browser
    r = owner.get(f"/proxy/{w.task_id}/page")
    assert r.status_code == 303 and "/proxy-auth?ticket=" in r.headers["location"]
    assert "task page" not in r.text
    r = owner.post(f"/proxy/{w.task_id}/echo", content=b"x")
    assert r.status_code == 403 and "own origin" in r.json()["detail"]
    # Without task_proxy.domain every task shares one origin: another user's browser (even
    # an admin's) may not open bob's task there (test_per_task_host_names: with a domain).
    r = w.admin_browser.get(f"/proxy/{w.task_id}/page")
    assert r.status_code == 403 and "task_proxy.domain" in r.json()["detail"]
    # Nobody at all gets 401 (another user's 403: test_tasks.py).
    assert httpx.get(f"{w.master.url}/proxy/{w.task_id}/page").status_code == 401


def test_proxy_origin_cookie_origin_checks_and_cookies(world: World) -> None:
    w = world
    owner = _sign_in_browser(w.master, "bob", "pw")  # its own session: logged out at the end
    proxy = _open_through_ticket(w, owner, "page")
    r = proxy.get(f"/proxy/{w.task_id}/page")
    assert r.status_code == 200 and "task page" in r.text
    # The service may set its own cookies, never the master's or the proxy's.
    set_cookies = r.headers.get_list("set-cookie")
    assert [c.split("=", 1)[0] for c in set_cookies] == ["svc"]
    # What the service receives: its token, its own origin, no dauntless_* cookie.
    r = proxy.post(f"/proxy/{w.task_id}/echo", headers={"Origin": w.master.proxy_url})
    seen = r.json()
    assert seen["authorization"] == f"token {w.service_token}"
    assert seen["cookie"] == "svc=1"
    assert seen["origin"].startswith("http://127.0.0.1:") and seen["origin"] != w.master.proxy_url
    # A page of another origin (the master's, or any other) may not call the service.
    for origin in (w.master.url, "http://evil.example", "null"):
        r = proxy.post(f"/proxy/{w.task_id}/echo", headers={"Origin": origin})
        assert r.status_code == 403 and "another origin" in r.json()["detail"]
    # No credential: 401; the master's cookie means nothing here; no API on this origin.
    bare = httpx.Client(base_url=w.master.proxy_url, timeout=30)
    assert bare.get(f"/proxy/{w.task_id}/page").status_code == 401
    master_cookie = owner.cookies.get("dauntless_token")
    assert master_cookie
    bare.cookies.set("dauntless_token", master_cookie)
    r = bare.get(f"/proxy/{w.task_id}/page")
    assert r.status_code == 401
    r = bare.get("/api/v1/users")
    assert r.status_code == 404 and "task services only" in r.json()["detail"]
    # The proxy cookie of this task opens no other task (its path is this task's).
    assert proxy.get("/proxy/othertask/page").status_code in (401, 404)
    # Logging out of the master ends the proxy session.
    r = owner.post("/api/v1/auth/logout", headers={"X-CSRF-Token": owner.headers["X-Test-CSRF"]})
    assert r.status_code == 200
    r = proxy.get(f"/proxy/{w.task_id}/page")
    assert r.status_code == 401 and "has ended" in r.json()["detail"]


def test_websockets_answer_401_without_credentials(world: World) -> None:
    w = world
    ws_master = "ws" + w.master.url[len("http") :]
    ws_proxy = "ws" + w.master.proxy_url[len("http") :]

    async def status(url: str, headers: dict[str, str] | None = None) -> int | str:
        try:
            async with websockets.connect(url, additional_headers=headers or {}) as conn:
                return json.loads(await conn.recv())["origin"] or "open"
        except websockets.InvalidStatus as exc:
            return exc.response.status_code

    async def checks() -> None:
        assert await status(f"{ws_master}/proxy/{w.task_id}/ws") == 401
        assert await status(f"{ws_master}/proxy/nosuchtask/ws") == 401
        assert await status(f"{ws_proxy}/proxy/{w.task_id}/ws") == 401
        # The master's cookie opens no WebSocket of a task.
        admin = w.admin_browser
        cookie = {"Cookie": f"dauntless_token={admin.cookies.get('dauntless_token')}"}
        assert await status(f"{ws_master}/proxy/{w.task_id}/ws", cookie) == 403
        # A bearer token (det shell) is forwarded; the service sees no browser origin.
        assert await status(f"{ws_master}/proxy/{w.task_id}/ws", bearer(w.owner_token)) == "open"
        # A browser's WebSocket from its own origin: the service sees its own origin.
        own = {**bearer(w.owner_token), "Origin": w.master.proxy_url}
        seen = await status(f"{ws_proxy}/proxy/{w.task_id}/ws", own)
        assert isinstance(seen, str) and seen.startswith("http://127.0.0.1:")
        evil = {**bearer(w.owner_token), "Origin": "http://evil.example"}
        assert await status(f"{ws_proxy}/proxy/{w.task_id}/ws", evil) == 403

    asyncio.run(checks())


def test_cookie_changes_need_the_csrf_token(world: World) -> None:
    w = world
    admin = w.admin_browser
    csrf = admin.headers["X-Test-CSRF"]
    body = {"username": "mallory", "admin": True}
    r = admin.post("/api/v1/users", json=body)
    assert r.status_code == 403 and "X-CSRF-Token" in r.json()["detail"]
    # A form post (what another site's page can make a browser send) likewise.
    r = admin.post("/api/v1/commands", data={"entrypoint": '["id"]'})
    assert r.status_code == 403 and "X-CSRF-Token" in r.json()["detail"]
    r = admin.post("/api/v1/users", json=body, headers={"X-CSRF-Token": "0" * 64})
    assert r.status_code == 403
    assert admin.get("/api/v1/auth/csrf").json() == {"csrf_token": csrf}
    r = admin.post("/api/v1/users", json=body, headers={"X-CSRF-Token": csrf})
    assert r.status_code == 201, r.text
    # Bearer clients (CLI, SDK) need no token; reads by cookie need none either.
    r = httpx.patch(
        f"{w.master.url}/api/v1/users/{r.json()['user']['id']}",
        json={"active": False},
        headers=bearer(w.admin_token),
    )
    assert r.status_code == 200, r.text
    assert admin.get("/api/v1/users").status_code == 200


def test_json_bodies_are_bounded(world: World) -> None:
    w = world
    json_headers = {**bearer(w.admin_token), "Content-Type": "application/json"}
    for depth, field in ((100, "display_name.0.0.0.0.0.0.0...."), (5000, "body")):
        deep = '{"username": "x", "display_name": ' + "[" * depth + "]" * depth + "}"
        r = httpx.post(f"{w.master.url}/api/v1/users", content=deep, headers=json_headers)
        assert r.status_code == 400, r.text
        assert r.json()["errors"] == [{"field": field, "message": "nested deeper than 64 levels"}]
    r = httpx.post(
        f"{w.master.url}/api/v1/users",
        content='{"username": "x", "display_name": 100000000000000000000000000}',
        headers=json_headers,
    )
    assert r.status_code == 400 and r.json()["errors"][0]["field"] == "display_name"
    big = b" " * (MAX_JSON_BODY_BYTES + 1)
    r = httpx.post(
        f"{w.master.url}/api/v1/trials/1/metrics/batch", content=big, headers=json_headers
    )
    assert r.status_code == 413 and r.json()["errors"][0]["field"] == "body"


def test_per_task_host_names(world: World) -> None:
    """``task_proxy.domain``: the same master with the domain set (its config swapped in
    place, as starting it with the setting would; restored after)."""
    w = world
    state = w.master.app.state
    original = state.config
    state.config = original.model_copy(update={"task_proxy": TaskProxyConfig(domain="tasks.test")})
    try:
        admin = w.admin_browser
        port = w.master.proxy_url.rsplit(":", 1)[1]
        r = admin.get(f"/proxy/{w.task_id}/page")
        assert r.status_code == 303
        assert r.headers["location"].startswith(
            f"http://{w.task_id}.tasks.test:{port}/proxy-auth?ticket="
        )
        ticket_path = r.headers["location"].split(f":{port}", 1)[1]
        # Redeemed on another task's host name: refused.
        other = {"Host": f"other.tasks.test:{port}"}
        r = httpx.get(w.master.proxy_url + ticket_path, headers=other)
        assert r.status_code == 403
        r = admin.get(f"/proxy/{w.task_id}/page")
        ticket_path = r.headers["location"].split(f":{port}", 1)[1]
        host = {"Host": f"{w.task_id}.tasks.test:{port}"}
        proxy = httpx.Client(base_url=w.master.proxy_url, timeout=30, headers=host)
        assert proxy.get(ticket_path).status_code == 303
        assert proxy.get(f"/proxy/{w.task_id}/page").text.endswith("task page</body></html>")
        # The task's cookie and path, reached through another task's host name: refused.
        proxy.headers["Host"] = f"other.tasks.test:{port}"
        r = proxy.get(f"/proxy/{w.task_id}/page")
        assert r.status_code == 403 and f"{w.task_id}.tasks.test" in r.json()["detail"]
    finally:
        state.config = original


def test_bodies_are_forwarded_framed_as_they_came(world: World) -> None:
    """A request without a body reaches the service without one (a GET sent chunked left
    its terminator unread by TensorBoard's server, which then reset the connection and
    cut its scripts short: issue 38); a body keeps its Content-Length, or its chunking."""
    w = world
    url = f"{w.master.url}/proxy/{w.task_id}/echo"
    seen = httpx.get(url, headers=bearer(w.owner_token), timeout=30).json()
    assert "transfer-encoding" not in seen and "content-length" not in seen, seen
    seen = httpx.post(url, headers=bearer(w.owner_token), content=b"abc", timeout=30).json()
    assert seen["content-length"] == "3" and "transfer-encoding" not in seen, seen

    def chunks() -> Iterator[bytes]:
        yield b"ab"
        yield b"c"

    seen = httpx.post(url, headers=bearer(w.owner_token), content=chunks(), timeout=30).json()
    assert seen["transfer-encoding"] == "chunked" and "content-length" not in seen, seen


def test_a_cross_site_navigation_gets_a_page_that_moves_on(world: World) -> None:
    """Opened from the WebUI on the master's origin, the ticket's answer is a page of the
    proxy origin that moves on by itself (a SameSite=Strict cookie is not sent on the
    redirects of a cross-site navigation), with the same cookie."""
    w = world
    r = w.owner_browser.get(f"/proxy/{w.task_id}/page")
    assert r.status_code == 303
    location = r.headers["location"]
    proxy = httpx.Client(base_url=w.master.proxy_url, timeout=30, follow_redirects=False)
    r = proxy.get(location[len(w.master.proxy_url) :], headers={"Sec-Fetch-Site": "cross-site"})
    assert r.status_code == 200 and r.headers["cache-control"] == "no-store"
    assert f"content='0;url=/proxy/{w.task_id}/page'" in r.text
    assert r.headers["set-cookie"].startswith("dauntless_proxy=")
    r = proxy.get(f"/proxy/{w.task_id}/page")
    assert r.status_code == 200 and "task page" in r.text
