"""The portfolio races its engines in turns of doubling length, warm-starts each turn from the
best incumbent, and keeps the best incumbent and the highest bound when no turn proves."""

from __future__ import annotations

import pytest

from formulation.plan import Plan, Stage
from instances.tiny import tiny_instance
from solvers.engine import EngineStatistics, ModelValues, Solve, SolveRequest, SolveStatus
from solvers.portfolio import PortfolioEngine
from solvers.tables import pair_tables


def _plan(layers: int) -> Plan:
    return Plan(dp=1, micro_batch=1, stages=(Stage(domain=0, layers=layers, tp=1),))


class Clock:
    """The portfolio's clock: a solve that stops at its limit advances it by that limit."""

    now = 0.0

    @classmethod
    def perf_counter(cls) -> float:
        return cls.now


class Scripted:
    """An engine that answers its n-th request with the n-th scripted outcome (status,
    objective, bound), records every request and takes its whole time limit."""

    def __init__(self, name: str, script: list[tuple[SolveStatus, float | None, float | None]]):
        self.name, self.script, self.requests = name, list(script), []
        self.statistics = EngineStatistics()

    def solve(self, request: SolveRequest) -> Solve:
        self.requests.append(request)
        Clock.now += request.time_limit or 0.0
        status, objective, bound = self.script.pop(0)
        plan = None if objective is None else _plan(int(objective))
        values = None if objective is None else ModelValues(objective, 1, 0.0)
        return Solve(status, plan, values, objective, bound, 0.0, self.name)


@pytest.fixture
def portfolio(monkeypatch):
    monkeypatch.setattr("solvers.portfolio.time", Clock)
    Clock.now = 0.0
    tables = pair_tables(tiny_instance(1, domains=3, layers=6), 1, 1)
    return PortfolioEngine(tables, first_turn_s=2.0)


def test_turns_double_and_start_from_the_best_incumbent(portfolio):
    limit = SolveStatus.LIMIT
    portfolio.cpsat = Scripted("cpsat", [(limit, 9.0, 1.0), (limit, 7.0, 3.0),
                                         (SolveStatus.OPTIMAL, 6.0, 6.0)])
    portfolio.highs = Scripted("highs", [(limit, 8.0, 2.0), (limit, None, 4.0)])
    solve = portfolio.solve(SolveRequest())
    assert solve.status == SolveStatus.OPTIMAL and solve.engine == "cpsat"
    turns = [r.time_limit for r in (portfolio.cpsat.requests[0], portfolio.highs.requests[0],
                                    portfolio.cpsat.requests[1], portfolio.highs.requests[1],
                                    portfolio.cpsat.requests[2])]
    assert turns == [2.0, 2.0, 4.0, 4.0, 8.0]
    # Each turn is hinted with the best incumbent of the turns before it.
    hints = [r.hint for r in portfolio.highs.requests + portfolio.cpsat.requests[1:]]
    assert hints == [_plan(9), _plan(7), _plan(8), _plan(7)]


def test_without_a_proof_it_keeps_the_best_incumbent_and_the_highest_bound(portfolio):
    limit = SolveStatus.LIMIT
    portfolio.cpsat = Scripted("cpsat", [(limit, 9.0, 1.0), (limit, 7.5, 2.5)])
    portfolio.highs = Scripted("highs", [(limit, 7.0, 3.0)])
    solve = portfolio.solve(SolveRequest(time_limit=5.0))
    assert solve.status == SolveStatus.LIMIT
    assert solve.objective == 7.0 and solve.bound == 3.0 and solve.engine == "highs"
    # The third turn gets what is left of the limit, and the fourth is not started.
    assert [r.time_limit for r in portfolio.cpsat.requests] == [2.0, 1.0]
    assert [r.time_limit for r in portfolio.highs.requests] == [2.0]


def test_an_engine_whose_bound_trails_sits_out_and_the_other_runs_alone(portfolio):
    limit, optimal = SolveStatus.LIMIT, SolveStatus.OPTIMAL
    # HiGHS's gap (50 %) is more than ten times CP-SAT's (1 %): it sits out, and CP-SAT gets
    # one long turn (8 first turns) instead of restarting every doubling.
    portfolio.cpsat = Scripted("cpsat", [(limit, 10.0, 9.9), (optimal, 9.95, 9.95),
                                         (optimal, 11.0, 11.0)])
    portfolio.highs = Scripted("highs", [(limit, 12.0, 5.0)])
    first = portfolio.solve(SolveRequest())
    assert first.status == optimal and first.objective == 9.95
    assert [r.time_limit for r in portfolio.cpsat.requests] == [2.0, 16.0]
    # The pair's next solve starts with CP-SAT alone.
    second = portfolio.solve(SolveRequest())
    assert second.objective == 11.0
    assert [r.time_limit for r in portfolio.cpsat.requests] == [2.0, 16.0, 16.0]
    assert len(portfolio.highs.requests) == 1


def test_a_lone_turn_that_ends_unproven_brings_the_other_engine_back(portfolio):
    limit, optimal = SolveStatus.LIMIT, SolveStatus.OPTIMAL
    portfolio.cpsat = Scripted("cpsat", [(limit, 10.0, 9.9), (limit, 9.9, 9.8),
                                         (limit, 9.9, 9.85)])
    portfolio.highs = Scripted("highs", [(limit, 12.0, 5.0), (optimal, 9.9, 9.9)])
    solve = portfolio.solve(SolveRequest())
    assert solve.engine == "highs" and solve.status == optimal
    # 2 s each, then CP-SAT alone for 16 s, then both again at twice that.
    assert [r.time_limit for r in portfolio.cpsat.requests] == [2.0, 16.0, 32.0]
    assert [r.time_limit for r in portfolio.highs.requests] == [2.0, 32.0]
    assert portfolio.trailing is None


def test_close_gaps_bench_nobody(portfolio):
    limit = SolveStatus.LIMIT
    # A ratio of 10 below TRAILING_GAP (0.1 %) is no evidence of a weak bound.
    portfolio.cpsat = Scripted("cpsat", [(limit, 1000.0, 999.99), (SolveStatus.OPTIMAL, 999.0,
                                                                   999.0)])
    portfolio.highs = Scripted("highs", [(limit, 1000.0, 999.5)])
    portfolio.solve(SolveRequest())
    assert portfolio.trailing is None
    assert [r.time_limit for r in portfolio.cpsat.requests] == [2.0, 4.0]


def test_a_lone_turn_cut_by_the_request_s_limit_keeps_the_other_engine_out(portfolio):
    limit = SolveStatus.LIMIT
    portfolio.trailing = "highs"
    portfolio.cpsat = Scripted("cpsat", [(limit, 10.0, 9.9)])
    portfolio.highs = Scripted("highs", [])
    solve = portfolio.solve(SolveRequest(time_limit=5.0))
    assert solve.status == limit and solve.objective == 10.0
    assert [r.time_limit for r in portfolio.cpsat.requests] == [5.0]
    # Five seconds say nothing about the engines: HiGHS still sits out.
    assert portfolio.trailing == "highs" and not portfolio.highs.requests
