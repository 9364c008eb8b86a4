"""Server-sent event framing and strict JSON text for the live streams of
:mod:`dauntless.master.routes_stream` (the WHATWG HTML standard, section "Server-sent
events"): :func:`sse_event` frames one event, :func:`dumps_json` writes its payload,
:class:`SpooledPayload` holds a large payload written piece by piece.
"""

from __future__ import annotations

import hashlib
import json
import math
import tempfile
from collections.abc import Iterable, Iterator
from typing import Any

SPOOL_MEMORY = 1 << 20
"""Bytes of a :class:`SpooledPayload` kept in memory; the rest goes to a temporary file."""

READ_CHUNK = 1 << 16
"""Bytes of a :class:`SpooledPayload` sent at a time."""


def _finite(obj: Any) -> Any:
    """``obj`` with every non-finite float (NaN, ±inf: not JSON) replaced by None."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


def dumps_json(obj: Any) -> str:
    """Compact, strict JSON text of ``obj``; NaN and infinities become ``null``.

    Args:
        obj: JSON-able data (dicts, lists, str, numbers, bool, None).

    Raises:
        TypeError: ``obj`` holds something JSON cannot represent.
    """
    try:
        return json.dumps(obj, separators=(",", ":"), allow_nan=False)
    except ValueError:
        return json.dumps(_finite(obj), separators=(",", ":"), allow_nan=False)


def sse_event(event: str, data: str, event_id: int | None = None) -> bytes:
    """One server-sent event, framed.

    Args:
        event: the event name (no newlines).
        data: the payload text; each of its lines becomes one ``data:`` field.
        event_id: the ``id:`` field (a client's ``Last-Event-ID`` on reconnection).

    Raises:
        ValueError: ``event`` is empty or holds a newline.
    """
    if not event or "\n" in event or "\r" in event:
        raise ValueError(f"event must be a non-empty single-line name, got {event!r}")
    head = f"event: {event}\n"
    if event_id is not None:
        head += f"id: {int(event_id)}\n"
    body = "".join(f"data: {line}\n" for line in data.split("\n"))
    return (head + body + "\n").encode()


def digest(text: str) -> bytes:
    """The digest by which a stream tells payloads apart (BLAKE2b, 32 bytes, of the
    UTF-8 text); :attr:`SpooledPayload.digest` is the same function of its text."""
    return hashlib.blake2b(text.encode(), digest_size=32).digest()


class SpooledPayload:
    """An event's payload text, written piece by piece into a spooled temporary file
    (in memory up to :data:`SPOOL_MEMORY` bytes, in a temporary file beyond), with its
    :func:`digest`: a stream of a large body (an experiment with 10,000 trials, 5 MB
    of JSON) holds neither the body nor the last one it sent in memory (issue 37),
    only a page of it while reading and the digest after.

    Args:
        pieces: the payload's text in order (their concatenation is the payload).

    Raises:
        Whatever iterating ``pieces`` raised (the file is closed first).
    """

    def __init__(self, pieces: Iterable[str]) -> None:
        self._file = tempfile.SpooledTemporaryFile(max_size=SPOOL_MEMORY)
        hasher = hashlib.blake2b(digest_size=32)
        try:
            for piece in pieces:
                data = piece.encode()
                hasher.update(data)
                # Framed as it is written: each line of the payload is a data field.
                self._file.write(data.replace(b"\n", b"\ndata: "))
        except BaseException:
            self._file.close()
            raise
        self.digest = hasher.digest()

    def event(self, event: str) -> Iterator[bytes]:
        """The framed event, :data:`READ_CHUNK` bytes at a time: the same bytes as
        ``sse_event(event, payload)`` (no ``id:`` field).

        Raises:
            ValueError: ``event`` is empty or holds a newline.
        """
        head = sse_event(event, "")  # checks the name; ends "data: \n\n"
        yield head[: -len(b"\n\n")]
        self._file.seek(0)
        while chunk := self._file.read(READ_CHUNK):
            yield chunk
        yield b"\n\n"

    def close(self) -> None:
        """Let the payload go (its temporary file, if any, is removed)."""
        self._file.close()
