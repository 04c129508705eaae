"""Demonstrations and behaviour cloning (rl.imitation)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from formulation.evaluator import evaluate_plans
from formulation.instance import Instance
from formulation.reward import reward
from instances.suites import PREFERENCES, SUITES_DIR, reference_front_path, suite_paths
from rl.env import PlanEnv, pair_code, plan_actions
from rl.imitation import (
    ImitationSettings,
    accuracy,
    budget_tasks,
    choices,
    clone,
    demonstrate,
    demonstrations,
    expert_plans,
    replay,
)
from rl.train import HiPPOConfig, make_policy
from solvers.baselines import baseline_references
from solvers.front import Front

QUICK = SUITES_DIR / "quick" / "cn-hubs-k6-llama2-7b-s130.json"
SMALL = ImitationSettings(states=1, random_preferences=2, epochs=1, workers=1,
                          budget_levels=0, cost_levels=0)


@pytest.fixture(scope="module")
def instance() -> Instance:
    return Instance.load(QUICK)


def test_demonstration_actions_rebuild_every_exact_front_plan():
    """Each plan of every quick exact front is replayed action by action under the masks
    (multi-stage runs of one domain merged into one segment where the split is even)."""
    env = PlanEnv()
    for path in suite_paths("quick"):
        instance = Instance.load(path)
        front = Front.load(reference_front_path(path), instance)
        for point in front.points:
            observations, actions = replay(env, instance, point.plan)  # raises on a mismatch
            assert actions[0] == pair_code(point.plan.dp, point.plan.micro_batch)
            assert len(actions) == len(observations) and (len(actions) - 1) % 4 == 0
            assert len(actions) <= 1 + 4 * point.plan.num_stages


def test_segments_merge_even_runs_and_keep_uneven_ones(instance: Instance):
    env = PlanEnv()
    env.reset(options={"instance": instance})
    plans = [p for p in expert_plans(instance, ("sailor",)) if p.num_stages >= 3]
    merged = 0
    for plan in plans[:40]:
        state = env.cache.rules.build(plan)
        if state is None:
            continue
        segments = state.segments
        assert sum(s.stages for s in segments) == plan.num_stages
        assert sum(s.layers for s in segments) == instance.model.layers
        merged += any(s.stages > 1 for s in segments)
        assert plan_actions(env.cache, plan) is not None
    assert merged  # the DP's equal splits inside a domain become one segment


def test_demonstrations_choose_the_best_expert_plan_or_better_when_polished(
        instance: Instance):
    plans = expert_plans(instance, SMALL.experts)
    result = evaluate_plans(instance, plans)
    scale = baseline_references(instance).scale
    raw = demonstrate(instance, dataclasses.replace(SMALL, polish=0), 0.0, 0.99, seed=0)
    polished = demonstrate(instance, SMALL, 0.0, 0.99, seed=0)
    # 7 fixed preferences + 2 random ones; with no swing the state is the instance itself
    assert len(raw.rewards) == len(polished.rewards) == 9
    for number, weights in enumerate(PREFERENCES):
        best = reward(result.objectives[result.feasible], weights, scale).max()
        assert raw.rewards[number] == pytest.approx(best)
        assert polished.rewards[number] >= best - 1e-12
    assert (polished.rewards > raw.rewards + 1e-9).any()
    # the discounted return of an episode's last decision is its reward
    last = np.flatnonzero(np.diff(np.append(polished.episode, -1)))
    assert np.allclose(polished.returns[last], polished.rewards)


def test_budgeted_demonstrations_stay_within_their_budgets(instance: Instance):
    """Budget tasks sit at front GPU counts and costs of the pooled plans; the plan each
    demonstrates is within its budgets, at least as fast as the fastest expert plan within
    them, and the masks build it under those budgets."""
    plans = expert_plans(instance, SMALL.experts)
    result = evaluate_plans(instance, plans)
    scale = baseline_references(instance).scale
    settings = dataclasses.replace(SMALL, budget_levels=4, cost_levels=2)
    tasks = budget_tasks(result, settings, np.random.default_rng(0))
    assert len(tasks) == 6 and any(b.cost is not None for _, b in tasks)
    env = PlanEnv()
    env.reset(options={"instance": instance})
    for weights, budgets in tasks:
        assert np.array_equal(weights, [1, 0, 0])
        limits = budgets.limits()
        within = result.feasible & np.all(result.objectives <= limits * (1 + 1e-12), axis=1)
        assert within.any()  # the budgets come from the pool's own plans
        candidates, value = choices(instance, plans, result, weights, scale, 2, limits)
        best = int(np.argmax(value))
        chosen = evaluate_plans(instance, [candidates[best]]).objectives[0]
        assert np.all(chosen <= limits * (1 + 1e-12))
        assert chosen[0] <= result.objectives[within, 0].min() + 1e-12
        assert replay(env, instance, candidates[best], budgets) is not None
    with_budgets = demonstrate(instance, settings, 0.0, 0.99, seed=0)
    assert len(with_budgets.rewards) == 9 + 6


def test_demonstrations_are_deterministic_and_independent_of_workers(instance: Instance):
    pool = [instance, Instance.load(suite_paths("quick")[0])]
    one = demonstrations(pool, SMALL, 0.3, 0.99, seed=5)
    two = demonstrations(pool, dataclasses.replace(SMALL, workers=2), 0.3, 0.99, seed=5)
    other = demonstrations(pool, SMALL, 0.3, 0.99, seed=6)
    for key in one.steps:
        assert np.array_equal(one.steps[key], two.steps[key])
    assert np.array_equal(one.actions, two.actions) and np.array_equal(one.returns,
                                                                        two.returns)
    assert len(one) != len(other) or not np.array_equal(one.returns, other.returns)


def test_cloning_learns_the_demonstrated_actions(instance: Instance):
    torch.manual_seed(0)
    demos = demonstrate(instance, dataclasses.replace(SMALL, states=2, random_preferences=4),
                        0.3, 0.99, seed=1)
    policy = make_policy(HiPPOConfig(hidden=32))
    everything = np.arange(len(demos))
    before = accuracy(policy, demos, everything)["held_out_accuracy"]
    settings = dataclasses.replace(SMALL, epochs=40, minibatch_size=32, holdout=0.0,
                                   learning_rate=3e-3)
    stats = clone(policy, demos, settings, vf_coef=0.5, max_grad_norm=0.5, seed=0)
    after = accuracy(policy, demos, everything)["held_out_accuracy"]
    assert after >= 0.9 > before
    assert stats["decisions"] == len(demos) and stats["clone_loss"] < 0.5


def test_unknown_expert_is_refused():
    with pytest.raises(ValueError, match="imitation.experts: unknown planner 'oracle'"):
        ImitationSettings(experts=("sailor", "oracle"))
