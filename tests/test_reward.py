"""The seeds' reward from objective vectors: MFU against the evaluator, hand values of R and
J, J's order and monotonicity, rejected weights and bases, and the baseline references."""

from __future__ import annotations

import numpy as np
import pytest

from formulation.evaluator import evaluate_plans
from formulation.families import score
from formulation.reward import (
    RewardScale,
    check_weights,
    mfu,
    mfu_space,
    reward,
    reward_terms,
    scalarised_cost,
)
from solvers.baselines import baseline_front, baseline_references

# MFU = W / (N peak T) = 50 / (N T) with these constants.
SCALE = RewardScale(t_base=100.0, c_base=2.0, model_flops=50.0, peak_flops=1.0)


@pytest.fixture(scope="module")
def references(quick_front):
    return baseline_references(quick_front[0])


def plausible_points(seed: int, n: int = 40) -> np.ndarray:
    """Random (T, N, C) with MFU <= 1 under SCALE (T >= 50 / N)."""
    rng = np.random.default_rng(seed)
    gpus = rng.integers(1, 33, size=n).astype(float)
    step = 50.0 / gpus * rng.uniform(1.0, 20.0, size=n)
    cost = rng.uniform(0.0, 5.0, size=n)
    cost[rng.random(n) < 0.2] = 0.0
    return np.column_stack([step, gpus, cost])


# -- MFU ------------------------------------------------------------------------------------


def test_mfu_from_objectives_equals_the_evaluators(quick_front, references):
    """For the committed front's plans, W / (N peak T) from the objectives alone is the
    evaluator's MFU."""
    instance, front = quick_front
    plans = [p.plan for p in front.points]
    result = evaluate_plans(instance, plans)
    assert result.feasible.all()
    assert np.allclose(result.objectives, front.objectives, rtol=1e-9)
    got = mfu(front.objectives, references.scale)
    assert np.all((got > 0) & (got < 1))
    assert got == pytest.approx(result.mfu, rel=1e-9)
    assert mfu(result.objectives, references.scale) == pytest.approx(result.mfu, rel=1e-12)
    assert 1 / mfu_space(front.objectives, references.scale)[:, 1] == pytest.approx(
        result.mfu, rel=1e-9)


def test_reward_scale_of_takes_the_instances_constants(quick_front):
    instance, _ = quick_front
    scale = RewardScale.of(instance, 2.0, 3.0)
    assert (scale.t_base, scale.c_base) == (2.0, 3.0)
    assert scale.peak_flops == instance.gpu.peak_tflops * 1e12


def test_mfu_space_hand_values():
    points = np.array([[50.0, 4.0, 1.0], [100.0, 1.0, 0.0]])
    assert mfu(points, SCALE) == pytest.approx([0.25, 0.5])
    assert mfu_space(points, SCALE) == pytest.approx(np.array([[50.0, 4.0, 1.0],
                                                               [100.0, 2.0, 0.0]]))


# -- R and J --------------------------------------------------------------------------------


def test_reward_terms_and_reward_hand_values():
    """(50, 4, 1): R_eff = (100 - 50) / 100 = 0.5, MFU = 50 / 200 = 0.25, R_cost = 1 / 2."""
    point = np.array([[50.0, 4.0, 1.0]])
    assert reward_terms(point, SCALE) == pytest.approx(np.array([[0.5, 0.25, 0.5]]))
    assert reward(point, (1.0, 1.0, 1.0), SCALE) == pytest.approx([0.25])
    assert reward(point, (0.5, 2.0, 3.0), SCALE) == pytest.approx([0.25 + 0.5 - 1.5])
    # slower than the baseline: negative R_eff
    assert reward(np.array([150.0, 1.0, 0.0]), (1.0, 0.0, 0.0), SCALE) == pytest.approx([-0.5])


def test_scalarised_cost_hand_values():
    """J = w1 T / T_base + w2 (1 - MFU) + w3 C / C_base."""
    point = np.array([[50.0, 4.0, 1.0]])
    assert scalarised_cost(point, (1.0, 1.0, 1.0), SCALE) == pytest.approx([1.75])
    assert scalarised_cost(point, (0.5, 2.0, 3.0), SCALE) == pytest.approx(
        [0.5 * 0.5 + 2.0 * 0.75 + 3.0 * 0.5])
    assert scalarised_cost(np.array([[100.0, 1.0, 0.0]]), (1.0, 1.0, 1.0),
                           SCALE) == pytest.approx([1.5])
    # without the speed term, MFU = 1 and C = 0 make J vanish
    assert scalarised_cost(np.array([[50.0, 1.0, 0.0]]), (0.0, 1.0, 1.0),
                           SCALE) == pytest.approx([0.0])


@pytest.mark.parametrize("seed", range(4))
def test_scalarised_cost_is_w1_plus_w2_minus_reward_and_not_negative(seed):
    points = plausible_points(seed)
    rng = np.random.default_rng(100 + seed)
    for w in rng.uniform(0.0, 2.0, size=(4, 3)):
        j = scalarised_cost(points, w, SCALE)
        r = reward(points, w, SCALE)
        assert j == pytest.approx(w[0] + w[1] - r, rel=1e-12, abs=1e-12)
        expected = (w[0] * points[:, 0] / SCALE.t_base + w[1] * (1 - mfu(points, SCALE))
                    + w[2] * points[:, 2] / SCALE.c_base)
        assert j == pytest.approx(expected, rel=1e-12, abs=1e-12)
        assert np.all(j >= 0)


def test_scalarised_cost_is_not_negative_on_real_plans(quick_front, references):
    _, front = quick_front
    for w in ((1.0, 1.0, 1.0), (1.0, 0.0, 0.0), (0.0, 1.0, 0.0), (0.0, 0.0, 1.0)):
        assert np.all(scalarised_cost(front.objectives, w, references.scale) >= 0)


@pytest.mark.parametrize("seed", range(4))
def test_scalarised_cost_orders_plans_as_minus_reward(seed):
    points = plausible_points(seed)
    rng = np.random.default_rng(200 + seed)
    for w in rng.uniform(0.0, 2.0, size=(4, 3)):
        j = scalarised_cost(points, w, SCALE)
        r = reward(points, w, SCALE)
        assert np.array_equal(np.argsort(j, kind="stable"), np.argsort(-r, kind="stable"))
        assert np.argmin(j) == np.argmax(r)


@pytest.mark.parametrize("seed", range(4))
def test_raising_step_time_gpus_or_cost_never_lowers_j(seed):
    """J rises with T, N and C alike; strictly where the objective's weight is positive."""
    points = plausible_points(seed)
    rng = np.random.default_rng(300 + seed)
    for w in [*rng.uniform(0.1, 2.0, size=(3, 3)), np.array([1.0, 0.0, 0.0]),
              np.array([0.0, 0.0, 1.0])]:
        base = scalarised_cost(points, w, SCALE)
        for i in range(3):
            raised = points.copy()
            raised[:, i] += rng.uniform(0.01, 10.0, size=len(points))
            j = scalarised_cost(raised, w, SCALE)
            assert np.all(j >= base), (w, i)
            strict = {0: w[0] > 0 or w[1] > 0, 1: w[1] > 0, 2: w[2] > 0}[i]
            if strict:
                assert np.all(j > base), (w, i)
            else:
                assert j == pytest.approx(base, rel=1e-12), (w, i)


# -- rejected inputs ------------------------------------------------------------------------


@pytest.mark.parametrize("weights", [
    (-0.1, 1.0, 1.0), (1.0, 1.0, -1e-9), (0.0, 0.0, 0.0), (1.0, 1.0), (1.0, 1.0, 1.0, 1.0),
    [[1.0, 1.0, 1.0]], (), (np.nan, 1.0, 1.0), (1.0, np.inf, 1.0), (1.0, 1.0, -np.inf),
], ids=["negative-first", "negative-last", "all-zero", "two", "four", "nested", "empty",
        "nan", "inf", "minus-inf"])
def test_check_weights_rejects(weights):
    with pytest.raises(ValueError, match="weights"):
        check_weights(weights)
    point = np.array([[50.0, 4.0, 1.0]])
    with pytest.raises(ValueError):
        reward(point, weights, SCALE)
    with pytest.raises(ValueError):
        scalarised_cost(point, weights, SCALE)


def test_check_weights_accepts_one_positive_weight():
    assert np.array_equal(check_weights((0.0, 0.0, 2.0)), [0.0, 0.0, 2.0])
    assert check_weights([1, 2, 3]).dtype == float


@pytest.mark.parametrize("t_base, c_base", [
    (0.0, 1.0), (-1.0, 1.0), (1.0, 0.0), (1.0, -0.5), (np.nan, 1.0), (1.0, np.nan),
])
def test_reward_scale_of_rejects_non_positive_bases(quick_front, t_base, c_base):
    with pytest.raises(ValueError, match="t_base and c_base"):
        RewardScale.of(quick_front[0], t_base, c_base)


# -- baseline references --------------------------------------------------------------------


def test_t_base_is_the_fastest_feasible_single_domain_plan(quick_front, references):
    instance, _ = quick_front
    front = baseline_front(instance, "single-domain")
    assert front.points
    objectives, feasible = score(instance, [p.plan for p in front.points])
    assert feasible.all()
    assert references.scale.t_base == pytest.approx(objectives[:, 0].min(), rel=1e-12)
    assert references.single_domain_feasible
    assert references.single_domain_objectives[0] == references.scale.t_base


def test_single_domain_reference_uses_one_domain_and_no_wan(quick_front, references):
    instance, _ = quick_front
    assert len(references.single_domain.domains_used()) == 1
    assert references.single_domain_objectives[2] == 0.0
    objectives, feasible = score(instance, [references.single_domain])
    assert feasible[0] and objectives[0, 2] == 0.0
    assert tuple(objectives[0]) == pytest.approx(references.single_domain_objectives)


def test_c_base_is_the_oblivious_plans_cost(quick_front, references):
    instance, _ = quick_front
    objectives, _ = score(instance, [references.oblivious])
    assert references.scale.c_base > 0
    assert references.scale.c_base == pytest.approx(objectives[0, 2], rel=1e-12)
    assert references.oblivious_objectives[2] == references.scale.c_base
    assert len(references.oblivious.domains_used()) > 1
