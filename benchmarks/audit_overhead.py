"""What the audit trail costs (issue 30 scope 5): a trial's metric report (not audited)
and a user's change (audited: one row appended to the chain before the answer leaves).

Starts a real master (a subprocess, SQLite in a temporary directory), registers a pretend
agent, starts one trial and takes its session token, then times, one request after the
other over one keep-alive connection:

- ``POST /trials/{id}/metrics`` with the trial's token (``--reports`` of them, 16
  metrics each): the metric-ingest hot path, which the audit middleware only looks at
  (a trial is not audited);
- ``PATCH /users/{id}`` setting the admin's display name (``--changes`` of them): a
  user's change, which appends an audit row in its own transaction.

The baseline is the same run on a master from another source tree without the audit
trail (``--compare-src DIR``, e.g. ``git archive <commit before issue 30> src | tar -x
-C /tmp/base`` and ``--compare-src /tmp/base/src``): the same requests, measured the same
way, in the same run. First, the CPU the middleware adds to a request it does not audit,
measured in this process on a trivial ASGI app (robust to a busy machine). Printed per
master: p50 / p95 / max latency of each kind (ms), the
master's CPU seconds per request (with its metric fold worker), the wall time, and the
load average; then the ratios this tree / baseline.

Usage::

    python benchmarks/audit_overhead.py [--reports 2000] [--changes 300]
                                        [--compare-src DIR]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _cluster  # noqa: E402
from master_long_poll_cpu import tree_cpu_seconds  # noqa: E402
from metric_ingest import start_trials  # noqa: E402


def _request(
    conn: http.client.HTTPConnection, method: str, path: str, token: str, body: Any
) -> float:
    """Send one JSON request; its latency in seconds (raises on an error status)."""
    start = time.perf_counter()
    conn.request(
        method,
        path,
        body=json.dumps(body),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    r = conn.getresponse()
    data = r.read()
    took = time.perf_counter() - start
    if r.status >= 300:
        raise RuntimeError(f"{method} {path}: {r.status} {data[:200]!r}")
    return took


def _stats(seconds: list[float]) -> str:
    ms = sorted(s * 1000 for s in seconds)
    p95 = ms[min(len(ms) - 1, int(0.95 * len(ms)))]
    return f"p50 {statistics.median(ms):6.2f}  p95 {p95:6.2f}  max {ms[-1]:7.2f} ms"


def run(label: str, src: str | None, reports: int, changes: int) -> dict[str, float]:
    """Time both kinds of requests on one master; returns p50s and CPU per request."""
    with tempfile.TemporaryDirectory(prefix="audit-bench-") as tmp:
        with _cluster.master(Path(tmp) / "data", src=src) as m:
            (spec,) = start_trials(m.url, 1)
            trial_token = spec["env"]["DET_SESSION_TOKEN"]
            admin = json.loads(
                http_post(m.port, "/api/v1/auth/login", {"username": "admin", "password": ""})
            )
            user_token, user_id = admin["token"], admin["user"]["id"]
            conn = http.client.HTTPConnection("127.0.0.1", m.port, timeout=30)
            path = f"/api/v1/trials/{spec['trial_id']}/metrics"
            body = {"group": "training", "trial_run_id": 1, "metrics": {}}
            for b in range(1, 21):  # warm-up: connection, token, first report
                _request(
                    conn,
                    "POST",
                    path,
                    trial_token,
                    {
                        **body,
                        "steps_completed": b,
                        "metrics": {f"m{i}": float(b) for i in range(16)},
                    },
                )
            cpu0, wall0 = tree_cpu_seconds(m.pid), time.perf_counter()
            ingest = [
                _request(
                    conn,
                    "POST",
                    path,
                    trial_token,
                    {
                        **body,
                        "steps_completed": b,
                        "metrics": {f"m{i}": b * 0.5 for i in range(16)},
                    },
                )
                for b in range(21, 21 + reports)
            ]
            cpu1, wall1 = tree_cpu_seconds(m.pid), time.perf_counter()
            edits = [
                _request(
                    conn, "PATCH", f"/api/v1/users/{user_id}", user_token, {"display_name": f"a{i}"}
                )
                for i in range(changes)
            ]
            cpu2, wall2 = tree_cpu_seconds(m.pid), time.perf_counter()
            conn.close()
    load = os.getloadavg()[0]
    print(f"{label}:")
    print(
        f"  trial metric reports ({reports}): {_stats(ingest)}; master CPU "
        f"{(cpu1 - cpu0) / reports * 1000:.2f} ms/report; wall {wall1 - wall0:.1f} s"
    )
    print(
        f"  user changes ({changes}):        {_stats(edits)}; master CPU "
        f"{(cpu2 - cpu1) / changes * 1000:.2f} ms/change; wall {wall2 - wall1:.1f} s"
    )
    print(f"  load average {load:.2f} ({os.cpu_count()} CPUs)")
    return {
        "ingest_p50": statistics.median(ingest),
        "edit_p50": statistics.median(edits),
        "ingest_cpu": (cpu1 - cpu0) / reports,
        "edit_cpu": (cpu2 - cpu1) / changes,
    }


def http_post(port: int, path: str, body: Any) -> str:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
    r = conn.getresponse()
    text = r.read().decode()
    conn.close()
    if r.status != 200:
        raise RuntimeError(f"{path}: {r.status} {text[:200]}")
    return text


def middleware_cost(n: int = 20_000) -> float:
    """CPU microseconds the audit middleware adds to a request it does not audit (a
    trial's report): the same trivial ASGI app called ``n`` times bare and wrapped,
    in this process (no network, no master), best of 3."""
    import asyncio

    from dauntless.master.audit import AuditTrail
    from dauntless.master.audit_http import AuditMiddleware

    class Trial:
        kind = "trial"

    async def app(scope: Any, receive: Any, send: Any) -> None:
        scope.setdefault("state", {})["principal"] = Trial()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})

    async def noop(message: Any) -> None:
        return None

    async def receive() -> Any:
        return {"type": "http.request", "body": b""}

    trail = AuditTrail.__new__(AuditTrail)  # never appended to: nothing is audited
    trail.clock = time.time
    wrapped = AuditMiddleware(app, trail)

    async def loop(target: Any) -> float:
        start = time.process_time()
        for _ in range(n):
            scope = {"type": "http", "method": "POST", "path": "/api/v1/trials/1/metrics"}
            await target(scope, receive, noop)
        return time.process_time() - start

    bare = min(asyncio.run(loop(app)) for _ in range(3))
    audited = min(asyncio.run(loop(wrapped)) for _ in range(3))
    return (audited - bare) / n * 1e6


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reports", type=int, default=2000)
    p.add_argument("--changes", type=int, default=300)
    p.add_argument("--compare-src", default=None, help="a source tree without the audit trail")
    args = p.parse_args()
    print(
        f"audit middleware on a request it does not audit: {middleware_cost():.1f} us of CPU "
        "(in process, best of 3)"
    )
    mine = run("this tree (audit trail)", None, args.reports, args.changes)
    if args.compare_src:
        base = run(f"baseline ({args.compare_src})", args.compare_src, args.reports, args.changes)
        print("ratios this tree / baseline:")
        for key in ("ingest_p50", "ingest_cpu", "edit_p50", "edit_cpu"):
            print(f"  {key}: {mine[key] / base[key]:.2f}")


if __name__ == "__main__":
    main()
