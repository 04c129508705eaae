"""No unverified claim ends a sweep step: the certifier's rules, with engines that lie."""

from __future__ import annotations

import dataclasses
import time

import pytest

from formulation.plan import Plan, Stage
from formulation.result import evaluate
from instances.tiny import tiny_instance
from solvers.bounds import PairBounds
from solvers.certify import Certifier, KnownPlans, ModelMismatch, Proof
from solvers.engine import (
    EngineStatistics,
    ModelValues,
    Solve,
    SolveRequest,
    SolveStatus,
    make_engine,
)
from solvers.highs import HighsEngine
from solvers.tables import pair_tables

# Issue 13's case: HiGHS's presolve called this dp = 2, micro-batch 1 model infeasible for
# traffic-cost caps between 0 and 0.0859, and the least step time is 3.0943 s at cost 0.
BUGGY = dict(domains=5, layers=10, free_gpus=(1, 1, 2, 2, 1))


@pytest.fixture(scope="module")
def tables():
    return pair_tables(tiny_instance(3, **BUGGY), 2, 1)


class Liar:
    """An engine that answers every request with the same claim."""

    def __init__(self, tables, solve: Solve, name: str = "highs"):
        self.name = name
        self.tables = tables
        self.answer = dataclasses.replace(solve, engine=name)
        self.statistics = EngineStatistics()

    def solve(self, request: SolveRequest) -> Solve:
        return self.statistics.record(self.answer)


def certifier(tables, engine) -> Certifier:
    return Certifier(engine, lambda name: make_engine(name, tables, 2), PairBounds(tables),
                     KnownPlans())


def test_highs_false_claims_on_the_buggy_model_are_not_believed(tables):
    """HiGHS itself still calls the model infeasible at cost cap 0.0429 (issue 13); the
    certifier asks CP-SAT, which finds the 3.0943 s plan."""
    engine = HighsEngine(tables)
    claims = [engine.solve(SolveRequest(cost_cap=cap)).status for cap in (0.0, 0.0429)]
    cert = certifier(tables, HighsEngine(tables))
    for cap in (0.0, 0.0429, 0.08):
        result = cert.solve(SolveRequest(cost_cap=cap))
        assert result.proven and result.status == SolveStatus.OPTIMAL
        assert result.solve.values.step_time_s == pytest.approx(3.0942419399, rel=1e-9)
    if claims[1] == SolveStatus.INFEASIBLE:  # the bug as measured with HiGHS 1.12
        assert "cpsat" in cert.confirmers


def test_a_false_infeasible_claim_is_refuted_by_the_confirmer(tables):
    lie = Liar(tables, Solve(SolveStatus.INFEASIBLE, None, None, None, None, 0.0))
    result = certifier(tables, lie).solve(SolveRequest(cost_cap=0.0429))
    assert result.status == SolveStatus.OPTIMAL and result.proof == Proof.BOUND
    assert result.solve.engine == "cpsat"  # the confirmer of a HiGHS claim
    assert result.solve.values.step_time_s == pytest.approx(3.0942419399, rel=1e-9)


def _claim(tables, plan: Plan, bound_factor: float) -> Solve:
    """An "optimal" claim for a real plan, with its true values and a chosen bound."""
    values = ModelValues(*evaluate(tables.instance, plan).objectives)
    return Solve(SolveStatus.OPTIMAL, plan, values, values.step_time_s,
                 values.step_time_s * bound_factor, 0.0)


SLOWER = Plan(dp=2, micro_batch=1, stages=(Stage(domain=2, layers=10, tp=1, recompute="none"),))


def test_an_optimal_claim_with_a_bound_above_its_objective_is_not_believed(tables):
    truth = HighsEngine(tables).solve(SolveRequest())
    result = certifier(tables, Liar(tables, _claim(tables, SLOWER, 2.0))).solve(SolveRequest())
    assert result.proven and result.solve.engine == "cpsat"
    assert result.solve.values.step_time_s == pytest.approx(truth.values.step_time_s,
                                                            rel=1e-9)


def test_an_optimal_claim_a_known_plan_beats_is_not_believed(tables):
    truth = HighsEngine(tables).solve(SolveRequest())
    claim = _claim(tables, SLOWER, 1.0)  # consistent with itself
    assert claim.values.step_time_s > truth.values.step_time_s * (1 + 1e-5)
    cert = certifier(tables, Liar(tables, claim))
    cert.known.add(truth.plan, truth.values)
    result = cert.solve(SolveRequest())
    assert result.proven and result.solve.engine == "cpsat"
    assert result.solve.values.step_time_s == pytest.approx(truth.values.step_time_s,
                                                            rel=1e-9)


def test_a_plan_whose_values_are_not_the_evaluator_s_is_an_error(tables):
    claim = _claim(tables, SLOWER, 1.0)
    wrong = dataclasses.replace(claim, values=dataclasses.replace(
        claim.values, step_time_s=claim.values.step_time_s * 0.9))
    with pytest.raises(ModelMismatch):
        certifier(tables, Liar(tables, wrong)).solve(SolveRequest())


def test_a_floor_above_the_step_cap_proves_infeasibility_without_a_solve(tables):
    engine = Liar(tables, Solve(SolveStatus.OPTIMAL, None, None, None, None, 0.0))
    cert = certifier(tables, engine)
    floor = cert.bounds.step_floor()
    result = cert.solve(SolveRequest(step_cap=floor * 0.99))
    assert result.status == SolveStatus.INFEASIBLE and result.proof == Proof.FLOOR
    assert engine.statistics.solves == 0


def test_infeasible_claims_are_confirmed_and_optimal_ones_bound_checked(tables):
    cert = certifier(tables, HighsEngine(tables))
    optimum = cert.solve(SolveRequest())
    assert optimum.proof == Proof.BOUND
    below = cert.solve(SolveRequest(step_cap=optimum.solve.values.step_time_s * (1 - 1e-4)))
    assert below.status == SolveStatus.INFEASIBLE
    assert below.proof in (Proof.CONFIRMED, Proof.FLOOR, Proof.ABOVE_CAP)
    if below.proof == Proof.CONFIRMED:
        assert cert.confirmers["cpsat"].statistics.solves >= 1


class CapLiar:
    """Calls its first request (one with a step cap) infeasible; answers the rest with
    ``uncapped`` (a real engine, or a fixed solve)."""

    def __init__(self, tables, uncapped):
        self.name, self.tables, self.uncapped = "cpsat", tables, uncapped
        self.statistics = EngineStatistics()
        self.requests: list[SolveRequest] = []

    def solve(self, request: SolveRequest) -> Solve:
        self.requests.append(request)
        if len(self.requests) == 1:
            assert request.step_cap is not None
            return Solve(SolveStatus.INFEASIBLE, None, None, None, None, 1.0, self.name)
        if isinstance(self.uncapped, Solve):
            return dataclasses.replace(self.uncapped, engine=self.name)
        return dataclasses.replace(self.uncapped.solve(request), engine=self.name)


def test_an_infeasible_claim_under_a_step_cap_is_proven_by_the_bound_without_it(tables):
    truth = HighsEngine(tables).solve(SolveRequest())
    cap = truth.values.step_time_s * (1 - 1e-4)
    cert = certifier(tables, CapLiar(tables, HighsEngine(tables)))
    assert cert.bounds.step_floor() < cap  # else the floor alone would prove it
    result = cert.solve(SolveRequest(step_cap=cap))
    assert result.status == SolveStatus.INFEASIBLE and result.proof == Proof.ABOVE_CAP
    assert not cert.confirmers  # no confirming engine was needed
    # The relaxed solve was a proven optimum: the sweep remembers it for tighter caps.
    assert result.optimum.values.step_time_s == pytest.approx(truth.values.step_time_s,
                                                              rel=1e-9)
    relaxed = cert.engine.requests[1]
    assert relaxed.step_cap is None and relaxed.time_limit == pytest.approx(12.0)


def test_a_false_infeasible_claim_under_a_step_cap_is_refuted(tables):
    truth = HighsEngine(tables).solve(SolveRequest())
    cap = truth.values.step_time_s * 1.1
    result = certifier(tables, CapLiar(tables, HighsEngine(tables))).solve(
        SolveRequest(step_cap=cap))
    assert result.status != SolveStatus.INFEASIBLE
    assert result.solve.values.step_time_s <= cap


def test_a_bound_above_its_own_incumbent_proves_no_infeasibility(tables):
    truth = HighsEngine(tables).solve(SolveRequest())
    cap = truth.values.step_time_s * (1 - 1e-4)
    liar = CapLiar(tables, _claim(tables, SLOWER, 2.0))  # bound twice its objective
    cert = certifier(tables, liar)
    result = cert.solve(SolveRequest(step_cap=cap))
    # The bound check fails, so the claim goes to the confirmer (CP-SAT without presolve).
    assert result.status == SolveStatus.INFEASIBLE and result.proof == Proof.CONFIRMED
    assert cert.confirmers


def test_the_bound_check_is_capped_at_the_best_known_plan(tables):
    truth = HighsEngine(tables).solve(SolveRequest())
    cap = truth.values.step_time_s * (1 - 1e-4)
    cert = certifier(tables, CapLiar(tables, HighsEngine(tables)))
    known = ModelValues(*evaluate(tables.instance, SLOWER).objectives)
    cert.known.add(SLOWER, known)
    result = cert.solve(SolveRequest(step_cap=cap))
    assert result.proof == Proof.ABOVE_CAP
    relaxed = cert.engine.requests[1]
    assert relaxed.hint == SLOWER
    assert relaxed.step_cap == pytest.approx(known.step_time_s * (1 + 1e-9), rel=1e-12)
    assert result.optimum.values.step_time_s == pytest.approx(truth.values.step_time_s,
                                                              rel=1e-9)


def test_the_chain_keeps_to_the_run_s_deadline(tables):
    """A claim's bound check gets at most the time left before the deadline (here 5 s, not
    2 x 1 s + 10 s), and past the deadline no check or confirmation starts: the claim stays
    unproven, so the sweep stops there and a resumed run solves the step again."""
    truth = HighsEngine(tables).solve(SolveRequest())
    cap = truth.values.step_time_s * (1 - 1e-4)
    cert = certifier(tables, CapLiar(tables, HighsEngine(tables)))
    result = cert.solve(SolveRequest(step_cap=cap), deadline=time.perf_counter() + 5.0)
    assert result.proof == Proof.ABOVE_CAP
    assert cert.engine.requests[1].time_limit <= 5.0

    class LateLiar(CapLiar):  # its claim arrives after the deadline
        def solve(self, request):
            time.sleep(0.2)
            return super().solve(request)

    cert = certifier(tables, LateLiar(tables, HighsEngine(tables)))
    result = cert.solve(SolveRequest(step_cap=cap), deadline=time.perf_counter() + 0.1)
    assert not result.proven and result.proof == Proof.NONE
    assert len(cert.engine.requests) == 1  # no bound check ran
    assert all(c.statistics.solves == 0 for c in cert.confirmers.values())
