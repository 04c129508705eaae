"""The lower level's latest plans, carried from one state of an instance to the next."""

from __future__ import annotations

import numpy as np

from formulation.plan import Plan, Stage
from rl import warm_starts
from rl.masks import Budgets
from rl.warm_starts import INSTANCES, LatestPlans, StatesDecided

FREE = np.array([64, 64])  # free GPUs of the two domains of the state decided


def _plan(dp: int, tp: int, micro_batch: int = 1, domain: int = 0) -> Plan:
    return Plan(dp=dp, micro_batch=micro_batch,
                stages=(Stage(domain=domain, layers=2, tp=tp, recompute="none"),))


def test_starts_are_the_fastest_plans_within_the_gpu_budget_per_pair():
    latest = LatestPlans()
    slow, fast, big = _plan(2, 1), _plan(2, 2), _plan(2, 8)  # 2, 4 and 16 GPUs
    latest.add("a", slow, 3.0)
    latest.add("a", fast, 2.0)
    latest.add("a", big, 1.0)
    latest.add("a", _plan(4, 2, micro_batch=2), 5.0)  # 8 GPUs
    assert latest.pairs("a") == {(2, 1), (4, 2)}
    assert latest.starts("a", Budgets(), FREE)[(2, 1)] == [big, fast, slow]
    assert latest.starts("a", Budgets(gpus=4), FREE) == {(2, 1): [fast, slow]}  # (4, 2) needs 8
    assert latest.starts("a", Budgets(gpus=1), FREE) == {}
    assert latest.starts("b", Budgets(), FREE) == {}  # another instance has none
    # the load took domain 0's GPUs but for 4: the plans of more there are not offered
    elsewhere = _plan(2, 4, domain=1)
    latest.add("a", elsewhere, 9.0)
    assert latest.starts("a", Budgets(), np.array([4, 64]))[(2, 1)] == [fast, slow, elsewhere]


def test_a_plan_is_kept_once_the_latest_and_old_ones_and_instances_are_dropped(monkeypatch):
    monkeypatch.setattr(warm_starts, "KEPT", 2)
    monkeypatch.setattr(warm_starts, "OFFERED", 5)
    monkeypatch.setattr(warm_starts, "INSTANCES", 2)
    latest = LatestPlans()
    first, second, third = _plan(2, 1), _plan(2, 2), _plan(2, 4)
    for plan in (first, second, first):  # added again: the latest, with its new time
        latest.add("a", plan, 1.0)
    latest.add("a", third, 1.0)  # the oldest, second, is dropped
    assert latest.starts("a", Budgets(), FREE)[(2, 1)] == [third, first]  # equals: latest first
    latest.add("b", first, 1.0)
    latest.add("a", first, 1.0)  # "a" decided last: "b" is the least recently decided
    latest.add("c", first, 1.0)
    assert latest.pairs("b") == set() and latest.pairs("a") == latest.pairs("c") == {(2, 1)}
    latest.clear()
    assert latest.pairs("a") == set()


def test_an_instance_is_all_of_it_but_its_load_and_its_links_state():
    """The key kept plans are filed under: the states of one instance share it, an
    instance of the same name with other GPUs or another model does not (its plans'
    stages may not fit there)."""
    import dataclasses

    from formulation.instance import Instance
    from instances.suites import SUITES_DIR
    from rl.env import InstanceStatics

    path = sorted((SUITES_DIR / "quick").glob("*.json"))[0]
    instance = Instance.load(path if path.name != "manifest.json" else
                             sorted((SUITES_DIR / "quick").glob("*-s*.json"))[0])
    key = InstanceStatics.key(instance)
    state = instance.with_link_state(bandwidth_gbps=instance.links.bandwidth_gbps * 0.5,
                                     free_gpus=instance.free_gpus // 2)
    assert InstanceStatics.key(state) == key
    smaller = dataclasses.replace(instance, gpu=dataclasses.replace(
        instance.gpu, hbm_gb=instance.gpu.hbm_gb / 3))
    deeper = dataclasses.replace(instance, model=dataclasses.replace(
        instance.model, layers=instance.model.layers + 1))
    assert InstanceStatics.key(smaller) != key and InstanceStatics.key(deeper) != key


def test_the_states_decided_keep_the_latest_instances_and_states():
    """Each instance keeps its ``STATES`` latest states, the ``INSTANCES`` latest
    instances are kept; deciding a state again makes it and its instance the latest."""
    decided = StatesDecided()
    assert not decided.knows("a")
    decided.add("a", 1)
    assert decided.knows("a") and decided.knows("a", 1) and not decided.knows("a", 2)
    for state in range(2, StatesDecided.STATES + 1):
        decided.add("a", state)
    decided.add("a", 1)  # again: the latest, so 2 is the oldest now
    decided.add("a", StatesDecided.STATES + 1)
    assert decided.knows("a", 1) and not decided.knows("a", 2)
    for instance in range(INSTANCES - 1):
        decided.add(instance, 0)
    decided.add("a", 1)  # "a" the latest again: instance 0 is the oldest
    decided.add("b", 0)
    assert decided.knows("a") and not decided.knows(0) and decided.knows(1)
    decided.clear()
    assert not decided.knows("a")
