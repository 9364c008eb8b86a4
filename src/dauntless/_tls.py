"""How clients (CLI/SDK, agents, trials) verify the master's TLS certificate.

One option everywhere, with Determined's name: a CA bundle file (PEM) that signed the
master's certificate, for masters with a self-signed or private-CA certificate. Without it
the system's trust store is used. The special value ``noverify`` turns verification off
(as Determined's ``DET_MASTER_CERT_FILE=noverify`` does); use it only on a trusted network.
"""

from __future__ import annotations

import functools
import os
import ssl
from collections.abc import Mapping

#: The environment variable naming the CA bundle (the CLI, SDK and trial processes read it;
#: the agent sets it for the trials it starts).
CERT_FILE_ENV = "DET_MASTER_CERT_FILE"
#: The value of the option that disables certificate verification.
NO_VERIFY = "noverify"


def cert_file_from_env(environ: Mapping[str, str] | None = None) -> str | None:
    """The CA bundle named by ``DET_MASTER_CERT_FILE``, or None when unset or empty."""
    env = os.environ if environ is None else environ
    value = env.get(CERT_FILE_ENV, "").strip()
    return value or None


def make_verify(cert_file: str | None) -> ssl.SSLContext | bool:
    """The ``verify=`` argument for an httpx client.

    Args:
        cert_file: a PEM CA bundle path, ``"noverify"``, or None for the system trust
            store.

    Returns:
        An SSL context trusting ``cert_file`` (and nothing else), False for
        ``"noverify"``, or True for the system defaults.

    Raises:
        ValueError: when ``cert_file`` names no readable PEM file; the message names it.
    """
    if cert_file is None:
        return True
    if cert_file == NO_VERIFY:
        return False
    path = os.path.abspath(os.path.expanduser(cert_file))
    if not os.path.isfile(path):
        raise ValueError(
            f"the master's CA bundle {cert_file!r} does not exist; give the PEM file that "
            f"signed the master's certificate (--cert-file or {CERT_FILE_ENV})"
        )
    try:
        return ssl.create_default_context(cafile=path)
    except (ssl.SSLError, OSError) as exc:
        raise ValueError(f"cannot load the CA bundle {cert_file!r}: {exc}") from None


@functools.cache
def default_ssl_context() -> ssl.SSLContext:
    """httpx's default client context (certifi's CA bundle), built once per process.

    Loading the bundle costs about 80 ms of CPU; a trial forked from the agent's warm
    worker (docs/warm-start.md) inherits the one the worker built, and a process that
    makes several clients builds it once. Safe to share: an :class:`ssl.SSLContext` is
    only read when connections are made.
    """
    import httpx  # here: importing this module must stay cheap (the CLI's start)

    return httpx.create_ssl_context()


def is_cert_verify_error(exc: BaseException) -> bool:
    """True when ``exc`` (or what caused it) is a failed certificate verification."""
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        if isinstance(cur, ssl.SSLCertVerificationError):
            return True
        if "CERTIFICATE_VERIFY_FAILED" in str(cur):
            return True
        cur = cur.__cause__ or cur.__context__
    return False


#: How the CLI and SDK are given the CA bundle (the default ``how`` of the hint below).
CLI_HINT = f"--cert-file PATH or {CERT_FILE_ENV}=PATH"


def describe_cert_error(url: str, exc: BaseException, how: str = CLI_HINT) -> str:
    """A one-line explanation of a failed verification and how to fix it.

    Args:
        url: the master's URL.
        exc: the exception of the failed connection.
        how: how this program is given a CA bundle (for example ``--master-cert-file``).
    """
    reason = ""
    cur: BaseException | None = exc
    while cur is not None:
        if isinstance(cur, ssl.SSLCertVerificationError):
            reason = cur.verify_message or ""
            break
        cur = cur.__cause__ or cur.__context__
    reason = reason or "certificate verify failed"
    return (
        f"the TLS certificate of {url} could not be verified ({reason}); if the master "
        f"uses a self-signed or private certificate, pass the CA bundle that signed it "
        f"with {how}"
    )


__all__ = [
    "CERT_FILE_ENV",
    "NO_VERIFY",
    "cert_file_from_env",
    "describe_cert_error",
    "is_cert_verify_error",
    "make_verify",
]
