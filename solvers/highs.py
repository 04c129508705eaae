"""HiGHS through Pyomo's ``pyomo.contrib.solver`` interface, on the models of ``solvers.milp``.

One persistent solver per model: the epsilon-constraint method changes only mutable caps and
objective weights, and the persistent interface passes just those changes to HiGHS.

HiGHS keeps its thread pool per process: the first solve fixes the thread count, and a
later solve asking for another count fails silently. ``set_threads`` is therefore called
once per process and every solve uses that value.
"""

from __future__ import annotations

import time

from pyomo.contrib.solver.common.results import TerminationCondition
from pyomo.contrib.solver.solvers.highs import Highs

from solvers.engine import NO_CAP, Solve
from solvers.milp import build_model, decisions, model_values
from solvers.tables import PairTables, decisions_plan

_THREADS: int | None = None


def set_threads(threads: int) -> int:
    """Fix the HiGHS thread count of this process (later different requests are refused)."""
    global _THREADS
    if _THREADS is None:
        _THREADS = max(1, int(threads))
    return _THREADS


class HighsEngine:
    """A pair's MILP and its persistent HiGHS solver."""

    name = "highs"

    def __init__(self, tables: PairTables, time_limit: float | None = None,
                 rel_gap: float = 1e-9, threads: int = 1):
        self.tables = tables
        start = time.perf_counter()
        self.model = build_model(tables)
        self.build_time_s = time.perf_counter() - start
        self.time_limit = time_limit
        self.rel_gap = rel_gap
        self.threads = set_threads(threads)
        self.solver = Highs()

    def solve(self, weights: tuple[float, float, float] = (1.0, 0.0, 0.0),
              gpu_cap: float | None = None, cost_cap: float | None = None,
              step_cap: float | None = None, time_limit: float | None = None) -> Solve:
        model = self.model
        for i, w in enumerate(weights):
            model.weights[i] = float(w)
        set_cap(model.gpu_cap, model.gpu_cap_con, gpu_cap)
        set_cap(model.cost_cap, model.cost_cap_con, cost_cap)
        set_cap(model.step_cap, model.step_cap_con, step_cap)
        # The period bound only exists with a step cap (a huge coefficient in its place
        # would wreck the numerics: HiGHS then reported feasible models infeasible).
        period_cap = None
        if step_cap is not None and step_cap < NO_CAP and self.tables.micro_batches > 1:
            period_cap = float(step_cap) / (self.tables.micro_batches - 1)
        set_cap(model.period_cap, model.period_layers, period_cap)
        limit = time_limit if time_limit is not None else self.time_limit
        start = time.perf_counter()
        result = self.solver.solve(
            model, load_solutions=False, raise_exception_on_nonoptimal_result=False,
            threads=self.threads, rel_gap=self.rel_gap, abs_gap=1e-9, time_limit=limit,
            solver_options={"mip_feasibility_tolerance": 1e-9,
                            "primal_feasibility_tolerance": 1e-9, "random_seed": 0})
        wall = time.perf_counter() - start
        condition = result.termination_condition
        if condition in (TerminationCondition.provenInfeasible,
                         TerminationCondition.infeasibleOrUnbounded):
            return Solve("infeasible", None, None, None, None, wall)
        has_solution = result.incumbent_objective is not None
        status = ("optimal" if condition == TerminationCondition.convergenceCriteriaSatisfied
                  else "time_limit")
        if not has_solution:
            return Solve(status if status == "time_limit" else "infeasible", None, None, None,
                         result.objective_bound, wall)
        result.solution_loader.load_vars()
        plan = decisions_plan(self.tables, decisions(model))
        return Solve(status, plan, model_values(model, self.tables),
                     float(result.incumbent_objective), _float(result.objective_bound), wall)


def set_cap(param, constraint, value: float | None) -> None:
    """Activate a cap constraint at ``value``, or deactivate it (None or no real cap)."""
    if value is None or value >= NO_CAP:
        constraint.deactivate()
    else:
        param.set_value(float(value))
        constraint.activate()


def _float(value) -> float | None:
    return None if value is None else float(value)

