"""``python -m dauntless.agent``: run an agent until SIGTERM/SIGINT."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading

from pydantic import ValidationError

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
    args = p.parse_args(argv)
    url = args.master_url if "://" in args.master_url else "http://" + args.master_url
    try:
        config = AgentConfig(
            master_url=url, agent_id=args.agent_id, resource_pool=args.resource_pool,
            slot_type=args.slot_type, artificial_slots=args.artificial_slots,
            visible_gpus=args.visible_gpus, work_dir=args.work_dir,
            heartbeat_interval=args.heartbeat_interval, advertise_addr=args.advertise_addr,
        )
    except ValidationError as exc:
        p.error("; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()))
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    Agent(config).run(stop)
    return 0


if __name__ == "__main__":
    sys.exit(main())
