"""Exact Pareto fronts in (step_time_s, gpus, comm_cost) by the epsilon-constraint method.

For a GPU cap ``n`` the inner sweep walks the (T, C) front of the plans with ``N <= n``:
minimise T under ``C <= c``, record the plan, set ``c`` just below its cost, repeat until
infeasible. A 3-D non-dominated point z with ``N_z <= n`` is (T, C)-non-dominated among those
plans, so the sweep returns a plan with z's (T, C) and some ``N' >= N_z`` (ties in T resolve
on later iterations: a cheaper plan of equal T is found once ``c`` drops below the dearer
one). Hence no front point has N between the largest N found and ``n``, the next cap is that
largest N minus one, and a point found with too many GPUs is found again with its own N at a
later, lower cap. The outer loop stops when a sweep finds nothing; the candidates are then
filtered for 3-D non-dominance. No lexicographic re-solves are needed.

Each (dp, micro-batch) pair has its own model; a solve "over the instance" is the best over
pairs, organised by :class:`PairPool` to skip pairs that cannot win.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from formulation.result import evaluate
from solvers.engine import NO_CAP, Solve
from solvers.tables import PairTables

# Relative slack for ties in step time, and the step below a found cost for the next sweep;
# far below the evaluator agreement tolerance (1e-6), above the engines' tolerances (1e-9).
FIX_SLACK = 1e-9
COST_STEP = 1e-7
VALUE_TOLERANCE = 1e-6


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


@dataclass(frozen=True)
class Candidate:
    solve: Solve
    tables: PairTables


@dataclass(frozen=True)
class Memo:
    """One min-step solve of a pair: its caps and outcome. ``result.values is None`` means
    no plan with step time <= ``step_cap`` exists under the caps."""

    gpu_cap: float
    cost_cap: float
    step_cap: float
    result: Solve

    def covers(self, gpu_cap: float, cost_cap: float) -> bool:
        """The query's caps are at least as tight, so what held here still holds there."""
        return (self.gpu_cap >= gpu_cap and self.cost_cap >= cost_cap
                and self.result.status != "time_limit")


class PairPool:
    """All pairs' engines and what is known about each pair's min-step problem.

    A solution that is optimal under caps (n1, c1) stays optimal under tighter caps it still
    satisfies, and its step time bounds the tighter problem from below; "nothing below s"
    also carries over to tighter caps. ``min_step`` visits pairs in order of these lower
    bounds, skips pairs that cannot beat (or tie) the best found, and solves the others with
    a step-time cap at that best, which lets the solver prune.
    """

    def __init__(self, engines: list, stats: SweepStats, deadline: float | None = None,
                 solve_limit: float | None = None):
        self.engines = engines
        self.stats = stats
        self.deadline = deadline
        self.solve_limit = solve_limit
        self.memo: dict[int, list[Memo]] = {i: [] for i in range(len(engines))}
        self.candidates: list[Candidate] = []

    def _solve(self, i: int, **caps) -> Solve:
        limits = [] if self.solve_limit is None else [self.solve_limit]
        if self.deadline is not None:
            remaining = self.deadline - time.perf_counter()
            if remaining <= 0:
                raise OutOfTime
            limits.append(remaining)
        if limits:
            caps["time_limit"] = min(limits)
        result = self.engines[i].solve(**caps)
        self.stats.solves += 1
        self.stats.solve_time_s += result.wall_time_s
        if result.status == "time_limit":
            self.stats.limited += 1
        if result.plan is not None:
            check_values(self.engines[i].tables, result)
        return result

    def _known(self, i: int, gpu_cap: float, cost_cap: float) -> tuple[float, Solve | None]:
        """(lower bound on the pair's least step time, its optimum if already known)."""
        bound = 0.0
        for memo in self.memo[i]:
            if not memo.covers(gpu_cap, cost_cap):
                continue
            values = memo.result.values
            if values is None:
                bound = max(bound, memo.step_cap)
            elif values.gpus <= gpu_cap and values.comm_cost <= cost_cap:
                return values.step_time_s, memo.result
            else:
                bound = max(bound, values.step_time_s)
        return bound, None

    def min_step(self, gpu_cap: float, cost_cap: float) -> Candidate | None:
        """The pair and solution of least step time under the caps (None if infeasible)."""
        known = {i: self._known(i, gpu_cap, cost_cap) for i in range(len(self.engines))}
        best: Candidate | None = None
        for i in sorted(known, key=lambda j: known[j][0]):
            bound, optimum = known[i]
            cutoff = NO_CAP if best is None else best.solve.values.step_time_s * (1 + FIX_SLACK)
            if bound > cutoff:
                self.stats.reused += 1
                continue
            if optimum is not None:
                self.stats.reused += 1
                result = optimum
            else:
                try:
                    result = self._solve(i, gpu_cap=gpu_cap, cost_cap=cost_cap,
                                         step_cap=cutoff)
                except OutOfTime:
                    if best is not None:  # keep what this search found: it is feasible
                        self.candidates.append(best)
                    raise
                self.memo[i].append(Memo(gpu_cap, cost_cap, cutoff, result))
            if result.values is not None and (
                    best is None or result.values.step_time_s < best.solve.values.step_time_s):
                best = Candidate(result, self.engines[i].tables)
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
                  time_limit: float | None = None,
                  solve_limit: float | None = None) -> tuple[list[Candidate], SweepStats]:
    """Candidates of the front (to be filtered for non-dominance) and solve statistics.

    With ``time_limit`` (seconds for the whole front) each solve gets the time that is left;
    when it runs out, the candidates found so far are returned and ``stats.complete`` is
    False. ``solve_limit`` caps each solve; a solve stopped there continues the sweep from its
    incumbent (a best-known sweep). A front is exact only if it completed and no solve
    stopped at a limit."""
    stats = SweepStats()
    start = time.perf_counter()
    pool = PairPool(engines, stats, None if time_limit is None else start + time_limit,
                    solve_limit)
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
            point = pool.min_step(gpu_cap, cost_cap)
            if point is None:
                break
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
