"""Local search on one plan for one preference (solvers.local_search)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from formulation.evaluator import evaluate_plans
from formulation.instance import Instance
from formulation.reward import reward
from instances.suites import SUITES_DIR
from solvers.baselines import baseline_front, baseline_references
from solvers.local_search import local_search, neighbours

QUICK = SUITES_DIR / "quick" / "random-k8-llama2-7b-s157.json"


@pytest.fixture(scope="module")
def instance() -> Instance:
    return Instance.load(QUICK)


def _moves(plan, other) -> int:
    """How many stage fields or pair fields differ (stage counts equal)."""
    pair = (plan.dp, plan.micro_batch) != (other.dp, other.micro_batch)
    return pair + sum(a != b for a, b in zip(plan.stages, other.stages, strict=True))


def test_neighbours_are_one_move_away_and_distinct(instance: Instance):
    plan = baseline_front(instance, "sailor").points[0].plan
    found = neighbours(instance, plan)
    assert plan not in found and len(set(found)) == len(found)
    for other in found:
        assert sum(s.layers for s in other.stages) == instance.model.layers
        assert all(s.layers >= 1 for s in other.stages)
        assert len(other.stages) <= instance.search.max_stages
        if len(other.stages) == len(plan.stages):
            # a cut move changes two stages, a regrouping every tp and the pair
            assert _moves(plan, other) <= max(2, len(plan.stages) + 1)
        else:
            assert abs(len(other.stages) - len(plan.stages)) == 1
    kinds = {"cut": False, "domain": False, "option": False, "pair": False}
    for other in found:
        if len(other.stages) != len(plan.stages):
            continue
        for a, b in zip(plan.stages, other.stages, strict=True):
            kinds["cut"] |= a.layers != b.layers
            kinds["domain"] |= a.domain != b.domain
            kinds["option"] |= (a.tp, a.recompute) != (b.tp, b.recompute)
        kinds["pair"] |= (plan.dp, plan.micro_batch) != (other.dp, other.micro_batch)
    assert all(kinds.values()), kinds


@pytest.mark.parametrize("weights", [(1, 0, 0), (0.5, 0, 0.5), (1 / 3, 1 / 3, 1 / 3)])
def test_local_search_never_worsens_and_ends_in_a_local_optimum(instance: Instance,
                                                                weights):
    scale = baseline_references(instance).scale
    start = baseline_front(instance, "greedy").points[0].plan
    before = float(reward(evaluate_plans(instance, [start]).objectives, weights, scale)[0])
    plan, value = local_search(instance, start, weights, scale)
    result = evaluate_plans(instance, [plan])
    assert result.feasible[0] and value >= before
    assert value == pytest.approx(float(reward(result.objectives, weights, scale)[0]))
    around = evaluate_plans(instance, neighbours(instance, plan))
    rewards = np.where(around.feasible, reward(around.objectives, weights, scale), -np.inf)
    assert rewards.max() <= value + 1e-12


def test_one_round_takes_the_best_neighbour_if_it_improves(instance: Instance):
    scale = baseline_references(instance).scale
    start = baseline_front(instance, "oblivious").points[0].plan
    around = neighbours(instance, start)
    result = evaluate_plans(instance, around)
    moved = 0
    for weights in [(1, 0, 0), (0.5, 0, 0.5), (0, 1, 0), (0.2, 0.2, 0.6)]:
        here = float(reward(evaluate_plans(instance, [start]).objectives, weights, scale)[0])
        plan, value = local_search(instance, start, weights, scale, rounds=1)
        rewards = np.where(result.feasible, reward(result.objectives, weights, scale),
                           -np.inf)
        if rewards.max() > here:
            moved += 1
            assert plan == around[int(np.argmax(rewards))]
            assert value == pytest.approx(rewards.max())
        else:
            assert (plan, value) == (start, pytest.approx(here))
    assert moved


def test_an_infeasible_start_scores_minus_infinity_and_is_repaired(instance: Instance):
    scale = baseline_references(instance).scale
    start = baseline_front(instance, "greedy").points[0].plan
    value = float(reward(evaluate_plans(instance, [start]).objectives, (1, 0, 0), scale)[0])
    assert local_search(instance, start, (1, 0, 0), scale, rounds=0) == (
        start, pytest.approx(value))
    outside = dataclasses.replace(start, dp=max(instance.search.dp) * 2)  # not searched
    assert not evaluate_plans(instance, [outside]).feasible[0]
    assert local_search(instance, outside, (1, 0, 0), scale, rounds=0) == (outside, -np.inf)
    repaired, value = local_search(instance, outside, (1, 0, 0), scale)
    assert np.isfinite(value) and evaluate_plans(instance, [repaired]).feasible[0]


def test_neighbours_keep_whole_micro_batches(instance: Instance):
    """Another (dp, micro-batch) pair is a neighbour only if it divides the global batch:
    a step holds whole micro-batches, and the evaluator refuses other rows."""
    batch = instance.training.global_batch
    space = dataclasses.replace(instance.search, dp=(*instance.search.dp, 3))
    odd = instance.replace(search=space)
    plan = baseline_front(odd, "greedy").points[0].plan
    found = neighbours(odd, plan)
    assert found and all(batch % (p.dp * p.micro_batch) == 0 for p in found)
    evaluate_plans(odd, found)  # every row a plan
