"""Signed-in users: the token store on disk and the rules that pick a token.

The store is one JSON file, ``$XDG_CONFIG_HOME/dauntless/auth.json`` (``~/.config`` when
``XDG_CONFIG_HOME`` is unset), readable by its owner only (mode 0600)::

    {"version": 1,
     "masters": {"http://127.0.0.1:8080": {"active_user": "determined",
                                           "tokens": {"determined": "<token>"}}}}

Tokens are kept per master URL and per user name; ``active_user`` is the user the CLI acts
as on that master when neither ``-u/--user`` nor ``DET_USER`` names one. Every write goes
to a new file created with mode 0600 and atomically renamed over the old one, under an
advisory lock, so a crash never leaves a half-written file and two ``det`` processes do not
lose each other's tokens.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
from collections.abc import Iterator, Mapping
from typing import Any

try:  # POSIX only; the store still works (without the lock) elsewhere
    import fcntl
except ImportError:  # pragma: no cover
    fcntl = None  # type: ignore[assignment]

#: Environment variables read when resolving who the client acts as (Determined's names).
USER_ENV = "DET_USER"
PASSWORD_ENV = "DET_PASS"
TOKEN_ENV = "DET_USER_TOKEN"
#: The user signed in automatically when nobody else is named (Determined's built-in user).
DEFAULT_USER = "determined"

_STORE_VERSION = 1


def default_store_path(environ: Mapping[str, str] | None = None) -> str:
    """``$XDG_CONFIG_HOME/dauntless/auth.json``, else ``~/.config/dauntless/auth.json``."""
    env = os.environ if environ is None else environ
    base = env.get("XDG_CONFIG_HOME", "").strip() or os.path.join(
        os.path.expanduser("~"), ".config"
    )
    return os.path.join(base, "dauntless", "auth.json")


class TokenStore:
    """The saved tokens of one OS user, keyed by master URL and user name.

    Args:
        path: the JSON file; :func:`default_store_path` when None. Its directory is
            created (mode 0700) on the first write.

    Methods never raise for a missing or corrupt file when reading (it reads as empty);
    writes raise ``OSError`` when the directory cannot be written.
    """

    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        self.path = os.fspath(path) if path is not None else default_store_path()

    def __repr__(self) -> str:
        return f"TokenStore({self.path!r})"

    # -- reading -------------------------------------------------------------------------

    def _load(self) -> dict[str, Any]:
        try:
            with open(self.path, encoding="utf-8") as f:
                data = json.load(f)
        except (OSError, ValueError):
            return {"version": _STORE_VERSION, "masters": {}}
        if not isinstance(data, dict) or not isinstance(data.get("masters"), dict):
            return {"version": _STORE_VERSION, "masters": {}}
        return data

    def _entry(self, data: dict[str, Any], master_url: str) -> dict[str, Any]:
        entry = data["masters"].get(master_url)
        if not isinstance(entry, dict):
            return {"active_user": None, "tokens": {}}
        if not isinstance(entry.get("tokens"), dict):
            entry["tokens"] = {}
        return entry

    def get_token(self, master_url: str, username: str) -> str | None:
        """The saved token of ``username`` on ``master_url``, or None."""
        token = self._entry(self._load(), master_url)["tokens"].get(username)
        return token if isinstance(token, str) and token else None

    def active_user(self, master_url: str) -> str | None:
        """The user last signed in on ``master_url`` (and not signed out), or None."""
        user = self._entry(self._load(), master_url).get("active_user")
        return user if isinstance(user, str) and user else None

    def users(self, master_url: str) -> dict[str, str]:
        """``{username: token}`` of every user with a saved token on ``master_url``."""
        tokens = self._entry(self._load(), master_url)["tokens"]
        return {u: t for u, t in tokens.items() if isinstance(t, str) and t}

    # -- writing -------------------------------------------------------------------------

    def set_token(
        self, master_url: str, username: str, token: str, *, activate: bool = True
    ) -> None:
        """Save ``token`` for ``username`` on ``master_url`` (replacing an older one).

        Args:
            master_url: the normalized master URL (``Session.master_url``).
            username: the user the token belongs to.
            token: the bearer token.
            activate: also make ``username`` the active user of that master.
        """
        with self._update() as data:
            entry = data["masters"].setdefault(master_url, {"active_user": None, "tokens": {}})
            entry.setdefault("tokens", {})[username] = token
            if activate:
                entry["active_user"] = username

    def drop_token(self, master_url: str, username: str) -> None:
        """Forget ``username``'s token on ``master_url``; the active user is cleared if it
        was ``username``."""
        with self._update() as data:
            entry = data["masters"].get(master_url)
            if not isinstance(entry, dict):
                return
            entry.get("tokens", {}).pop(username, None)
            if entry.get("active_user") == username:
                entry["active_user"] = None
            if not entry.get("tokens"):
                data["masters"].pop(master_url, None)

    def drop_master(self, master_url: str) -> None:
        """Forget every token saved for ``master_url``."""
        with self._update() as data:
            data["masters"].pop(master_url, None)

    @contextlib.contextmanager
    def _update(self) -> Iterator[dict[str, Any]]:
        directory = os.path.dirname(os.path.abspath(self.path))
        os.makedirs(directory, mode=0o700, exist_ok=True)
        with self._locked(directory):
            data = self._load()
            data["version"] = _STORE_VERSION
            yield data
            self._write(directory, data)

    @contextlib.contextmanager
    def _locked(self, directory: str) -> Iterator[None]:
        if fcntl is None:  # pragma: no cover
            yield
            return
        fd = os.open(os.path.join(directory, ".auth.lock"), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing releases the lock

    def _write(self, directory: str, data: dict[str, Any]) -> None:
        text = json.dumps(data, indent=2, sort_keys=True) + "\n"
        # A fresh name in the same directory, created 0600 (O_EXCL: never an existing file).
        for _ in range(100):
            tmp = os.path.join(directory, f".auth.json.{secrets.token_hex(8)}")
            try:
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                break
            except FileExistsError:
                continue
        else:  # pragma: no cover
            raise OSError(f"could not create a temporary file in {directory}")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise


__all__ = [
    "DEFAULT_USER",
    "PASSWORD_ENV",
    "TOKEN_ENV",
    "TokenStore",
    "USER_ENV",
    "default_store_path",
]
