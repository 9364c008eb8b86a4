"""A simulated day of bursty demand driven through the pure provisioning decision.

Jobs arrive in bursts (a quiet night, a busy working day with bursts of hyperparameter
searches); each needs 1, 2 or 4 slots for an exponentially distributed time. A pool of
instances with ``--slots`` slots each boots in ``--boot`` seconds. Every ``--tick``
seconds the simulator places queued jobs first-come-first-served on free slots (a job
larger than one instance takes whole empty instances, as the scheduler's gang placement
does) and then asks :func:`dauntless.scheduler.provision` what to launch and terminate.

Printed per policy: instance-hours used, the minimum needed (the integral over the day
of ``ceil(busy slots / slots per instance)``: a perfect oracle that packs instantly and
boots in no time), their ratio, and the queueing delay of jobs (mean, p95, max). The
baseline measured in the same run is a static pool of ``max_instances`` always on.

    python benchmarks/provisioner_sim.py [--seed 1] [--max-instances 16]
"""

from __future__ import annotations

import argparse
import math
import random
import resource
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from dauntless.scheduler import InstanceInfo, ProvisionerSpec, provision  # noqa: E402

DAY = 24 * 3600.0


@dataclass
class Job:
    id: int
    arrive: float
    slots: int
    duration: float
    start: float | None = None


@dataclass
class Inst:
    id: str
    launched_at: float
    ready_at: float
    free: int
    busy_jobs: set[int] = field(default_factory=set)
    idle_since: float | None = None


def make_jobs(rng: random.Random) -> list[Job]:
    """Bursty arrivals: a low night rate, a day rate, and bursts of 6-20 jobs at once."""
    jobs: list[Job] = []
    t = 0.0
    while t < DAY:
        hour = t / 3600.0
        rate = 2 / 3600.0 if hour < 8 or hour > 20 else 12 / 3600.0  # jobs per second
        t += rng.expovariate(rate)
        if t >= DAY:
            break
        burst = rng.randint(10, 40) if rng.random() < 0.1 else 1
        for _ in range(burst):
            jobs.append(
                Job(
                    id=len(jobs),
                    arrive=t,
                    slots=rng.choice([1, 1, 1, 2, 2, 4]),
                    duration=rng.expovariate(1 / 1800.0) + 120.0,
                )
            )
    return jobs


def simulate(jobs: list[Job], spec: ProvisionerSpec, boot: float, tick: float, static: bool):
    """Run the day; returns (instance-seconds used, minimum instance-seconds, delays)."""
    jobs = [Job(j.id, j.arrive, j.slots, j.duration) for j in jobs]
    per = spec.slots_per_instance
    insts: dict[str, Inst] = {}
    if static:
        for k in range(spec.max_instances):
            insts[f"s{k}"] = Inst(f"s{k}", 0.0, 0.0, per, idle_since=0.0)
    queue: list[Job] = []
    running: dict[int, tuple[Job, list[str]]] = {}
    nxt = 0
    used = minimum = 0.0
    serial = 0
    t = 0.0
    while t < DAY or queue or running:
        while nxt < len(jobs) and jobs[nxt].arrive <= t:
            queue.append(jobs[nxt])
            nxt += 1
        for jid, (job, where) in list(running.items()):
            if job.start + job.duration <= t:
                del running[jid]
                for iid in where:
                    inst = insts.get(iid)
                    if inst is None:
                        continue
                    inst.busy_jobs.discard(jid)
                    inst.free = per if job.slots > per else inst.free + job.slots
                    if not inst.busy_jobs:
                        inst.idle_since = t
        ready = [i for i in insts.values() if i.ready_at <= t]
        for job in list(queue):  # FCFS with backfill
            if job.slots > per:
                need = math.ceil(job.slots / per)
                empty = [i for i in ready if i.free == per][:need]
                if len(empty) < need:
                    continue
                targets = empty
                for i in targets:
                    i.free = 0
            else:
                fit = next((i for i in ready if i.free >= job.slots), None)
                if fit is None:
                    continue
                fit.free -= job.slots
                targets = [fit]
            for i in targets:
                i.busy_jobs.add(job.id)
                i.idle_since = None
            job.start = t
            running[job.id] = (job, [i.id for i in targets])
            queue.remove(job)
        if not static:
            infos = [
                InstanceInfo(
                    i.id,
                    "RUNNING" if i.ready_at <= t else "STARTING",
                    i.launched_at,
                    free_slots=i.free if i.ready_at <= t else 0,
                    idle_since=i.idle_since if i.ready_at <= t else None,
                )
                for i in insts.values()
            ]
            decision = provision(spec, infos, [j.slots for j in queue], t)
            for iid in decision.terminate:
                del insts[iid]
            for _ in range(decision.launch):
                serial += 1
                iid = f"i{serial}"
                insts[iid] = Inst(iid, t, t + boot, per, idle_since=t + boot)
        busy = sum(j.slots for j, _ in running.values())
        used += len(insts) * tick
        minimum += math.ceil(busy / per) * tick
        t += tick
        if t > 3 * DAY:
            raise RuntimeError("the simulation did not drain its queue in 3 days")
    delays = sorted(j.start - j.arrive for j in jobs)
    return used, minimum, delays


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--slots", type=int, default=4, help="slots per instance")
    p.add_argument("--max-instances", type=int, default=16)
    p.add_argument("--boot", type=float, default=180.0, help="seconds an instance boots")
    p.add_argument("--tick", type=float, default=30.0, help="seconds between decisions")
    args = p.parse_args()
    jobs = make_jobs(random.Random(args.seed))
    slot_hours = sum(j.slots * j.duration for j in jobs) / 3600
    print(
        f"{len(jobs)} jobs, {slot_hours:.0f} slot-hours of work; instances of {args.slots} "
        f"slots boot in {args.boot:.0f} s; max_instances {args.max_instances}"
    )
    print(
        f"{'policy':<34}{'inst-h used':>12}{'inst-h min':>11}{'ratio':>7}"
        f"{'delay mean':>12}{'p95':>8}{'max':>8}{'cpu s':>7}{'wall s':>7}"
    )
    policies = [("static: max_instances always on", None, True)]
    for idle in (60.0, 300.0, 1200.0):
        policies.append((f"provisioner, max_idle {idle:.0f} s", idle, False))
    for name, idle, static in policies:
        spec = ProvisionerSpec(
            slots_per_instance=args.slots,
            min_instances=0,
            max_instances=args.max_instances,
            max_idle_agent_period=idle or 0.0,
            max_agent_starting_period=4 * args.boot,
        )
        cpu0 = resource.getrusage(resource.RUSAGE_SELF).ru_utime
        wall0 = time.perf_counter()
        used, minimum, delays = simulate(jobs, spec, args.boot, args.tick, static)
        wall = time.perf_counter() - wall0
        cpu = resource.getrusage(resource.RUSAGE_SELF).ru_utime - cpu0
        mean = sum(delays) / len(delays)
        p95 = delays[int(0.95 * (len(delays) - 1))]
        print(
            f"{name:<34}{used / 3600:>12.1f}{minimum / 3600:>11.1f}{used / minimum:>7.2f}"
            f"{mean:>11.0f}s{p95:>7.0f}s{delays[-1]:>7.0f}s{cpu:>7.2f}{wall:>7.2f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
