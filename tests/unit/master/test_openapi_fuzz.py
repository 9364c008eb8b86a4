"""A bounded schemathesis run over the master's OpenAPI spec (issue 18, scope 3).

Every operation gets a few generated requests, as the built-in admin and as an ordinary
second user; no answer may be a 5xx, and every answer must have a declared status, the
declared content type and a body that conforms to the declared schema. The server-sent
event streams (``/stream/...``) are left out: they answer for as long as the client
listens. The run is bounded (a few examples per operation, no shrinking) so that it
stays well under a minute.
"""

from __future__ import annotations

import time

import schemathesis
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import FlakyFailure
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from dauntless.config import MasterConfig
from dauntless.master import loop
from dauntless.master.app import create_app
from dauntless.master.testing import bearer, login, model_def_tarball

EXAMPLES = 4
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]
CONFIG = """
name: fuzz
entrypoint: model_def:Trial
hyperparameters: {global_batch_size: 8}
searcher: {name: single, metric: loss, max_length: {batches: 30}}
"""


def _last(op) -> bool:
    """Operations that change users or sign-ins run last (they may revoke tokens)."""
    return "/users" in op.path or "/auth/" in op.path


def test_openapi_fuzz_as_admin_and_as_user(tmp_path):
    app = create_app(MasterConfig(data_dir=str(tmp_path), port=18080), run_loop=False)
    with TestClient(app) as client:
        admin = login(client)
        r = client.post(
            "/api/v1/users",
            json={"username": "alice", "password": "pw"},
            headers=bearer(admin),
        )
        assert r.status_code == 201, r.text
        # Objects to find: an experiment with a trial and a running allocation.
        r = client.post(
            "/api/v1/experiments",
            data={"config": CONFIG},
            files={"context": ("c.tar.gz", model_def_tarball(), "application/gzip")},
            headers=bearer(admin),
        )
        assert r.status_code == 201, r.text
        client.post(
            "/api/v1/agents", json={"id": "a1", "slots": [{"id": "0"}]}, headers=bearer(admin)
        )
        loop.schedule_pass(app.state.ctx)
        client.post("/api/v1/agents/a1/heartbeat", json={"running": []}, headers=bearer(admin))

        schema = schemathesis.openapi.from_asgi("/openapi.json", app)
        ops = [res.ok() for res in schema.get_all_operations()]
        ops = [op for op in ops if "/stream/" not in op.path]
        ops.sort(key=_last)
        assert len(ops) > 40
        tokens = {"alice": login(client, "alice", "pw"), "admin": admin}
        started = time.monotonic()
        failures: list[str] = []
        for who in ("alice", "admin"):
            for op in ops:
                for attempt in (1, 2):
                    try:
                        _fuzz(op, tokens[who])()
                    except KeyboardInterrupt:
                        raise
                    except BaseException as exc:  # a failure group: collect all, then report
                        inner = "; ".join(repr(e)[:600] for e in getattr(exc, "exceptions", ()))
                        text = f"as {who}: {op.method.upper()} {op.path}: {exc} {inner}"[:2500]
                        # A failure hypothesis could not replay (FlakyFailure: the example
                        # passed when run again, the master's state having moved on) gets
                        # one fresh run of the operation; it fails the test only if that
                        # fails too, and is printed otherwise (the suite turns warnings
                        # into errors).
                        if isinstance(exc, FlakyFailure) and attempt == 1:
                            print(f"not reproducible, re-run: {text}")
                            continue
                        failures.append(text)
                    break
        assert not failures, "\n\n".join(failures)
        print(f"fuzzed {len(ops)} operations twice in {time.monotonic() - started:.1f} s")


def _fuzz(op, token: str):
    """A hypothesis test of ``op`` calling with ``token``."""

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(case=op.as_strategy())
    def check(case):
        response = case.call(headers=bearer(token))
        case.validate_response(response, checks=CHECKS)

    return check
