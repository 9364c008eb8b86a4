"""The master's routes are matched in order and the first full match wins: every route
must be reachable, and the hot ones (scrapes, heartbeats, the trials' own calls) come
first so that a request to them is not matched against every other route (issue 37)."""

from __future__ import annotations

import re

from fastapi.routing import APIRoute
from starlette.routing import Match

from dauntless.master.app import shared_routes
from dauntless.master.routes_harness import router as harness_router

_PARAM = re.compile(r"\{[^}:]+(:path)?\}")


def _flat() -> list[tuple[str, APIRoute]]:
    """Every API route of the master with its inclusion prefix, in matching order."""
    out = []
    for included in shared_routes():
        prefix = included.include_context.prefix  # type: ignore[attr-defined]
        for route in included.original_router.routes:  # type: ignore[attr-defined]
            if isinstance(route, APIRoute):
                out.append((prefix, route))
    return out


def _first_match(routes: list[tuple[str, APIRoute]], method: str, path: str) -> APIRoute | None:
    for prefix, route in routes:
        if prefix and not path.startswith(prefix):
            continue
        scope = {"type": "http", "method": method, "path": path[len(prefix) :], "root_path": ""}
        if route.matches(scope)[0] == Match.FULL:
            return route
    return None


def test_every_route_is_reached_by_a_path_of_its_own_pattern() -> None:
    """A path made from a route's pattern (each parameter a segment ``7``, a ``:path``
    parameter two segments) reaches that route, not one before it whose pattern also
    matches: a route listed after a more general one of the same method is caught here."""
    routes = _flat()
    assert len(routes) > 100
    shadowed = []
    for prefix, route in routes:
        path = _PARAM.sub(lambda m: "a/b" if m.group(1) else "7", prefix + route.path)
        for method in sorted(route.methods):
            got = _first_match(routes, method, path)
            if got is not route:
                shadowed.append(f"{method} {route.path} -> {got.path if got else None}")
    assert not shadowed, shadowed


def test_the_trials_own_routes_are_matched_before_the_rest() -> None:
    routes = _flat()
    positions = [i for i, (_, r) in enumerate(routes) if r in harness_router.routes]
    assert positions, "no harness route found"
    assert max(positions) < 30, positions
    batch = "/api/v1/trials/7/metrics/batch"
    assert _first_match(routes, "POST", batch).path == "/api/v1/trials/{trial_id}/metrics/batch"
