"""``python -m dauntless.agent``: run an agent until SIGTERM/SIGINT."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading

from pydantic import SecretStr, ValidationError

from dauntless._auth import CLUSTER_SECRET_ENV, read_secret_file
from dauntless._tls import CERT_FILE_ENV, cert_file_from_env
from dauntless.config import AgentConfig

from ._agent import Agent


def main(argv: list[str] | None = None) -> int:
    """Parse flags, register with the master and run the agent loop."""
    p = argparse.ArgumentParser(prog="dauntless agent", description=__doc__)
    p.add_argument("--master-url", default="http://127.0.0.1:8080")
    p.add_argument("--agent-id")
    p.add_argument("--resource-pool", default="default")
    p.add_argument("--slot-type", default="auto", choices=["auto", "cuda", "gpu", "cpu", "none"])
    p.add_argument("--artificial-slots", type=int, default=0)
    p.add_argument("--visible-gpus")
    p.add_argument("--work-dir", required=True)
    p.add_argument("--heartbeat-interval", type=float, default=0.5)
    p.add_argument("--advertise-addr", help="address other agents reach this host at")
    p.add_argument(
        "--no-warm-start",
        dest="warm_start",
        action="store_false",
        help="start every trial as fresh interpreters instead of forking single-rank trials "
        "from a warm worker that has imported torch and Dauntless (docs/warm-start.md)",
    )
    p.add_argument(
        "--runtime",
        default="auto",
        choices=["auto", "process", "docker", "podman"],
        help="how tasks run: as processes, or (tasks naming environment.image) in docker or "
        "podman containers; auto: docker or podman when its engine answers, else process",
    )
    p.add_argument(
        "--orphan-grace-period",
        type=float,
        default=180.0,
        help="seconds a task outlives this agent when the agent dies without stopping it: "
        "an agent started again on the same --work-dir within this time adopts the task; "
        "after it, the task's supervisor ends every process of the task (default 180)",
    )
    p.add_argument(
        "--master-cert-file",
        default=cert_file_from_env(),
        help="PEM CA bundle that signed an HTTPS master's certificate, or 'noverify' "
        f"(default: ${CERT_FILE_ENV}, else the system's trust store); passed on to tasks "
        f"as {CERT_FILE_ENV}",
    )
    p.add_argument(
        "--cluster-secret-file",
        help="file holding the master's cluster secret (security.cluster_secret, or the "
        f"master's <data_dir>/cluster_secret); default: ${CLUSTER_SECRET_ENV}",
    )
    p.add_argument(
        "--prometheus-port",
        type=int,
        help="serve the agent's Prometheus metrics on this port (0: a free one)",
    )
    p.add_argument(
        "--prometheus-host",
        default="127.0.0.1",
        help="the address --prometheus-port listens on (default 127.0.0.1)",
    )
    args = p.parse_args(argv)
    # The secret comes from a file or the environment, never the command line (which
    # other users of the host can read), and leaves the environment at once so that no
    # task inherits it.
    secret = os.environ.pop(CLUSTER_SECRET_ENV, "").strip() or None
    if args.cluster_secret_file:
        try:
            secret = read_secret_file(args.cluster_secret_file)
        except ValueError as exc:
            p.error(str(exc))
        if os.stat(args.cluster_secret_file).st_mode & 0o077:
            sys.stderr.write(
                f"warning: {args.cluster_secret_file} is readable by other users (and so by "
                "their tasks): chmod 600 it; whoever reads it can register agents\n"
            )
    if secret is None:
        p.error(
            f"no cluster secret: give --cluster-secret-file (the master keeps one in "
            f"<data_dir>/cluster_secret) or set {CLUSTER_SECRET_ENV}"
        )
    url = args.master_url if "://" in args.master_url else "http://" + args.master_url
    try:
        config = AgentConfig(
            master_url=url,
            agent_id=args.agent_id,
            resource_pool=args.resource_pool,
            slot_type=args.slot_type,
            artificial_slots=args.artificial_slots,
            visible_gpus=args.visible_gpus,
            work_dir=args.work_dir,
            heartbeat_interval=args.heartbeat_interval,
            advertise_addr=args.advertise_addr,
            master_cert_file=args.master_cert_file,
            cluster_secret=SecretStr(secret),
            runtime=args.runtime,
            warm_start=args.warm_start,
            orphan_grace_period=args.orphan_grace_period,
            prometheus_port=args.prometheus_port,
            prometheus_host=args.prometheus_host,
        )
    except ValidationError as exc:
        p.error("; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()))
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    # httpx logs every request at INFO: a line per heartbeat buries what the agent says.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    try:
        agent = Agent(config)
    except (ValueError, RuntimeError) as exc:  # a missing CA bundle; no container engine
        p.error(str(exc))

    def _stop(*_: object) -> None:
        stop.set()
        agent.wake.set()  # the loop waits on it between heartbeats

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _stop)
    agent.run(stop)
    return 0


if __name__ == "__main__":
    sys.exit(main())
