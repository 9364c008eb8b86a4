"""``python -m dauntless.launch.torch_distributed [OVERRIDES... --] (--trial SPEC | CMD...)``:
start the per-slot workers of one node (container) of a trial's allocation, the way
Determined's launcher of the same name does (with ``torchrun``).

The agent runs an experiment's entrypoint once per node. A ``module:Class`` entrypoint
runs under this launcher (as ``--trial module:Class``); a script that wants one process
per slot names the launcher itself, as Determined 0.38 scripts do::

    entrypoint: python3 -m dauntless.launch.torch_distributed -- python3 train.py

(``determined.launch.torch_distributed`` is the same module under the compatibility
package, see :mod:`dauntless.compat`.) The launcher reads the allocation's shape from the
environment the master gave the task (docs/protocol.md):

- ``DET_WORLD_SIZE``: ranks in the whole allocation; ``DET_RANK_OFFSET``: this node's first
  rank; ``DET_SLOT_IDS``: this node's slots (one local rank each);
- ``DET_PART_INDEX`` / ``DET_NUM_PARTS``: which node this is (0 is the chief);
- ``DET_ALLOCATION_ID`` and ``DET_MASTER``: to publish or look up the rendezvous point.

``OVERRIDES`` are torchrun options placed before ``--``; ``--nproc_per_node N`` (or
``--nproc-per-node``) is honoured when it does not exceed the node's slots (fewer
workers, each rank still numbered densely); any other option is refused with a message
naming it, because the launcher sets the layout itself.

With one rank in all it simply ``exec``s ``CMD``. Otherwise the chief picks a free TCP port
on its host and publishes ``addr:port`` to the master (``POST
/allocations/{id}/rendezvous``); the other nodes long-poll for it. Each local rank then runs
``CMD`` with torch.distributed's ``env://`` variables (``RANK``, ``LOCAL_RANK``,
``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``, ``GROUP_RANK``, ``MASTER_ADDR``, ``MASTER_PORT``) and
Determined's ``DET_CHIEF_IP`` and ``USE_TORCH_DISTRIBUTED``, and (issue 37) with
``OMP_NUM_THREADS=1`` when there is more than one local rank and the task's environment
does not set it, as ``torchrun`` does (PyTorch's intra-op threads follow it): two ranks of
two threads each on two cores ran at 0.29x the speed of ``torchrun``. An experiment that
wants more threads per rank sets ``OMP_NUM_THREADS`` in its ``environment_variables``,
which the launcher then leaves alone. Each rank's output is prefixed
``[rank=N]`` (:mod:`dauntless.launch.wrap_rank`). If any rank exits non-zero the others are
stopped (SIGTERM, then SIGKILL after a grace period) and the launcher exits with that code,
so the master restarts the whole trial; SIGTERM/SIGINT to the launcher are forwarded to
every rank. On an allocation of several nodes the launchers also watch each other
(:mod:`dauntless.launch._liveness`): a node unheard for ``DAUNTLESS_PEER_TIMEOUT``
seconds (default 60) makes the launcher stop its ranks and exit with
:data:`PEER_LOST_EXIT_CODE`, so ranks that lost each other (while every agent still
reaches the master) do not wait for the process group's 12-hour timeout.

Gloo finds the address it listens on, and tells its peers, from the host name, which on
many hosts resolves to a loopback address (Debian's ``127.0.1.1``; several hosts sharing
one name): peers on other nodes then connect to their own loopback and fail. For an
allocation on several nodes the launcher therefore names the interface that holds this
node's advertised address (``DET_ADVERTISE_ADDR``) in ``GLOO_SOCKET_IFNAME``, unless the
task sets that variable itself (:func:`interface_of`).

The rendezvous wait is written here (not taken from a library) because it goes through the
master, which is the only party every agent can reach.
"""

from __future__ import annotations

import fcntl
import os
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from typing import Any

import httpx

from dauntless._auth import session_token_headers
from dauntless._http import RetryPolicy, internal_client
from dauntless._tls import cert_file_from_env, make_verify
from dauntless.launch._liveness import PeerWatch, bind_port_pair, peer_timeout

KILL_GRACE_SECONDS = 10.0
"""Seconds between SIGTERM and SIGKILL when stopping the remaining ranks."""
RENDEZVOUS_TIMEOUT_SECONDS = 600.0
"""How long a non-chief part waits for the chief's address."""
PEER_LOST_EXIT_CODE = 75
"""The launcher's exit code when another node of the trial went unheard for the peer
timeout (:mod:`dauntless.launch._liveness`)."""
DEFAULT_OMP_THREADS = "1"
"""``OMP_NUM_THREADS`` of each rank when a node runs several and the task sets none:
``torchrun``'s own default (torch/distributed/run.py), so that the ranks of one node do
not oversubscribe its cores."""


def rank_thread_env(environ: dict[str, str], local_ranks: int) -> dict[str, str]:
    """The thread variables the launcher adds to each rank's environment.

    Args:
        environ: the task's environment (an ``OMP_NUM_THREADS`` there wins).
        local_ranks: the ranks this node runs.

    Returns:
        ``{"OMP_NUM_THREADS": "1"}`` for several local ranks when ``environ`` sets no
        ``OMP_NUM_THREADS`` (``torchrun``'s rule), else ``{}``.
    """
    if local_ranks > 1 and not environ.get("OMP_NUM_THREADS"):
        return {"OMP_NUM_THREADS": DEFAULT_OMP_THREADS}
    return {}


SIOCGIFADDR = 0x8915
"""ioctl(2) request: an interface's IPv4 address (netdevice(7))."""


def interface_of(addr: str) -> str | None:
    """The name of this host's network interface whose (primary) IPv4 address is
    ``addr``, None when none has it (or ``addr`` is not an IPv4 address).

    Read with ``ioctl(SIOCGIFADDR)`` per interface (netdevice(7)): the standard library
    has no call that lists interface addresses.
    """
    try:
        socket.inet_aton(addr)
    except OSError:
        return None
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for _index, name in socket.if_nameindex():
            try:
                req = struct.pack("256s", name.encode()[:15])
                answer = fcntl.ioctl(s.fileno(), SIOCGIFADDR, req)
            except OSError:  # no IPv4 address
                continue
            if socket.inet_ntoa(answer[20:24]) == addr:
                return name
    return None


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


def _rendezvous(world: int, part: int, port: int | None = None) -> tuple[str, int]:
    """Publish (chief) or fetch (others) the chief's address through the master; the
    chief publishes ``port`` (a free one when None)."""
    master = os.environ.get("DET_MASTER", "").rstrip("/")
    alloc = os.environ.get("DET_ALLOCATION_ID", "")
    addr = os.environ.get("DET_ADVERTISE_ADDR", "127.0.0.1")
    if not master or not alloc:
        if os.environ.get("DET_NUM_PARTS", "1") not in ("", "1"):
            raise SystemExit(
                "launcher: DET_MASTER and DET_ALLOCATION_ID are needed to "
                "meet ranks on other agents"
            )
        return "127.0.0.1", _free_port("127.0.0.1")
    url = f"{master}/api/v1/allocations/{alloc}/rendezvous"
    deadline = time.monotonic() + RENDEZVOUS_TIMEOUT_SECONDS
    verify = make_verify(cert_file_from_env())  # an HTTPS master's CA bundle, if any
    # The clients' one retry policy, until the deadline: publishing and reading the
    # rendezvous may be repeated. Error answers are retried too, as a part may ask before
    # the master has assigned the allocation's other parts; a failed certificate
    # verification is not.
    policy = RetryPolicy(attempts=None, backoff=0.5, max_backoff=4.0, repeatable=True)

    def retry(exc: Exception) -> bool:
        if isinstance(exc, httpx.HTTPStatusError):
            return True
        return isinstance(exc, httpx.HTTPError) and policy.retryable_error("GET", exc, sent=True)

    def past_deadline() -> bool:
        return time.monotonic() > deadline

    with internal_client(
        timeout=httpx.Timeout(90.0, connect=10.0), verify=verify, headers=session_token_headers()
    ) as client:
        if part == 0:
            chosen = _free_port(addr) if port is None else port

            def publish() -> None:
                client.post(url, json={"addr": addr, "port": chosen}).raise_for_status()

            try:
                policy.call(publish, retry_error=retry, stopped=past_deadline)
            except httpx.HTTPError as exc:
                raise SystemExit(f"launcher: could not publish the rendezvous: {exc}") from None
            return addr, chosen

        def poll() -> Any:
            r = client.get(url, params={"timeout_seconds": 30})
            r.raise_for_status()
            return r.json().get("rendezvous")

        while not past_deadline():
            try:
                info = policy.call(poll, retry_error=retry, stopped=past_deadline)
            except httpx.HTTPError as exc:
                raise SystemExit(f"launcher: could not read the rendezvous: {exc}") from None
            if info:
                return str(info["addr"]), int(info["port"])
    raise SystemExit(
        f"launcher: no rendezvous from the chief within {RENDEZVOUS_TIMEOUT_SECONDS} s"
    )


def _pump(stream, prefix: bytes) -> None:
    out = sys.stdout.buffer
    with stream:
        for line in iter(stream.readline, b""):
            out.write(prefix + line)
            out.flush()


USAGE = (
    "usage: python -m dauntless.launch.torch_distributed "
    "[[TORCH_OVERRIDES...] --] (--trial module:Class | CMD...)"
)


def parse_args(args: list[str]) -> tuple[int | None, list[str]]:
    """Split the launcher's command line into the worker count override and the command.

    Args:
        args: the arguments after the module name: ``[OVERRIDES... --] (--trial SPEC |
            CMD...)``. Without ``--`` everything is the command (Determined's rule).

    Returns:
        ``(nproc_per_node, cmd)``: the ``--nproc_per_node`` override (None when not
        given) and the argv each worker runs (``--trial SPEC`` becomes the PyTorchTrial
        harness with that class).

    Raises:
        SystemExit: an empty command, extra arguments after ``--trial SPEC``, or an
            override other than ``--nproc_per_node``/``--nproc-per-node`` (named).
    """
    overrides: list[str] = []
    if "--" in args:
        split = args.index("--")
        overrides, args = args[:split], args[split + 1 :]
    nproc: int | None = None
    i = 0
    while i < len(overrides):
        opt = overrides[i]
        name, eq, value = opt.partition("=")
        if name in ("--nproc_per_node", "--nproc-per-node"):
            if not eq:
                if i + 1 >= len(overrides):
                    raise SystemExit(f"launcher: {name} needs a value\n{USAGE}")
                value = overrides[i + 1]
                i += 1
            try:
                nproc = int(value)
            except ValueError:
                raise SystemExit(f"launcher: {name} must be an integer, got {value!r}") from None
            if nproc < 1:
                raise SystemExit(f"launcher: {name} must be at least 1, got {nproc}")
        else:
            raise SystemExit(
                f"launcher: torchrun option {opt!r} is not supported: the launcher sets the "
                "node count, ranks and rendezvous from the allocation; only "
                "--nproc_per_node may be overridden"
            )
        i += 1
    if args[:1] == ["--trial"]:
        if len(args) != 2:
            raise SystemExit(f"launcher: --trial takes exactly one module:Class\n{USAGE}")
        return nproc, [sys.executable, "-m", "dauntless.exec.harness", "--trial", args[1]]
    if not args:
        raise SystemExit(f"launcher: empty command\n{USAGE}")
    return nproc, list(args)


def launch(cmd: list[str], nproc_per_node: int | None = None) -> int:
    """Run ``cmd`` as this node's local ranks; returns the exit code for the launcher.

    Args:
        cmd: the worker argv.
        nproc_per_node: run this many workers instead of one per slot (single-node
            allocations only; at most the node's slot count).

    Raises:
        SystemExit: a malformed environment, a bad override or a failed rendezvous.
    """
    if not cmd:
        raise SystemExit(USAGE)
    world = _env_int("DET_WORLD_SIZE", 1)
    slot_count = len([x for x in os.environ.get("DET_SLOT_IDS", "").split(",") if x])
    if nproc_per_node is not None and "RANK" not in os.environ:
        if _env_int("DET_NUM_PARTS", 1) > 1:
            raise SystemExit(
                "launcher: --nproc_per_node cannot be overridden for an allocation that "
                "spans several agents"
            )
        if nproc_per_node > max(slot_count, 1):
            raise SystemExit(
                f"launcher: --nproc_per_node {nproc_per_node} exceeds the node's "
                f"{max(slot_count, 1)} slot(s)"
            )
        world = nproc_per_node
    if world <= 1 or "RANK" in os.environ:
        # One rank in all, or already launched (a user entrypoint that names the launcher).
        os.environ.setdefault("RANK", "0")
        os.environ.setdefault("LOCAL_RANK", "0")
        os.environ.setdefault("WORLD_SIZE", "1")
        os.environ.setdefault("LOCAL_WORLD_SIZE", "1")
        if os.environ["WORLD_SIZE"] == "1":
            # As torchrun does for one process: code that joins a process group from
            # the environment (Hugging Face's Trainer, accelerate) finds a rendezvous.
            os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
            if "MASTER_PORT" not in os.environ:
                with socket.socket() as s:
                    s.bind(("127.0.0.1", 0))
                    os.environ["MASTER_PORT"] = str(s.getsockname()[1])
        os.execvp(cmd[0], cmd)
    offset = _env_int("DET_RANK_OFFSET", 0)
    part = _env_int("DET_PART_INDEX", 0)
    local = nproc_per_node or max(slot_count, 1)
    parts = _env_int("DET_NUM_PARTS", 1)
    timeout = peer_timeout(os.environ) if parts > 1 else 0.0
    udp = None
    if timeout and part == 0:  # the peers' beats come to the rendezvous port's number
        chief_port, udp = bind_port_pair(os.environ.get("DET_ADVERTISE_ADDR", "127.0.0.1"))
        addr, port = _rendezvous(world, part, chief_port)
    else:
        addr, port = _rendezvous(world, part)
    watch = None
    if timeout:
        watch = PeerWatch(
            os.environ.get("DET_ALLOCATION_ID", ""),
            part,
            parts,
            (addr, port),
            timeout,
            sock=udp,
            first_beat_timeout=RENDEZVOUS_TIMEOUT_SECONDS,
        )
        watch.start()
    base = dict(os.environ)
    if parts > 1 and not base.get("GLOO_SOCKET_IFNAME"):
        iface = interface_of(base.get("DET_ADVERTISE_ADDR", ""))
        if iface is not None:  # gloo's peers reach this node there (see the module)
            base["GLOO_SOCKET_IFNAME"] = iface
    procs: list[subprocess.Popen] = []
    pumps: list[threading.Thread] = []
    threads = rank_thread_env(dict(os.environ), local)
    for local_rank in range(local):
        rank = offset + local_rank
        env = dict(base)
        env.update(threads)
        env.update(
            {
                "RANK": str(rank),
                "LOCAL_RANK": str(local_rank),
                "WORLD_SIZE": str(world),
                "LOCAL_WORLD_SIZE": str(local),
                "GROUP_RANK": str(part),
                "MASTER_ADDR": addr,
                "MASTER_PORT": str(port),
                "DET_CHIEF_IP": addr,
                "USE_TORCH_DISTRIBUTED": "True",
            }
        )
        if nproc_per_node is not None:
            env["DET_WORLD_SIZE"] = str(world)
        argv = [sys.executable, "-m", "dauntless.agent._launch", str(os.getpid()), "--", *cmd]
        proc = subprocess.Popen(
            argv,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        procs.append(proc)
        t = threading.Thread(
            target=_pump, args=(proc.stdout, f"[rank={rank}] ".encode()), daemon=True
        )
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
        lost = watch.lost() if watch is not None else None
        if lost is not None:
            print(
                f"launcher: {lost}; stopping this node's ranks so that the trial restarts "
                "from its latest checkpoint",
                file=sys.stderr,
                flush=True,
            )
            code = PEER_LOST_EXIT_CODE
            break
        time.sleep(0.1)
    if watch is not None and code == 0:
        watch.finish()
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
    """Entry point: ``[OVERRIDES... --] (--trial SPEC | CMD...)`` from the command line."""
    nproc, cmd = parse_args(list(sys.argv[1:] if argv is None else argv))
    raise SystemExit(launch(cmd, nproc))


if __name__ == "__main__":
    main()
