"""Trials per second of a search of trivial Core API trials, against Optuna in-process.

Starts a real master (SQLite in a temporary directory) and ``--agents`` agents (default
1) sharing ``--slots`` artificial CPU slots (default 2) as processes on 127.0.0.1, waits
until the agents' warm workers are ready (or, with ``--cold``, starts them with
``--no-warm-start``), then for each N creates a ``random`` search of N trials, as many
at once as there are slots, whose entrypoint is ``python3 train.py``: each trial calls
``core.init()``, sleeps ``--trial-seconds`` (default 0), reports one training metric and
its searcher operation as completed, and exits. Printed per N:

- total / ideal, where ideal is ``ceil(N / slots) * trial_seconds`` (with
  ``--trial-seconds`` above 0);
- the master's CPU per trial for the first and the last W trials to complete
  (W = min(1000, N // 4)) side by side, and their ratio (issue 37: a per-trial cost
  that grows with the trials already in the experiment shows as a ratio above 1): the
  benchmark reads the count of completed trials from the SQLite file itself (read-only,
  no master CPU) every 0.1 s with the master's CPU at that moment;
- the master's resident memory (RSS) before the search, when the count of completed
  trials reached each thousand, when the experiment ended and at the end (after
  ``GET /experiments/{id}`` and ``GET /experiments/{id}/trials``, each listing every
  trial); and the count of trials that ended ERROR;
- the master's requests per trial by route and SQL statements per trial by verb, with
  the wall time they took, from its ``/debug/prom/metrics`` read before and after;

- seconds from ``POST /experiments`` to the experiment's COMPLETED (wall: its
  ``end_time``; the benchmark polls the state only 4 times a second, so that its polls
  add little master CPU);
- per-trial slot overhead: ``2 * wall / N`` (2 slots busy all the time);
- CPU seconds per trial of each side: the master process, the agent process with its
  warm worker and every trial process (children's CPU, read from ``/proc`` and
  ``getrusage``-style ``cutime``/``cstime`` of the agent, which waits for its cold
  children; a warm trial's CPU is the fork server's children's);
- the slot gap: the time from one trial's end (``end_time``) to the first training
  metric (``reported_at``) of the trial that took its slot, median and p90.

The baselines, in the same run: the same N trials as an Optuna study (``optuna`` when it
is installed, else skipped: ``.venv/bin/pip install -e '.[bench]'``) whose objective
returns a constant: what a hyperparameter search costs with no process per trial; and
as a Ray Tune search on a local Ray with 2 CPUs (the issue's baseline: a trial per
worker process, as ours), run by a separate Python with ``ray[tune]`` (``--ray-python PATH``, or ``.venv-ray`` at the repository root:
``python3 -m venv .venv-ray && .venv-ray/bin/pip install "ray[tune]"``), with its wall
time and the CPU of all of Ray's processes.

Usage::

    python benchmarks/trial_throughput.py [--n 10 100] [--slots 2] [--agents 1]
        [--trial-seconds 0] [--cold] [--ray-python PATH] [--no-ray] [--no-optuna]
        [--profile-master DIR] [--master-src DIR]

Issue 37's acceptance run: ``--n 10000 --slots 100 --agents 10 --trial-seconds 1 --no-ray``
(total / ideal <= 1.05, last / first thousand within 10%, RSS <= 150 MB).
"""

from __future__ import annotations

import argparse
import contextlib
import grp
import io
import json
import math
import os
import pwd
import signal
import sqlite3
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

import _cluster
import httpx
from master_long_poll_cpu import tree_cpu_seconds

TRAIN_PY = """\
import time

from dauntless import core

with core.init() as ctx:
    for op in ctx.searcher.operations():
        time.sleep({seconds!r})
        ctx.train.report_training_metrics(op.length, {{"loss": 1.0}})
        op.report_completed(1.0)
"""


def _own_identity_args() -> list[str]:
    """Master flags that make this process's Unix identity ``security.default_task``."""
    uid, gid = os.getuid(), os.getgid()
    try:
        user = pwd.getpwuid(uid).pw_name
    except KeyError:
        user = f"u{uid}"
    try:
        group = grp.getgrgid(gid).gr_name
    except KeyError:
        group = f"g{gid}"
    ident = {"uid": uid, "gid": gid, "user": user, "group": group}
    return [arg for k, v in ident.items() for arg in (f"--security-default-task-{k}", str(v))]


def _cpu_seconds(pid: int) -> tuple[float, float]:
    """``(own, waited-for children)`` CPU seconds of a live process, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    own = (int(fields[11]) + int(fields[12])) / tick
    children = (int(fields[13]) + int(fields[14])) / tick
    return own, children


def _tree_cpu(root: int) -> dict[str, float]:
    """CPU of a process and its descendants now alive or waited for, by command."""
    out: dict[str, float] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        pid, ppid = int(entry.name), int(fields[1])
        if pid != root and ppid != root:
            continue
        own, children = _cpu_seconds(pid)
        key = "agent" if pid == root else ("warm worker" if "_forkserver" in cmd else "other")
        out[key] = out.get(key, 0.0) + own
        out[key + " (children)"] = out.get(key + " (children)", 0.0) + children
    return out


class Cluster:
    """A master and one agent with 2 slots, as processes; :meth:`stop` ends both.

    The master runs at its default log level and agent timeout. Raises what
    :func:`_cluster.master` raises, and ``RuntimeError`` if the agent does not register
    (or its warm worker is not ready) within 120 s; both processes are stopped then.
    """

    def __init__(
        self,
        tmp: Path,
        warm: bool,
        slots: int = 2,
        agents: int = 1,
        master_src: Path | None = None,
    ) -> None:
        if agents < 1 or slots < agents:
            raise ValueError(f"need 1 <= agents <= slots, got {agents} agents, {slots} slots")
        self.tmp = tmp
        self.slots, self.n_agents = slots, agents
        self.agents: list[subprocess.Popen[bytes]] = []
        self.master_src = master_src
        self._stack = contextlib.ExitStack()
        try:
            self._start(warm)
        except BaseException:
            self._stack.close()
            raise

    def _start(self, warm: bool) -> None:
        tmp = self.tmp
        secret = tmp / "secret"
        secret.write_text(os.urandom(16).hex())
        secret.chmod(0o600)
        master = self._stack.enter_context(
            _cluster.master(
                tmp / "data",
                db_url=f"sqlite:///{tmp}/master.db",
                log=tmp / "master.log",
                src=self.master_src,
                args=[
                    "--cluster-secret-file",
                    str(secret),
                    "--allow-artificial-slots",
                    # Tasks run as this process's identity, as `det deploy local
                    # cluster-up` makes its deployer's (issue 29): the temporary
                    # directory is closed to other users.
                    *_own_identity_args(),
                ],
                agent_timeout=None,
                log_level=None,
                start_timeout=120.0,
            )
        )
        self.port, self.url, self.master = master.port, master.url, master.process
        r = httpx.post(self.url + "/api/v1/auth/login", json={"username": "admin", "password": ""})
        r.raise_for_status()
        self.headers = {"Authorization": f"Bearer {r.json()['token']}"}
        logs = []
        for i in range(self.n_agents):
            # The slots split as evenly as they go: the first agents take the remainder.
            slots = self.slots // self.n_agents + (i < self.slots % self.n_agents)
            cmd = [
                sys.executable,
                "-m",
                "dauntless.agent",
                "--master-url",
                self.url,
                "--agent-id",
                f"bench-{i}",
                "--work-dir",
                str(tmp / f"agent-{i}"),
                "--artificial-slots",
                str(slots),
                "--runtime",
                "process",
                "--cluster-secret-file",
                str(secret),
            ]
            if not warm:
                cmd.append("--no-warm-start")
            agent_log = tmp / f"agent-{i}.log"
            log = self._stack.enter_context(open(agent_log, "w"))  # closed after the stop
            agent = subprocess.Popen(
                cmd,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=dict(os.environ, PYTHONUNBUFFERED="1"),
            )
            self._stack.callback(_cluster.stop, agent, 15.0)  # before the master's stop
            self.agents.append(agent)
            logs.append(agent_log)
        self.agent, self.agent_log = self.agents[0], logs[0]
        self._wait(lambda: len(self.get("/agents")["agents"]) == self.n_agents)
        if warm:
            ready = "warm worker (fork server) ready"
            self._wait(lambda: all(ready in path.read_text() for path in logs))

    def _wait(self, ok: Any, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if ok():
                    return
            except (httpx.HTTPError, OSError, KeyError):
                pass
            time.sleep(0.05)
        tails = "".join(
            f"\n--- {path.name}:\n{path.read_text()[-1500:]}"
            for path in sorted(self.tmp.glob("agent-*.log"))
        )
        raise RuntimeError(f"cluster did not start in {timeout:.0f} s{tails}")

    def get(self, path: str, **params: Any) -> Any:
        r = httpx.get(self.url + "/api/v1" + path, params=params, headers=self.headers, timeout=30)
        r.raise_for_status()
        return r.json()

    def stop(self) -> None:
        """Stop the agent (SIGTERM, SIGKILL after 15 s), then the master."""
        self._stack.close()


def _rss_mb(pid: int) -> float:
    """Resident memory of a live process in MB (VmRSS of /proc/PID/status)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def master_counts(cluster: Cluster) -> dict[str, tuple[float, float]]:
    """The master's requests by ``METHOD handler`` and SQL statements by ``SQL verb``:
    ``{key: (count, seconds)}`` from its ``/debug/prom/metrics`` (one request); ``{}``
    when Prometheus metrics are off or the page cannot be read."""
    from prometheus_client.parser import text_string_to_metric_families

    r = httpx.get(cluster.url + "/debug/prom/metrics", headers=cluster.headers, timeout=30)
    if r.status_code != 200:
        return {}
    out: dict[str, tuple[float, float]] = {}
    names = {
        "det_http_request_duration_seconds": ("method", "handler"),
        "det_db_query_duration_seconds": ("operation",),
    }
    for family in text_string_to_metric_families(r.text):
        labels = names.get(family.name)
        if labels is None:
            continue
        for sample in family.samples:
            suffix = sample.name[len(family.name) :]
            if suffix not in ("_count", "_sum"):
                continue
            key = ("SQL " if family.name.startswith("det_db") else "") + " ".join(
                sample.labels[k] for k in labels
            )
            count, seconds = out.get(key, (0.0, 0.0))
            if suffix == "_count":
                count += sample.value
            else:
                seconds += sample.value
            out[key] = (count, seconds)
    return out


def _agents_cpu(cluster: Cluster) -> dict[str, float]:
    out: dict[str, float] = {}
    for agent in cluster.agents:
        for k, v in _tree_cpu(agent.pid).items():
            out[k] = out.get(k, 0.0) + v
    return out


def window_cpu(samples: list[tuple[int, float]], lo: int, hi: int) -> float | None:
    """Master CPU seconds per trial between the samples where the completed count first
    reached ``lo`` and ``hi``: ``samples`` are ``(completed trials, master CPU s)`` in
    time order. None when the samples do not cover both."""
    at_lo = next(((c, cpu) for c, cpu in samples if c >= lo), None)
    at_hi = next(((c, cpu) for c, cpu in samples if c >= hi), None)
    if at_lo is None or at_hi is None or at_hi[0] <= at_lo[0]:
        return None
    return (at_hi[1] - at_lo[1]) / (at_hi[0] - at_lo[0])


def run_search(
    cluster: Cluster, n: int, model_dir: Path, profile: Path | None = None
) -> dict[str, Any]:
    """Create one search of ``n`` trivial trials and wait for it; returns its figures.

    ``profile``: a file for py-spy's collapsed stacks of the master during the search
    (py-spy must be on ``PATH`` or beside this Python).
    """
    config = {
        "name": f"throughput-{n}",
        "entrypoint": "python3 train.py",
        "hyperparameters": {"x": {"type": "double", "minval": 0.0, "maxval": 1.0}},
        "searcher": {
            "name": "random",
            "metric": "loss",
            "max_trials": n,
            "max_concurrent_trials": cluster.slots,
            "max_length": {"batches": 1},
        },
        "max_restarts": 0,
    }
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        tar.add(model_dir / "train.py", arcname="train.py")
    spy = None
    if profile is not None:
        exe = Path(sys.executable).with_name("py-spy")
        spy = subprocess.Popen(
            [str(exe) if exe.exists() else "py-spy", "record", "--pid", str(cluster.master.pid)]
            + ["--format", "raw", "--rate", "250", "--nonblocking", "-o", str(profile)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        time.sleep(1.0)  # py-spy attaches
    counts0 = master_counts(cluster)
    rss0 = _rss_mb(cluster.master.pid)
    m0 = tree_cpu_seconds(cluster.master.pid)  # with its metric fold worker
    a0 = _agents_cpu(cluster)
    t0 = time.time()
    r = httpx.post(
        cluster.url + "/api/v1/experiments",
        headers=cluster.headers,
        timeout=60,
        data={"config": json.dumps(config)},
        files={"context": ("context.tar.gz", buf.getvalue(), "application/gzip")},
    )
    r.raise_for_status()
    exp_id = r.json()["experiment"]["id"]
    # The count of completed trials and the state, read from the database file itself:
    # polls through the API would add master CPU to the figures measured.
    db = sqlite3.connect(f"file:{cluster.tmp / 'master.db'}?mode=ro", uri=True, timeout=30)
    samples: list[tuple[int, float]] = [(0, m0)]
    rss_at: dict[int, float] = {}  # the master's RSS (MB) when a thousand trials completed
    try:
        while True:
            count = db.execute(
                "SELECT count(*) FROM trials WHERE experiment_id = ? AND state = 'COMPLETED'",
                (exp_id,),
            ).fetchone()[0]
            (state,) = db.execute(
                "SELECT state FROM experiments WHERE id = ?", (exp_id,)
            ).fetchone()
            samples.append((int(count), tree_cpu_seconds(cluster.master.pid)))
            rss_at.setdefault(int(count) // 1000 * 1000, _rss_mb(cluster.master.pid))
            if state in ("COMPLETED", "ERROR", "CANCELED"):
                break
            time.sleep(0.1)
    finally:
        db.close()
    rss_ended = _rss_mb(cluster.master.pid)  # before any read of the whole experiment
    exp = cluster.get(f"/experiments/{exp_id}")["experiment"]
    state = exp["state"]
    wall = float(exp["end_time"] or time.time()) - t0
    m1 = tree_cpu_seconds(cluster.master.pid)
    a1 = _agents_cpu(cluster)
    counts1 = master_counts(cluster)
    if spy is not None:
        spy.send_signal(signal.SIGINT)
        spy.wait(60)
    trials = cluster.get(f"/experiments/{exp_id}/trials")["trials"]
    rss1 = _rss_mb(cluster.master.pid)  # after two reads of every trial
    states = [t["state"] for t in trials]
    if state not in ("COMPLETED", "ERROR") or states.count("COMPLETED") == 0:
        raise RuntimeError(
            f"experiment {exp_id} ended {state}: {len(states)} trials, "
            f"{states.count('COMPLETED')} completed; see {cluster.tmp}"
        )
    if states.count("COMPLETED") != n:
        # A long run's figures are still worth printing; the failures are said first.
        failed = [t for t in trials if t["state"] != "COMPLETED"]
        for t in failed[:1]:  # the first failure's log and exit say why
            lines = cluster.get(f"/trials/{t['id']}/logs").get("logs", [])
            print("".join(str(x.get("log", x)) for x in lines[-30:]), file=sys.stderr)
        print(
            f"WARNING: experiment {exp_id} ended {state}: {len(failed)} of {n} trials did "
            f"not complete (the figures below include them)",
            file=sys.stderr,
        )
    w = max(1, min(1000, n // 4))
    done = states.count("COMPLETED")  # the last window ends at the last completed trial
    return {
        "wall": wall,
        "master_cpu": m1 - m0,
        "agent_cpu": {k: a1.get(k, 0.0) - a0.get(k, 0.0) for k in a1},
        # One metrics request per trial: only where that stays cheap.
        "gaps": slot_gaps(cluster, trials) if n <= 300 else [],
        "window": w,
        "first_cpu": window_cpu(samples, 0, w),
        "last_cpu": window_cpu(samples, done - w, done),
        "done": done,
        "rss_at": {k: v for k, v in sorted(rss_at.items()) if k > 0},
        "rss": (rss0, rss_ended, rss1),
        "errors": states.count("ERROR"),
        "counts": {
            k: (c - counts0.get(k, (0.0, 0.0))[0], t - counts0.get(k, (0.0, 0.0))[1])
            for k, (c, t) in counts1.items()
        },
    }


def slot_gaps(cluster: Cluster, trials: list[dict[str, Any]]) -> list[float]:
    """Seconds from a trial's end to the first metric of the trial that took its slot.

    With ``max_concurrent_trials`` equal to the slot count, every trial after the first
    ``slots`` starts on the slot an ended trial freed; the k-th end (in time) is paired with the
    k-th first metric among those later trials (first in, first out).
    """
    ends = sorted(float(t["end_time"]) for t in trials if t.get("end_time") is not None)
    firsts = []
    for t in trials:
        metrics = cluster.get(f"/trials/{t['id']}/metrics", group="training")["metrics"]
        if metrics:
            firsts.append(min(float(m["reported_at"]) for m in metrics))
    firsts.sort()
    return [f - e for e, f in zip(ends, firsts[cluster.slots :], strict=False)]


RAY_TUNE_PY = """\
import json, os, sys, tempfile, time
from pathlib import Path


def tree_cpu(root):
    # CPU seconds of root and its descendants, alive or waited for (/proc).
    tick = os.sysconf("SC_CLK_TCK")
    parent, cpu = {}, {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        pid = int(entry.name)
        parent[pid] = int(fields[1])
        cpu[pid] = sum(int(fields[i]) for i in (11, 12, 13, 14)) / tick
    total = 0.0
    for pid, seconds in cpu.items():
        p = pid
        while p in parent and p != root:
            p = parent[p]
        if p == root:
            total += seconds
    return total


n = int(sys.argv[1])
import ray
from ray import tune

t0 = time.monotonic()
ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
init_s = time.monotonic() - t0


def trainable(config):
    tune.report({"loss": 1.0})


c0 = tree_cpu(os.getpid())
t0 = time.monotonic()
tuner = tune.Tuner(
    tune.with_resources(trainable, {"cpu": 1}),
    param_space={"x": tune.uniform(0.0, 1.0)},
    tune_config=tune.TuneConfig(
        num_samples=n, metric="loss", mode="min", max_concurrent_trials=2
    ),
    run_config=tune.RunConfig(storage_path=tempfile.mkdtemp(), verbose=0),
)
results = tuner.fit()
wall = time.monotonic() - t0
cpu = tree_cpu(os.getpid()) - c0
ok = sum(1 for r in results if r.error is None)
ray.shutdown()
print("RESULT " + json.dumps({"init": init_s, "wall": wall, "cpu": cpu, "ok": ok}))
"""


def find_ray_python(given: Path | None) -> Path | None:
    """The Python with ``ray[tune]``: ``given``, else ``.venv-ray/bin/python`` at the
    repository root when it exists."""
    if given is not None:
        return given
    default = Path(__file__).resolve().parent.parent / ".venv-ray" / "bin" / "python"
    return default if default.exists() else None


def ray_baseline(python: Path, n: int, tmp: Path) -> dict[str, Any]:
    """``n`` trivial trials (report one metric, return) as a Ray Tune search on a local
    Ray with 2 CPUs, one CPU per trial, run by ``python`` (a separate environment: Ray
    pins its own dependencies).

    Returns:
        ``{"init", "wall", "cpu", "ok"}``: seconds of ``ray.init``, seconds of
        ``Tuner.fit``, CPU seconds of the driver and every process it started (Ray's
        GCS, raylet and workers) during the fit, and trials without error.

    Raises:
        RuntimeError: the run failed (its output's tail says why).
    """
    script = tmp / "ray_tune_trivial.py"
    script.write_text(RAY_TUNE_PY)
    env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0", RAY_DISABLE_DOCKER_CPU_WARNING="1")
    proc = subprocess.run(
        [str(python), str(script), str(n)],
        capture_output=True,
        text=True,
        timeout=900,
        env=env,
        cwd=tmp,
    )
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return dict(json.loads(line[len("RESULT ") :]))
    tail = (proc.stdout + proc.stderr)[-2000:]
    raise RuntimeError(f"the Ray Tune run failed (exit {proc.returncode}): {tail}")


def optuna_baseline(n: int) -> float | None:
    """Seconds for ``n`` constant-objective trials in an in-process Optuna study."""
    try:
        import optuna
    except ImportError:
        return None
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    t0 = time.monotonic()
    study = optuna.create_study()
    study.optimize(lambda trial: trial.suggest_float("x", 0.0, 1.0) * 0 + 1.0, n_trials=n)
    return time.monotonic() - t0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, nargs="+", default=[10, 100])
    p.add_argument("--cold", action="store_true", help="start the agent with --no-warm-start")
    p.add_argument(
        "--profile-master",
        type=Path,
        metavar="DIR",
        help="record the master with py-spy during each search: DIR/master-N.txt "
        "(collapsed stacks; the figures then include py-spy's sampling cost)",
    )
    p.add_argument(
        "--ray-python",
        type=Path,
        metavar="PATH",
        help="a Python with ray[tune] for the Ray Tune baseline (default: "
        ".venv-ray/bin/python at the repository root, when it exists)",
    )
    p.add_argument("--no-ray", action="store_true", help="skip the Ray Tune baseline")
    p.add_argument(
        "--no-optuna",
        action="store_true",
        help="skip the Optuna baseline (412 s of CPU at --n 10000, after the search)",
    )
    p.add_argument("--slots", type=int, default=2, help="artificial slots in all (default 2)")
    p.add_argument("--agents", type=int, default=1, help="agents sharing the slots (default 1)")
    p.add_argument(
        "--trial-seconds",
        type=float,
        default=0.0,
        help="seconds each trial sleeps before it reports (default 0: trivial trials)",
    )
    p.add_argument(
        "--master-src",
        type=Path,
        metavar="DIR",
        help="run the master from this source directory (put first on its PYTHONPATH), "
        "e.g. a checkout of main's src/, for a side-by-side baseline; the agents run the "
        "installed package",
    )
    args = p.parse_args()
    if args.master_src is not None:
        print(f"master from {args.master_src}")
    if args.trial_seconds < 0:
        p.error(f"--trial-seconds must be >= 0, got {args.trial_seconds}")
    ray_python = None if args.no_ray else find_ray_python(args.ray_python)
    print(f"load average: {open('/proc/loadavg').read().strip()}")
    with tempfile.TemporaryDirectory(prefix="dauntless-throughput-") as tmp_s:
        tmp = Path(tmp_s)
        (tmp / "model").mkdir()
        (tmp / "model" / "train.py").write_text(TRAIN_PY.format(seconds=args.trial_seconds))
        try:
            cluster = Cluster(
                tmp,
                warm=not args.cold,
                slots=args.slots,
                agents=args.agents,
                master_src=args.master_src,
            )
        except ValueError as exc:
            p.error(str(exc))
        try:
            for n in args.n:
                prof = None
                if args.profile_master is not None:
                    args.profile_master.mkdir(parents=True, exist_ok=True)
                    prof = args.profile_master / f"master-{n}.txt"
                res = run_search(cluster, n, tmp / "model", prof)
                gaps = sorted(res["gaps"])
                agent = res["agent_cpu"]
                print(
                    f"\nN = {n} trials, {args.slots} slots on {args.agents} agent(s), "
                    f"{args.trial_seconds:g} s per trial, {'cold' if args.cold else 'warm'} start"
                )
                print(f"  create -> COMPLETED      {res['wall']:.2f} s")
                if args.trial_seconds > 0:
                    ideal = math.ceil(n / args.slots) * args.trial_seconds
                    print(
                        f"  total / ideal            {res['wall'] / ideal:.3f} "
                        f"(ideal {ideal:.1f} s; target <= 1.05)"
                    )
                print(f"  slot time per trial      {args.slots * res['wall'] / n:.3f} s")
                if gaps:
                    p90 = gaps[int(0.9 * (len(gaps) - 1))]
                    print(
                        f"  slot gap (end -> next first metric): median "
                        f"{statistics.median(gaps):.3f} s, p90 {p90:.3f} s ({len(gaps)} gaps)"
                    )
                print(f"  master CPU per trial     {res['master_cpu'] / n * 1000:.1f} ms")
                first, last, w = res["first_cpu"], res["last_cpu"], res["window"]
                if first is not None and last is not None:
                    print(
                        f"  master CPU per trial, trials 1-{w}: {first * 1000:.1f} ms; "
                        f"trials {res['done'] - w + 1}-{res['done']}: {last * 1000:.1f} ms; "
                        f"last / first "
                        f"{last / first:.2f} (target <= 1.10)"
                    )
                rss0, rss_ended, rss1 = res["rss"]
                print(
                    f"  master RSS               {rss0:.0f} MB before, {rss_ended:.0f} MB when "
                    f"the experiment ended, {rss1:.0f} MB at the end, after reading it and its "
                    f"{n:,} trials twice (target <= 150 MB)"
                )
                print(f"  trials ended ERROR       {res['errors']}")
                if res["rss_at"]:
                    print(
                        "  master RSS when the count of completed trials reached "
                        + ", ".join(f"{k:,}: {v:.0f} MB" for k, v in res["rss_at"].items())
                    )
                counts = {k: v for k, v in res["counts"].items() if v[0] > 0}
                if counts:
                    reqs = sum(c for k, (c, _) in counts.items() if not k.startswith("SQL "))
                    sqls = sum(c for k, (c, _) in counts.items() if k.startswith("SQL "))
                    print(
                        f"  master requests per trial {reqs / n:.1f}, SQL statements per "
                        f"trial {sqls / n:.1f} (by route / verb: count per trial, ms per "
                        "trial of its wall time)"
                    )
                    for k, (c, t) in sorted(counts.items(), key=lambda kv: -kv[1][0])[:14]:
                        print(f"    {k:<58} {c / n:6.2f}  {t / n * 1000:6.2f} ms")
                for k, v in sorted(agent.items()):
                    if v > 0:
                        print(f"  {k + ' CPU per trial':<40} {v / n * 1000:.1f} ms")
                base = None if args.no_optuna else optuna_baseline(n)
                if args.no_optuna:
                    print("  optuna: skipped (--no-optuna)")
                elif base is not None:
                    print(
                        f"  optuna in-process        {base:.3f} s "
                        f"(ratio dauntless / optuna {res['wall'] / base:.0f}x)"
                    )
                else:
                    print("  optuna not installed: no baseline")
                if args.no_ray:
                    print("  ray tune: skipped (--no-ray)")
                elif ray_python is None:
                    print(
                        "  ray tune: no baseline (no .venv-ray at the repository root; pass "
                        '--ray-python PATH, a Python with `pip install "ray[tune]"`)'
                    )
                else:
                    try:
                        ray_res = ray_baseline(ray_python, n, tmp)
                    except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
                        print(f"  ray tune: failed: {exc}")
                    else:
                        print(
                            f"  ray tune (2 CPUs)        {ray_res['wall']:.2f} s, CPU "
                            f"{ray_res['cpu'] / n * 1000:.1f} ms per trial (all Ray "
                            f"processes; ray.init {ray_res['init']:.1f} s not counted; "
                            f"{ray_res['ok']}/{n} ok; ratio dauntless / ray "
                            f"{res['wall'] / ray_res['wall']:.2f}x)"
                        )
                print(f"  load average now: {open('/proc/loadavg').read().strip()}")
        finally:
            cluster.stop()
            if os.environ.get("KEEP_LOGS"):
                print((tmp / "agent-0.log").read_text()[-3000:])
                print((tmp / "master.log").read_text()[-3000:])


if __name__ == "__main__":
    main()
