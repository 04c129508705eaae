"""Exact Pareto fronts in (step_time_s, gpus, comm_cost) by the epsilon-constraint method.

For a GPU cap ``n`` the inner sweep enumerates the front of (T, C) among plans with
``N <= n``: minimise T under ``C <= c``, then lexicographically C (with T at its optimum) and
N (with T and C at theirs), record the point, set ``c`` just below its cost, repeat until
infeasible. Every 3-D non-dominated point with ``N <= n`` is (T, C)-non-dominated among those
plans, so it is found by the sweep with its own N. Points with N between the largest N found
and ``n`` cannot exist, so the next cap is that largest N minus one; the outer loop stops when
a sweep finds nothing. Candidates are finally filtered for 3-D non-dominance.

Each (dp, micro-batch) pair has its own model; a solve "over the instance" is the best over
pairs. Within one sweep caps only tighten, so a pair whose last optimum still satisfies the
caps keeps it without a new solve, and an infeasible pair stays infeasible.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from formulation.result import evaluate
from solvers.engine import Solve
from solvers.tables import PairTables

# Relative slack when fixing an optimised objective for the next lexicographic stage, and the
# step below a found cost for the next sweep. Both are far below the evaluator agreement
# tolerance (1e-6) and far above the engines' feasibility tolerances.
FIX_SLACK = 1e-9
COST_STEP = 1e-7
VALUE_TOLERANCE = 1e-6
NO_CAP = 1e12


class OutOfTime(Exception):
    """The front's time budget is spent; what was found so far is best known."""


class ModelMismatch(RuntimeError):
    """A model's objective values disagree with the evaluator's for the plan it returned."""


@dataclass
class SweepStats:
    solves: int = 0
    reused: int = 0
    solve_time_s: float = 0.0
    limited: int = 0  # solves that stopped at a limit (the front is then best known)
    complete: bool = True  # False if the front's time budget ran out
    gaps: list[float] = field(default_factory=list)


@dataclass(frozen=True)
class Candidate:
    solve: Solve
    tables: PairTables


class PairPool:
    """All pairs' engines, with the caching of optima described in the module docstring.

    A solution that is optimal under caps (n1, c1) is optimal under any tighter caps it still
    satisfies, and infeasibility carries over to tighter caps; ``memo`` keeps, per pair, the
    (caps, outcome) of every min-step solve and answers from it where it can.
    """

    def __init__(self, engines: list, stats: SweepStats, deadline: float | None = None):
        self.engines = engines
        self.stats = stats
        self.deadline = deadline
        self.memo: dict[int, list[tuple[float, float, Solve]]] = {i: [] for i in
                                                                    range(len(engines))}
        self.last: dict[int, Solve] = {}
        self.candidates: list[Candidate] = []

    def _solve(self, i: int, **caps) -> Solve:
        if self.deadline is not None:
            remaining = self.deadline - time.perf_counter()
            if remaining <= 0:
                raise OutOfTime
            caps["time_limit"] = remaining
        result = self.engines[i].solve(**caps)
        self.stats.solves += 1
        self.stats.solve_time_s += result.wall_time_s
        if result.status == "time_limit":
            self.stats.limited += 1
        if result.gap is not None:
            self.stats.gaps.append(result.gap)
        if result.plan is not None:
            check_values(self.engines[i].tables, result)
        return result

    def _recall(self, i: int, gpu_cap: float, cost_cap: float) -> Solve | None:
        for n1, c1, result in self.memo[i]:
            if n1 < gpu_cap or c1 < cost_cap or result.status == "time_limit":
                continue
            if result.values is None or (result.values.gpus <= gpu_cap
                                         and result.values.comm_cost <= cost_cap):
                return result
        return None

    def min_step(self, gpu_cap: float, cost_cap: float) -> Candidate | None:
        """The pair and solution of least step time under the caps (None if infeasible)."""
        best: Candidate | None = None
        for i, engine in enumerate(self.engines):
            result = self._recall(i, gpu_cap, cost_cap)
            if result is not None:
                self.stats.reused += 1
            else:
                result = self._solve(i, gpu_cap=gpu_cap, cost_cap=cost_cap)
                self.memo[i].append((gpu_cap, cost_cap, result))
            self.last[i] = result
            if result.values is not None and (
                    best is None or result.values.step_time_s < best.solve.values.step_time_s):
                best = Candidate(result, engine.tables)
        return best

    def refine(self, step: float, gpu_cap: float, cost_cap: float) -> Candidate:
        """Lexicographic stages 2 and 3 over every pair that reaches the least step time."""
        step_cap = step * (1 + FIX_SLACK)
        by_cost: list[Candidate] = []
        for i, engine in enumerate(self.engines):
            cached = self.last.get(i)
            if cached is None or cached.values is None or cached.values.step_time_s > step_cap:
                continue
            result = self._solve(i, weights=(0.0, 0.0, 1.0), gpu_cap=gpu_cap,
                                 cost_cap=cost_cap, step_cap=step_cap)
            if result.values is not None:
                by_cost.append(Candidate(result, engine.tables))
        least_cost = min(c.solve.values.comm_cost for c in by_cost)
        cost_fix = least_cost * (1 + FIX_SLACK) + 1e-12
        best: Candidate | None = None
        for candidate in by_cost:
            if candidate.solve.values.comm_cost > cost_fix:
                continue
            index = next(i for i, e in enumerate(self.engines) if e.tables is candidate.tables)
            result = self._solve(index, weights=(0.0, 1.0, 0.0), gpu_cap=gpu_cap,
                                 cost_cap=cost_fix, step_cap=step_cap)
            if result.values is not None and (
                    best is None or result.values.gpus < best.solve.values.gpus):
                best = Candidate(result, candidate.tables)
        assert best is not None, "the lexicographic stages lost the step-time optimum"
        return best


def check_values(tables: PairTables, result: Solve) -> None:
    """SPEC 7: the model's objective values equal the evaluator's for the returned plan."""
    evaluation = evaluate(tables.instance, result.plan)
    ours = (result.values.step_time_s, result.values.gpus, result.values.comm_cost)
    theirs = evaluation.objectives
    if not evaluation.feasible:
        raise ModelMismatch(f"plan infeasible for the evaluator: {evaluation.violations}")
    for name, a, b in zip(("step_time_s", "gpus", "comm_cost"), ours, theirs, strict=True):
        if abs(a - b) > VALUE_TOLERANCE * max(abs(b), 1e-3):
            raise ModelMismatch(f"{name}: model {a!r} vs evaluator {b!r} for {result.plan}")


def epsilon_front(engines: list, progress: Callable[[str], None] | None = None,
                  time_limit: float | None = None) -> tuple[list[Candidate], SweepStats]:
    """Candidates of the front (to be filtered for non-dominance) and solve statistics.

    With ``time_limit`` (seconds for the whole front) each solve gets the time that is left;
    when it runs out, the candidates found so far are returned and ``stats.complete`` is
    False. A front is exact only if it completed and no solve stopped at a limit."""
    stats = SweepStats()
    start = time.perf_counter()
    pool = PairPool(engines, stats, None if time_limit is None else start + time_limit)
    try:
        _sweep(pool, stats, start, progress)
    except OutOfTime:
        stats.complete = False
    return pool.candidates, stats


def _sweep(pool: PairPool, stats: SweepStats, start: float,
           progress: Callable[[str], None] | None) -> None:
    gpu_cap = NO_CAP
    while True:
        cost_cap = NO_CAP
        found: list[Candidate] = []
        while True:
            best = pool.min_step(gpu_cap, cost_cap)
            if best is None:
                break
            point = pool.refine(best.solve.values.step_time_s, gpu_cap, cost_cap)
            found.append(point)
            pool.candidates.append(point)
            cost = point.solve.values.comm_cost
            if progress:
                v = point.solve.values
                progress(f"N<={gpu_cap:g}: T={v.step_time_s:.4f} N={v.gpus} C={v.comm_cost:.4f}"
                         f" ({stats.solves} solves, {time.perf_counter() - start:.1f}s)")
            if cost <= 0:
                break
            cost_cap = cost - max(cost * COST_STEP, 1e-8)
        if not found:
            break
        gpu_cap = max(c.solve.values.gpus for c in found) - 1
        if gpu_cap < 1:
            break
