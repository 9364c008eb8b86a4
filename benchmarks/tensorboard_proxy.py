"""TensorBoard behind the master's proxy: seconds from its service being ready to its
scalars page drawn in Chromium, and the requests of the page that failed (issue 38).

For each variant a real master (``python -m dauntless.master``, SQLite, its proxy origin
on a free port) gets a pretend agent and a task of user ``admin`` whose service is a
real TensorBoard over scalar event files written here (``--runs-in-logdir`` runs of
``--points`` points, two tags each), started with ``--path_prefix /proxy/<task id>`` as
a TensorBoard task starts it, and reported to the master as the task's own process
does. Once TensorBoard answers (the moment the task reports it ready), a headless
Chromium (Debian's, driven by Playwright) signed in as ``admin`` opens
``<master>/proxy/<task id>/#timeseries`` ``--loads`` times (each in a fresh browser
context, no cache: the master's 303 to the proxy origin with a one-time ticket, then
TensorBoard's page; the two variants alternate, each first every other time) and
records the seconds until the ``validation/accuracy`` card's line chart is drawn, and
every request that failed or was answered >= 400.

Variants, measured in the same run:

- *baseline*: the master of ``--baseline-ref`` (default ``main``; its ``src/`` taken with
  ``git archive`` into a temporary directory) and the stock ``python -m
  tensorboard.main``: TensorBoard's fonts are asked for at the proxy origin's root
  (404), and the proxy sent every request's body chunked, GETs included (TensorBoard's
  server closed such connections with the chunk terminator unread, which reset them and
  could cut its scripts short);
- *this checkout*: its master and ``python -m dauntless.exec.tensorboard_server``.

Beside the wall times it prints the CPU seconds of the master and of TensorBoard over all
loads, and the load average before and after. Target: drawn <= 5 s after ready.

Usage::

    python benchmarks/tensorboard_proxy.py [--loads 3] [--points 200] [--baseline-ref main]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import _cluster
import httpx
import psutil

from dauntless._auth import CLUSTER_SECRET_HEADER

REPO = Path(__file__).resolve().parents[1]
TARGET_SECONDS = 5.0
CARD = "card-view:has-text('validation/accuracy')"
DRAWN = f"{CARD} line-chart canvas, {CARD} line-chart svg path"


@dataclass
class Result:
    """One variant's figures: draw times (seconds), failed requests, CPU seconds."""

    name: str
    drawn: list[float] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    master_cpu: float = 0.0
    tensorboard_cpu: float = 0.0


def write_events(logdir: Path, runs: int, points: int) -> dict[str, Path]:
    """Scalar event files (``validation/accuracy``, ``training/loss``) of ``runs`` runs
    of ``points`` steps each; {run name: directory}."""
    from torch.utils.tensorboard import SummaryWriter

    out = {}
    for r in range(runs):
        name = f"exp1-trial{r + 1}"
        writer = SummaryWriter(str(logdir / name))
        for step in range(points):
            writer.add_scalar("validation/accuracy", (step + r) / (points + runs), step)
            writer.add_scalar("training/loss", 1.0 - step / points, step)
        writer.close()
        out[name] = logdir / name
    return out


def baseline_src(ref: str, into: Path) -> Path:
    """``src/`` of git ``ref`` extracted into ``into`` (``git archive``); its path."""
    archive = subprocess.run(
        ["git", "archive", "--format=tar", ref, "src"], cwd=REPO, capture_output=True, check=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into / "src"


def _cpu(proc: psutil.Process) -> float:
    try:
        t = proc.cpu_times()
        return t.user + t.system + t.children_user + t.children_system
    except psutil.NoSuchProcess:
        return 0.0


@contextlib.contextmanager
def tensorboard_task(
    master: _cluster.Master, data_dir: Path, module: str, logdirs: dict[str, Path], src: Path
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """A task of ``admin`` on a pretend agent whose service is TensorBoard (``python -m
    module``) under the task's proxy prefix, reported ready; yields (task id, process)."""
    secret = (data_dir / "cluster_secret").read_text().strip()
    agent = {CLUSTER_SECRET_HEADER: secret}
    with httpx.Client(base_url=master.url, timeout=60) as c:
        r = c.post("/api/v1/auth/login", json={"username": "admin", "password": ""})
        r.raise_for_status()
        admin = {"Authorization": f"Bearer {r.json()['token']}"}
        c.cookies.clear()  # a script's calls: bearer tokens, not the sign-in's cookie
        r = c.post("/api/v1/agents", json={"id": "a1", "slots": [{"id": "cpu0"}]}, headers=agent)
        r.raise_for_status()
        if r.json().get("token"):  # masters with agent credentials: the registration's token
            agent = {"X-Dauntless-Agent-Token": r.json()["token"]}
        r = c.post("/api/v1/notebooks", data={"config": "resources: {slots: 0}"}, headers=admin)
        r.raise_for_status()
        task_id = r.json()["task"]["id"]
        spec = None
        for _ in range(600):
            beat = c.post("/api/v1/agents/a1/heartbeat", json={"running": []}, headers=agent)
            if beat.status_code != 200:
                raise RuntimeError(f"heartbeat answered {beat.status_code}: {beat.text[:300]}")
            if beat.json()["start"]:
                spec = beat.json()["start"][0]
                break
            time.sleep(0.1)
        if spec is None:
            raise RuntimeError("the master did not hand the task to the pretend agent")
        port = _cluster.free_port()
        spec_arg = ",".join(f"{k}:{v}" for k, v in logdirs.items())
        env = dict(os.environ, PYTHONPATH=str(src))
        proc = subprocess.Popen(
            [sys.executable, "-m", module, "--logdir_spec", spec_arg, "--host", "127.0.0.1"]
            + ["--port", str(port), "--path_prefix", f"/proxy/{task_id}"]
            + ["--reload_interval", "5"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=env,
        )
        try:
            deadline = time.monotonic() + 180
            while time.monotonic() < deadline:
                try:
                    if httpx.get(f"http://127.0.0.1:{port}/proxy/{task_id}/").status_code < 500:
                        break
                except httpx.HTTPError:
                    time.sleep(0.2)
            else:
                raise RuntimeError(f"{module} did not answer within 180 s")
            token = {"Authorization": f"Bearer {spec['env']['DET_SESSION_TOKEN']}"}
            c.post(
                f"/api/v1/tasks/{task_id}/service",
                json={"addr": "127.0.0.1", "port": port},
                headers=token,
            ).raise_for_status()
            yield task_id, proc
        finally:
            _cluster.stop(proc)


@contextlib.contextmanager
def variant(
    name: str, src: Path, module: str, logdirs: dict[str, Path]
) -> Iterator[tuple[Result, str, str, psutil.Process, psutil.Process]]:
    """A master of ``src`` and its TensorBoard task; yields (its Result, master URL,
    task id, master process, TensorBoard process)."""
    with tempfile.TemporaryDirectory(prefix="tb-proxy-") as tmp:
        data_dir = Path(tmp)
        with (
            _cluster.master(data_dir, src=src, args=["--proxy-port", "0"]) as master,
            tensorboard_task(master, data_dir, module, logdirs, src) as (task_id, tb),
        ):
            yield (
                Result(name),
                master.url,
                task_id,
                psutil.Process(master.pid),
                psutil.Process(tb.pid),
            )


def load_once(browser, url: str, task_id: str) -> tuple[float, list[str]]:
    """Open TensorBoard's scalars page in a fresh signed-in browser context (no cache);
    (seconds until the accuracy chart is drawn, inf when it is not within 120 s; the
    requests that failed or were answered >= 400)."""
    context = browser.new_context(viewport={"width": 1300, "height": 900})
    try:
        context.request.post(url + "/api/v1/auth/login", data={"username": "admin", "password": ""})
        page = context.new_page()
        failed: list[str] = []
        page.on(
            "response", lambda r: failed.append(f"{r.status} {r.url}") if r.status >= 400 else None
        )
        page.on("requestfailed", lambda r: failed.append(f"{r.failure} {r.url}"))
        start = time.monotonic()
        page.goto(f"{url}/proxy/{task_id}/#timeseries")
        try:
            page.wait_for_selector(DRAWN, timeout=120_000)
            drawn = time.monotonic() - start
        except Exception:  # noqa: BLE001 (Playwright's TimeoutError): counted as not drawn
            drawn = float("inf")
        page.wait_for_load_state("networkidle")
        return drawn, failed
    finally:
        context.close()


def _summary(failed: list[str]) -> str:
    fonts = sum("font-roboto" in f for f in failed)
    other = len(failed) - fonts
    return f"{len(failed)} ({fonts} font requests, {other} other)"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--loads", type=int, default=3, help="page loads per variant")
    p.add_argument("--points", type=int, default=200, help="points per run and tag")
    p.add_argument("--runs-in-logdir", type=int, default=2, help="TensorBoard runs")
    p.add_argument("--baseline-ref", default="main", help="git ref of the baseline's src/")
    args = p.parse_args()
    from playwright.sync_api import sync_playwright

    exe = shutil.which("chromium")
    if exe is None:
        print("Debian's chromium is not installed (apt-get install chromium)", file=sys.stderr)
        return 1
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="tb-bench-") as tmp:
        logdirs = write_events(Path(tmp) / "logs", args.runs_in_logdir, args.points)
        base = baseline_src(args.baseline_ref, Path(tmp))
        pw = sync_playwright().start()
        browser = pw.chromium.launch(
            executable_path=exe, args=["--headless", "--no-sandbox", "--disable-gpu"]
        )
        try:
            with contextlib.ExitStack() as stack:
                variants = [
                    stack.enter_context(
                        variant(
                            f"baseline ({args.baseline_ref}, tensorboard.main)",
                            base,
                            "tensorboard.main",
                            logdirs,
                        )
                    ),
                    stack.enter_context(
                        variant(
                            "this checkout (tensorboard_server)",
                            REPO / "src",
                            "dauntless.exec.tensorboard_server",
                            logdirs,
                        )
                    ),
                ]
                cpu0 = [(_cpu(m), _cpu(t)) for _, _, _, m, t in variants]
                # Alternated, each first every other time: both see the same load.
                for i in range(args.loads):
                    for result, url, task_id, _, _ in variants[:: 1 if i % 2 == 0 else -1]:
                        drawn, failed = load_once(browser, url, task_id)
                        result.drawn.append(drawn)
                        result.failed.extend(failed)
                for (result, _, _, m, t), (m0, t0) in zip(variants, cpu0, strict=True):
                    result.master_cpu = _cpu(m) - m0
                    result.tensorboard_cpu = _cpu(t) - t0
                results = [v[0] for v in variants]
        finally:
            browser.close()
            pw.stop()
    load_after = os.getloadavg()
    print(
        f"TensorBoard behind the proxy: {args.loads} page loads per variant, "
        f"{args.runs_in_logdir} runs x {args.points} points x 2 tags"
    )
    base_median = statistics.median(results[0].drawn)
    for r in results:
        median = statistics.median(r.drawn)
        print(
            f"  {r.name:40s} drawn after ready: median {median:5.2f} s, max {max(r.drawn):5.2f} s "
            f"(x{median / base_median:.2f} of baseline); failed requests: {_summary(r.failed)}; "
            f"CPU s: master {r.master_cpu:.2f}, TensorBoard {r.tensorboard_cpu:.2f}"
        )
        for f in sorted(set(r.failed))[:5]:
            print(f"      {f}")
    print(
        f"  target: drawn <= {TARGET_SECONDS:g} s after ready; "
        f"load average {load_before[0]:.2f} before, {load_after[0]:.2f} after ({os.cpu_count()} CPUs)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
