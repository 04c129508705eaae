"""Hi-PPO decisions: API and CLI, explanation, fronts, checkpoints."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from clitools import assert_usage_error, kernels_compiled_by, run_module

from formulation.instance import Instance
from formulation.plan import Plan, Stage
from formulation.result import evaluate
from formulation.schema import InputError
from instances.suites import PREFERENCES, SUITES_DIR
from rl.decide import parse_weights
from rl.decision_settings import (
    HIERARCHICAL,
    POLICY_ONLY,
    REAL_TIME,
    Deadlines,
    DecisionSettings,
    StateKind,
)
from rl.env import InstanceCache, InstanceStatics, NoPlanWithinBudget
from rl.lower import PERIOD_PRECISION, forget, place
from rl.masks import NO_BUDGETS, Budgets
from rl.scheduler import DEFAULT_CHECKPOINT, Scheduler
from rl.sweep import sweep_front
from rl.train import HiPPOConfig, train
from solvers.chain import WORK_PER_SECOND
from solvers.tables import all_pair_tables

QUICK = SUITES_DIR / "quick" / "cn-hubs-k6-llama2-7b-s130.json"


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    config = HiPPOConfig(num_steps=128, update_epochs=2, minibatch_size=64, total_steps=256,
                         eval_every=100, eval_tasks=2, checkpoint_every=100,
                         tasks={"instance": str(QUICK)})
    path = tmp_path_factory.mktemp("ckpt") / "tiny.pt"
    train(config, path, progress=False)
    return path


@pytest.fixture(scope="module")
def instance() -> Instance:
    return Instance.load(QUICK)


def test_decision_is_feasible_explained_and_decomposed(checkpoint: Path, instance: Instance):
    decision = Scheduler(checkpoint).decide(instance, (0.6, 0.2, 0.2))
    assert decision.evaluation.feasible
    assert decision.evaluation.objectives == evaluate(instance, decision.plan).objectives
    reward = decision.reward
    assert reward["R"] == pytest.approx(0.6 * reward["R_eff"] + 0.2 * reward["R_util"]
                                        - 0.2 * reward["R_cost"])
    assert decision.explanation[0].startswith("chain (front to back)")
    assert any("1F1B period" in line for line in decision.explanation)
    wan = [s for s, z in zip(decision.plan.stages, decision.plan.stages[1:], strict=False)
           if s.domain != z.domain]
    assert sum("WAN cut" in line for line in decision.explanation) == len(wan)
    assert decision.latency_s > 0


def test_save_and_load_give_identical_decisions(checkpoint: Path, instance: Instance,
                                                tmp_path: Path):
    import torch

    payload = torch.load(checkpoint, weights_only=True)
    copy = tmp_path / "copy.pt"
    torch.save(payload, copy)
    # with the lower level, its work counted rather than timed: a busy machine that ends
    # one search early must not make the two differ
    settings = DecisionSettings(samples=2, seed=3, lower_time=None, lower_work=WORK_PER_SECOND)
    for weights in PREFERENCES:
        a = Scheduler(checkpoint).decide(instance, weights, settings=settings)
        b = Scheduler(copy).decide(instance, weights, settings=settings)
        assert a.plan == b.plan


def test_polish_only_improves_and_counts_in_the_latency(checkpoint: Path,
                                                         instance: Instance):
    scheduler = Scheduler(checkpoint)
    for weights in [(1, 0, 0), (0.5, 0, 0.5), (0.2, 0.2, 0.6)]:
        plain = scheduler.decide(instance, weights, settings=DecisionSettings(samples=1,
                                                                             seed=2, pairs=0))
        polished = scheduler.decide(instance, weights, settings=DecisionSettings(
            samples=1, seed=2, polish=10, pairs=0))
        assert polished.reward["R"] >= plain.reward["R"] - 1e-12
        assert polished.evaluation.feasible
    settings = DecisionSettings(samples=2, seed=0, polish=5, pairs=0)
    plans = scheduler.plans(instance, (1, 0, 0), settings=settings)
    assert len(plans) == 6  # three episodes and their three local optima
    assert [p for p, _ in plans[:3]] == [p for p, _ in scheduler.plans(
        instance, (1, 0, 0), settings=dataclasses.replace(settings, polish=0))]


def test_lower_level_adds_the_placed_plans_of_the_best_ranked_pairs(checkpoint: Path,
                                                                    instance: Instance):
    scheduler = Scheduler(checkpoint)
    alone = scheduler.plans(instance, (1, 0, 0), settings=POLICY_ONLY)
    assert len(alone) == 1
    for pairs in (1, 3):
        plans = scheduler.plans(instance, (1, 0, 0), settings=DecisionSettings(
            pairs=pairs, exhaust=False, policy_plan=True))
        assert plans[0] == alone[0] and 1 < len(plans) <= 1 + pairs
        assert len({(p.dp, p.micro_batch) for p, _ in plans[1:]}) == len(plans) - 1
        assert all(evaluate(instance, p).feasible for p, _ in plans)
        # without the policy's own plan: the lower level's plans alone
        lower = scheduler.plans(instance, (1, 0, 0),
                                settings=DecisionSettings(pairs=pairs, exhaust=False))
        assert [p for p, _ in lower] == [p for p, _ in plans[1:]]
    # where the lower level finds nothing in time, the policy's own plan
    scheduler.forget()
    assert scheduler.plans(instance, (1, 0, 0),
                           settings=DecisionSettings(pairs=1, lower_time=1e-9)) == alone
    # exhaust: the pairs beyond the first are placed unless proven slower, so the best
    # placed plan is within the period precision of the best placement of every pair
    scheduler.forget()
    plans = scheduler.plans(instance, (1, 0, 0),
                            settings=DecisionSettings(pairs=1, lower_time=None))
    best = min(evaluate(instance, p).objectives[0] for p, _ in plans)
    every = min(place(t, Budgets()).step_time_s for t in all_pair_tables(instance))
    assert best <= every * (1 + PERIOD_PRECISION)
    with pytest.raises(ValueError, match="pairs must be an integer >= 0"):
        DecisionSettings(pairs=-1)


def test_the_same_request_is_answered_the_same_even_out_of_time(checkpoint: Path,
                                                                instance: Instance):
    scheduler = Scheduler(checkpoint)
    hurried = DecisionSettings(lower_time=1e-9)  # the lower level runs out of time
    first = scheduler.plans(instance, (1, 0, 0), Budgets(gpus=40), hurried)
    again = scheduler.plans(instance, (2, 0, 0), Budgets(gpus=40), hurried)  # same direction
    assert again == first and len(scheduler.answers) == 1
    slow = instance.with_link_state(bandwidth_gbps=instance.links.bandwidth_gbps * 0.5)
    scheduler.plans(slow, (1, 0, 0), Budgets(gpus=40), hurried)  # another state: asked
    assert len(scheduler.answers) == 2
    scheduler.forget()
    assert not scheduler.answers


def test_a_remembered_decision_explains_its_own_request(checkpoint: Path,
                                                        instance: Instance):
    scheduler = Scheduler(checkpoint)
    budget = Budgets(gpus=int(scheduler.decide(instance, (1, 0, 0)).evaluation.objectives[1]))
    asked = scheduler.decide(instance, (1, 0, 0), budgets=budget)
    other = Instance.load(SUITES_DIR / "quick" / "random-k8-llama2-7b-s157.json")
    scheduler.decide(other, (1, 0, 0), budgets=Budgets(gpus=8))  # the env now holds this
    remembered = scheduler.decide(instance, (1, 0, 0), budgets=budget)
    assert remembered.plan == asked.plan
    assert remembered.explanation == asked.explanation
    assert remembered.reward == asked.reward


def test_a_checkpoint_of_nan_weights_is_refused(checkpoint: Path, tmp_path: Path):
    import torch

    payload = torch.load(checkpoint, weights_only=True)
    name = next(iter(payload["policy"]))
    payload["policy"][name] = torch.full_like(payload["policy"][name], float("nan"))
    broken = tmp_path / "nan.pt"
    torch.save(payload, broken)
    with pytest.raises(InputError, match=f"weights {name} are not finite"):
        Scheduler(broken)


def test_a_preference_is_its_direction(checkpoint: Path, instance: Instance):
    scheduler = Scheduler(checkpoint)
    settings = DecisionSettings(samples=1, seed=4)
    a = scheduler.decide(instance, (0.5, 0.3, 0.2), settings=settings)
    b = scheduler.decide(instance, (100, 60, 40), settings=settings)
    c = scheduler.decide(instance, (1e308, 6e307, 4e307), settings=settings)
    assert a.plan == b.plan == c.plan
    assert np.allclose(b.weights, (0.5, 0.3, 0.2)) and np.allclose(c.weights, (0.5, 0.3, 0.2))


def test_a_link_change_is_placed_by_the_new_links(checkpoint: Path, instance: Instance):
    # the masks' rules outlive a bandwidth change; the lower level's delays must not
    slow = instance.with_link_state(bandwidth_gbps=instance.links.bandwidth_gbps * 0.05)
    seen = Scheduler(checkpoint)
    seen.plans(instance, (1, 0, 0))
    after = seen.plans(slow, (1, 0, 0), settings=DecisionSettings(exhaust=False))
    index = seen.env.cache.rules.pair_of(after[0][0])
    tables = seen.env.cache.tables_at(slow, index)
    fresh = all_pair_tables(slow)
    assert np.array_equal(tables.delay, next(t.delay for t in fresh if (t.dp, t.micro_batch)
                                             == (tables.dp, tables.micro_batch)))
    forget()
    cold = Scheduler(checkpoint)
    cold.forget()
    alone = cold.plans(slow, (1, 0, 0), settings=DecisionSettings(exhaust=False))
    # the same pair, each placed within the period precision of its least period (the
    # warm one started from the plan of the state before, the cold one from an open run)
    assert [(p.dp, p.micro_batch) for p, _ in after] == [(p.dp, p.micro_batch)
                                                         for p, _ in alone]
    for (warm, _), (fresh, _) in zip(after, alone, strict=True):
        ratio = evaluate(slow, warm).objectives[0] / evaluate(slow, fresh).objectives[0]
        assert 1 / (1 + PERIOD_PRECISION) <= ratio <= 1 + PERIOD_PRECISION


def test_a_new_state_starts_from_the_plans_placed_on_an_earlier_one(checkpoint: Path,
                                                                     instance: Instance,
                                                                     monkeypatch):
    """After a change of the links or the load, each pair the lower level placed on an
    earlier state of the instance starts from its latest plans there, re-timed by the new
    state: no first plan is looked for (:meth:`rl.lower._Runs.opening`, then an open run).
    A kept plan that is no plan of the new state (the load took its GPUs) or not within
    the request's budgets is not returned. ``forget`` drops them."""
    import rl.lower

    scheduler = Scheduler(checkpoint)
    scheduler.forget()
    settings = DecisionSettings(exhaust=False)
    first = scheduler.plans(instance, (1, 0, 0), settings=settings)
    placed = {(p.dp, p.micro_batch) for p, _ in first}
    assert placed and scheduler.latest.pairs(InstanceStatics.key(instance)) == placed
    opened = []
    opening = rl.lower._Runs.opening
    monkeypatch.setattr(rl.lower._Runs, "opening", lambda self: (
        opened.append((self.chain.tables.dp, self.chain.tables.micro_batch)),
        opening(self))[1])
    used = {stage.domain for plan, _ in first for stage in plan.stages}
    load = np.array([f if k in used else f // 2 for k, f in enumerate(instance.free_gpus)])
    for state in (instance.with_link_state(bandwidth_gbps=instance.links.bandwidth_gbps * 0.7),
                  instance.with_link_state(free_gpus=load)):  # the earlier plans still fit
        opened.clear()
        after = scheduler.plans(state, (1, 0, 0), settings=settings)
        assert all(evaluate(state, p).feasible for p, _ in after)
        assert not placed & set(opened)
    # the load takes every GPU of a domain the plans use; a cost budget below theirs
    taken = instance.free_gpus.copy()
    taken[first[0][0].stages[0].domain] = 0
    cost = 0.5 * min(evaluate(instance, p).objectives[2] for p, _ in first)
    for state, budgets in ((instance.with_link_state(free_gpus=taken), Budgets()),
                           (instance, Budgets(cost=cost))):
        try:
            after = scheduler.plans(state, (1, 0, 0), budgets, settings)
        except NoPlanWithinBudget:
            continue
        for plan, _ in after:
            result = evaluate(state, plan)
            assert result.feasible and plan != first[0][0]
            assert budgets.cost is None or result.objectives[2] <= cost * (1 + 1e-9)
    warm = scheduler.front(instance, settings=settings)  # its provenance says so
    assert warm.provenance["kept_plans_of_pairs"] and placed <= {
        tuple(pair) for pair in warm.provenance["kept_plans_of_pairs"]}
    scheduler.forget()
    assert not scheduler.latest.pairs(InstanceStatics.key(instance))
    assert scheduler.front(instance, settings=settings).provenance["kept_plans_of_pairs"] == []
    scheduler.forget()
    opened.clear()
    scheduler.plans(instance.with_link_state(bandwidth_gbps=instance.links.bandwidth_gbps
                                             * 0.6), (1, 0, 0), settings=settings)
    assert opened  # cold: a first plan looked for


def test_front_is_a_budget_sweep(checkpoint: Path, instance: Instance):
    front = Scheduler(checkpoint).front(instance, settings=DecisionSettings(samples=1))
    assert front.status == "heuristic" and front.points
    assert front.provenance["decisions"] >= 2
    assert all(evaluate(instance, p.plan).feasible for p in front.points)
    gpus = [p.objectives[1] for p in front.points]
    assert len(set(gpus)) >= 2  # the GPU budget stepped below the first plan's


def test_sweep_steps_the_gpu_budget_down_and_the_cost_budget_at_each_level():
    """With a stand-in for the agent that takes every GPU and cost it is given: the GPU
    budget goes one below each plan's GPUs until none fits, and at each level the cost
    budget steps below the plan's cost, the last step asking for no traffic."""
    asked = []

    def decide(weights, budgets: Budgets):
        asked.append(budgets)
        gpus = 8 if budgets.gpus is None else budgets.gpus
        if gpus < 6:
            raise NoPlanWithinBudget("no plan within budget")
        cost = 1.0 if budgets.cost is None else budgets.cost
        return [(Plan(dp=1, micro_batch=1, stages=tuple(
            Stage(0, 1, 1, "none") for _ in range(gpus))), -cost)], cost

    costs = {}

    def run(weights, budgets):
        candidates, cost = decide(weights, budgets)
        costs[candidates[0][0]] = cost
        return candidates

    plans, decisions = sweep_front(run, costs.get, [(1, 0, 0)], cost_steps=3)
    gpu_levels = [b.gpus for b in asked if b.cost is None]
    assert gpu_levels == [None, 7, 6, 5]
    at_eight = [b.cost for b in asked if b.gpus == 8]
    assert at_eight == [pytest.approx(0.98), pytest.approx(0.98 ** 2), 0.0]
    assert decisions == len(asked) - 1 == len(plans)  # the last ask found no plan


def test_a_sweep_resumes_each_decision_once_after_the_sweep():
    """Given ``resume``, the sweep asks it once for each decision made, in the sweep's
    order, after the sweep; a resumed decision's plans join the front and count as a
    decision, one not cut short (None) does not, nor one that finds none."""
    def decide(weights, budgets: Budgets):
        gpus = 8 if budgets.gpus is None else budgets.gpus
        if gpus < 6 or budgets.cost is not None:
            raise NoPlanWithinBudget("no plan within budget")
        return [(Plan(dp=1, micro_batch=1, stages=tuple(
            Stage(0, 1, 1, "none") for _ in range(gpus))), 0.0)]

    resumed = []
    better = Plan(dp=1, micro_batch=1, stages=(Stage(0, 1, 1, "none"),))

    def resume(weights, budgets: Budgets):
        resumed.append(budgets.gpus)
        if budgets.gpus == 7:
            raise NoPlanWithinBudget("none found")
        return [(better, 1.0)] if budgets.gpus is None else None

    plans, decisions = sweep_front(decide, lambda plan: 1.0, [(1, 0, 0)], cost_steps=1,
                                   resume=resume)
    assert resumed == [None, 7, 6]  # the decisions made, once each, in order
    assert decisions == 3 + 1 and plans[-1] is better and len(plans) == 4
    again, count = sweep_front(decide, lambda plan: 1.0, [(1, 0, 0)], cost_steps=1)
    assert count == 3 and again == plans[:-1]


def test_a_decision_cut_short_resumes_from_where_it_stopped(checkpoint: Path):
    """A request whose lower level ran out of its work is remembered as cut short; resumed,
    it is decided again with a new allowance, and its best plan is no worse than the
    first's (the lower level's plans and floors on the state carry over); it resumes once,
    and a request not cut short has nothing to resume."""
    instance = Instance.load(SUITES_DIR / "quick" / "aws-10-k5-llama2-70b-s110.json")
    scheduler = Scheduler(checkpoint)
    short = DecisionSettings(lower_time=None, lower_work=20_000)

    def best(candidates) -> float:
        return min(evaluate(instance, plan).step_time_s for plan, _ in candidates)

    first = scheduler.plans(instance, (1, 0, 0), NO_BUDGETS, short)
    assert len(scheduler.cut_short) == 1
    decided = []
    plans = scheduler._plans
    scheduler._plans = lambda *args: decided.append(args) or plans(*args)
    resumed = scheduler.resume(instance, (1, 0, 0), NO_BUDGETS, short)
    assert len(decided) == 1  # decided again, not answered from the first
    assert resumed is not None and best(resumed) <= best(first)
    assert scheduler.resume(instance, (1, 0, 0), NO_BUDGETS, short) is None  # once
    assert scheduler.plans(instance, (1, 0, 0), NO_BUDGETS, short) == resumed  # answered
    assert len(decided) == 1
    del scheduler._plans
    loose = DecisionSettings(lower_time=None)
    scheduler.plans(instance, (1, 0, 0), NO_BUDGETS, loose)  # runs to its end
    assert scheduler.resume(instance, (1, 0, 0), NO_BUDGETS, loose) is None
    scheduler.forget()
    assert not scheduler.cut_short
    # the policy alone ran out of time, not a lower level: nothing to resume
    scheduler.plans(instance, (1, 0, 0), NO_BUDGETS, DecisionSettings(pairs=0,
                                                                      lower_time=1e-4))
    assert not scheduler.cut_short


def test_the_policy_builds_its_plan_after_a_cut_short_lower_level_only_with_fallback(
        checkpoint: Path):
    """Where the lower level ran out of its work with a plan found, the policy's greedy
    episode adds its plan with ``fallback`` (the default) and not without: under a
    deadline of milliseconds it would outlast the deadline."""
    instance = Instance.load(SUITES_DIR / "quick" / "aws-10-k5-llama2-70b-s110.json")
    scheduler = Scheduler(checkpoint)
    episodes = []
    built = scheduler._episodes
    scheduler._episodes = lambda *args: episodes.append(args) or built(*args)
    for fallback, expected in ((True, 1), (False, 0)):
        scheduler.forget()
        episodes.clear()
        short = DecisionSettings(lower_time=None, lower_work=20_000, fallback=fallback)
        candidates = scheduler.plans(instance, (1, 0, 0), NO_BUDGETS, short)
        assert len(scheduler.cut_short) == 1 and candidates
        assert len(episodes) == expected
    assert DecisionSettings().fallback  # on by default


def test_deadlines_are_seconds_and_name_the_field_they_reject():
    assert Deadlines(0.3, 0.2, 0.1).of(StateKind.NEW_STATE) == 0.2
    assert [Deadlines().of(kind) for kind in StateKind] == [0.09, 0.014, 0.007]
    for bad in (0, -1.0, float("nan"), True, "0.1", 1e9):
        with pytest.raises(ValueError, match="deadlines.known_state must be a number"):
            Deadlines(known_state=bad)
    assert REAL_TIME.deadlines == Deadlines() and not REAL_TIME.fallback
    assert REAL_TIME.to_dict()["deadlines"]["new_state"] == 0.014


def test_a_decision_under_deadlines_gets_the_deadline_of_what_the_scheduler_knows(
        checkpoint: Path, instance: Instance, monkeypatch: pytest.MonkeyPatch):
    """The lower level's time is the deadline of the request's kind of state, at most
    ``lower_time``: the first decision on an instance has the new instance's, a new budget
    on a state decided the known state's, a bandwidth or load change the new state's; a
    resumed decision has ``lower_time``; after :meth:`Scheduler.forget` the instance is new
    again. Without deadlines, ``lower_time``."""
    import rl.scheduler as scheduler_module

    granted = []
    of = scheduler_module.Allowance.of
    monkeypatch.setattr(scheduler_module.Allowance, "of", staticmethod(
        lambda seconds, work, start=None: granted.append(seconds) or of(seconds, work)))
    scheduler = Scheduler(checkpoint)
    granted.clear()  # the process's warm-up decision, where this scheduler made it
    settings = DecisionSettings(lower_time=0.25, deadlines=Deadlines(0.3, 0.2, 0.1))
    slower = instance.with_link_state(bandwidth_gbps=instance.links.bandwidth_gbps * 0.8)
    fewer = instance.with_link_state(free_gpus=instance.free_gpus - 1)
    expected = []
    for state, budgets, kind, seconds in (
            (instance, NO_BUDGETS, StateKind.NEW_INSTANCE, 0.25),  # lower_time is less
            (instance, Budgets(gpus=instance.free_gpus.sum() - 1), StateKind.KNOWN_STATE,
             0.1),
            (slower, NO_BUDGETS, StateKind.NEW_STATE, 0.2),
            (fewer, NO_BUDGETS, StateKind.NEW_STATE, 0.2),
            (slower, Budgets(gpus=8), StateKind.KNOWN_STATE, 0.1)):
        assert scheduler.state_kind(state) is kind
        with contextlib.suppress(NoPlanWithinBudget):
            scheduler.plans(state, (1, 0, 0), budgets, settings)
        expected.append(seconds)
    assert granted == expected
    scheduler.plans(instance, (1, 0, 0), NO_BUDGETS, settings)  # answered: no allowance
    assert len(granted) == len(expected)
    # resumed, a request has lower_time: its deadline has passed
    scheduler.cut_short.add(scheduler._request(instance, (1, 0, 0), NO_BUDGETS, settings))
    assert scheduler.resume(instance, (1, 0, 0), NO_BUDGETS, settings) is not None
    assert granted[-1] == 0.25 and len(granted) == len(expected) + 1
    scheduler.forget()
    assert scheduler.state_kind(slower) is StateKind.NEW_INSTANCE
    scheduler.plans(slower, (0, 1, 0), NO_BUDGETS, HIERARCHICAL)
    assert granted[-1] == HIERARCHICAL.lower_time


def test_a_state_is_known_after_a_decision_on_it_that_raised_and_new_without_its_caches(
        checkpoint: Path, instance: Instance):
    """A decision that finds no plan within its budget made the state's caches: the next
    request on the state is a known state's. Where the environment dropped the state's
    rules, it is a new state; where it dropped all its caches, the instance is a new one
    again (its cold start falls inside the next decision)."""
    scheduler = Scheduler(checkpoint)
    assert scheduler.state_kind(instance) is StateKind.NEW_INSTANCE
    with pytest.raises(NoPlanWithinBudget):
        scheduler.plans(instance, (1, 0, 0), Budgets(gpus=1), REAL_TIME)
    assert scheduler.state_kind(instance) is StateKind.KNOWN_STATE
    del scheduler.env.caches[InstanceCache.key(instance)]  # the state's rules dropped
    assert scheduler.state_kind(instance) is StateKind.NEW_STATE
    scheduler.env.caches.clear()
    assert scheduler.state_kind(instance) is StateKind.NEW_INSTANCE


def test_budgets_are_met_explained_and_an_impossible_one_is_refused(checkpoint: Path,
                                                                   instance: Instance):
    scheduler = Scheduler(checkpoint)
    free = scheduler.decide(instance, (1, 0, 0))
    budget = int(free.evaluation.objectives[1]) - 1
    decision = scheduler.decide(instance, (1, 0, 0), budgets=Budgets(gpus=budget, cost=0.0))
    step_time, gpus, cost = decision.evaluation.objectives
    assert decision.evaluation.feasible and gpus <= budget and cost == 0.0
    assert decision.explanation[0].startswith(f"GPU budget {budget}")
    assert decision.explanation[1].startswith("cost budget 0 USD/step")
    assert decision.budgets == Budgets(gpus=budget, cost=0.0)
    with pytest.raises(InputError, match="no plan within budget"):
        scheduler.decide(instance, (1, 0, 0), budgets=Budgets(gpus=1))
    capped = scheduler.decide(instance, (1, 0, 0), budgets=Budgets(step_time=1e-3))
    assert "step-time cap 0.001 s missed by" in capped.explanation[0]


@pytest.mark.parametrize(("args", "needle"), [
    (["--gpus", "1"], "no plan within budget"),
    (["--gpus", "0"], "--gpus"),
    (["--cost-budget", "nan"], "--cost-budget"),
    (["--cost-budget", "-1"], "--cost-budget"),
    (["--step-cap", "0"], "--step-cap"),
])
def test_cli_budgets_bad_or_impossible(checkpoint: Path, tmp_path: Path, args: list[str],
                                       needle: str):
    out = tmp_path / "plan.json"
    done = run_module("rl.decide", QUICK, "--weights", "1,0,0", "--checkpoint", checkpoint,
                      *args, "--out", out)
    assert_usage_error(done, out)
    assert needle in done.stderr


def test_cli_budget_is_met_and_named(checkpoint: Path):
    done = run_module("rl.decide", QUICK, "--weights", "1,0,0", "--checkpoint", checkpoint,
                      "--gpus", "24", "--cost-budget", "0.5")
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    assert document["objectives"][1] <= 24 and document["objectives"][2] <= 0.5
    assert document["budgets"] == {"gpus": 24, "cost": 0.5, "step_time": None}
    assert document["explanation"][0].startswith("GPU budget 24")


def test_cli_prints_the_decision_and_draws_the_heat_map(checkpoint: Path, tmp_path: Path):
    heat, plan = tmp_path / "traffic.png", tmp_path / "plan.json"
    done = run_module("rl.decide", QUICK, "--weights", "1,0,0", "--checkpoint", checkpoint,
                      "--heatmap", heat, "--out", plan)
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    assert set(document) >= {"plan", "objectives", "latency_s", "reward", "explanation"}
    assert heat.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert json.loads(plan.read_text()) == document["plan"]
    alone = run_module("rl.decide", QUICK, "--weights", "1,0,0", "--checkpoint", checkpoint,
                       "--pairs", "1", "--no-exhaust", "--lower-time", "0.5")
    assert alone.returncode == 0, alone.stderr
    assert json.loads(alone.stdout)["objectives"][0] \
        >= document["objectives"][0] * (1 - 1e-9)  # the exhaust is no slower


@pytest.mark.parametrize(("args", "needle"), [
    (["--weights", "1,0"], "--weights"),
    (["--weights", "-1,1,1"], "--weights"),
    (["--weights", "1,0,0", "--checkpoint", "missing.pt"], "no such file"),
    (["--weights", "1,0,0", "--polish", "-1"], "--polish"),
    (["--weights", "1,0,0", "--lower-time", "0"], "--lower-time"),
    (["--weights", "1,0,0", "--pairs", "-2"], "--pairs"),
])
def test_cli_bad_input_is_one_line_and_exit_2(args: list[str], needle: str, tmp_path: Path):
    out = tmp_path / "plan.json"
    done = run_module("rl.decide", QUICK, *args, "--out", out)
    assert_usage_error(done, out)
    assert needle in done.stderr


def test_bad_instance_or_checkpoint_file(checkpoint: Path, tmp_path: Path):
    out = tmp_path / "plan.json"
    done = run_module("rl.decide", tmp_path / "nowhere.json", "--weights", "1,0,0",
                      "--checkpoint", checkpoint, "--out", out)
    assert_usage_error(done, out)
    junk = tmp_path / "junk.pt"
    junk.write_bytes(b"\x00" * 64)
    with pytest.raises(InputError, match="not a Hi-PPO checkpoint"):
        Scheduler(junk)


def test_weights_parser():
    assert parse_weights("0.5,0.25,0.25").tolist() == [0.5, 0.25, 0.25]
    for bad in ("a,b,c", "0,0,0", "1,2", "nan,1,1"):
        with pytest.raises(InputError):
            parse_weights(bad)


@pytest.mark.skipif(not DEFAULT_CHECKPOINT.is_file(), reason="no shipped checkpoint")
def test_shipped_checkpoint_loads_and_decides(instance: Instance):
    config = dataclasses.asdict(HiPPOConfig.load(Path(__file__).resolve().parents[1]
                                                 / "rl" / "configs" / "hi_ppo.yaml"))
    import torch

    payload = torch.load(DEFAULT_CHECKPOINT, weights_only=True)
    assert payload["config"] == config  # trained with the committed config
    decision = Scheduler().decide(instance, (1 / 3, 1 / 3, 1 / 3))
    assert decision.evaluation.feasible and np.isfinite(decision.reward["R"])


def test_preference_grid_covers_the_simplex():
    from rl.sweep import preference_grid

    grid = preference_grid(10)
    assert len(grid) == 66 and len(set(grid)) == 66
    assert all(min(w) >= 0 and abs(sum(w) - 1) < 1e-12 for w in grid)
    assert {(1.0, 0.0, 0.0), (0.0, 1.0, 0.0), (0.0, 0.0, 1.0)} <= set(grid)


def test_an_instance_without_any_plan_gives_no_plans_and_a_clear_error(checkpoint: Path):
    from evaluation.latency import one_domain_view

    hopeless = one_domain_view(Instance.load(SUITES_DIR / "quick"
                                             / "aws-10-k5-llama2-70b-s110.json"))
    scheduler = Scheduler(checkpoint)
    # the masks offer no pair, so the lower level's DP tries every pair: without a time
    # limit it proves there is none (with one, a cold machine compiling its kernels may
    # only say it found none in time)
    untimed = dataclasses.replace(DecisionSettings(), lower_time=None)
    assert scheduler.plans(hopeless, (1, 0, 0), settings=untimed) == []
    with pytest.raises(InputError, match="no feasible plan exists"):
        scheduler.decide(hopeless, (1, 0, 0), settings=untimed)
    assert scheduler.front(hopeless).points == []


def test_a_state_the_masks_cannot_start_is_placed_by_the_lower_level(checkpoint: Path):
    """After a failure the 70B instance's only plans mix (tp, recompute) options, which
    the masks' uniform completion test cannot start: the policy alone finds none, the
    lower level's DP finds the exact engine's least step time (to its precision)."""
    from solvers.engine import NO_CAP
    from solvers.epsilon import PairPool
    from solvers.exact import ExactSettings, certifiers

    instance = Instance.load(SUITES_DIR / "quick" / "aws-10-k5-llama2-70b-s110.json")
    tight = instance.with_link_state(free_gpus=np.array([8, 1, 7, 7, 7]))
    scheduler = Scheduler(checkpoint)
    assert scheduler.env.cache_of(tight).rules.pairs == []  # no pair offered
    assert scheduler.plans(tight, (1, 0, 0), settings=POLICY_ONLY) == []
    # no time limit: a cold machine compiling the DP's kernels must not change the answer
    untimed = dataclasses.replace(DecisionSettings(), lower_time=None)
    decision = scheduler.decide(tight, (1, 0, 0), settings=untimed)
    assert decision.evaluation.feasible
    assert len({(s.tp, s.recompute) for s in decision.plan.stages}) > 1
    least = PairPool(certifiers(tight, ExactSettings(threads=1))).min_step(NO_CAP, NO_CAP)
    assert least is not None
    assert least.proven
    assert decision.evaluation.step_time_s <= least.values.step_time_s * (1 + PERIOD_PRECISION)
    within = scheduler.decide(tight, (0, 1, 0), Budgets(gpus=decision.evaluation.gpus),
                              settings=untimed)
    assert within.evaluation.feasible and within.evaluation.gpus <= decision.evaluation.gpus
    # 80 layers on at most 3 stages: tp 8 holds at most 41, tp 4 at most 20, and one
    # domain has 8 free GPUs: 8 + 4 + 4 GPUs is the least
    with pytest.raises(NoPlanWithinBudget, match="no plan within budget"):
        scheduler.plans(tight, (1, 0, 0), Budgets(gpus=decision.evaluation.gpus - 1),
                        settings=untimed)
    hopeless = instance.with_link_state(free_gpus=np.array([8, 1, 3, 3, 3]))
    with pytest.raises(InputError, match="no feasible plan exists"):  # the DP ran to its end
        scheduler.decide(hopeless, (1, 0, 0), settings=untimed)
    assert scheduler.plans(hopeless, (1, 0, 0), settings=untimed) == []
    with pytest.raises(NoPlanWithinBudget, match="no plan within budget"):
        scheduler.plans(tight, (1, 0, 0), Budgets(gpus=15), settings=untimed)


def test_a_lower_level_out_of_time_proves_nothing_and_is_not_kept(checkpoint: Path):
    """Where the masks offer no pair and the lower level's time runs out before its DP
    places one, the decision says so (not "no plan"), and a later request with time finds
    the plan; a state where not even one stage fits gives no plan from a new scheduler."""
    from rl.scheduler import NoPlanInTime

    instance = Instance.load(SUITES_DIR / "quick" / "aws-10-k5-llama2-70b-s110.json")
    tight = instance.with_link_state(free_gpus=np.array([8, 1, 7, 7, 7]))
    scheduler = Scheduler(checkpoint)
    hurried = dataclasses.replace(DecisionSettings(), lower_time=1e-9)
    for _ in range(2):  # not kept as the request's answer
        with pytest.raises(NoPlanInTime, match="limit"):
            scheduler.plans(tight, (1, 0, 0), settings=hurried)
    assert scheduler.plans(tight, (1, 0, 0),
                           settings=dataclasses.replace(hurried, lower_time=None))
    empty = instance.with_link_state(free_gpus=np.zeros(5, dtype=np.int64))
    assert Scheduler(checkpoint).plans(empty, (1, 0, 0)) == []


def test_a_scheduler_warms_up_before_its_first_decision():
    """A new process's first decision would pay, within its deadline, for compiling or
    loading the lower level's kernels (seconds on a fresh install, where its plan was
    twice as slow as later ones'): the scheduler decides once, untimed, when it is made,
    and forgets that decision."""
    before, after = kernels_compiled_by(
        "from rl.scheduler import Scheduler\n"
        "s = Scheduler()\n"
        "assert not s.answers and not s.env.caches, 'the warm-up is forgotten'")
    assert not any(before) and all(after)


@pytest.mark.parametrize(("args", "lower_time", "lower_work"), [
    ([], HIERARCHICAL.lower_time, None),
    (["--lower-work", "5000"], None, 5000),  # counted alone: the same plan on any machine
    (["--lower-work", "5000", "--lower-time", "0.5"], 0.5, 5000),
    (["--lower-time", "0.5"], 0.5, None),
])
def test_cli_limits_the_lower_level_by_time_or_counted_work(
        args: list[str], lower_time, lower_work, monkeypatch: pytest.MonkeyPatch):
    import rl.decide as decide

    asked = []

    def decide_with(self, instance, weights, budgets, settings):
        asked.append(settings)
        raise InputError("stop here")

    monkeypatch.setattr(decide.Scheduler, "decide", decide_with)
    assert decide.main([str(QUICK), "--weights", "1,0,0", *args]) == 2
    assert (asked[0].lower_time, asked[0].lower_work) == (lower_time, lower_work)



def test_a_state_with_a_front_answers_later_requests_from_it(checkpoint: Path,
                                                               instance: Instance,
                                                               monkeypatch):
    """After :meth:`Scheduler.front`, a request of any preference and budgets on the same
    state is read off that front: no DP run, the front's plans within the budgets, valued
    as a decision values them; the best of them for the least step time is the front's
    fastest within the GPU budget. A budget below every front point is decided; other
    settings, another state and a forgotten scheduler are not answered from it."""
    import rl.scheduler as scheduler_module

    scheduler = Scheduler(checkpoint)
    front = scheduler.front(instance)
    assert front.provenance["answers_later_requests"]
    points = [(p.plan, p.objectives) for p in front.points]
    assert len(points) >= 3
    searched = []
    real_search = scheduler_module.search

    def spy(*args, **kwargs):
        searched.append(1)
        return real_search(*args, **kwargs)

    monkeypatch.setattr(scheduler_module, "search", spy)
    gpus = sorted({int(o[1]) for _, o in points})
    budget = Budgets(gpus=gpus[len(gpus) // 2])
    within = [(plan, o) for plan, o in points if o[1] <= budget.gpus]
    candidates = scheduler.plans(instance, (1, 0, 0), budget)
    assert not searched
    assert {id(plan) for plan, _ in candidates} == {id(plan) for plan, _ in within}
    best, _ = max(candidates, key=lambda item: item[1])
    assert evaluate(instance, best).objectives[0] == min(o[0] for _, o in within)
    weights = (0.2, 0.5, 0.3)
    for plan, value in scheduler.plans(instance, weights, budget):
        scheduler.env.reset(options=scheduler._options(instance, weights, budget))
        assert value == pytest.approx(scheduler.env.score(plan)[0], rel=1e-12)
    cost = sorted(o[2] for _, o in points)[len(points) // 2]
    cheap = scheduler.plans(instance, (0, 0, 1), Budgets(cost=cost))
    assert cheap and all(evaluate(instance, p).objectives[2] <= cost * (1 + 1e-12)
                         for p, _ in cheap)
    assert not searched
    # below every front point: decided, by the lower level (a plan or none)
    with contextlib.suppress(NoPlanWithinBudget):
        scheduler.plans(instance, (1, 0, 0), Budgets(gpus=max(1, gpus[0] - 1)))
    assert searched
    for state, settings in ((instance, DecisionSettings(exhaust=False)),
                            (instance.with_link_state(
                                bandwidth_gbps=instance.links.bandwidth_gbps * 0.5),
                             HIERARCHICAL)):
        searched.clear()
        scheduler.plans(state, (1, 0, 0), budget, settings)
        assert searched
    # a request cut short before the front is resumed by a decision, not read off it
    request = scheduler._request(instance, (1, 0, 0), budget, HIERARCHICAL)
    scheduler.answers[request] = candidates
    scheduler.cut_short.add(request)
    searched.clear()
    assert scheduler.resume(instance, (1, 0, 0), budget) is not None
    assert searched
    scheduler.forget()
    searched.clear()
    scheduler.plans(instance, (1, 0, 0), Budgets(gpus=budget.gpus + 1))
    assert searched


def test_a_front_whose_decisions_ran_out_or_of_another_sweep_is_not_kept(
        checkpoint: Path, instance: Instance):
    """A front whose sweep had a decision run out of its work, or that is not the default
    sweep (other preferences), answers no later request: those are decided."""
    for scheduler, settings, kwargs in (
            (Scheduler(checkpoint), DecisionSettings(lower_work=2_000), {}),
            (Scheduler(checkpoint), HIERARCHICAL, {"preferences": [(0.5, 0.5, 0.0)]})):
        front = scheduler.front(instance, settings=settings, **kwargs)
        assert front.points and not front.provenance["answers_later_requests"]
        key = scheduler._front_key(instance, settings)
        assert scheduler.fronts.answer(key, np.ones(3) / 3, Budgets(),
                                       scheduler.multipliers) is None


def test_the_first_scheduler_freezes_what_the_process_holds_after_its_garbage():
    """In a fresh process: a scheduler made with ``freeze_gc=False`` freezes nothing; the
    first one made with it collects the garbage, then freezes what the process holds out
    of the garbage collector's full collections (README); a later one freezes nothing
    more. A cycle that was garbage before is collected, not frozen."""
    code = ("import gc, weakref\n"
            "from rl.scheduler import Scheduler\n"
            "Scheduler(freeze_gc=False)\n"
            "unfrozen = gc.get_freeze_count()\n"
            "gc.disable()  # no collection but the scheduler's own\n"
            "class Node: pass\n"
            "a, b = Node(), Node()\n"
            "a.other, b.other = b, a\n"
            "gone = weakref.ref(a)\n"
            "del a, b\n"
            "Scheduler()\n"
            "frozen = gc.get_freeze_count()\n"
            "Scheduler()\n"
            "print(unfrozen, frozen, gc.get_freeze_count(), gone() is None)\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parents[1],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    unfrozen, frozen, again, collected = done.stdout.split()
    assert int(unfrozen) == 0 and int(frozen) > 100_000 and int(again) == int(frozen)
    assert collected == "True"
