"""The SSH key pair of a shell task (issue 34 scope 6; Determined's shell keys).

Every shell gets a key pair of its own when it is created: the public key goes to the
shell's process (``DAUNTLESS_SSH_PUBLIC_KEY``, :mod:`dauntless.master.task_scheduling`),
which lets only that key into the ``sshd`` it starts
(:mod:`dauntless.exec.shell_sshd`); the private key is kept in the task's row
(``meta["ssh"]``, never in any view of the task) and handed to the shell's owner
alone by ``GET /api/v1/shells/{id}/ssh_key`` (:func:`owner_key`). The key pair only
opens the shell's ``sshd``, which is reachable only through the master's proxy, which
lets only the owner (or a user with ``UPDATE_NSC`` on its workspace) through: a key
that leaked is still no way in for anyone else.

Keys are of the master config's ``security.ssh.key_type`` (Ed25519 by default, as
Determined's; RSA of ``rsa_key_size`` bits or ECDSA P-256), made by the ``cryptography``
library and written in OpenSSH's formats.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .task_states import NotFound

if TYPE_CHECKING:
    from .auth_access import Principal

META_KEY = "ssh"
"""The key of the task row's ``meta`` that holds the shell's key pair."""


class NotOwner(Exception):
    """Someone other than a shell's owner asked for its private key."""


def new_key_pair(key_type: str = "ED25519", rsa_key_size: int | None = None) -> dict[str, str]:
    """A fresh key pair in OpenSSH's formats.

    Args:
        key_type: ``ED25519``, ``RSA`` or ``ECDSA`` (NIST P-256), as
            ``security.ssh.key_type``.
        rsa_key_size: bits of an RSA key (default 2048).

    Returns:
        ``{"private_key": PEM text (OpenSSH private key, unencrypted),
        "public_key": "ssh-ed25519 AAAA... dauntless-shell"}``.

    Raises:
        ValueError: an unknown key type.
    """
    # Imported at the first shell, not with the master: ``cryptography`` costs about
    # 7.5 MB of resident memory that a master running no shells never needs (issue 37).
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec, rsa
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    key: Any
    if key_type == "ED25519":
        key = Ed25519PrivateKey.generate()
    elif key_type == "RSA":
        key = rsa.generate_private_key(public_exponent=65537, key_size=rsa_key_size or 2048)
    elif key_type == "ECDSA":
        key = ec.generate_private_key(ec.SECP256R1())
    else:
        raise ValueError(f"key_type must be ED25519, RSA or ECDSA, got {key_type!r}")
    private = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.OpenSSH,
        serialization.NoEncryption(),
    ).decode("ascii")
    public = key.public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
    )
    return {"private_key": private, "public_key": public.decode("ascii") + " dauntless-shell"}


def public_key(meta: dict[str, Any]) -> str | None:
    """The shell's public key from its row's ``meta``; None for a shell made before
    shells had keys (it serves its WebSocket terminal only)."""
    pair = meta.get(META_KEY)
    return pair.get("public_key") if isinstance(pair, dict) else None


def owner_key(row: Any, who: Principal) -> dict[str, Any]:
    """The answer of ``GET /api/v1/shells/{id}/ssh_key``: the shell's key pair, for its
    owner only.

    Args:
        row: the task's row (``id``, ``type``, ``owner``, ``meta``).
        who: the caller.

    Returns:
        ``{"id", "private_key", "public_key"}`` (OpenSSH formats).

    Raises:
        NotFound: the task is not a shell, or a shell without a key.
        NotOwner: the caller is not the shell's owner (an admin neither: the key is the
            owner's credential, and the proxy lets admins into the shell's terminal).
    """
    pair = row.meta.get(META_KEY) if row.type == "SHELL" else None
    if not isinstance(pair, dict):
        raise NotFound(f"task {row.id} is not a shell with an SSH key")
    if who.kind != "user" or who.username != row.owner:
        raise NotOwner(f"only the owner of shell {row.id} ({row.owner}) may have its SSH key")
    return {"id": row.id, "private_key": pair["private_key"], "public_key": pair["public_key"]}


__all__ = ["META_KEY", "NotOwner", "new_key_pair", "owner_key", "public_key"]
