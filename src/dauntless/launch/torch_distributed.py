"""``python -m dauntless.launch.torch_distributed [--] CMD ...``: start the local ranks of
one part of a trial's allocation, the way ``torchrun`` does.

The agent runs every task through this launcher. It reads the allocation's shape from the
environment the master gave the task (docs/protocol.md):

- ``DET_WORLD_SIZE``: ranks in the whole allocation; ``DET_RANK_OFFSET``: this part's first
  rank; ``DET_SLOT_IDS``: this part's slots (one local rank each);
- ``DET_PART_INDEX`` / ``DET_NUM_PARTS``: which part this is (0 is the chief);
- ``DET_ALLOCATION_ID`` and ``DET_MASTER``: to publish or look up the rendezvous point.

With one rank in all it simply ``exec``s ``CMD``. Otherwise the chief picks a free TCP port
on its host and publishes ``addr:port`` to the master (``POST
/allocations/{id}/rendezvous``); the other parts long-poll for it. Each local rank then runs
``CMD`` with torch.distributed's ``env://`` variables (``RANK``, ``LOCAL_RANK``,
``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``, ``GROUP_RANK``, ``MASTER_ADDR``, ``MASTER_PORT``), its
output prefixed ``[rank=N]``. If any rank exits non-zero the others are stopped (SIGTERM,
then SIGKILL after a grace period) and the launcher exits with that code, so the master
restarts the whole trial; SIGTERM/SIGINT to the launcher are forwarded to every rank.

The rendezvous wait is written here (not taken from a library) because it goes through the
master, which is the only party every agent can reach.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time

import httpx

from dauntless._auth import session_token_headers
from dauntless._tls import cert_file_from_env, make_verify

KILL_GRACE_SECONDS = 10.0
"""Seconds between SIGTERM and SIGKILL when stopping the remaining ranks."""
RENDEZVOUS_TIMEOUT_SECONDS = 600.0
"""How long a non-chief part waits for the chief's address."""


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw in (None, ""):
        return default
    try:
        return int(raw)
    except ValueError:
        raise SystemExit(f"launcher: {name} must be an integer, got {raw!r}") from None


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host if host != "localhost" else "127.0.0.1", 0))
        return int(s.getsockname()[1])


def _rendezvous(world: int, part: int) -> tuple[str, int]:
    """Publish (chief) or fetch (others) the chief's address through the master."""
    master = os.environ.get("DET_MASTER", "").rstrip("/")
    alloc = os.environ.get("DET_ALLOCATION_ID", "")
    addr = os.environ.get("DET_ADVERTISE_ADDR", "127.0.0.1")
    if not master or not alloc:
        if os.environ.get("DET_NUM_PARTS", "1") not in ("", "1"):
            raise SystemExit("launcher: DET_MASTER and DET_ALLOCATION_ID are needed to "
                             "meet ranks on other agents")
        return "127.0.0.1", _free_port("127.0.0.1")
    url = f"{master}/api/v1/allocations/{alloc}/rendezvous"
    deadline = time.monotonic() + RENDEZVOUS_TIMEOUT_SECONDS
    verify = make_verify(cert_file_from_env())  # an HTTPS master's CA bundle, if any
    with httpx.Client(timeout=httpx.Timeout(90.0, connect=10.0), verify=verify,
                      headers=session_token_headers()) as client:
        if part == 0:
            port = _free_port(addr)
            while True:
                try:
                    client.post(url, json={"addr": addr, "port": port}).raise_for_status()
                    return addr, port
                except httpx.HTTPError as exc:
                    if time.monotonic() > deadline:
                        raise SystemExit(f"launcher: could not publish the rendezvous: {exc}") from None
                    time.sleep(1.0)
        while time.monotonic() < deadline:
            try:
                r = client.get(url, params={"timeout_seconds": 30})
                r.raise_for_status()
                info = r.json().get("rendezvous")
                if info:
                    return str(info["addr"]), int(info["port"])
            except httpx.HTTPError:
                time.sleep(1.0)
    raise SystemExit(f"launcher: no rendezvous from the chief within {RENDEZVOUS_TIMEOUT_SECONDS} s")


def _pump(stream, prefix: bytes) -> None:
    out = sys.stdout.buffer
    with stream:
        for line in iter(stream.readline, b""):
            out.write(prefix + line)
            out.flush()


def launch(cmd: list[str]) -> int:
    """Run ``cmd`` as this part's local ranks; returns the exit code for the launcher.

    Raises:
        SystemExit: a malformed environment or a failed rendezvous.
    """
    if not cmd:
        raise SystemExit("usage: python -m dauntless.launch.torch_distributed [--] CMD ...")
    world = _env_int("DET_WORLD_SIZE", 1)
    if world <= 1 or "RANK" in os.environ:
        # One rank in all, or already launched (a user entrypoint that names the launcher).
        os.environ.setdefault("RANK", "0")
        os.environ.setdefault("LOCAL_RANK", "0")
        os.environ.setdefault("WORLD_SIZE", "1")
        os.environ.setdefault("LOCAL_WORLD_SIZE", "1")
        os.execvp(cmd[0], cmd)
    offset = _env_int("DET_RANK_OFFSET", 0)
    part = _env_int("DET_PART_INDEX", 0)
    slots = [x for x in os.environ.get("DET_SLOT_IDS", "").split(",") if x]
    local = max(len(slots), 1)
    addr, port = _rendezvous(world, part)
    procs: list[subprocess.Popen] = []
    pumps: list[threading.Thread] = []
    for local_rank in range(local):
        rank = offset + local_rank
        env = dict(os.environ)
        env.update({
            "RANK": str(rank), "LOCAL_RANK": str(local_rank), "WORLD_SIZE": str(world),
            "LOCAL_WORLD_SIZE": str(local), "GROUP_RANK": str(part),
            "MASTER_ADDR": addr, "MASTER_PORT": str(port),
        })
        argv = [sys.executable, "-m", "dauntless.agent._launch", str(os.getpid()), "--", *cmd]
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        procs.append(proc)
        t = threading.Thread(target=_pump, args=(proc.stdout, f"[rank={rank}] ".encode()),
                             daemon=True)
        t.start()
        pumps.append(t)

    stopping = threading.Event()

    def _forward(signum, _frame):  # type: ignore[no-untyped-def]
        stopping.set()
        for p in procs:
            if p.poll() is None:
                p.send_signal(signum)

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _forward)

    code = 0
    while True:
        codes = [p.poll() for p in procs]
        failed = [c for c in codes if c not in (None, 0)]
        if failed:
            code = failed[0]
            break
        if all(c == 0 for c in codes):
            break
        time.sleep(0.1)
    if code != 0:
        for p in procs:
            if p.poll() is None:
                p.terminate()
        deadline = time.monotonic() + KILL_GRACE_SECONDS
        for p in procs:
            try:
                p.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
    for t in pumps:
        t.join(timeout=5)
    return int(code) if code >= 0 else 128 - int(code)  # killed by signal N -> 128 + N


def main(argv: list[str] | None = None) -> None:
    """Entry point: ``[--] CMD ...`` from the command line."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["--"]:
        args = args[1:]
    raise SystemExit(launch(args))


if __name__ == "__main__":
    main()
