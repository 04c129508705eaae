"""The plan-building environment: Gymnasium API, exact masks, rewards."""

from __future__ import annotations

import dataclasses
import warnings

import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from formulation.evaluator import evaluate_plans
from formulation.instance import Instance
from formulation.result import evaluate
from formulation.reward import reward
from instances.generate import generate_instance
from instances.suites import SUITES_DIR, reference_front_path, suite_paths
from instances.tiny import tiny_instance
from rl.env import (
    ACTIONS,
    DOMAIN,
    INVALID_LIMIT,
    PAIR,
    Multipliers,
    PlanEnv,
    Task,
    budget_bucket,
)
from rl.masks import Budgets, PlanRules, even_split
from solvers.baselines import baseline_references
from solvers.front import Front

QUICK = SUITES_DIR / "quick" / "cn-hubs-k6-llama2-7b-s130.json"


@pytest.fixture(scope="module")
def instance() -> Instance:
    return Instance.load(QUICK)


def _env(instance: Instance) -> PlanEnv:
    return PlanEnv(tasks=lambda rng: Task(instance, rng.dirichlet(np.ones(3))))


def _rollout(env: PlanEnv, rng: np.random.Generator, **reset) -> tuple[float, dict, int]:
    observation, _ = env.reset(**reset)
    steps = 0
    while True:
        allowed = np.flatnonzero(observation["action_mask"])
        assert len(allowed), "dead end: no admissible action"
        observation, value, terminated, truncated, info = env.step(int(rng.choice(allowed)))
        steps += 1
        assert not truncated
        if terminated:
            return value, info, steps


def test_passes_the_gymnasium_env_checker(instance: Instance):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_env(_env(instance), skip_render_check=True)


@pytest.mark.parametrize("case", ["quick", "generated", "tiny"])
def test_masks_never_admit_an_infeasible_plan(case: str):
    """Random admissible actions on many instances: every episode ends, in a feasible plan."""
    rng = np.random.default_rng(7)
    if case == "quick":
        instances = [Instance.load(p) for p in suite_paths("quick")]
    elif case == "generated":
        instances = [generate_instance(k, model, seed, topology)
                     for k, model, seed, topology in ((5, "70b", 11, "aws-10"),
                                                      (12, "13b", 12, "random"),
                                                      (20, "7b", 13, "cn-hubs"))]
    else:
        instances = [tiny_instance(3, domains=4, layers=12, free_gpus=(1, 1, 1, 1)),
                     tiny_instance(5, domains=5, layers=8)]
    for instance in instances:
        env = _env(instance)
        for episode in range(12):
            _, info, _ = _rollout(env, rng, seed=episode)
            result = evaluate(instance, info["plan"])
            assert result.feasible, (instance.name, result.violations)
            assert info["feasible"]


def test_every_exact_front_plan_is_reachable():
    """The masks forbid none of the exact optimum's plans: each point of every quick front,
    cut into one-stage segments back to front, is admissible step by step."""
    for path in suite_paths("quick"):
        instance = Instance.load(path)
        rules = PlanRules(instance)
        front = Front.load(reference_front_path(path), instance)
        for point in front.points:
            state = rules.build(point.plan)
            assert state is not None, (path.stem, point.plan)
            assert state.layers_left == 0 and rules.plan(state) == point.plan


def test_reward_is_the_seed_reward_of_the_evaluated_plan(instance: Instance):
    env = _env(instance)
    weights = np.array([0.5, 0.2, 0.3])
    value, info, steps = _rollout(env, np.random.default_rng(1),
                                  options={"instance": instance, "weights": weights})
    objectives = evaluate_plans(instance, [info["plan"]]).objectives
    scale = baseline_references(instance).scale
    assert value == pytest.approx(float(reward(objectives, weights, scale)[0]))
    # one PAIR step, then four steps (DOMAIN, LAYERS, OPTION, SPLIT) per segment
    assert steps >= 5 and (steps - 1) % 4 == 0


def test_the_step_cap_is_penalised_by_its_bucket_multiplier(instance: Instance):
    """The step-time cap is soft: the reward loses multiplier x relative excess, the
    multiplier being the trainer's for the cap's bucket (passed at reset, never set)."""
    env = _env(instance)
    scale = baseline_references(instance).scale
    budgets = Budgets(step_time=0.3 * scale.t_base)  # bucket of caps below T_base / 2
    bucket = budget_bucket(budgets, scale.t_base)
    multipliers = Multipliers()
    multipliers.values[1, bucket] = 2.0
    for seed in range(20):  # until a random plan misses the cap
        value, info, _ = _rollout(env, np.random.default_rng(seed), options={
            "instance": instance, "weights": (1, 0, 0), "budgets": budgets,
            "multipliers": multipliers})
        if info["constraints"][1] > 0:
            break
    excess = info["constraints"][1]
    step_time = info["objectives"][0]
    assert info["bucket"] == bucket == 1
    assert excess == pytest.approx(step_time / budgets.step_time - 1) and excess > 0
    assert value == pytest.approx(info["reward_terms"] - 2.0 * excess)
    assert env.multipliers is multipliers  # the env reads the trainer's, never copies


def test_the_instance_cost_budget_is_met_exactly_by_the_masks(instance: Instance):
    """The instance's own cost budget joins the task's: no plan the masks admit exceeds it
    (it was a soft constraint before budgets were masks)."""
    tight = instance.replace(constraints=dataclasses.replace(instance.constraints,
                                                             cost_budget=1e-6))
    env = _env(tight)
    for seed in range(10):
        _, info, _ = _rollout(env, np.random.default_rng(seed),
                              options={"instance": tight, "weights": (1, 0, 0)})
        assert info["feasible"] and info["objectives"][2] <= 1e-6


def test_an_action_outside_the_mask_changes_nothing_and_repeated_truncates(
        instance: Instance):
    env = _env(instance)
    observation, _ = env.reset(seed=0)
    assert observation["phase"] == PAIR
    forbidden = int(np.flatnonzero(observation["action_mask"] == 0)[0])
    for count in range(1, INVALID_LIMIT + 1):
        after, value, terminated, truncated, info = env.step(forbidden)
        assert all(np.array_equal(after[key], observation[key]) for key in after)
        assert (value, terminated, info["invalid_action"]) == (-1.0, False, True)
        assert truncated == (count == INVALID_LIMIT)


def test_same_seed_same_tasks_and_observations(instance: Instance):
    first, second = _env(instance), _env(instance)
    for seed in (0, 3):
        a, _ = first.reset(seed=seed)
        b, _ = second.reset(seed=seed)
        assert all(np.array_equal(a[key], b[key]) for key in a)
        assert np.array_equal(first.task.weights, second.task.weights)


def test_domain_phase_points_only_at_real_domains_with_room(instance: Instance):
    env = _env(instance)
    observation, _ = env.reset(seed=0)
    observation, *_ = env.step(int(np.flatnonzero(observation["action_mask"])[0]))
    assert observation["phase"] == DOMAIN
    allowed = np.flatnonzero(observation["action_mask"])
    free = [d.free_gpus for d in instance.domains]
    assert len(allowed) and allowed.max() < instance.num_domains
    assert all(free[k] > 0 for k in allowed)
    assert observation["action_mask"].shape == (ACTIONS,)


def test_even_split_and_its_capacity_match_enumeration(instance: Instance):
    assert even_split(10, 3) == [4, 3, 3] and even_split(6, 3) == [2, 2, 2]
    rules = PlanRules(instance)
    tables, limits = rules.pairs[0], rules.limits(0)
    for position in range(tables.positions):
        for option in range(tables.num_options):
            for stages in range(1, tables.positions - position + 1):
                for finishing in (False, True):
                    caps = tables.layer_cap[position:position + stages, option].copy()
                    if finishing:
                        caps[-1] = tables.layer_cap_first[position + stages - 1, option]
                    fitting = [n for n in range(stages, tables.layers + 1)
                               if all(a <= c for a, c in zip(even_split(n, stages), caps,
                                                             strict=True))]
                    most = limits.most_first if finishing else limits.most
                    assert most[position, option, stages] == max(fitting, default=0)


def test_build_rejects_an_infeasible_plan(instance: Instance):
    rules = PlanRules(instance)
    front = Front.load(reference_front_path(QUICK), instance)
    largest = max(front.points, key=lambda p: p.objectives[1]).plan
    poorest = int(np.argmin([d.free_gpus for d in instance.domains]))
    crowded = dataclasses.replace(largest, stages=tuple(
        dataclasses.replace(s, domain=poorest) for s in largest.stages))
    assert not evaluate(instance, crowded).feasible
    assert rules.build(crowded) is None
    assert rules.build(dataclasses.replace(largest, dp=3)) is None  # pair not offered
