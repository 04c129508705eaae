"""Quality indicators against hand-computed values on tiny fronts, against moocore, pymoo and
brute-force numpy formulas on random fronts, and the front's mapping to MFU space."""

from __future__ import annotations

import moocore
import numpy as np
import pytest
from pymoo.indicators.hv import HV
from pymoo.indicators.igd_plus import IGDPlus

from evaluation.metrics import (
    ReferenceSet,
    c_metric,
    chosen_point,
    coverage,
    epsilon_additive,
    epsilon_multiplicative,
    hypervolume_ratio,
    igd_plus,
    preference_gap,
    step_time_gaps,
)
from formulation.reward import RewardScale, scalarised_cost
from solvers.front import nondominated_mask, reference_box, scale_to_box

SEEDS = range(6)
EMPTY = np.zeros((0, 3))


def reference_set(points) -> ReferenceSet:
    ref = np.array(points, dtype=float)
    return ReferenceSet(objectives=ref, normalisation=reference_box(ref))


# Three non-dominated points; the first has a zero cost. Used by the coverage cases.
STAIRS = reference_set([[1.0, 3.0, 0.0], [2.0, 2.0, 1.0], [3.0, 1.0, 2.0]])

# Two points whose box is ideal (1, 1, 0), nadir (3, 2, 10), hv reference (3.2, 2.1, 11):
# scaled they are (0, 1, 1) and (1, 0, 0), and the scaled reference point is (1.1, 1.1, 1.1).
CORNERS = reference_set([[1.0, 2.0, 10.0], [3.0, 1.0, 0.0]])
MIDDLE = np.array([[2.0, 1.5, 5.0]])  # scaled (0.5, 0.5, 0.5)

# MFU = W / (N peak T) = 50 / (N T) with these constants.
SCALE = RewardScale(t_base=100.0, c_base=2.0, model_flops=50.0, peak_flops=1.0)
# J for weights (1, 1, 1): T / 100 + (1 - 50 / (N T)) + C / 2
#   (50, 4, 1):  0.5 + 0.75 + 0.5 = 1.75;   (100, 1, 0): 1 + 0.5 + 0 = 1.5
PREFERENCE_FRONT = np.array([[50.0, 4.0, 1.0], [100.0, 1.0, 0.0]])


def random_reference(seed: int, n: int = 12) -> ReferenceSet:
    """A non-dominated set with positive values on different scales per objective."""
    unit = moocore.generate_ndset(n, 3, "simplex", seed=seed)
    return reference_set(unit * np.array([300.0, 20.0, 3.0]) + np.array([40.0, 2.0, 0.1]))


def random_method(reference: ReferenceSet, seed: int) -> np.ndarray:
    """Some reference points made somewhat worse (or a little better), plus random points
    around the reference's box."""
    rng = np.random.default_rng(1000 + seed)
    ref = reference.objectives
    picked = ref[rng.choice(len(ref), size=len(ref) // 2, replace=False)]
    worse = picked * rng.uniform(0.98, 1.3, size=picked.shape)
    ideal, nadir = ref.min(axis=0), ref.max(axis=0)
    spread = rng.uniform(ideal * 0.9, nadir * 1.2, size=(5, 3))
    return np.vstack([worse, spread])


def random_scaled(seed: int) -> tuple[ReferenceSet, np.ndarray, np.ndarray, np.ndarray]:
    """A random reference, a random method front, and both scaled to the reference's box
    (method ``a``, reference ``z``)."""
    reference = random_reference(seed)
    method = random_method(reference, seed)
    return (reference, method, scale_to_box(method, reference.normalisation),
            scale_to_box(reference.objectives, reference.normalisation))


def brute_hypervolume(points: np.ndarray, ref: np.ndarray) -> float:
    """Exact hypervolume on the grid of all point coordinates: a cell counts when some point
    weakly dominates its lower corner."""
    points = points[np.all(points < ref, axis=1)]
    if not len(points):
        return 0.0
    axes = [np.unique(np.append(points[:, i], ref[i])) for i in range(3)]
    lows = np.stack(np.meshgrid(*(a[:-1] for a in axes), indexing="ij"), axis=-1)
    widths = np.prod(np.stack(np.meshgrid(*(np.diff(a) for a in axes), indexing="ij"),
                              axis=-1), axis=-1)
    covered = np.all(points[:, None, None, None, :] <= lows[None], axis=-1).any(axis=0)
    return float(widths[covered].sum())


# -- coverage -------------------------------------------------------------------------------


def test_coverage_of_equal_three_percent_worse_and_better_points():
    """An equal point and a better one count at eps 0; a point 3 % worse in one objective
    only counts once eps reaches 3 %."""
    method = np.array([[1.0, 3.0, 0.0],     # equal to the first reference point
                       [2.06, 2.0, 1.0],    # 3 % slower than the second
                       [2.9, 1.0, 1.5]])    # better than the third
    assert coverage(method, STAIRS, 0.0) == pytest.approx(2 / 3)
    assert coverage(method, STAIRS, 0.01) == pytest.approx(2 / 3)
    assert coverage(method, STAIRS, 0.029) == pytest.approx(2 / 3)
    assert coverage(method, STAIRS, 0.03) == 1.0
    assert coverage(method, STAIRS, 0.05) == 1.0


def test_coverage_of_a_single_point_by_objective():
    """3 % worse in any one objective is covered at eps 0.03 and above, not below."""
    ref = reference_set([[10.0, 4.0, 2.0]])
    for i in range(3):
        worse = np.array([[10.0, 4.0, 2.0]])
        worse[0, i] *= 1.03
        assert coverage(worse, ref, 0.0) == 0.0, i
        assert coverage(worse, ref, 0.01) == 0.0, i
        assert coverage(worse, ref, 0.03) == 1.0, i
        assert coverage(worse, ref, 0.05) == 1.0, i


def test_a_zero_objective_is_covered_only_by_zero():
    """A reference point with cost 0 is matched by no positive cost, however large eps."""
    ref = reference_set([[1.0, 3.0, 0.0]])
    for eps in (0.0, 0.05, 1.0, 100.0):
        assert coverage(np.array([[1.0, 3.0, 1e-6]]), ref, eps) == 0.0
        assert coverage(np.array([[1.0, 3.0, 0.0]]), ref, eps) == 1.0


def test_coverage_of_no_points_is_zero():
    assert coverage(EMPTY, STAIRS, 0.0) == 0.0
    assert coverage(EMPTY, STAIRS, 1.0) == 0.0


def test_coverage_takes_a_single_point_as_a_flat_vector():
    assert coverage(np.array([2.0, 2.0, 1.0]), STAIRS, 0.0) == pytest.approx(1 / 3)


# -- epsilon indicators ---------------------------------------------------------------------


def test_epsilon_multiplicative_hand_values():
    ref = reference_set([[1.0, 2.0, 4.0]])
    assert epsilon_multiplicative(np.array([[2.0, 2.0, 4.0]]), ref) == 2.0
    assert epsilon_multiplicative(np.array([[2.0, 1.0, 1.0]]), ref) == 2.0
    assert epsilon_multiplicative(np.array([[0.5, 1.0, 1.0]]), ref) == 0.5
    # z1 = (1, 2, 4): a1 matches it (1); z2 = (4, 2, 1): a1 needs 4, a2 needs 1.5.
    two = reference_set([[1.0, 2.0, 4.0], [4.0, 2.0, 1.0]])
    assert epsilon_multiplicative(np.array([[1.0, 2.0, 4.0], [4.0, 3.0, 1.0]]), two) == 1.5
    assert epsilon_multiplicative(EMPTY, ref) == np.inf


def test_epsilon_multiplicative_zero_convention():
    """A reference cost of 0 is matched only by a cost of 0, which counts as ratio 1."""
    ref = reference_set([[1.0, 2.0, 0.0]])
    assert epsilon_multiplicative(np.array([[1.0, 2.0, 0.5]]), ref) == np.inf
    assert epsilon_multiplicative(np.array([[1.0, 2.0, 0.0]]), ref) == 1.0
    assert epsilon_multiplicative(np.array([[2.0, 2.0, 0.0]]), ref) == 2.0
    assert epsilon_multiplicative(np.array([[0.5, 1.0, 0.0]]), ref) == 1.0
    # another method point with cost 0 makes the infinite one irrelevant
    assert epsilon_multiplicative(np.array([[1.0, 2.0, 0.5], [3.0, 2.0, 0.0]]), ref) == 3.0


@pytest.mark.parametrize("seed", SEEDS)
def test_coverage_is_full_exactly_when_epsilon_multiplicative_allows_it(seed):
    """coverage(eps) == 1 iff epsilon_multiplicative <= 1 + eps, on positive random fronts;
    the boundary itself is covered, a hair below it is not."""
    reference = random_reference(seed)
    method = random_method(reference, seed)
    e = epsilon_multiplicative(method, reference)
    assert e > 1  # the random method is worse somewhere, so the boundary is meaningful
    for eps in (0.0, 0.01, 0.03, 0.05, 0.1, 0.2, 0.3, 0.5, 1.0):
        assert (coverage(method, reference, eps) == 1.0) == (e <= 1 + eps), eps
    assert coverage(method, reference, e - 1) == 1.0
    assert coverage(method, reference, (e - 1) - 1e-6) < 1.0


@pytest.mark.parametrize("seed", SEEDS)
def test_epsilon_multiplicative_matches_moocore(seed):
    reference = random_reference(seed)
    method = random_method(reference, seed)
    assert epsilon_multiplicative(method, reference) == pytest.approx(
        moocore.epsilon_mult(method, ref=reference.objectives), rel=1e-12)


@pytest.mark.parametrize("seed", SEEDS)
def test_epsilon_additive_matches_moocore_and_the_formula(seed):
    """On scaled points: max over z of min over a of max over i of (a_i - z_i)."""
    reference, method, a, z = random_scaled(seed)
    brute = (a[:, None, :] - z[None]).max(axis=2).min(axis=0).max()
    got = epsilon_additive(method, reference)
    assert got == pytest.approx(moocore.epsilon_additive(a, ref=z), rel=1e-12, abs=1e-12)
    assert got == pytest.approx(brute, rel=1e-12, abs=1e-12)


def test_epsilon_additive_and_igd_plus_hand_values():
    """The scaled point (0.5, 0.5, 0.5) against (0, 1, 1) and (1, 0, 0): shifts of 0.5 each;
    IGD+ distances 0.5 and sqrt(0.5^2 + 0.5^2)."""
    assert epsilon_additive(MIDDLE, CORNERS) == pytest.approx(0.5)
    assert igd_plus(MIDDLE, CORNERS) == pytest.approx((0.5 + np.sqrt(0.5)) / 2)
    assert igd_plus(CORNERS.objectives, CORNERS) == 0.0
    assert epsilon_additive(CORNERS.objectives, CORNERS) == 0.0
    assert igd_plus(EMPTY, CORNERS) == np.inf
    assert epsilon_additive(EMPTY, CORNERS) == np.inf


@pytest.mark.parametrize("seed", SEEDS)
def test_igd_plus_matches_pymoo_and_the_formula(seed):
    """Mean over z of min over a of the norm of max(a - z, 0), on scaled points."""
    reference, method, a, z = random_scaled(seed)
    brute = np.sqrt((np.maximum(a[:, None, :] - z[None], 0.0) ** 2).sum(axis=2)).min(
        axis=0).mean()
    got = igd_plus(method, reference)
    assert got > 0
    assert got == pytest.approx(IGDPlus(z)(a), rel=1e-12)
    assert got == pytest.approx(brute, rel=1e-12)


# -- hypervolume ----------------------------------------------------------------------------


def test_hypervolume_ratio_hand_values():
    """Scaled reference point r = (1.1, 1.1, 1.1). Alone, (0, 1, 1) dominates
    1.1 * 0.1 * 0.1 = 0.011 and (1, 0, 0) dominates 0.1 * 1.1 * 1.1 = 0.121; they share the
    box above (1, 1, 1), 0.1^3 = 0.001, so the reference's volume is 0.131. (0.5, 0.5, 0.5)
    dominates 0.6^3 = 0.216 and shares 0.6 * 0.1 * 0.1 = 0.006 with (0, 1, 1)."""
    assert CORNERS.hypervolume == pytest.approx(0.131)
    assert hypervolume_ratio(CORNERS.objectives, CORNERS) == pytest.approx(1.0)
    assert hypervolume_ratio(CORNERS.objectives[:1], CORNERS) == pytest.approx(0.011 / 0.131)
    assert hypervolume_ratio(CORNERS.objectives[1:], CORNERS) == pytest.approx(0.121 / 0.131)
    two = np.vstack([CORNERS.objectives[:1], MIDDLE])
    assert hypervolume_ratio(two, CORNERS) == pytest.approx((0.011 + 0.216 - 0.006) / 0.131)


def test_hypervolume_ratio_ignores_points_outside_the_reference_box():
    outside = np.array([[3.3, 1.0, 0.0]])  # scaled (1.15, 0, 0), beyond r = 1.1
    assert hypervolume_ratio(outside, CORNERS) == 0.0
    assert hypervolume_ratio(EMPTY, CORNERS) == 0.0


@pytest.mark.parametrize("seed", SEEDS)
def test_hypervolume_ratio_of_the_reference_and_its_subsets(seed):
    reference = random_reference(seed)
    assert hypervolume_ratio(reference.objectives, reference) == pytest.approx(1.0, rel=1e-12)
    assert hypervolume_ratio(reference.objectives[::-1], reference) == pytest.approx(1.0)
    subset = reference.objectives[1:]
    assert 0 < hypervolume_ratio(subset, reference) < 1


@pytest.mark.parametrize("seed", SEEDS)
def test_hypervolume_ratio_matches_pymoo_and_a_grid_count(seed):
    reference, method, a, z = random_scaled(seed)
    r = scale_to_box(np.array(reference.normalisation["hv_reference"]),
                     reference.normalisation)[0]
    assert np.allclose(r, 1.1)  # nadir + 10 % of the range, scaled
    inside = a[np.all(a < r, axis=1)]
    assert 0 < len(inside) < len(a)  # some random points lie outside the box
    got = hypervolume_ratio(method, reference)
    hv = HV(ref_point=r)
    assert got == pytest.approx(hv(inside) / hv(z), rel=1e-12)
    assert got == pytest.approx(brute_hypervolume(a, r) / brute_hypervolume(z, r), rel=1e-9)


# -- C metric -------------------------------------------------------------------------------


def test_c_metric_hand_values_both_directions():
    a = np.array([[1.0, 1.0, 1.0]])
    b = np.array([[2.0, 2.0, 2.0], [0.5, 3.0, 3.0]])
    assert c_metric(a, b) == 0.5
    assert c_metric(b, a) == 0.0
    c = np.array([[2.0, 2.0, 2.0], [3.0, 3.0, 3.0], [0.5, 0.5, 9.0], [4.0, 0.1, 4.0]])
    assert c_metric(a, c) == 0.5
    assert c_metric(c, a) == 0.0


def test_c_metric_counts_equal_points():
    """Weak dominance: a point dominates its equal; a set covers itself entirely."""
    a = np.array([[1.0, 2.0, 3.0]])
    assert c_metric(a, a) == 1.0
    assert c_metric(STAIRS.objectives, STAIRS.objectives) == 1.0
    # equal in two objectives, worse in the third: still weakly dominated
    assert c_metric(a, np.array([[1.0, 2.0, 3.5]])) == 1.0
    assert c_metric(np.array([[1.0, 2.0, 3.5]]), a) == 0.0


def test_c_metric_and_coverage_forgive_solver_rounding_only():
    """A point worse by 1e-12 relative still counts as equal; worse by 1e-6 does not."""
    a = np.array([[1.0, 2.0, 3.0]])
    assert c_metric(a * (1 + 1e-12), a) == 1.0
    assert c_metric(a * (1 + 1e-6), a) == 0.0
    ref = reference_set(a)
    assert coverage(a * (1 + 1e-12), ref, 0.0) == 1.0
    assert coverage(a * (1 + 1e-6), ref, 0.0) == 0.0


def test_c_metric_of_empty_sets_is_zero():
    a = np.array([[1.0, 2.0, 3.0]])
    assert c_metric(EMPTY, a) == 0.0
    assert c_metric(a, EMPTY) == 0.0
    assert c_metric(EMPTY, EMPTY) == 0.0


# -- preferences ----------------------------------------------------------------------------


def test_preference_gap_hand_values():
    """J* = 1.5 at (100, 1, 0); (100, 2, 0) has MFU 0.25, J = 1 + 0.75 = 1.75, gap 1/6."""
    weights = (1.0, 1.0, 1.0)
    assert preference_gap(PREFERENCE_FRONT, PREFERENCE_FRONT, weights, SCALE) == 0.0
    assert preference_gap(np.array([[100.0, 2.0, 0.0]]), PREFERENCE_FRONT, weights,
                          SCALE) == pytest.approx(1 / 6)
    # the best of several method points counts; (60, 4, 1) has J = 0.6 + 0.7917 + 0.5
    method = np.array([[60.0, 4.0, 1.0], [100.0, 2.0, 0.0]])
    assert preference_gap(method, PREFERENCE_FRONT, weights, SCALE) == pytest.approx(1 / 6)
    # speed only: J = T / 100, J* = 0.5; a plan at T = 60 is 20 % worse
    assert preference_gap(method, PREFERENCE_FRONT, (1.0, 0.0, 0.0),
                          SCALE) == pytest.approx(0.2)
    assert preference_gap(EMPTY, PREFERENCE_FRONT, weights, SCALE) == np.inf


def test_chosen_point_is_the_least_scalarised_cost():
    assert chosen_point(PREFERENCE_FRONT, (1.0, 1.0, 1.0), SCALE) == 1
    assert chosen_point(PREFERENCE_FRONT, (1.0, 0.0, 0.0), SCALE) == 0
    assert chosen_point(PREFERENCE_FRONT, (0.0, 0.0, 1.0), SCALE) == 1
    rng = np.random.default_rng(7)
    points = rng.uniform([50.0, 1.0, 0.0], [400.0, 24.0, 3.0], size=(30, 3))
    for weights in rng.uniform(0.0, 1.0, size=(5, 3)):
        j = scalarised_cost(points, weights, SCALE)
        chosen = chosen_point(points, weights, SCALE)
        assert chosen == int(np.argmin(j))
        assert np.all(j[chosen] <= j)


def test_step_time_gaps_hand_values():
    """T* is the least reference step time with no more GPUs and no more cost."""
    reference = reference_set([[50.0, 4.0, 1.0], [100.0, 2.0, 0.0]])
    method = np.array([[60.0, 4.0, 1.0],    # both frugal enough: T* = 50
                       [110.0, 2.0, 0.0],   # only (100, 2, 0): T* = 100
                       [40.0, 8.0, 0.5],    # cost 0.5 < 1: only (100, 2, 0)
                       [80.0, 1.0, 0.0],    # fewer GPUs than any reference point
                       [30.0, 3.0, 5.0]])   # 3 GPUs: only (100, 2, 0)
    gaps = step_time_gaps(method, reference)
    assert gaps[:3] == pytest.approx([0.2, 0.1, -0.6])
    assert np.isnan(gaps[3])
    assert gaps[4] == pytest.approx(-0.7)
    assert step_time_gaps(reference.objectives, reference) == pytest.approx([0.0, 0.0])
    assert step_time_gaps(EMPTY, reference).shape == (0,)


# -- MFU space ------------------------------------------------------------------------------


def test_reference_set_of_a_front_uses_its_committed_normalisation(quick_front):
    _, front = quick_front
    reference = ReferenceSet.of_front(front)
    assert np.array_equal(reference.objectives, front.objectives)
    assert reference.normalisation == front.normalisation
    assert hypervolume_ratio(front.objectives, reference) == pytest.approx(1.0)
    assert coverage(front.objectives, reference, 0.0) == 1.0


def test_in_mfu_space_is_the_non_dominated_part_with_one_over_mfu(quick_front):
    """(T, N, C) -> (T, N peak T / W, C); the result has no dominated row, keeps every point
    not dominated there, and gets its own reference box."""
    instance, front = quick_front
    scale = RewardScale.of(instance, 1.0, 1.0)
    mapped = ReferenceSet.in_mfu_space(front, scale)
    t, n, c = front.objectives.T
    expected = np.column_stack([t, n * scale.peak_flops * t / scale.model_flops, c])
    m = mapped.objectives
    assert len(m) >= 2
    # every mapped row is a front point's row, with 1/MFU = N peak T / W
    for row in m:
        match = np.flatnonzero(np.all(np.isclose(expected, row, rtol=1e-12), axis=1))
        assert len(match) >= 1
    # no mapped row is weakly dominated by another (pairwise, without moocore)
    le = np.all(m[:, None, :] <= m[None], axis=2)
    lt = np.any(m[:, None, :] < m[None], axis=2)
    assert not np.any(le & lt)
    assert len(np.unique(m, axis=0)) == len(m)
    # every front point, kept or left out, is weakly dominated by a kept one
    assert np.all(np.all(m[:, None, :] <= expected[None] * (1 + 1e-12), axis=2).any(axis=0))
    assert len(m) == nondominated_mask(expected).sum()
    assert mapped.normalisation == reference_box(m)
    assert hypervolume_ratio(m, mapped) == pytest.approx(1.0)


def test_indicators_are_listed_once_and_score_no_points_by_their_empty_value():
    from evaluation.metrics import INDICATORS

    names = [indicator.name for indicator in INDICATORS]
    assert len(set(names)) == len(names)
    assert len({indicator.label for indicator in INDICATORS}) == len(names)
    for indicator in INDICATORS:
        assert indicator.do(EMPTY, STAIRS) == indicator.empty, indicator.name
    assert {i.name: i.empty for i in INDICATORS if i.empty != np.inf} == {
        "coverage_0": 0.0, "coverage_0.01": 0.0, "coverage_0.02": 0.0, "coverage_0.05": 0.0,
        "hv_ratio": 0.0, "c_method_exact": 0.0, "c_exact_method": 0.0}


def test_a_new_indicator_states_only_its_formula():
    """The base class hands a subclass non-empty, normalised points: here the largest
    normalised coordinate of the method, which must lie in the reference's box."""
    from evaluation.metrics import Indicator

    class Largest(Indicator):
        name, label, normalised = "largest", "max", True

        def _do(self, method, ref, reference):
            return method.max()

    assert Largest().do(EMPTY, CORNERS) == np.inf
    assert Largest().do(CORNERS.objectives, CORNERS) == pytest.approx(1.0)
    assert Largest().do(MIDDLE, CORNERS) == pytest.approx(0.5)
