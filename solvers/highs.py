"""HiGHS through Pyomo's ``pyomo.contrib.solver`` interface, on the models of ``solvers.milp``.

One persistent solver per model: the epsilon-constraint method changes only mutable caps,
cuts and objective weights, and the persistent interface passes just those changes to HiGHS.
A request's ``hint`` becomes a MIP start (HiGHS completes the continuous part).

HiGHS keeps its thread pool per process: the first solve fixes the thread count, and a
later solve asking for another count fails silently. ``set_threads`` is therefore called
once per process and every solve uses that value.

Measured (issue 13): with presolve on, HiGHS 1.12 declared some feasible tiny models with a
traffic-cost cap infeasible (49 of 100 cost caps between 0 and 0.0859 on one dp = 2 model),
and given a MIP start it called them "optimal" with a bound of -inf; with presolve off, or
with only its forcing-row rule off (``presolve_rule_off = 64``), they solve. That rule stays
on: with it off, HiGHS crashed (segmentation fault) on a bench model with the floors of
:mod:`solvers.bounds` as cuts. :mod:`solvers.certify` confirms every claim instead, by the
other engine. ``HighsNoPresolveEngine`` (``highs-nopresolve``) runs the same model with
presolve off.
"""

from __future__ import annotations

import time

import numpy as np
from pyomo.contrib.solver.common.results import TerminationCondition
from pyomo.contrib.solver.solvers.highs import Highs

from formulation.plan import Plan
from solvers.engine import NO_CAP, EngineStatistics, Solve, SolveRequest, SolveStatus, timed
from solvers.milp import build_model, choices, model_values, stage_cells
from solvers.tables import PairTables, choices_plan, plan_choices

_THREADS: int | None = None

_PROVEN_INFEASIBLE = (TerminationCondition.provenInfeasible,
                      TerminationCondition.infeasibleOrUnbounded)
_STOPPED = (TerminationCondition.maxTimeLimit, TerminationCondition.iterationLimit,
            TerminationCondition.objectiveLimit, TerminationCondition.interrupted,
            TerminationCondition.minStepLength)


def set_threads(threads: int) -> int:
    """Fix the HiGHS thread count of this process (later different requests are refused)."""
    global _THREADS
    if _THREADS is None:
        _THREADS = max(1, int(threads))
    return _THREADS


class _StartingHighs(Highs):
    """Pyomo's persistent HiGHS interface with an optional MIP start for the next run."""

    start: dict[int, float] | None = None  # id(pyomo var) -> value

    def _solve(self):
        if self.start:
            index = self._pyomo_var_to_solver_var_map
            pairs = [(index[key], value) for key, value in self.start.items() if key in index]
            columns, values = zip(*pairs, strict=True)
            self._solver_model.setSolution(len(columns), np.array(columns, dtype=np.int32),
                                           np.array(values, dtype=np.float64))
        self.start = None
        return super()._solve()


class HighsEngine:
    """A pair's MILP and its persistent HiGHS solver."""

    name = "highs"
    presolve = True
    use_floors = False  # SolveRequest floors as cuts (see solve)

    def __init__(self, tables: PairTables, threads: int = 1, rel_gap: float = 1e-9):
        self.tables = tables
        start = time.perf_counter()
        # a pair no stage fits (no option has its GPUs and room for a layer anywhere) has
        # no plan: every solve is infeasible, proven without a model
        self.model = build_model(tables) if stage_cells(tables) else None
        self.build_time_s = time.perf_counter() - start
        self.rel_gap = rel_gap
        self.threads = set_threads(threads)
        self.solver = _StartingHighs()
        self.statistics = EngineStatistics()

    def solve(self, request: SolveRequest) -> Solve:
        model, tables = self.model, self.tables
        if model is None:
            return self.statistics.record(timed(self.name, time.perf_counter(),
                                                SolveStatus.INFEASIBLE))
        for i, w in enumerate(request.weights):
            model.weights[i] = float(w)
        set_cap(model.gpu_cap, model.gpu_cap_con, request.gpu_cap)
        set_cap(model.cost_cap, model.cost_cap_con, request.cost_cap)
        set_cap(model.step_cap, model.step_cap_con, request.step_cap)
        # The period bound only exists with a step cap (a huge coefficient in its place
        # would wreck the numerics: HiGHS then reported feasible models infeasible).
        period_cap = None
        step_cap = request.capped(request.step_cap)
        if step_cap is not None and tables.micro_batches > 1:
            period_cap = step_cap / (tables.micro_batches - 1)
        set_cap(model.period_cap, model.period_layers, period_cap)
        # The floors stay out: as cuts they slowed HiGHS down (bench K = 20, dp 2: 16 -> 20 s
        # and 30 -> 42 s; tiny dp 1 models 0.8 -> 1.6 s), where they speed CP-SAT up.
        if self.use_floors:
            set_cap(model.period_floor, model.period_floor_cells, request.period_floor)
            set_cap(model.step_floor, model.step_floor_con, request.step_floor)
        else:
            set_cap(model.period_floor, model.period_floor_cells, None)
            set_cap(model.step_floor, model.step_floor_con, None)
        if request.hint is not None:
            self.solver.start = mip_start(model, tables, request.hint)
        start = time.perf_counter()
        result = self.solver.solve(
            model, load_solutions=False, raise_exception_on_nonoptimal_result=False,
            threads=self.threads, rel_gap=self.rel_gap, abs_gap=1e-9,
            time_limit=request.time_limit,
            solver_options={"mip_feasibility_tolerance": 1e-9,
                            "primal_feasibility_tolerance": 1e-9, "random_seed": 0,
                            "presolve": "on" if self.presolve else "off"})
        condition = result.termination_condition
        bound = None if result.objective_bound is None else float(result.objective_bound)
        if condition in _PROVEN_INFEASIBLE:
            return self.statistics.record(timed(self.name, start, SolveStatus.INFEASIBLE))
        if condition == TerminationCondition.convergenceCriteriaSatisfied:
            status = SolveStatus.OPTIMAL
        elif condition in _STOPPED:
            status = SolveStatus.LIMIT
        else:
            status = SolveStatus.UNKNOWN
        if result.incumbent_objective is None:
            if status == SolveStatus.OPTIMAL:  # "optimal" without a solution is no claim
                status = SolveStatus.UNKNOWN
            return self.statistics.record(timed(self.name, start, status, bound=bound))
        result.solution_loader.load_vars()
        values = model_values(model, tables)  # every epigraph at its tight value
        return self.statistics.record(timed(
            self.name, start, status, plan=choices_plan(tables, choices(model)),
            values=values, objective=values.weighted(request.weights), bound=bound))


class HighsNoPresolveEngine(HighsEngine):
    """The same model with HiGHS's presolve off: the second opinion on its claims."""

    name = "highs-nopresolve"
    presolve = False


def set_cap(param, constraint, value: float | None) -> None:
    """Activate a cap (or cut) constraint at ``value``, or deactivate it (None or no real
    cap)."""
    if value is None or value >= NO_CAP:
        constraint.deactivate()
    else:
        param.set_value(float(value))
        constraint.activate()


def mip_start(model, tables: PairTables, plan: Plan) -> dict[int, float] | None:
    """Values of the assignment variables (u, z, n, y, same) that encode ``plan``; None if
    the plan is not expressible in this model (another pair, an option or a cell the model
    does not have). HiGHS completes the continuous variables itself."""
    chosen = plan_choices(tables, plan)
    if chosen is None:
        return None
    values: dict[int, float] = {}
    for p in range(tables.positions):
        if p > 0:
            values[id(model.u[p])] = float(p in chosen)
    cells = set(model.cells)
    for (p, k, o) in cells:
        d = chosen.get(p)
        on = d is not None and (d.domain, d.option) == (k, o)
        values[id(model.z[p, k, o])] = float(on)
        values[id(model.n[p, k, o])] = float(d.layers) if on else 0.0
    for p, k, q in model.links:
        on = p + 1 in chosen and chosen[p + 1].domain == k and chosen[p].domain == q
        values[id(model.y[p, k, q])] = float(on)
    for key in model.same:
        p, k, a, b = key
        on = (p + 1 in chosen and chosen[p + 1].domain == k == chosen[p].domain
              and chosen[p + 1].option == a and chosen[p].option == b)
        values[id(model.same[key])] = float(on)
    if any((p, d.domain, d.option) not in cells for p, d in chosen.items()):
        return None
    return values
