"""The CP-SAT engine (SPEC 7: the second exact engine) against the evaluator, HiGHS and brute force.

Both engines load in one process: ``highspy`` is pinned to the HiGHS release that OR-Tools
bundles (two different ``libhighs.so.1`` in one process break whichever loads second).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from formulation.evaluator import evaluate_batch
from formulation.instance import Constraints, Instance, SearchSpace
from formulation.plan import Plan
from formulation.result import evaluate
from instances.suites import suite_paths
from instances.tiny import tiny_instance
from solvers.bruteforce import enumerate_plans
from solvers.cpsat import TIME_RANGE_BITS, CpSatEngine
from solvers.engine import SolveRequest, SolveStatus
from solvers.highs import HighsEngine
from solvers.tables import all_pair_tables, pair_tables

PAIRS = ((1, 1), (2, 1))  # (dp, micro-batch) pairs of the quick instance
TOLERANCE = 1e-6  # SPEC 7: model values equal the evaluator's


def _solve(engine: str, instances: list[Instance], cases: list[dict]) -> list[dict]:
    """Solve the cases (instance index, dp, micro_batch, request fields) with one engine per
    (instance, pair); each result as a dict with the scaling error of the model it used."""
    engines, out = {}, []
    for case in cases:
        key = (case["instance"], case["dp"], case["micro_batch"])
        if key not in engines:
            tables = pair_tables(instances[key[0]], key[1], key[2])
            engines[key] = CpSatEngine(tables) if engine == "cpsat" else HighsEngine(tables)
        request = SolveRequest(**case.get("solve", {}))
        solve = engines[key].solve(request)
        scaling = engines[key].scale_for(request).error_bound() if engine == "cpsat" \
            else (0.0, 0.0)
        out.append({"status": solve.status.value, "plan": solve.plan and solve.plan.to_dict(),
                    "values": solve.values and dataclasses.asdict(solve.values),
                    "objective": solve.objective, "bound": solve.bound,
                    "wall": solve.wall_time_s, "scaling": scaling})
    return out


def _check_values(instance: Instance, result: dict) -> None:
    """The engine's values are the evaluator's values of its plan, and the plan is feasible."""
    evaluation = evaluate(instance, Plan.from_dict(result["plan"]))
    assert evaluation.feasible, evaluation.violations
    values = result["values"]
    assert values["gpus"] == evaluation.gpus
    for ours, theirs in ((values["step_time_s"], evaluation.step_time_s),
                         (values["comm_cost"], evaluation.comm_cost)):
        assert ours == pytest.approx(theirs, rel=TOLERANCE, abs=1e-12)


@pytest.fixture(scope="module")
def quick() -> Instance:
    """The smallest quick-suite instance with a narrower search space (fast HiGHS solves)."""
    instance = Instance.load(suite_paths("quick")[0])
    return instance.replace(search=SearchSpace(
        dp=(1, 2), tp=(2, 4, 8), micro_batch=(1,), recompute=("none", "selective"),
        max_stages=3))


@pytest.fixture(scope="module")
def optima(quick: Instance) -> list[dict]:
    """Min-step-time CP-SAT solves of each pair, then a 0.01 s one of each."""
    cases = [{"instance": 0, "dp": dp, "micro_batch": b} for dp, b in PAIRS]
    cases += [{**c, "solve": {"time_limit": 0.01}} for c in cases]
    assert SolveStatus.OPTIMAL.value == "optimal"
    return _solve("cpsat", [quick], cases)


def test_min_step_values_equal_the_evaluator(quick: Instance, optima: list[dict]) -> None:
    for result in optima[:len(PAIRS)]:
        assert result["status"] == "optimal"
        _check_values(quick, result)
        step = result["values"]["step_time_s"]
        assert result["objective"] == pytest.approx(step, rel=1e-12)
        assert step * (1 - TOLERANCE) <= result["bound"] + 1e-9 <= step * (1 + 1e-12) + 1e-9


def test_scaling_error_bound_is_small(optima: list[dict]) -> None:
    for result in optima[:len(PAIRS)]:
        step_error, cost_error = result["scaling"]
        assert 0 < step_error < TOLERANCE * result["values"]["step_time_s"]
        assert 0 < cost_error < 1e-8


def test_min_step_equals_highs(quick: Instance, optima: list[dict]) -> None:
    """The two exact engines agree on the optimum within the scaling bound: CP-SAT's plan is
    optimal for the rounded coefficients, which moves any plan by at most the bound."""
    highs = _solve("highs", [quick], [{"instance": 0, "dp": dp, "micro_batch": b}
                                      for dp, b in PAIRS])
    for ours, theirs in zip(optima[:len(PAIRS)], highs, strict=True):
        assert theirs["status"] == "optimal"
        a, b = ours["values"]["step_time_s"], theirs["values"]["step_time_s"]
        assert abs(a - b) <= 2 * ours["scaling"][0] + TOLERANCE * b


def test_time_limit_never_crashes(quick: Instance, optima: list[dict]) -> None:
    for result in optima[len(PAIRS):]:
        assert result["status"] in ("optimal", "limit")
        if result["plan"] is not None:
            _check_values(quick, result)


def test_caps_are_honoured(quick: Instance, optima: list[dict]) -> None:
    best = optima[0]["values"]
    step_error, cost_error = optima[0]["scaling"]
    dp, b = PAIRS[0]
    caps = [{"gpu_cap": best["gpus"] - 1}, {"cost_cap": 0.6 * best["comm_cost"]},
            {"step_cap": best["step_time_s"], "weights": (0.0, 1.0, 0.0)},
            {"step_cap": best["step_time_s"], "weights": (0.0, 0.0, 1.0)},
            {"weights": (1.0, 0.01, 0.1), "gpu_cap": best["gpus"]},
            {"gpu_cap": 0}, {"cost_cap": -1.0}, {"step_cap": 0.999 * best["step_time_s"]}]
    results = _solve("cpsat", [quick], [{"instance": 0, "dp": dp, "micro_batch": b,
                                         "solve": c} for c in caps])
    for cap, result in zip(caps[:5], results[:5], strict=True):
        assert result["status"] == "optimal", cap
        _check_values(quick, result)
        values = result["values"]
        assert values["gpus"] <= cap.get("gpu_cap", np.inf)
        assert values["comm_cost"] <= cap.get("cost_cap", np.inf) + cost_error
        # the plan at the optimum step time is within its own cap: never excluded by rounding
        assert values["step_time_s"] <= cap.get("step_cap", np.inf) + step_error
        weights = cap.get("weights", (1.0, 0.0, 0.0))
        objective = float(np.dot(weights, [values[k] for k in ("step_time_s", "gpus",
                                                                "comm_cost")]))
        assert result["objective"] == pytest.approx(objective, rel=1e-12)
        # a valid bound; loose by the weight resolution (~1e-5) when several weights mix
        mixed = np.count_nonzero(weights) > 1
        assert objective * (1 - (1e-4 if mixed else TOLERANCE)) <= result["bound"] <= objective
    assert results[2]["values"]["gpus"] <= best["gpus"]
    assert results[3]["values"]["comm_cost"] <= best["comm_cost"] + cost_error
    assert all(r["status"] == "infeasible" and r["plan"] is None for r in results[5:])


def _brute_force_min_step(instance: Instance) -> float:
    best = np.inf
    for batch in enumerate_plans(instance):
        result = evaluate_batch(instance, batch)
        best = min(best, result.step_time_s[result.feasible].min(initial=np.inf))
    return float(best)


@pytest.mark.parametrize("constraints", [Constraints(wan_share_cap=0.3),
                                         Constraints(cost_budget=0.05)], ids=["wan", "budget"])
def test_instance_constraints_match_brute_force(constraints: Constraints) -> None:
    """With a WAN share cap or a cost budget (both binding here), CP-SAT's optimum is brute
    force's. The cap is stated against the tight period, which an epigraph does not give."""
    base = tiny_instance(4, domains=4, layers=12, free_gpus=(1, 1, 1, 1))
    instance = base.replace(constraints=constraints,
                            search=SearchSpace(dp=(1,), tp=(1,), micro_batch=(1,),
                                               recompute=("none", "full"), max_stages=3))
    free = _brute_force_min_step(instance.replace(constraints=Constraints()))
    best = _brute_force_min_step(instance)
    assert best > free * (1 + 1e-3)  # the constraint binds
    (result,) = _solve("cpsat", [instance], [{"instance": 0, "dp": 1, "micro_batch": 1}])
    assert result["status"] == "optimal"
    _check_values(instance, result)
    step = result["values"]["step_time_s"]
    assert abs(step - best) <= 2 * result["scaling"][0] + TOLERANCE * best


def test_a_step_cap_leaves_the_optimum_in_place() -> None:
    """Regression (issue 13): at a step cap of 0.6 s CP-SAT, with every time in one integer
    unit 2^-36 s, called a plan of 0.5617 s optimal where one of 0.5591 s exists; so did it
    on a K = 10 full-space instance with integers up to ~1.6e15. Counting the period in
    units of unit / (m - 1) keeps the integers within 2^TIME_RANGE_BITS and the optimum in
    place."""
    instance = tiny_instance(3, domains=3, layers=6)
    pair = instance.replace(search=dataclasses.replace(instance.search, dp=(2,),
                                                       micro_batch=(1,)))
    best = np.inf
    for batch in enumerate_plans(pair):
        result = evaluate_batch(pair, batch)
        ok = result.feasible & (result.gpus <= 10)
        best = min(best, result.step_time_s[ok].min(initial=np.inf))
    engine = CpSatEngine(pair_tables(instance, 2, 1))
    for step_cap in (None, 0.6, best * (1 + 1e-9)):
        request = SolveRequest(gpu_cap=10, step_cap=step_cap)
        solve = engine.solve(request)
        assert solve.status == SolveStatus.OPTIMAL
        assert solve.values.step_time_s == pytest.approx(best, rel=TOLERANCE)
        scaled = engine.scale_for(request)
        assert scaled.high < 2 ** (TIME_RANGE_BITS + 1)
        assert solve.bound <= solve.objective


def test_interleaved_cells_equal_brute_force_cell_by_cell() -> None:
    """Each interleaved cell's CP-SAT model (solvers.cpsat_interleaved): its least step time
    is brute force's over the cell's plans (within SPEC 7's tolerance, the scaling bound
    being below it), its bound valid; a cell without a feasible plan is infeasible."""
    base = tiny_instance(2, layers=12, free_gpus=(2, 4, 2))
    instance = base.replace(search=dataclasses.replace(
        base.search, max_stages=4, tp=(1,), recompute=("none",), virtual_stages=(1, 2, 3)))
    best: dict[tuple, float] = {}
    for batch in enumerate_plans(instance):
        result = evaluate_batch(instance, batch)
        for i in np.flatnonzero(result.admissible & (batch.virtual_stages > 1)):
            key = (int(batch.dp[i]), int(batch.micro_batch[i]), int(batch.virtual_stages[i]),
                   int(batch.num_stages[i]))
            best[key] = min(best.get(key, np.inf), float(result.step_time_s[i]))
    cells = [t for t in all_pair_tables(instance, interleaved=True) if t.interleaved]
    assert {(t.virtual_stages, t.positions) for t in cells} == {(2, 2), (2, 4), (3, 2), (3, 4)}
    for tables in cells:
        engine = CpSatEngine(tables)
        solve = engine.solve(SolveRequest())
        key = (tables.dp, tables.micro_batch, tables.virtual_stages, tables.positions)
        if key not in best:
            assert solve.status == SolveStatus.INFEASIBLE
            continue
        assert solve.status == SolveStatus.OPTIMAL and solve.plan.virtual_stages > 1
        step = solve.values.step_time_s
        assert step == pytest.approx(best[key], rel=TOLERANCE)
        assert step * (1 - TOLERANCE) <= solve.bound <= step * (1 + 1e-12)
        # at the unit of the optimum's own step time, where a coarse optimum is solved again
        step_error, _ = engine.scale_for(SolveRequest(step_cap=step)).error_bound()
        assert 0 < step_error < TOLERANCE * step

