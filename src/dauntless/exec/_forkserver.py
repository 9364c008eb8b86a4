"""``python -m dauntless.exec._forkserver SOCKET PARENT_PID``: the agent's warm worker.

A fork server that has already imported ``torch`` and Dauntless (the trial harness, the
Core API) and forks one fresh process per trial, so a trial's first line of user code
runs a few milliseconds after the agent asks instead of after three interpreter starts
and their imports (docs/warm-start.md). The agent (:mod:`dauntless.agent._warm`) starts
one per agent and talks to it over a Unix stream socket, one connection per trial:

1. the agent sends one request: a JSON line (``kind``, ``target``, ``args``, ``env``,
   ``cwd``) and, as ``SCM_RIGHTS`` ancillary data on the same message, the trial's
   stdout and stderr (write ends of pipes the agent reads);
2. the server forks; it answers ``{"pid": N}`` and, when the child has exited,
   ``{"exit": CODE}`` (a negative code: killed by that signal, as ``Popen.returncode``).

A request with ``shim_dir`` (a task state directory the agent made,
:func:`dauntless.agent._supervise.make_state_dir`) asks for a *supervised* trial: the
child becomes the trial's supervisor (:func:`_supervised_child`), which forks the trial
itself and, like a cold start's supervisor, outlives the agent; the two fds are then
unused (the output goes to the state directory) and ``pid`` is the supervisor's.

The child is a new session (its pid is its process group, so the agent's
``killpg(SIGTERM/SIGKILL)`` reaches it and whatever it starts), gets
``PR_SET_PDEATHSIG(SIGKILL)`` on the fork server (which has it on the agent: a killed agent
leaves no worker behind), its own working directory, environment (``os.environ`` is
replaced, ``PYTHONPATH`` entries go on ``sys.path``), stdio, and fresh seeds of
``random``, ``numpy`` and ``torch`` drawn from ``os.urandom`` (the harness then seeds
them with the trial seed, so exact resume is unchanged). A crash or ``os._exit`` in one
child touches neither the server nor other trials.

``kind`` is ``script`` (``python FILE ARGS...``: :func:`runpy.run_path` as
``__main__``), ``module`` (``python -m MODULE ARGS...``) or ``harness`` (the PyTorchTrial
harness with ``--trial module:Class``). The server stays single-threaded: forking a
process with threads could copy a held lock into the child.

The protocol is small and local, so it is written here rather than taken from
:mod:`multiprocessing.forkserver`, which cannot hand a child a different environment,
working directory and stdio per request, nor report its exit status to another process.
"""

from __future__ import annotations

import array
import ctypes
import gc
import json
import os
import selectors
import signal
import socket
import sys
from typing import Any

PR_SET_PDEATHSIG = 1
MAX_REQUEST_BYTES = 4 << 20
"""The largest request (its environment holds the experiment config) the server reads."""


def preload() -> None:
    """Import what trials use, once, in the server (``torch``, the harness, the Core API).

    Nothing here may start a thread or initialise CUDA: both would be inherited by every
    child in a broken state.
    """
    import httpx

    import dauntless.config  # noqa: F401  (core.init() parses the experiment config)
    import dauntless.core  # noqa: F401
    import dauntless.exec.harness  # noqa: F401  (torch, dauntless.pytorch, configs)
    from dauntless._tls import default_ssl_context

    # httpx imports its transport (httpcore, h11) when the first client is made, and the
    # default TLS context loads a CA bundle (~80 ms): both once, here.
    httpx.Client(verify=default_ssl_context()).close()
    # socket.getaddrinfo() encodes a host name with the IDNA codec, whose first use
    # imports encodings.idna and stringprep (~5 ms in every trial otherwise).
    "localhost".encode("idna")
    # numpy imports numpy.random on first use; each child's reseed (_reseed) would.
    if "numpy" in sys.modules:
        import numpy.random  # noqa: F401
    # torch.seed() in each child's reseed queues the accelerators' seeds for their lazy
    # start, which records the call's stack with its source lines
    # (traceback.format_stack): one reseed here reads those files into linecache once.
    # A child's reseed measured 3.8 ms of CPU without, 2.2 ms with (30 forks). The
    # server's own streams are never used: every child reseeds.
    _reseed()
    global _SHIM
    _SHIM = _load_shim()  # each warm trial's supervisor is a fork of this process
    _keep_preloaded_finalizers_from_children()


def _keep_preloaded_finalizers_from_children() -> int:
    """Stop the children from running, at their exit, the ``weakref.finalize`` callbacks
    that the preloaded modules registered; returns how many.

    ``torch`` registers one per operator library it defines; a child's emulated
    interpreter exit (:func:`_run`) would run them all: about 40 ms of CPU per trial,
    spent undoing registrations in a process about to ``_exit``, which nothing outside
    it can observe. Finalizers a trial creates itself still run at its exit. The
    registry of live finalizers has no public accessor: ``weakref.finalize._registry``
    (CPython since 3.4); without it nothing changes. Each one's documented ``atexit``
    flag is cleared.
    """
    import weakref

    registry = getattr(weakref.finalize, "_registry", None)
    if not isinstance(registry, dict):
        return 0
    count = 0
    for fin in list(registry):
        if isinstance(fin, weakref.finalize) and fin.atexit:
            fin.atexit = False
            count += 1
    return count


MADV_COLLAPSE = 25
"""``madvise`` advice of Linux 6.1+ (``<asm-generic/mman-common.h>``): back a range's
pages by transparent huge pages now, in the calling thread."""
HUGE_PAGE = 2 << 20
"""Bytes of a transparent huge page on x86-64 and arm64 (4 KiB base pages)."""


def collapse_to_huge_pages() -> int:
    """Back the server's private writable anonymous memory (the heap and the mappings
    of ``malloc`` and Python's allocator, about 170 MB once torch is imported) by 2 MiB
    transparent huge pages; returns how many bytes were collapsed (0 where the kernel
    cannot: before Linux 6.1, other page sizes, THP ``never``).

    Why: ``fork`` copies one page-table entry and takes one page reference per resident
    4 KiB page of such memory, and the child's exit drops them again, so with torch
    imported each fork and each exit cost several ms of system CPU, and a supervised
    warm trial is two forks and two exits (:func:`_supervised_child`). A range mapped by
    a huge page is one entry and one reference. Measured on 6.18 after :func:`preload`
    (2 cores, load about 9): a fork of the server, a fork of that child and both exits,
    25.2 ms of CPU in all, became 12.3 ms. A child's first write into a shared huge
    page splits its mapping and copies only the 4 KiB page written (copy-on-write as
    before), so no child holds more memory; the server's resident memory grows by
    the holes filled in the ranges collapsed (about 1 MB measured).

    Best effort: ``madvise(MADV_COLLAPSE)`` is advice the kernel may refuse, and each
    refusal only leaves that range as it was. The ranges' THP flags are not changed
    (no ``MADV_HUGEPAGE``), so a child's own allocations follow the host's THP
    setting as in a cold process. Source of the mechanism: madvise(2), ``MADV_COLLAPSE``.
    """
    if not sys.platform.startswith("linux"):
        return 0
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        madvise = libc.madvise
        madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        with open("/proc/self/maps", encoding="ascii", errors="replace") as f:
            maps = f.read().splitlines()
    except (OSError, AttributeError):
        return 0
    done = 0
    for line in maps:
        parts = line.split()
        if len(parts) < 5 or not parts[1].startswith("rw") or parts[1][3] != "p":
            continue
        if len(parts) > 5 and parts[5] != "[heap]":  # files, stacks, vdso ...
            continue
        start, end = (int(x, 16) for x in parts[0].split("-"))
        lo = -(-start // HUGE_PAGE) * HUGE_PAGE
        hi = end // HUGE_PAGE * HUGE_PAGE
        for at in range(lo, hi, HUGE_PAGE):  # one by one: a refusal stops no other
            if madvise(at, HUGE_PAGE, MADV_COLLAPSE) == 0:
                done += HUGE_PAGE
    return done


def _set_pdeathsig() -> None:
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def _reseed() -> None:
    """Give the child random streams of its own (the server's were copied by fork)."""
    import random

    random.seed()
    np = sys.modules.get("numpy")
    if np is not None:
        np.random.seed()
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.seed()


def _child(request: dict[str, Any], fds: list[int], server_pid: int) -> None:
    """Become the trial: runs in the forked process and never returns."""
    code = 1
    try:
        os.setsid()
        _set_pdeathsig()
        if os.getppid() != server_pid:  # the server died before the signal was armed
            os._exit(1)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.dup2(fds[0], 1)
        os.dup2(fds[1], 2)
        for fd in (devnull, *fds):
            if fd > 2:
                os.close(fd)
        code = _run(request)
    except SystemExit as exc:
        code = _exit_code(exc)
    except BaseException:
        import traceback

        try:
            traceback.print_exc()
        except BaseException:
            pass
        code = 1
    finally:
        os._exit(code)


_SHIM: Any = None
"""The task supervisor's module (:mod:`dauntless.agent._shim`), loaded by :func:`preload`."""


def _load_shim() -> Any:
    """Load ``dauntless/agent/_shim.py`` by path: the supervisor imports only the standard
    library, while its package's ``__init__`` would import the whole agent."""
    import importlib.util

    path = os.path.join(os.path.dirname(os.path.dirname(__file__)), "agent", "_shim.py")
    spec = importlib.util.spec_from_file_location("dauntless_task_shim", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _supervised_child(request: dict[str, Any], fds: list[int]) -> None:
    """Become the supervisor (shim) of a warm trial, which it forks as its own child:
    runs in the process the server forked and never returns.

    The shim is the one cold starts have (:mod:`dauntless.agent._shim`, state directory
    ``request["shim_dir"]`` made by the agent), except that its task is a fork of this
    process running the request (:func:`_run`) instead of an ``exec``. It is a session
    of its own without ``PR_SET_PDEATHSIG``, so it outlives the server and the agent,
    and an agent started again adopts the trial as it adopts any supervised task
    (docs/partitions.md). Its errors go to the directory's ``shim.log``.
    """
    code = 1
    try:
        os.setsid()
        for fd in fds:  # the output goes to the state directory, not to the agent
            os.close(fd)
        directory = request["shim_dir"]
        devnull = os.open(os.devnull, os.O_RDWR)
        errors = os.open(
            os.path.join(directory, "shim.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600
        )
        os.dup2(devnull, 0)
        os.dup2(devnull, 1)
        os.dup2(errors, 2)
        os.close(errors)
        shim = _SHIM if _SHIM is not None else _load_shim()

        class WarmShim(shim.Shim):  # type: ignore[name-defined,misc]
            def become_task(self, shim_pid: int, out_w: int, err_w: int, status_w: int) -> None:
                task_code = 1
                try:
                    os.setsid()
                    _set_pdeathsig()  # dies with its shim, as a cold task does
                    if os.getppid() != shim_pid:
                        os._exit(1)
                    signal.set_wakeup_fd(-1)
                    for sig in (signal.SIGTERM, signal.SIGUSR1, signal.SIGCHLD):
                        signal.signal(sig, signal.SIG_DFL)
                    signal.signal(signal.SIGINT, signal.default_int_handler)
                    os.dup2(out_w, 1)
                    os.dup2(err_w, 2)
                    for fd in (out_w, err_w, self.out, *self.pipe_reads):
                        if fd > 2:
                            os.close(fd)
                    task_code = _run(request)
                except SystemExit as exc:
                    task_code = _exit_code(exc)
                except BaseException:
                    import traceback

                    try:
                        traceback.print_exc()
                    except BaseException:
                        pass
                finally:
                    os._exit(task_code)

        WarmShim(directory).run()
        code = 0
    except BaseException:
        import traceback

        try:
            traceback.print_exc()
        except BaseException:
            pass
    finally:
        os._exit(code)


def _exit_code(exc: SystemExit) -> int:
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code & 0xFF
    try:
        print(exc.code, file=sys.stderr)
    except BaseException:
        pass
    return 1


def _run(request: dict[str, Any]) -> int:
    """Run the request's code as ``__main__`` would run it; returns the exit code."""
    import io
    import logging
    import runpy
    import threading

    env: dict[str, str] = request["env"]
    os.environ.clear()
    os.environ.update(env)
    cwd = request["cwd"]
    os.chdir(cwd)
    sys.stdin = open(0, closefd=False)  # noqa: SIM115
    sys.stdout = io.TextIOWrapper(
        io.FileIO(1, "w", closefd=False), line_buffering=True, write_through=True
    )
    sys.stderr = io.TextIOWrapper(
        io.FileIO(2, "w", closefd=False),
        line_buffering=True,
        write_through=True,
        errors="backslashreplace",
    )
    root = logging.getLogger()
    for h in list(root.handlers):
        root.removeHandler(h)
    _reseed()
    kind, target, args = request["kind"], request["target"], list(request.get("args", []))
    extra = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    base = [p for p in sys.path[1:] if p not in extra]
    code = 0
    try:
        if kind == "script":
            path = os.path.abspath(target)
            sys.path[:] = [os.path.dirname(path), *extra, *base]
            sys.argv = [target, *args]
            runpy.run_path(path, run_name="__main__")
        elif kind == "module":
            sys.path[:] = [cwd, *extra, *base]
            sys.argv = [target, *args]
            runpy.run_module(target, run_name="__main__", alter_sys=True)
        elif kind == "harness":
            from dauntless.exec import harness

            sys.path[:] = [cwd, *extra, *base]
            sys.argv = ["harness", "--trial", target]
            logging.basicConfig(stream=sys.stdout, level=logging.INFO, format=harness.LOG_FORMAT)
            logging.getLogger("httpx").setLevel(logging.WARNING)
            logging.getLogger("httpcore").setLevel(logging.WARNING)
            code = harness.main(trial_spec=target)
        else:
            print(f"fork server: unknown kind {kind!r}", file=sys.stderr)
            code = 2
    except SystemExit as exc:
        code = _exit_code(exc)
    except BaseException:
        import traceback

        traceback.print_exc()
        code = 1
    # What the interpreter does at exit: wait for non-daemon threads, run atexit.
    threading._shutdown()  # type: ignore[attr-defined]
    import atexit

    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:
            pass
    return code


def _recv_request(conn: socket.socket) -> tuple[dict[str, Any], list[int]]:
    """Read one request: a JSON line; the two fds ride on its first message.

    Raises:
        ValueError: a malformed request (no fds, no newline within the size limit).
    """
    fds: list[int] = []
    data = b""
    while not data.endswith(b"\n"):
        chunk, anc, _flags, _addr = conn.recvmsg(1 << 16, socket.CMSG_SPACE(2 * 4))
        for level, typ, payload in anc:
            if level == socket.SOL_SOCKET and typ == socket.SCM_RIGHTS:
                a = array.array("i")
                a.frombytes(payload[: len(payload) - len(payload) % a.itemsize])
                fds.extend(a)
        if not chunk:
            break
        data += chunk
        if len(data) > MAX_REQUEST_BYTES:
            break
    if len(fds) != 2 or not data.endswith(b"\n"):
        for fd in fds:
            os.close(fd)
        raise ValueError("malformed fork request")
    return json.loads(data), fds


def serve(path: str) -> None:
    """Listen on ``path`` and fork a child per request until the agent goes away."""
    server_pid = os.getpid()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    listener.bind(path)
    os.chmod(path, 0o600)
    listener.listen(64)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    sel = selectors.DefaultSelector()
    sel.register(listener, selectors.EVENT_READ, "accept")
    sel.register(wake_r, selectors.EVENT_READ, "wake")
    children: dict[int, socket.socket] = {}
    print("ready", flush=True)
    while True:
        for key, _ in sel.select():
            if key.data == "accept":
                conn, _ = listener.accept()
                try:
                    request, fds = _recv_request(conn)
                except (ValueError, OSError):
                    conn.close()
                    continue
                pid = os.fork()
                if pid == 0:
                    signal.set_wakeup_fd(-1)
                    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                    sel.close()
                    listener.close()
                    for c in children.values():
                        c.close()
                    os.close(wake_r)
                    os.close(wake_w)
                    conn.close()
                    if request.get("shim_dir"):
                        _supervised_child(request, fds)
                    _child(request, fds, server_pid)
                for fd in fds:
                    os.close(fd)
                children[pid] = conn
                try:
                    conn.sendall(json.dumps({"pid": pid}).encode() + b"\n")
                except OSError:
                    pass
            else:
                try:
                    while os.read(wake_r, 512):
                        pass
                except BlockingIOError:
                    pass
        while children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            ended = children.pop(pid, None)
            if ended is None:
                continue
            code = os.waitstatus_to_exitcode(status)
            try:
                ended.sendall(json.dumps({"exit": code}).encode() + b"\n")
            except OSError:
                pass
            ended.close()


def main(argv: list[str]) -> None:
    """Entry point: ``SOCKET PARENT_PID``; dies with its parent (the agent).

    Raises:
        SystemExit: 2 on a malformed command line, 1 if the parent is already gone.
    """
    if len(argv) != 2 or not argv[1].isdigit():
        sys.stderr.write("usage: python -m dauntless.exec._forkserver SOCKET PARENT_PID\n")
        raise SystemExit(2)
    parent = int(argv[1])
    _set_pdeathsig()
    if os.getppid() != parent:
        raise SystemExit(1)
    preload()
    # Objects the server made stay out of every child's garbage collections: a
    # collection would otherwise touch (and so copy) every page the server filled.
    gc.collect()
    gc.freeze()
    collapse_to_huge_pages()
    serve(argv[0])


if __name__ == "__main__":
    main(sys.argv[1:])
