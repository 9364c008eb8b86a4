"""Secrets of the master's authentication (:mod:`dauntless.master.auth`): argon2id
password hashes, random bearer tokens and their SHA-256 (how tokens are stored; the
reasons are in that module's docstring), and the cluster secret agents present.
"""

from __future__ import annotations

import hashlib
import logging
import os
import secrets

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError, VerifyMismatchError

from dauntless.config import MasterConfig

log = logging.getLogger("dauntless.master.auth")

CLUSTER_SECRET_FILE = "cluster_secret"
"""The file in the data directory holding the generated cluster secret."""

_hasher = PasswordHasher()
_dummy_hash: str | None = None

#: Stored hash -> whether it is a hash of the empty password (None: the dummy hash of an
#: unknown user). A fresh cluster's built-in users have an empty password and the WebUI
#: signs in as ``determined`` silently on a first visit: without this, each such sign-in
#: costs one argon2 verification (0.15-0.9 s of CPU on the machines measured, issue 38).
#: Only the empty password is remembered, never another one; a changed password has a
#: new hash (a new salt), so it is never answered from here. Bounded by
#: :data:`_EMPTY_CACHE_MAX` entries.
_empty_verified: dict[str | None, bool] = {}
_EMPTY_CACHE_MAX = 4096


DET_PREHASH_SALT = "GubPEmmotfiK9TMD6Zdw"
"""The fixed salt of Determined's client-side password pre-hash (its clients send
``sha512(salt + password)`` as hex with ``isHashed: true``; Determined 0.38.1,
``determined/common/api/authentication.py`` and ``master/internal/user/service.go``)."""

PREHASHED = "det-sha512:"
"""Prefix of a stored hash made over Determined's pre-hash of the password rather than
over the password itself: ``det-sha512:`` + argon2id(sha512(salt + password) hex). Such a
hash verifies both a plain password (pre-hashed here) and a pre-hashed one from
Determined's own client, so its ``det user login`` and SDK ``login`` work unchanged. A
stored hash without the prefix (made before) verifies plain passwords only, and is
replaced by the prefixed form at the user's next plain sign-in
(:func:`needs_rehash`)."""


def det_prehash(password: str) -> str:
    """Determined's client-side pre-hash of a password: the hex SHA-512 of
    :data:`DET_PREHASH_SALT` + ``password``; the empty password stays empty (as its
    client sends it)."""
    if password == "":
        return ""
    return hashlib.sha512(
        (DET_PREHASH_SALT + password).encode("utf-8", "surrogatepass")
    ).hexdigest()


#: This process's one hash of the empty password (see :func:`hash_password`).
_empty_hash: str | None = None


def hash_password(password: str) -> str:
    """The stored hash of a plain ``password``: :data:`PREHASHED` + the argon2id hash
    (encoded, salt and parameters included) of its :func:`det_prehash`.

    The empty password is hashed once per process and that hash given to every user
    who has it (each fresh master's built-in users; a user who sets it): one argon2
    hash (0.15-0.9 s of CPU) instead of one per master started in the process, and
    :data:`_empty_verified` then answers their sign-ins from one verification. A
    shared salt hides nothing here: a salt keeps a password that is secret from being
    found by one precomputation over many hashes, and the empty password is no secret
    (whoever reads any hash can test it with one verification).
    """
    global _empty_hash
    if password == "":
        if _empty_hash is None:
            _empty_hash = PREHASHED + _hasher.hash("")
        return _empty_hash
    return PREHASHED + _hasher.hash(det_prehash(password))


def needs_rehash(stored: str | None) -> bool:
    """Whether ``stored`` is an older hash over the plain password (see :data:`PREHASHED`)."""
    return stored is not None and not stored.startswith(PREHASHED)


def verify_password(stored: str | None, password: str, *, is_hashed: bool = False) -> bool:
    """Whether ``password`` matches the stored hash (False for no hash).

    Args:
        stored: the user's stored hash (:func:`hash_password`), or None.
        password: the plain password, or with ``is_hashed`` Determined's pre-hash of it
            (:func:`det_prehash`, what its clients send).
        is_hashed: Determined's ``isHashed`` login flag.

    With no stored hash a dummy hash is checked anyway, so that an unknown user costs
    as much time as a wrong password (no user enumeration by timing). The answer for the
    empty password is computed once per stored hash and remembered (see
    :data:`_empty_verified`; for an unknown user too, so that both stay alike in time).
    """
    key, argon = stored, stored
    if stored is not None and stored.startswith(PREHASHED):
        argon = stored[len(PREHASHED) :]
        if not is_hashed:
            password = det_prehash(password)  # "" stays ""
    elif is_hashed and password != "":
        # An older hash over the plain password cannot check a pre-hash: still spend
        # the time of one verification, then refuse.
        _verify(None, password)
        return False
    if password == "":
        known = _empty_verified.get(key)
        if known is None:
            known = _verify(argon, password)
            if len(_empty_verified) < _EMPTY_CACHE_MAX:
                _empty_verified[key] = known
        return known
    return _verify(argon, password)


def warm_empty_password(stored: str | None) -> None:
    """Compute and remember whether ``stored`` is a hash of the empty password (what
    :func:`verify_password` would, ahead of the first sign-in: the master does it for
    the built-in users in the background when it starts)."""
    verify_password(stored, "")


def _verify(stored: str | None, password: str) -> bool:
    global _dummy_hash
    if stored is None:
        if _dummy_hash is None:
            _dummy_hash = _hasher.hash(secrets.token_hex(16))
        stored, password = _dummy_hash, password + "\0"
    try:
        return _hasher.verify(stored, password)
    except (VerifyMismatchError, VerificationError, InvalidHashError):
        return False


def new_token() -> str:
    """A new random bearer token (256 bits, URL-safe text)."""
    return secrets.token_urlsafe(32)


def hash_token(token: str) -> str:
    """SHA-256 (hex) of a token: how tokens are stored and looked up (see the module)."""
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def load_cluster_secret(config: MasterConfig) -> str:
    """The cluster secret: ``security.cluster_secret``, else the one in
    ``<data_dir>/cluster_secret``, made (random, mode 0600) when missing."""
    if config.security.cluster_secret is not None:
        value = config.security.cluster_secret.get_secret_value()
        if not value:
            raise ValueError("security.cluster_secret must not be empty")
        return value
    path = os.path.join(config.data_dir, CLUSTER_SECRET_FILE)
    try:
        with open(path, encoding="utf-8") as f:
            value = f.read().strip()
        if value:
            return value
    except FileNotFoundError:
        pass
    value = secrets.token_urlsafe(32)
    fd = os.open(path + ".tmp", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(value + "\n")
    os.replace(path + ".tmp", path)
    log.info("made a cluster secret for agents in %s", path)
    return value
