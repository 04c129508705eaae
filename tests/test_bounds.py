"""The capacity-DP floors of solvers.bounds are valid: no plan of the pair under the caps has a
smaller period or step time (checked against every plan of tiny instances)."""

from __future__ import annotations

import numpy as np
import pytest

from formulation.evaluator import evaluate_batch
from instances.tiny import tiny_instance
from solvers.bounds import PairBounds
from solvers.bruteforce import enumerate_plans
from solvers.tables import all_pair_tables

CASES = [dict(domains=4, layers=12, free_gpus=(1, 1, 1, 1)),
         dict(domains=3, layers=8, free_gpus=(2, 2, 2), recompute=("selective", "full")),
         dict(domains=3, layers=6, tp=(1, 2, 4), max_stages=3),
         dict(domains=5, layers=10, free_gpus=(1, 1, 2, 2, 1), gpu="H100-80GB")]


def _least_by_caps(instance) -> dict[tuple[int, int, int, float], tuple[float, float]]:
    """(dp, micro-batch, GPUs, cost) -> least (period, step time) of the feasible plans with
    exactly those values: a floor under caps (GPUs, cost) must not exceed either."""
    least: dict[tuple[int, int, int, float], tuple[float, float]] = {}
    for batch in enumerate_plans(instance):
        result = evaluate_batch(instance, batch)
        ok = result.feasible
        keys = np.stack([batch.dp[ok], batch.micro_batch[ok], result.gpus[ok],
                         result.comm_cost[ok]], axis=1)
        unique, inverse = np.unique(keys, axis=0, return_inverse=True)
        periods = np.full(len(unique), np.inf)
        steps = np.full(len(unique), np.inf)
        np.minimum.at(periods, inverse.ravel(), result.period_s[ok])
        np.minimum.at(steps, inverse.ravel(), result.step_time_s[ok])
        for row, period, step in zip(unique, periods, steps, strict=True):
            key = (int(row[0]), int(row[1]), int(row[2]), float(row[3]))
            old = least.get(key, (np.inf, np.inf))
            least[key] = (min(old[0], period), min(old[1], step))
    return least


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"k{c['domains']}-l{c['layers']}")
def test_floors_never_exceed_a_feasible_plan(case):
    instance = tiny_instance(5, **case)
    bounds = {(t.dp, t.micro_batch): PairBounds(t) for t in all_pair_tables(instance)}
    least = _least_by_caps(instance)
    assert len(least) > 10
    for (dp, b, gpus, cost), (period, step) in least.items():
        pair = bounds[dp, b]
        for caps in ((None, None), (gpus, None), (gpus, cost), (None, cost)):
            assert pair.period_floor(*caps) <= period
            assert pair.step_floor(*caps) <= step


@pytest.mark.parametrize("case", CASES[1:3], ids=lambda c: f"k{c['domains']}-l{c['layers']}")
def test_the_period_floor_is_tight_on_single_domain_plans(case):
    """Measured: on single-domain plans (cost cap 0) the floor is within 0.1 % of the least
    period of the pair's plans with at most that many GPUs, at the median."""
    instance = tiny_instance(5, **case)
    bounds = {(t.dp, t.micro_batch): PairBounds(t) for t in all_pair_tables(instance)}
    least = {(dp, b, gpus): period for (dp, b, gpus, cost), (period, _) in
             _least_by_caps(instance).items() if cost == 0}
    ratios = []
    for dp, b, gpus in least:
        best = min(p for (d, m, n), p in least.items() if (d, m) == (dp, b) and n <= gpus)
        ratios.append(best / bounds[dp, b].period_floor(gpus, 0.0))
    assert min(ratios) >= 1.0
    assert np.median(ratios) <= 1.001


def test_a_cost_cap_below_any_boundary_confines_plans_to_one_domain():
    """Below the cheapest WAN boundary the pool of GPUs is one domain's, so the floor is the
    best single domain's: never below the floor without the cost cap."""
    instance = tiny_instance(2, domains=4, layers=12, free_gpus=(1, 1, 1, 1))
    for tables in all_pair_tables(instance):
        bounds = PairBounds(tables)
        assert bounds.period_floor(cost_cap=0.0) >= bounds.period_floor()


def test_window_minimum_matches_the_naive_one():
    from solvers.bounds import _window_min

    rng = np.random.default_rng(7)
    values = rng.normal(size=(3, 40))
    for span in (1, 2, 3, 5, 8, 13, 40, 55):
        naive = np.stack([values[:, max(0, l - span + 1):l + 1].min(axis=1)
                          for l in range(values.shape[1])], axis=1)
        assert np.array_equal(_window_min(values, span), naive)


@pytest.mark.parametrize("case", CASES[1:3], ids=lambda c: f"k{c['domains']}-l{c['layers']}")
def test_the_step_floor_finds_period_and_compute_together(case):
    """The joint DP is never looser than the separate floors of the period and the other
    terms, and on single-domain plans it is closer to the least step time (in the median)."""
    instance = tiny_instance(5, **case)
    least = {(dp, b, gpus): step for (dp, b, gpus, cost), (_, step) in
             _least_by_caps(instance).items() if cost == 0}
    joint, apart = [], []
    for tables in all_pair_tables(instance):
        bounds = PairBounds(tables)
        for dp, b, gpus in least:
            if (dp, b) != (tables.dp, tables.micro_batch):
                continue
            best = min(s for (d, m, n), s in least.items() if (d, m) == (dp, b) and n <= gpus)
            branches = bounds._branches(gpus, 0.0)
            rest = bounds._rest_floor[1]
            floor = min((tables.micro_batches - 1) * x.period + x.delays for x in branches) + rest
            joint.append(best / bounds.step_floor(gpus, 0.0))
            apart.append(best / floor)
    assert min(joint) >= 1.0 and all(j <= a * (1 + 1e-9) for j, a in zip(joint, apart, strict=True))
    assert np.median(joint) < np.median(apart)


def test_a_budget_above_the_widest_plan_is_the_widest_one(monkeypatch: pytest.MonkeyPatch):
    """No plan uses more tp units than its positions times the widest stage, so a larger
    budget gives the same capacity, computed on arrays of that size: 10 M free GPUs a
    domain once made the capacity DP allocate 10 M entries a position (17 s a front)."""
    instance = tiny_instance(5, **CASES[2])
    pair = PairBounds(next(iter(all_pair_tables(instance))))
    sizes = []
    real_full = np.full
    monkeypatch.setattr(np, "full", lambda shape, *a, **k: (sizes.append(shape),
                                                            real_full(shape, *a, **k))[1])
    for period in (pair.candidates[0], pair.candidates[len(pair.candidates) // 2], np.inf):
        assert pair._capacity(period, 10_000_000, 10_000_000) \
            == pair._capacity(period, pair.widest, 10_000_000)
    assert max(np.prod(shape) for shape in sizes) == pair.widest + 1
