"""``python -m dauntless.agent.slurm_task SPEC_FILE``: run one allocation part inside a
Slurm job (the node side of the ``slurm`` resource manager,
:mod:`dauntless.master.slurm`).

The master's Slurm resource manager writes a spec file (mode 0600, on a file system
the nodes share) holding the same task spec an agent gets in a heartbeat answer, the
master's URL, and the credential of this allocation part (``agent_token``: it speaks for
this part only, :mod:`dauntless.master.auth_agents`); the job's batch script runs this
module once per node. It does what an agent does for one task: fetch the model
definition, start the entrypoint under the rank launcher
(:mod:`dauntless.launch.torch_distributed`, which starts the per-slot workers), ship
its output as task logs, and report the exit code to the master. SIGTERM (``scancel``)
is passed on to the task, whose exit is still reported.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import httpx

from dauntless._auth import AGENT_TOKEN_HEADER, CLUSTER_SECRET_ENV
from dauntless._tls import CERT_FILE_ENV, NO_VERIFY, make_verify
from dauntless.compat import SHIM_PATH as COMPAT_SHIM_PATH

from ._agent import _safe_extract, advertise_address, launched_command, task_command
from ._logs import LogShipper

log = logging.getLogger("dauntless.agent.slurm_task")

REPORT_DEADLINE_SECONDS = 600.0
"""How long the exit report is retried while the master is unreachable."""


def _post_exit(client: httpx.Client, alloc_id: str, code: int | None, msg: str | None) -> None:
    """Report the exit, retrying for :data:`REPORT_DEADLINE_SECONDS`.

    A hand-written retry: the master may be restarting, and a lost report would leave
    the trial waiting for the job to be seen gone; httpx retries only connection setup,
    and one loop with a deadline is all that is needed here.
    """
    deadline = time.monotonic() + REPORT_DEADLINE_SECONDS
    delay = 0.5
    while True:
        try:
            r = client.post(
                f"/api/v1/allocations/{alloc_id}/exited", json={"exit_code": code, "message": msg}
            )
            if r.status_code in (200, 404):
                return
            r.raise_for_status()
        except httpx.HTTPError as exc:
            if time.monotonic() > deadline:
                log.error("could not report the exit of %s: %s", alloc_id, exc)
                return
            time.sleep(delay)
            delay = min(delay * 2, 10.0)


def run(spec_file: str) -> int:
    """Run the task of ``spec_file``; returns its exit code (1 if it could not start).

    Raises:
        ValueError: the spec file is unreadable or has no part credential.
    """
    with open(spec_file, encoding="utf-8") as f:
        job = json.load(f)
    spec = job["task"]
    alloc_id = spec["allocation_id"]
    token = job.get("agent_token")
    if not token:
        raise ValueError(f"{spec_file} holds no agent_token (written by an older master?)")
    cert = job.get("master_cert_file")
    client = httpx.Client(
        base_url=job["master_url"].rstrip("/"),
        timeout=httpx.Timeout(30.0, connect=5.0),
        transport=httpx.HTTPTransport(retries=2, verify=make_verify(cert)),
        headers={AGENT_TOKEN_HEADER: token},
    )
    shipper = LogShipper(client)
    shipper.start()
    identity = spec.get("identity") or {}
    if identity and identity.get("uid") != os.getuid():
        shipper.add(
            alloc_id,
            "stderr",
            f"warning: Slurm runs this job as uid {os.getuid()}; the task's Unix identity "
            f"({identity.get('user')}, uid {identity.get('uid')}) does not apply to Slurm jobs",
        )
    work_dir = os.path.join(job["work_dir"], alloc_id)
    try:
        os.makedirs(work_dir, exist_ok=True)
        if spec.get("context_url"):
            r = client.get(spec["context_url"])
            if r.status_code != 404:
                r.raise_for_status()
                _safe_extract(r.content, work_dir)
        if spec.get("task_type", "TRIAL") == "TRIAL":
            argv = launched_command(spec["entrypoint"])
        else:  # a command, notebook, shell or TensorBoard: no rank launcher (as on agents)
            argv = task_command(spec["entrypoint"])
        cwd = spec.get("work_dir") or work_dir
        if not os.path.isdir(cwd):
            raise ValueError(f"work_dir {cwd!r} is not a directory on {socket.gethostname()}")
    except (httpx.HTTPError, OSError, ValueError) as exc:
        msg = f"could not prepare task {alloc_id} in Slurm job: {exc}"
        shipper.add(alloc_id, "stderr", msg)
        shipper.stop()
        _post_exit(client, alloc_id, None, msg)
        return 1
    env = dict(os.environ)
    env.pop(CLUSTER_SECRET_ENV, None)
    env.update({k: str(v) for k, v in spec.get("env", {}).items()})
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    env["PYTHONUNBUFFERED"] = "1"
    env["DET_ADVERTISE_ADDR"] = advertise_address(job["master_url"])
    if cert:
        env[CERT_FILE_ENV] = cert if cert == NO_VERIFY else os.path.abspath(cert)
    # As on agents: the context, then the `determined` compatibility package.
    env["PYTHONPATH"] = os.pathsep.join([work_dir, COMPAT_SHIM_PATH]) + (
        os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else ""
    )
    proc = subprocess.Popen(
        argv,
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )

    def forward(signum, _frame) -> None:
        try:
            os.killpg(proc.pid, signum)
        except ProcessLookupError:
            pass

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    readers = []
    for stream, name in ((proc.stdout, "stdout"), (proc.stderr, "stderr")):
        t = threading.Thread(target=shipper.pump, args=(alloc_id, name, stream), daemon=True)
        t.start()
        readers.append(t)
    code = proc.wait()
    for t in readers:
        t.join(timeout=5)
    shipper.stop()  # sends what is left (kept if the master is away)
    _post_exit(client, alloc_id, code, None if code == 0 else f"exit code {code}")
    return 0 if code == 0 else 1


def main(argv: list[str] | None = None) -> int:
    """Entry point: ``python -m dauntless.agent.slurm_task SPEC_FILE``."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        sys.stderr.write("usage: python -m dauntless.agent.slurm_task SPEC_FILE\n")
        return 2
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    return run(args[0])


if __name__ == "__main__":
    sys.exit(main())
