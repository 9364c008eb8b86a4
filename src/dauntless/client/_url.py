"""Where the master is: explicit argument, then ``DET_MASTER``, then the local default."""

from __future__ import annotations

import os
from collections.abc import Mapping

import httpx

#: The master a client talks to when nothing else is said (Determined's default port).
DEFAULT_MASTER_URL = "http://127.0.0.1:8080"
#: The port added to a bare host name given without scheme or port.
DEFAULT_MASTER_PORT = 8080
#: Environment variables read, in order, when no URL is given explicitly.
MASTER_ENV_VARS = ("DET_MASTER", "DET_MASTER_ADDR")


def normalize_master_url(url: str) -> str:
    """Turn a user-given master address into a base URL.

    ``host:port`` and ``host`` gain ``http://`` (and ``host`` the port 8080); a trailing
    slash is dropped. ``https://host`` keeps its scheme's default port.

    Args:
        url: ``http(s)://host[:port][/prefix]``, ``host:port`` or ``host``.

    Returns:
        The base URL, for example ``"http://10.0.0.5:8080"``.

    Raises:
        ValueError: when ``url`` is empty, has a scheme other than http/https, or names no
            host.
    """
    if not isinstance(url, str):
        raise TypeError(f"master url must be a str, got {type(url).__name__}")
    text = url.strip()
    if not text:
        raise ValueError("master url must not be empty; give host:port or http://host:port")
    if "://" not in text:
        host_part = text.split("/", 1)[0]
        has_port = ("]:" in host_part) if host_part.startswith("[") else (":" in host_part)
        if not has_port:
            text = f"{host_part}:{DEFAULT_MASTER_PORT}" + text[len(host_part) :]
        text = "http://" + text
    try:
        parsed = httpx.URL(text)
    except (httpx.InvalidURL, ValueError) as exc:
        raise ValueError(f"master url {url!r} is not a valid URL: {exc}") from None
    if parsed.scheme not in ("http", "https"):
        raise ValueError(f"master url {url!r} has scheme {parsed.scheme!r}; expected http or https")
    if not parsed.host:
        raise ValueError(f"master url {url!r} names no host; expected http://host:port")
    return text.rstrip("/")


def resolve_master_url(
    explicit: str | None = None, environ: Mapping[str, str] | None = None
) -> str:
    """Decide which master to talk to.

    An explicit argument wins; otherwise the first non-empty of ``DET_MASTER`` and
    ``DET_MASTER_ADDR``; otherwise :data:`DEFAULT_MASTER_URL`.

    Args:
        explicit: the address given on the command line or to :class:`Session`, or None.
        environ: the environment to read; ``os.environ`` when None.

    Returns:
        A normalized base URL (see :func:`normalize_master_url`).

    Raises:
        ValueError: when the chosen address is not a valid master URL; the message names
            where it came from.
    """
    env = os.environ if environ is None else environ
    if explicit is not None:
        return normalize_master_url(explicit)
    for name in MASTER_ENV_VARS:
        value = env.get(name, "").strip()
        if value:
            try:
                return normalize_master_url(value)
            except ValueError as exc:
                raise ValueError(f"{name}: {exc}") from None
    return DEFAULT_MASTER_URL
