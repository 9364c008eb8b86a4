"""The agent's Prometheus metrics (issue 34 scope 1; ``prometheus_port`` of the agent
config, ``--prometheus-port``).

Served by ``prometheus_client``'s own HTTP server in a daemon thread, from a registry of
the agent's own: its process (CPU, memory, file descriptors), and, read from the agent
at scrape time, ``det_agent_slots{slot_type}``, ``det_agent_slots_used{slot_type}`` and
``det_agent_tasks_running``; the machine's CPU, memory, disk, network and GPUs
(:class:`~dauntless.agent._sysmetrics.SystemCollector`). Every series carries the label
``agent_id``.

The page holds counts only (no task names, users or secrets), so it needs no
credential; it listens on 127.0.0.1 unless ``prometheus_host`` says otherwise.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.process_collector import ProcessCollector

from ._sysmetrics import SystemCollector

log = logging.getLogger("dauntless.agent")


@dataclass(frozen=True)
class AgentUsage:
    """What the agent holds at one instant.

    Attributes:
        slots: slot type -> slots the agent offers.
        used: slot type -> slots held by the tasks it runs.
        tasks: tasks it runs (preparing or started).
    """

    slots: dict[str, int]
    used: dict[str, int]
    tasks: int


class _AgentCollector:
    def __init__(self, agent_id: str, usage: Callable[[], AgentUsage]) -> None:
        self.agent_id = agent_id
        self.usage = usage

    def collect(self) -> Iterator[Metric]:
        u = self.usage()
        slots = GaugeMetricFamily(
            "det_agent_slots", "Slots this agent offers", labels=["agent_id", "slot_type"]
        )
        used = GaugeMetricFamily(
            "det_agent_slots_used",
            "Slots of this agent held by its tasks",
            labels=["agent_id", "slot_type"],
        )
        for typ in sorted(u.slots):
            slots.add_metric([self.agent_id, typ], u.slots[typ])
            used.add_metric([self.agent_id, typ], u.used.get(typ, 0))
        tasks = GaugeMetricFamily(
            "det_agent_tasks_running", "Tasks this agent runs", labels=["agent_id"]
        )
        tasks.add_metric([self.agent_id], u.tasks)
        yield from (slots, used, tasks)


def serve_metrics(
    agent_id: str, usage: Callable[[], AgentUsage], host: str, port: int
) -> tuple[int, Callable[[], None]]:
    """Serve the agent's metrics over HTTP in a daemon thread.

    Args:
        agent_id: the agent's id (the ``agent_id`` label).
        usage: called at every scrape; must be cheap and thread-safe.
        host: the listen address.
        port: the listen port; 0 picks a free one.

    Returns:
        ``(the bound port, a function that stops the server)``.

    Raises:
        OSError: the address cannot be bound.
    """
    reg = CollectorRegistry(auto_describe=False)
    ProcessCollector(registry=reg)
    reg.register(_AgentCollector(agent_id, usage))  # type: ignore[arg-type]
    system = SystemCollector(agent_id)
    reg.register(system)  # type: ignore[arg-type]
    server, thread = start_http_server(port, addr=host, registry=reg)
    bound = int(server.server_address[1])
    log.info("Prometheus metrics on http://%s:%d/metrics", host, bound)

    def stop() -> None:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
        system.close()

    return bound, stop
