"""The CP-SAT engine (SPEC 7: the second exact engine) against the evaluator, HiGHS and brute force.

ortools 9.15 and highspy 1.15 both ship a ``libhighs.so.1`` (HiGHS 1.12 and 1.15): in one
process whichever loads second fails. So every solve here runs in a child process
(:func:`_solve`), and this module works whatever else the test session has imported; only
the evaluator and the brute-force enumeration (numpy) run in the test process.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from formulation.evaluator import evaluate_batch
from formulation.instance import Constraints, Instance, SearchSpace
from formulation.plan import Plan
from formulation.result import evaluate
from instances.suites import suite_paths
from instances.tiny import tiny_instance
from solvers.bruteforce import enumerate_plans

ROOT = Path(__file__).resolve().parents[1]
PAIRS = ((1, 1), (2, 1))  # (dp, micro-batch) pairs of the quick instance
TOLERANCE = 1e-6  # SPEC 7: model values equal the evaluator's

CHILD = r"""
import dataclasses, json, sys
from formulation.instance import Instance
from formulation.plan import Plan
from solvers.tables import pair_tables
request = json.load(sys.stdin)
instances = [Instance.from_dict(doc) for doc in request["instances"]]
engines, out = {}, []
for case in request["cases"]:
    key = (case["instance"], case["dp"], case["micro_batch"])
    if key not in engines:
        tables = pair_tables(instances[key[0]], key[1], key[2])
        if request["engine"] == "cpsat":
            from solvers.cpsat import CpSatEngine
            engines[key] = CpSatEngine(tables)
        else:
            from solvers.highs import HighsEngine
            engines[key] = HighsEngine(tables)
    engine = engines[key]
    s = engine.solve(**case.get("solve", {}))
    bound = getattr(engine, "scaling_error_bound", lambda: (0.0, 0.0))()
    out.append({"status": s.status, "plan": s.plan and s.plan.to_dict(),
                "values": s.values and dataclasses.asdict(s.values), "objective": s.objective,
                "bound": s.bound, "wall": s.wall_time_s, "scaling": bound})
print(json.dumps(out))
"""


def _solve(engine: str, instances: list[Instance], cases: list[dict]) -> list[dict]:
    """Run the cases (instance index, dp, micro_batch, solve keyword arguments) in a child."""
    request = {"engine": engine, "instances": [i.to_dict() for i in instances], "cases": cases}
    done = subprocess.run([sys.executable, "-c", CHILD], input=json.dumps(request), cwd=ROOT,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


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
        assert result["status"] in ("optimal", "time_limit")
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
