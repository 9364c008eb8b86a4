"""Every JSON route of the master declares what it answers (issue 18): its OpenAPI success
response names a response model (a ``$ref`` to a component schema with properties), not
FastAPI's empty default (``{}``) or the bare ``object`` of a ``dict[str, Any]`` return
annotation, and its errors are the declared :class:`~dauntless.master.api_spec.ErrorBody`.

The routes that answer something other than a JSON document are listed below by name,
so that a new untyped route fails here instead of going unnoticed.
"""

from __future__ import annotations

from typing import Any

import pytest

from dauntless.config import MasterConfig
from dauntless.master.app import create_app

NOT_JSON = {
    # Gzipped tars (application/gzip, declared in api_spec.GZIP_ROUTES).
    ("GET", "/api/v1/experiments/{exp_id}/model_def"),
    ("GET", "/api/v1/checkpoints/{uuid}/download"),
    ("GET", "/api/v1/tasks/{task_id}/context"),
    # One file's bytes: text/plain or application/octet-stream.
    ("GET", "/api/v1/experiments/{exp_id}/model_def/file"),
    # Server-sent event streams: they answer for as long as the client listens.
    ("GET", "/api/v1/stream/experiments"),
    ("GET", "/api/v1/stream/experiments/{exp_id}"),
    ("GET", "/api/v1/stream/cluster"),
    ("GET", "/api/v1/stream/trials/{trial_id}/logs"),
}
"""Routes whose success answer is not a JSON document (the proxy, ``/proxy/...``, is not
part of the API spec at all)."""

PENDING: set[tuple[str, str]] = set()
"""JSON routes still without a response model, each with the reason."""

METHODS = {"get", "post", "put", "patch", "delete"}


@pytest.fixture(scope="module")
def spec(tmp_path_factory) -> dict[str, Any]:
    data_dir = tmp_path_factory.mktemp("typed")
    app = create_app(MasterConfig(data_dir=str(data_dir), port=18080), run_loop=False)
    return app.openapi()


def _operations(spec: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    return {
        (method.upper(), path): op
        for path, item in spec["paths"].items()
        if path.startswith("/api/")
        for method, op in item.items()
        if method in METHODS
    }


def _component(spec: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any] | None:
    ref = schema.get("$ref")
    prefix = "#/components/schemas/"
    if not isinstance(ref, str) or not ref.startswith(prefix):
        return None
    return spec["components"]["schemas"].get(ref.removeprefix(prefix))


def test_every_json_route_declares_a_response_model(spec):
    ops = _operations(spec)
    assert len(ops) > 60
    untyped = []
    for key, op in sorted(ops.items()):
        if key in NOT_JSON or key in PENDING:
            continue
        ok = {s: r for s, r in op["responses"].items() if s.startswith("2")}
        assert ok, f"{key}: no success response declared"
        for status, response in ok.items():
            content = response.get("content", {})
            schema = content.get("application/json", {}).get("schema", {})
            model = _component(spec, schema)
            if set(content) != {"application/json"} or model is None:
                untyped.append(f"{key} {status}: {schema or content}")
            elif not model.get("properties") and model.get("additionalProperties") is not False:
                untyped.append(f"{key} {status}: {schema['$ref']} has no properties")
    assert not untyped, "routes without a response model:\n" + "\n".join(untyped)


def test_routes_that_answer_no_json_declare_what_they_send(spec):
    """Gzipped tars, files and event streams do not claim to be JSON."""
    ops = _operations(spec)
    for key in NOT_JSON:
        content = ops[key]["responses"]["200"].get("content", {})
        assert content and "application/json" not in content, (key, content)
    streams = [k for k in NOT_JSON if k[1].startswith("/api/v1/stream/")]
    assert len(streams) == 4
    for key in streams:
        assert set(ops[key]["responses"]["200"]["content"]) == {"text/event-stream"}, key


def test_the_listed_exceptions_exist(spec):
    """A renamed or removed route must leave the lists, so they stay exact."""
    ops = _operations(spec)
    assert (NOT_JSON | PENDING) - set(ops) == set()


def test_every_route_declares_its_errors_as_error_bodies(spec):
    for key, op in _operations(spec).items():
        responses = op["responses"]
        assert "400" in responses, f"{key}: 400 not declared"
        assert "422" not in responses, f"{key}: FastAPI's 422 is never answered"
        for status, response in responses.items():
            if status.startswith(("4", "5")):
                schema = response["content"]["application/json"]["schema"]
                assert schema == {"$ref": "#/components/schemas/ErrorBody"}, (key, status)
