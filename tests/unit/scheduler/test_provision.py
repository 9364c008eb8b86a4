"""The pure provisioning decision (dauntless.scheduler.provision)."""

from __future__ import annotations

import random

import pytest

from dauntless.scheduler import InstanceInfo, ProvisionerSpec, provision

SPEC = ProvisionerSpec(
    slots_per_instance=2,
    min_instances=0,
    max_instances=4,
    max_idle_agent_period=60.0,
    max_agent_starting_period=120.0,
)


def running(id_, free, idle_since=None, launched_at=0.0):
    return InstanceInfo(id_, "RUNNING", launched_at, free_slots=free, idle_since=idle_since)


def starting(id_, launched_at=0.0):
    return InstanceInfo(id_, "STARTING", launched_at)


def test_no_demand_no_instances_does_nothing():
    d = provision(SPEC, [], [], now=100.0)
    assert d.launch == 0 and d.terminate == {} and d.unplaceable == ()


def test_packs_pending_requests_into_new_instances():
    # 1+1 share one 2-slot instance; 2 needs its own.
    assert provision(SPEC, [], [1, 1, 2], now=0.0).launch == 2
    assert provision(SPEC, [], [1, 1, 1], now=0.0).launch == 2


def test_starting_instances_count_as_coming_capacity():
    d = provision(SPEC, [starting("a", 0.0)], [1, 1], now=10.0)
    assert d.launch == 0
    d = provision(SPEC, [starting("a", 0.0)], [2, 2], now=10.0)
    assert d.launch == 1


def test_free_slots_of_running_instances_are_used_first():
    d = provision(SPEC, [running("a", free=1)], [1], now=10.0)
    assert d.launch == 0


def test_max_instances_caps_launches_and_reports_unplaceable():
    d = provision(SPEC, [running("a", 0)], [2, 2, 2, 2, 2], now=0.0)
    assert d.launch == 3
    assert d.unplaceable == (2, 2)


def test_gang_request_larger_than_an_instance_takes_whole_instances():
    d = provision(SPEC, [], [4], now=0.0)
    assert d.launch == 2
    # one empty running instance is reused, one more is launched
    d = provision(SPEC, [running("a", 2, idle_since=0.0)], [4], now=1.0)
    assert d.launch == 1
    # more than max_instances can ever hold: nothing launched for it
    d = provision(SPEC, [], [10], now=0.0)
    assert d.launch == 0 and d.unplaceable == (10,)


def test_zero_slot_requests_need_only_some_instance():
    assert provision(SPEC, [], [0, 0], now=0.0).launch == 1
    assert provision(SPEC, [running("a", 0)], [0], now=0.0).launch == 0


def test_min_instances_are_kept():
    spec = ProvisionerSpec(slots_per_instance=1, min_instances=2, max_instances=3)
    assert provision(spec, [], [], now=0.0).launch == 2
    idle = [running("a", 1, idle_since=0.0), running("b", 1, idle_since=0.0)]
    d = provision(spec, idle, [], now=10_000.0)
    assert d.terminate == {} and d.launch == 0


def test_idle_instances_are_stopped_after_max_idle_agent_period():
    inst = [running("a", 2, idle_since=100.0), running("b", 2, idle_since=130.0)]
    assert provision(SPEC, inst, [], now=159.0).terminate == {}
    assert provision(SPEC, inst, [], now=160.0).terminate == {"a": "idle"}
    assert provision(SPEC, inst, [], now=200.0).terminate == {"a": "idle", "b": "idle"}


def test_idle_instance_wanted_by_pending_demand_is_kept():
    inst = [running("a", 2, idle_since=0.0)]
    d = provision(SPEC, inst, [2], now=1000.0)
    assert d.terminate == {} and d.launch == 0


def test_busy_instances_are_never_terminated():
    inst = [running("a", 0, idle_since=None, launched_at=0.0)]
    assert provision(SPEC, inst, [], now=1e9).terminate == {}


def test_instance_that_never_registers_is_replaced():
    inst = [starting("a", launched_at=0.0)]
    assert provision(SPEC, inst, [1], now=120.0).launch == 0
    d = provision(SPEC, inst, [1], now=121.0)
    assert d.terminate == {"a": "never registered"}
    assert d.launch == 1


def test_bad_inputs_are_refused_with_the_field_named():
    with pytest.raises(ValueError, match="max_instances"):
        ProvisionerSpec(slots_per_instance=1, min_instances=3, max_instances=2)
    with pytest.raises(ValueError, match="slots_per_instance"):
        ProvisionerSpec(slots_per_instance=-1)
    with pytest.raises(ValueError, match="max_idle_agent_period"):
        ProvisionerSpec(slots_per_instance=1, max_idle_agent_period=-5)
    with pytest.raises(ValueError, match="unique"):
        provision(SPEC, [starting("a"), starting("a")], [], now=0.0)
    with pytest.raises(ValueError, match="pending slot counts"):
        provision(SPEC, [], [-1], now=0.0)


def test_random_inputs_respect_the_limits():
    rng = random.Random(7)
    for _ in range(2000):
        per = rng.randint(1, 8)
        lo = rng.randint(0, 3)
        spec = ProvisionerSpec(
            slots_per_instance=per,
            min_instances=lo,
            max_instances=lo + rng.randint(0, 5),
            max_idle_agent_period=rng.choice([0.0, 30.0, 300.0]),
            max_agent_starting_period=rng.choice([10.0, 100.0]),
        )
        now = 1000.0
        insts = []
        for k in range(rng.randint(0, spec.max_instances)):
            if rng.random() < 0.3:
                insts.append(starting(f"i{k}", launched_at=now - rng.uniform(0, 200)))
            else:
                free = rng.randint(0, per)
                idle = now - rng.uniform(0, 600) if free == per and rng.random() < 0.7 else None
                insts.append(running(f"i{k}", free, idle_since=idle))
        pending = [rng.randint(0, 2 * per) for _ in range(rng.randint(0, 6))]
        d = provision(spec, insts, pending, now)
        remaining = len(insts) - len(d.terminate)
        assert d.launch >= 0
        assert remaining + d.launch <= max(spec.max_instances, len(insts))
        if len(insts) <= spec.max_instances:
            assert remaining + d.launch >= min(spec.min_instances, spec.max_instances)
        for iid, why in d.terminate.items():
            inst = next(i for i in insts if i.id == iid)
            if why == "idle":
                assert inst.state == "RUNNING" and inst.idle_since is not None
                assert now - inst.idle_since >= spec.max_idle_agent_period
            else:
                assert inst.state == "STARTING"
                assert now - inst.launched_at > spec.max_agent_starting_period
