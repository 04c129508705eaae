"""Both exact engines on one (dp, micro-batch) model: CP-SAT first, HiGHS where it stalls.

Measured on the quick suite: CP-SAT proves most min-step solves in well under a second, about
15x faster than HiGHS overall, but a few of its solves run for many minutes; HiGHS is slower
on average and far more even. The portfolio gives CP-SAT a short budget per solve and hands
the solve to HiGHS when CP-SAT has not proven it by then, so a front costs roughly CP-SAT's
typical time without its tail. The solve's result says which engine proved it.
"""

from __future__ import annotations

import time

from solvers.cpsat import CpSatEngine
from solvers.engine import Solve
from solvers.highs import HighsEngine
from solvers.tables import PairTables

CPSAT_BUDGET_S = 5.0


class PortfolioEngine:
    name = "portfolio"

    def __init__(self, tables: PairTables, threads: int = 1, budget_s: float = CPSAT_BUDGET_S):
        self.tables = tables
        self.cpsat = CpSatEngine(tables, workers=threads)
        self.highs = HighsEngine(tables, threads=threads)
        self.budget_s = budget_s
        self.handed_over = 0  # solves CP-SAT passed to HiGHS

    def solve(self, weights=(1.0, 0.0, 0.0), gpu_cap=None, cost_cap=None, step_cap=None,
              time_limit: float | None = None) -> Solve:
        start = time.perf_counter()
        budget = self.budget_s if time_limit is None else min(self.budget_s, time_limit)
        first = self.cpsat.solve(weights, gpu_cap, cost_cap, step_cap, time_limit=budget)
        if first.status in ("optimal", "infeasible"):
            return first
        self.handed_over += 1
        left = None if time_limit is None else max(0.01, time_limit - first.wall_time_s)
        second = self.highs.solve(weights, gpu_cap, cost_cap, step_cap, time_limit=left)
        wall = time.perf_counter() - start
        if second.values is None and first.values is not None and second.status != "infeasible":
            # HiGHS stopped without an incumbent: keep CP-SAT's, with the better bound.
            bounds = [b for b in (first.bound, second.bound) if b is not None]
            return Solve("time_limit", first.plan, first.values, first.objective,
                         max(bounds) if bounds else None, wall)
        return Solve(second.status, second.plan, second.values, second.objective,
                     second.bound, wall)
