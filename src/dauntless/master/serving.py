"""Serving the master: its API and WebUI on ``port``, and the task services' own origin
(``task_proxy``, :mod:`dauntless.master.proxy`) on a second port, in one process and one
event loop (two uvicorn servers).

The proxy origin starts once the master's start-up (migrations, the loop) is done, and
stops when the master's server stops (a signal, or ``should_exit``); only the master's
server handles signals.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Callable, Iterator
from typing import Any

import uvicorn
from fastapi import FastAPI

from dauntless.config import MasterConfig


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` (0: a port the OS picks), bound now so
    that nothing else can take the port before the server starts.

    Raises:
        OSError: the address is in use or cannot be bound.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(2048)
        sock.set_inheritable(True)
    except OSError:
        sock.close()
        raise
    return sock


def bind_proxy(config: MasterConfig, master_port: int) -> socket.socket:
    """Bind the proxy origin's socket: ``task_proxy.host`` (default the master's host),
    ``task_proxy.port`` (default ``master_port + 1``, or any free port when the master's
    port is 0; 0: any free port).

    Raises:
        OSError: naming the ``task_proxy`` setting when the port cannot be bound.
    """
    proxy = config.task_proxy
    host = proxy.host or config.host
    if proxy.port is not None:
        port = proxy.port
    else:
        port = master_port + 1 if master_port else 0
    try:
        return bind(host, port)
    except OSError as exc:
        raise OSError(
            exc.errno,
            f"the task proxy origin cannot listen on {host}:{port} ({exc.strerror}); set "
            "task_proxy.port (or --proxy-port) in the master config",
        ) from None


class _Quiet(uvicorn.Server):
    """A uvicorn server that leaves signals to the master's server."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def proxy_server(app: FastAPI, master: uvicorn.Config) -> uvicorn.Server:
    """The uvicorn server of ``app``'s proxy origin, with the master's TLS and logging."""
    return _Quiet(
        uvicorn.Config(
            app.state.proxy_origin_app,
            lifespan="off",
            log_level=master.log_level,
            access_log=master.access_log,
            timeout_graceful_shutdown=master.timeout_graceful_shutdown,
            ssl_certfile=master.ssl_certfile,
            ssl_keyfile=master.ssl_keyfile,
        )
    )


async def serve(
    app: FastAPI,
    master: uvicorn.Server,
    proxy_socket: socket.socket,
    master_sockets: list[socket.socket] | None = None,
    on_started: Callable[[], Any] | None = None,
) -> None:
    """Serve the master with ``master`` (a uvicorn server of ``app``) and, once it has
    started, its proxy origin on ``proxy_socket``, until the master's server stops.

    Args:
        app: the master application (:func:`dauntless.master.app.create_app`).
        master: its uvicorn server.
        proxy_socket: the proxy origin's bound socket (:func:`bind_proxy`); its port
            becomes ``app.state.proxy_port``.
        master_sockets: the master's bound sockets (None: uvicorn binds its host/port).
        on_started: called once both listen.

    Raises:
        OSError: the proxy origin did not start (the master is stopped first).
    """
    app.state.proxy_port = int(proxy_socket.getsockname()[1])
    proxy = proxy_server(app, master.config)
    main = asyncio.ensure_future(master.serve(sockets=master_sockets))
    while not master.started and not main.done():
        await asyncio.sleep(0.02)
    if main.done():
        await main  # start-up failed: its error, or uvicorn's exit
        return
    side = asyncio.ensure_future(proxy.serve(sockets=[proxy_socket]))
    while not proxy.started and not side.done():
        await asyncio.sleep(0.02)
    if not proxy.started:  # a master without its task services' origin does not run
        master.should_exit = True
        await main
        await side
        raise OSError(f"the task proxy origin did not start on port {app.state.proxy_port}")
    if on_started is not None:
        on_started()
    try:
        await main
    finally:
        proxy.should_exit = True
        await side


def run(app: FastAPI, config: MasterConfig, **uvicorn_options: Any) -> None:
    """Run the master and its proxy origin until interrupted (``python -m
    dauntless.master``).

    Args:
        app: the master application.
        config: its config (host, port, ``task_proxy``).
        **uvicorn_options: for the master's :class:`uvicorn.Config` (log level, TLS ...).

    Raises:
        OSError: the proxy origin's port cannot be bound.
        SystemExit: (3, uvicorn's code for it) the master's start-up failed.
    """
    proxy_socket = bind_proxy(config, config.port)
    master = uvicorn.Server(
        uvicorn.Config(app, host=config.host, port=config.port, **uvicorn_options)
    )
    # The standard event loop, as uvicorn.run uses without uvloop (not a dependency);
    # the HTTP parser is httptools (a dependency: uvicorn picks it over h11, issue 37).
    asyncio.run(serve(app, master, proxy_socket))
    if not master.started:
        raise SystemExit(3)


__all__ = ["bind", "bind_proxy", "proxy_server", "run", "serve"]
