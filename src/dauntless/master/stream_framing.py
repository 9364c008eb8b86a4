"""Server-sent event framing and strict JSON text for the live streams of
:mod:`dauntless.master.routes_stream` (the WHATWG HTML standard, section "Server-sent
events"): :func:`sse_event` frames one event, :func:`dumps_json` writes its payload.
"""

from __future__ import annotations

import json
import math
from typing import Any


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
