"""``python -m dauntless.agent``: run an agent until SIGTERM/SIGINT."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from typing import Any

from pydantic import SecretStr, ValidationError

from dauntless._auth import CLUSTER_SECRET_ENV, read_secret_file
from dauntless._tls import CERT_FILE_ENV, cert_file_from_env
from dauntless.config import (
    AgentConfig,
    LimitError,
    RefusedField,
    env_agent_config,
    load_yaml_file,
    translate_agent_config,
)

from ._agent import Agent

DEFAULTS: dict[str, Any] = {
    "master_url": "http://127.0.0.1:8080",
    "agent_id": None,
    "resource_pool": "default",
    "slot_type": "auto",
    "artificial_slots": 0,
    "visible_gpus": None,
    "work_dir": None,
    "heartbeat_interval": 0.5,
    "advertise_addr": None,
    "runtime": "auto",
    "warm_start": True,
    "orphan_grace_period": 180.0,
    "master_cert_file": None,
    "cluster_secret_file": None,
    "prometheus_port": None,
    "prometheus_host": "127.0.0.1",
}
"""The agent's settings when no flag, environment variable or config file sets them."""


def _settings(p: argparse.ArgumentParser, args: argparse.Namespace) -> dict[str, Any]:
    """The agent's settings: :data:`DEFAULTS` <- the config file <- Determined's ``DET_*``
    environment variables <- flags (issue 33). Fields of the file Dauntless ignores are
    warned about on stderr, naming each; refused ones end the agent naming them."""
    settings = dict(DEFAULTS)
    settings["master_cert_file"] = cert_file_from_env()
    layers: list[tuple[str, dict[str, Any]]] = []
    if args.config_file:
        try:
            raw = load_yaml_file(args.config_file, "agent")
        except LimitError as exc:
            p.error(exc.detail)
        layers.append((args.config_file, raw))
    from_env = env_agent_config(os.environ)
    if from_env:
        layers.append(("the DET_* environment variables", from_env))
    for where, raw in layers:
        try:
            values, ignored = translate_agent_config(raw)
        except RefusedField as exc:
            p.error(f"{where}: {exc}")
        for text in ignored:
            sys.stderr.write(f"warning: {where}: {text}\n")
        settings.update(values)
    for key in DEFAULTS:
        value = getattr(args, key, None)
        if value is not None:
            settings[key] = value
    if not settings["work_dir"]:
        p.error("--work-dir (or work_dir in the config file) is required")
    return settings


def main(argv: list[str] | None = None) -> int:
    """Parse flags, register with the master and run the agent loop."""
    p = argparse.ArgumentParser(prog="dauntless agent", description=__doc__)
    p.add_argument(
        "--config-file",
        help="agent config YAML: Determined's agent.yaml keys (master_host, master_port, "
        "agent_id, ...) or this agent's own settings; environment variables (DET_MASTER_HOST, "
        "DET_AGENT_ID, ...) override it and flags override both",
    )
    p.add_argument("--master-url", help="default http://127.0.0.1:8080")
    p.add_argument("--agent-id")
    p.add_argument("--resource-pool", help="default: default")
    p.add_argument("--slot-type", choices=["auto", "cuda", "gpu", "cpu", "none"])
    p.add_argument("--artificial-slots", type=int)
    p.add_argument("--visible-gpus")
    p.add_argument("--work-dir", help="required (here or in the config file)")
    p.add_argument("--heartbeat-interval", type=float, help="seconds (default 0.5)")
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
        choices=["auto", "process", "docker", "podman"],
        help="how tasks run: as processes, or (tasks naming environment.image) in docker or "
        "podman containers; auto: docker or podman when its engine answers, else process",
    )
    p.add_argument(
        "--orphan-grace-period",
        type=float,
        help="seconds a task outlives this agent when the agent dies without stopping it: "
        "an agent started again on the same --work-dir within this time adopts the task; "
        "after it, the task's supervisor ends every process of the task (default 180)",
    )
    p.add_argument(
        "--master-cert-file",
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
        help="the address --prometheus-port listens on (default 127.0.0.1)",
    )
    p.set_defaults(warm_start=None)
    args = p.parse_args(argv)
    settings = _settings(p, args)
    # The secret comes from a file or the environment, never the command line (which
    # other users of the host can read), and leaves the environment at once so that no
    # task inherits it.
    secret = os.environ.pop(CLUSTER_SECRET_ENV, "").strip() or None
    secret_file = settings["cluster_secret_file"]
    if secret_file:
        try:
            secret = read_secret_file(secret_file)
        except ValueError as exc:
            p.error(str(exc))
        if os.stat(secret_file).st_mode & 0o077:
            sys.stderr.write(
                f"warning: {secret_file} is readable by other users (and so by "
                "their tasks): chmod 600 it; whoever reads it can register agents\n"
            )
    if secret is None:
        p.error(
            f"no cluster secret: give --cluster-secret-file (the master keeps one in "
            f"<data_dir>/cluster_secret) or set {CLUSTER_SECRET_ENV}"
        )
    master_url = str(settings["master_url"])
    url = master_url if "://" in master_url else "http://" + master_url
    settings.pop("cluster_secret_file")
    try:
        config = AgentConfig(**{**settings, "master_url": url}, cluster_secret=SecretStr(secret))
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
