"""The lower level's latest plans, carried from one state of an instance to the next."""

from __future__ import annotations

from formulation.plan import Plan, Stage
from rl import warm_starts
from rl.masks import Budgets
from rl.warm_starts import LatestPlans


def _plan(dp: int, tp: int, micro_batch: int = 1) -> Plan:
    return Plan(dp=dp, micro_batch=micro_batch,
                stages=(Stage(domain=0, layers=2, tp=tp, recompute="none"),))


def test_starts_are_the_fastest_plans_within_the_gpu_budget_per_pair():
    latest = LatestPlans()
    slow, fast, big = _plan(2, 1), _plan(2, 2), _plan(2, 8)  # 2, 4 and 16 GPUs
    latest.add("a", slow, 3.0)
    latest.add("a", fast, 2.0)
    latest.add("a", big, 1.0)
    latest.add("a", _plan(4, 2, micro_batch=2), 5.0)  # 8 GPUs
    assert latest.pairs("a") == {(2, 1), (4, 2)}
    assert latest.starts("a", Budgets())[(2, 1)] == [big, fast, slow]
    assert latest.starts("a", Budgets(gpus=4)) == {(2, 1): [fast, slow]}  # (4, 2) needs 8
    assert latest.starts("a", Budgets(gpus=1)) == {}
    assert latest.starts("b", Budgets()) == {}  # another instance has none


def test_a_plan_is_kept_once_the_latest_and_old_ones_and_instances_are_dropped(monkeypatch):
    monkeypatch.setattr(warm_starts, "KEPT", 2)
    monkeypatch.setattr(warm_starts, "OFFERED", 5)
    monkeypatch.setattr(warm_starts, "INSTANCES", 2)
    latest = LatestPlans()
    first, second, third = _plan(2, 1), _plan(2, 2), _plan(2, 4)
    for plan in (first, second, first):  # added again: the latest, with its new time
        latest.add("a", plan, 1.0)
    latest.add("a", third, 1.0)  # the oldest, second, is dropped
    assert latest.starts("a", Budgets())[(2, 1)] == [third, first]  # equals: latest first
    latest.add("b", first, 1.0)
    latest.add("a", first, 1.0)  # "a" decided last: "b" is the least recently decided
    latest.add("c", first, 1.0)
    assert latest.pairs("b") == set() and latest.pairs("a") == latest.pairs("c") == {(2, 1)}
    latest.clear()
    assert latest.pairs("a") == set()
