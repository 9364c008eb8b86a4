"""Loaded by Determined's own client (in its separate virtual environment) when the
real-client suite puts this folder on ``PYTHONPATH``: every HTTP request the client
makes through ``requests`` is appended to ``$DET_RECORD_FILE`` as one JSON line
``{"method", "path", "status"}``, so the suite can count the endpoints it exercised and
how many answered 2xx. Nothing is changed in what the client sends or receives."""

from __future__ import annotations

import json
import os
from urllib.parse import urlsplit

_record = os.environ.get("DET_RECORD_FILE")

if _record:
    import requests

    _original = requests.Session.request

    def _recording(self, method, url, *args, **kwargs):  # type: ignore[no-untyped-def]
        response = _original(self, method, url, *args, **kwargs)
        line = {
            "method": method.upper(),
            "path": urlsplit(url).path,
            "status": response.status_code,
        }
        with open(_record, "a", encoding="utf-8") as f:
            f.write(json.dumps(line) + "\n")
        return response

    requests.Session.request = _recording  # type: ignore[method-assign]
