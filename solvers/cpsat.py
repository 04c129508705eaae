"""A second exact engine: one (dp, micro-batch) pair as a native OR-Tools CP-SAT model (an
interleaved cell's model: :mod:`solvers.cpsat_interleaved`).

Built from the same :mod:`solvers.tables` as the MILP of :mod:`solvers.milp` but formulated
independently, as a constraint model states it, so that the two engines cross-check:

* Positions from the end (0 = last stage, LM head): ``act[p]``, ``act[0] = 1``,
  ``act[p+1] -> act[p]``; ``first[p] = act[p] - act[p+1]`` marks the first stage (embedding).
* Per position one-hots ``dom[p,k]`` and ``opt[p,o]`` (option = (tp, recompute)) summing to
  ``act[p]``, a domain index ``d[p]`` (``K`` = no stage) and layers ``n[p]``, ``sum n = L``.
  Under ``opt[p,o]`` (``only_enforce_if``): ``1 <= n[p] <=`` the memory cap of the option at
  p (the first-stage cap also under ``first[p]``) and compute
  ``c[p] = n lt_o + first ft_o + [p = 0] lst_o`` (0 when inactive). The LP relaxation never
  sees enforced constraints, so a valid inequality splits ``n[p]`` by option and bounds
  ``c[p]`` below linearly (5x faster proofs on the quick suite).
* GPUs: ``g[p,k] = r t_p`` if ``dom[p,k]`` else 0; ``sum_p g[p,k] <= a_k``; ``N = sum r t_p``.
* Boundary p+1 -> p: ``AddElement`` on the pair index ``(K+1) d[p+1] + d[p]`` into (K+1)^2
  tables of delay, occupancy and cost (zero where a side is "no stage").
* Period ``P``: ``P >= c[p]``, ``occ[p]`` and ``w P >= sum c + 2 sum delta`` for every window
  of w consecutive positions (inactive ones add 0, so such windows are dominated). With a WAN
  share cap ``P`` is the exact maximum (``add_max_equality``, windows as exact ceilings): the
  cap is stated against the evaluator's tight period, which an inflatable epigraph would
  satisfy spuriously; every WAN boundary then needs ``P >= occ / share`` (an element
  threshold).
* All-reduce and optimizer: epigraphs above each stage's affine time, under ``dom[p,k] and
  opt[p,o]`` / ``opt[p,o]``. ``T = (m-1) P + sum c + 2 sum delta + AR + OPT``.

Scaling. Times are rounded to integer multiples of a step unit ``u``, costs of a cost unit,
each coefficient off by at most 1/2 unit. The period and everything compared with it (stage
compute, boundary delay and occupancy, windows) are counted in ``u / (m - 1)``, so that the
period variable *is* ``(m - 1) P`` in step units: its rounding error costs the step time about
``L / 2`` units, not ``(m - 1) L / 2``. The step time's ``sum c`` and ``2 sum delta`` are
epigraphs in step units over those period-unit terms divided by ``m - 1`` (one ceiling each).
For any plan (L layers, S positions) the scaled step time and cost differ from the float
ones by at most

    e_P = (L + 2)/2 + 1              period units: a stage's compute has <= n + 2 rounded
                                     terms; windows of w >= 2 add 2(w-1) link terms but divide
                                     by w; 1 for ceilings
    e_T = e_P + (L + 2S)/(2(m-1)) + S + (S-1)(1/(m-1) + 2) + (L+3)/2 + (L+2)/2
                                     step units ((m-1) P, sum c, 2 sum delta, AR, OPT)
    e_C = (S-1)/2                    cost units

(``ScaledModel.error_bound``; with m = 1 the period is not in the step time and ``m - 1``
reads 1). ``Solve.values`` are computed in float from the tables
(:func:`solvers.tables.choice_values`), never read from the scaled model.

The step unit is chosen per solve, a power of two at which the largest step time the solve
may return (its step cap, else a loose bound of the pair) spans ``2^TIME_RANGE_BITS`` units,
and every variable's domain ends just above that; a min-step optimum found at a coarse unit
is solved again, warm-started, at the unit of its own step time. Measured (issue 13): with
all times in one unit, CP-SAT 9.15 called a K = 10 full-space plan "optimal" 50 % slower than
a feasible one (integers up to ~1.6e15), and a tiny instance's plan optimal 0.5 % slower than
another (step times near 2^35 units, periods near 2^31); its presolve is what goes wrong
(with ``cp_model_presolve`` off both are right). With ``2^30`` both are right, and ``e_T`` stays
below 2e-7 of the cap for L <= 80.

Weights ``(w_T, w_N, w_C)`` are per second, GPU and USD, i.e. ``a = (w_T u, w_N, w_C u_C)`` per
integer unit. A single nonzero weight becomes coefficient +-1 (exact); otherwise the
coefficients are ``round(lam a)``, ``lam`` as large as keeps the objective's range below
``2^OBJECTIVE_BITS`` but at most what makes the smallest nonzero coefficient
``WEIGHT_RESOLUTION``, divided by their gcd. ``Solve.objective`` is the weighted float values;
``Solve.bound`` is the proven integer bound turned into a valid float bound (less the
scaling error and the weights' rounding), whose gap to the objective
:mod:`solvers.certify` holds to the front's tolerance.

Caps are rounded outwards: ``N <= floor(gpu_cap)``, ``C <= floor(1e9 cap + e_C)``,
``T <= floor(cap / u + e_T)`` (the instance's cost budget and WAN share cap likewise), so no
plan within a cap in float is excluded; a returned plan may exceed a float cap by less than
the scaling bound. Floors (``SolveRequest.period_floor``, ``step_floor``) are rounded inwards.
A request's ``hint`` becomes CP-SAT hints. CP-SAT runs at least 2 workers: with one it stalled
for minutes on 15 of 75 tiny instances that 2 workers finish in under 40 s (issue 13).
``random_seed = 0``; with several workers, plans of equal objective may differ from run to
run.

Note: ortools 9.15 bundles HiGHS 1.12 as ``libhighs.so.1``, the same soname as highspy's; with
highspy 1.15 whichever is imported second fails to load, so run the engines in separate
processes unless highspy matches the bundled version (1.12.0 loads beside it).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import threading
import time
from collections.abc import Callable

import numpy as np
from ortools.sat.python import cp_model

from formulation.plan import Plan
from solvers.engine import EngineStatistics, Solve, SolveRequest, SolveStatus, timed
from solvers.tables import PairTables, StageChoice, choice_values, choices_plan, plan_choices

TIME_RANGE_BITS = 30  # the largest step time a solve may return spans 2^30 step units
COST_RANGE_BITS = 30  # the costliest plan of a pair spans at most 2^30 cost units
OBJECTIVE_BITS = 46  # the largest objective magnitude when several weights mix
WEIGHT_RESOLUTION = 2 ** 10  # the smallest nonzero objective coefficient, range permitting
MIN_WORKERS = 2
REFINE_GAP = 1e-7  # a min-step optimum whose float gap exceeds this is solved at a finer unit

_STATUS = {cp_model.OPTIMAL: SolveStatus.OPTIMAL, cp_model.FEASIBLE: SolveStatus.LIMIT,
           cp_model.UNKNOWN: SolveStatus.LIMIT, cp_model.INFEASIBLE: SolveStatus.INFEASIBLE}


def _ints(values: np.ndarray | float, unit: float, high: int | None = None) -> np.ndarray:
    """Float coefficients (seconds or USD) rounded to integer units, clipped at ``high``."""
    out = np.rint(np.asarray(values, dtype=float) / unit)
    if high is not None:
        out = np.minimum(out, high)
    return out.astype(np.int64)


def _pair_table(values: np.ndarray) -> list[int]:
    """A (K, K) table padded with zeros to (K+1, K+1) ("no stage" last), flattened."""
    k = values.shape[0]
    padded = np.zeros((k + 1, k + 1), dtype=np.int64)
    padded[:k, :k] = values
    return [int(x) for x in padded.ravel()]


def loose_step_bound(t: PairTables) -> float:
    """Seconds no plan of the pair exceeds: every term at its largest."""
    s = t.positions
    compute = t.layers * t.layer_time.max() + t.first_time.max() + t.last_time.max()
    links = 2 * (s - 1) * float(t.delay.max())
    period = max(compute + links, float(t.occupancy.max()))
    return (t.micro_batches - 1) * period + s * compute + links + sync_bound(t)


def sync_bound(t: PairTables) -> float:
    """Seconds no stage's all-reduce plus optimizer step exceeds (the whole model on one
    stage, at the largest coefficients)."""
    params = t.layers * t.layer_params + t.embedding_params + t.head_params
    allreduce = float((t.allreduce_per_param * params + t.allreduce_fixed).max())
    optimizer = float((t.optimizer_per_param * params).max())
    return allreduce + optimizer


def power_of_two_unit(high: float, bits: int) -> float:
    """The power-of-two unit at which ``high`` spans at most ``2^bits`` units."""
    return 2.0 ** math.ceil(math.log2(max(high, 1e-300) / 2 ** bits))


class CpSatEngine:
    """A pair's CP-SAT models, one per step-time unit in use; each solve works on a copy."""

    name = "cpsat"
    presolve = True

    def __init__(self, tables: PairTables, threads: int = MIN_WORKERS, rel_gap: float = 0.0):
        self.tables = tables
        self.workers = max(MIN_WORKERS, int(threads))
        self.rel_gap = rel_gap
        self.statistics = EngineStatistics()
        if tables.interleaved:  # an interleaved cell: its own model (imported on use)
            from solvers.cpsat_interleaved import InterleavedScaledModel, loose_interleaved_bound
            self.loose_step_s = loose_interleaved_bound(tables)
            self._model_class = InterleavedScaledModel
        else:
            self.loose_step_s = loose_step_bound(tables)
            self._model_class = ScaledModel

    @functools.lru_cache(maxsize=8)  # noqa: B019 (a few scales per engine)
    def model(self, unit: float) -> ScaledModel:
        return self._model_class(self.tables, unit)

    def scale_for(self, request: SolveRequest) -> ScaledModel:
        """The model whose step unit fits the largest step time the request may return."""
        step_cap = request.capped(request.step_cap)
        high = self.loose_step_s if step_cap is None else min(step_cap, self.loose_step_s)
        return self.model(power_of_two_unit(high, TIME_RANGE_BITS))

    def solve(self, request: SolveRequest) -> Solve:
        """One solve; a min-step-time optimum found at a coarse unit (the request's step cap,
        or its absence, was far above it) is solved again at the unit of its own step time,
        warm-started, so that its bound is as tight as the scaling allows."""
        start = time.perf_counter()
        solve = self._solve(request)
        if (solve.status == SolveStatus.OPTIMAL and request.weights == (1.0, 0.0, 0.0)
                and solve.gap is not None and solve.gap > REFINE_GAP):
            step = solve.values.step_time_s * (1 + 1e-9)
            if self.scale_for(dataclasses.replace(request, step_cap=step)) \
                    is not self.scale_for(request):
                left = None if request.time_limit is None \
                    else max(1e-3, request.time_limit - solve.wall_time_s)
                finer = self._solve(dataclasses.replace(request, step_cap=step,
                                                        hint=solve.plan, time_limit=left))
                if finer.status == SolveStatus.OPTIMAL:
                    solve = finer
        return self.statistics.record(dataclasses.replace(
            solve, wall_time_s=time.perf_counter() - start))

    def _solve(self, request: SolveRequest) -> Solve:
        start = time.perf_counter()
        scaled = self.scale_for(request)
        model = scaled.model.clone()  # the clone keeps the variable indices
        scaled.apply(model, request)
        coefficients, valid_bound = scaled.objective(request.weights)
        if any(coefficients):
            model.minimize(coefficients[0] * scaled.step + coefficients[1] * scaled.gpus
                           + coefficients[2] * scaled.cost)
        if request.hint is not None:
            scaled.hint(model, request.hint)
        solver = cp_model.CpSolver()
        solver.parameters.num_workers = self.workers
        solver.parameters.random_seed = 0
        solver.parameters.relative_gap_limit = self.rel_gap
        solver.parameters.cp_model_presolve = self.presolve
        if request.time_limit is not None:
            solver.parameters.max_time_in_seconds = max(float(request.time_limit), 1e-3)
        code = _solve_interruptibly(solver, model)
        if code == cp_model.MODEL_INVALID:
            raise RuntimeError(f"CP-SAT model invalid: {model.validate()}")
        status = _STATUS[code]
        if code not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            return timed(self.name, start, status)
        chosen = scaled.choices(solver)
        values = choice_values(self.tables, chosen)
        objective = values.weighted(request.weights)
        bound = valid_bound(solver.best_objective_bound) if any(coefficients) else objective
        return timed(self.name, start, status, plan=choices_plan(self.tables, chosen),
                     values=values, objective=float(objective), bound=float(bound))


def _solve_interruptibly(solver: cp_model.CpSolver, model: cp_model.CpModel) -> int:
    """``solver.solve(model)`` in a worker thread while this one waits: Python runs its
    signal handlers only here, between bytecodes, and CP-SAT's own SIGINT handler stops the
    search without telling Python, so Ctrl-C (or SIGTERM) would either wait for the solve's
    time limit or be lost. Here it stops the search at once and is raised again. The wait
    is on an event, not ``Thread.join``: an interrupted join can leave a running thread
    marked finished (CPython 3.11), and the process would then exit under a live solve."""
    solver.parameters.catch_sigint_signal = False
    outcome: dict = {}
    done = threading.Event()

    def run() -> None:
        try:
            outcome["code"] = solver.solve(model)
        except BaseException as err:  # handed to the waiting thread
            outcome["error"] = err
        finally:
            done.set()

    threading.Thread(target=run, name="cp-sat", daemon=True).start()
    try:
        while not done.wait(0.05):
            pass
    except BaseException:
        solver.stop_search()
        done.wait()
        raise
    if "error" in outcome:
        raise outcome["error"]
    return outcome["code"]


class ScaledModel:
    """The CP-SAT model of a pair at one step-time unit ``unit`` (seconds).

    The period and everything compared with it (stage compute, boundary delay and
    occupancy, windows) are counted in ``unit / (m - 1)``, so that ``(m - 1) P`` in step
    units is the period variable itself: a rounding error of the period then costs the step
    time one unit, not ``m - 1``. The other step-time terms are counted in ``unit``, costs in
    a power-of-two unit at which the costliest plan spans ``2^COST_RANGE_BITS``. Every
    variable's domain ends at ``high``, just above ``2^TIME_RANGE_BITS``: no quantity of a
    plan within the step cap exceeds it.
    """

    def __init__(self, tables: PairTables, unit: float):
        t = self.tables = tables
        self.unit = unit
        self.periods = t.micro_batches - 1
        self.period_unit = unit / max(self.periods, 1)
        max_cost = self.crossings() * float(t.cost.max(initial=0.0))
        self.cost_unit = power_of_two_unit(max_cost, COST_RANGE_BITS) if max_cost > 0 else 1.0
        self.high = 2 ** TIME_RANGE_BITS + int(math.ceil(self._error_units()[1])) + 1
        self.model = cp_model.CpModel()
        self._build()

    def crossings(self) -> int:
        """The most boundary crossings a plan pays for (cost) a micro-batch."""
        return self.tables.positions - 1

    # -- scaling --------------------------------------------------------------------------
    def _error_units(self) -> tuple[float, float, float]:
        """(e_P in period units, e_T in step units, e_C in cost units): module docstring."""
        t = self.tables
        big_l, s = t.layers, t.positions
        e_period = (big_l + 2) / 2 + 1
        per = max(self.periods, 1)  # period units per step unit
        e_step = (e_period * (self.periods > 0)
                  + (big_l + 2 * s) / (2 * per) + s  # sum c: rounding, then ceilings
                  + (s - 1) * (1 / per + 2)  # 2 sum delta: rounding, then ceilings
                  + (big_l + 3) / 2 + (big_l + 2) / 2)  # all-reduce, optimizer
        return e_period, e_step, (s - 1) / 2

    def error_bound(self) -> tuple[float, float]:
        """The most by which this model's step time (s) and cost (USD) of any plan can
        differ from their float values."""
        _, e_step, e_cost = self._error_units()
        return e_step * self.unit, e_cost * self.cost_unit

    # -- model ----------------------------------------------------------------------------
    def _build(self) -> None:
        t, md, high = self.tables, self.model, self.high
        s, nk, no, big_l = t.positions, t.num_domains, t.num_options, t.layers
        act = [md.new_bool_var(f"act{p}") for p in range(s)]
        md.add(act[0] == 1)
        first = []
        for p in range(s - 1):
            md.add_implication(act[p + 1], act[p])
            first.append(md.new_bool_var(f"first{p}"))
            md.add(first[p] == act[p] - act[p + 1])
        first.append(act[s - 1])
        dom = [[md.new_bool_var(f"dom{p}_{k}") for k in range(nk)] for p in range(s)]
        opt = [[md.new_bool_var(f"opt{p}_{o}") for o in range(no)] for p in range(s)]
        layers = [md.new_int_var(0, big_l, f"n{p}") for p in range(s)]
        index = [md.new_int_var(0, nk, f"d{p}") for p in range(s)]
        for p in range(s):
            md.add(sum(dom[p]) == act[p])
            md.add(sum(opt[p]) == act[p])
            md.add(index[p] == sum(k * dom[p][k] for k in range(nk)) + nk * (1 - act[p]))
            md.add(layers[p] >= act[p])
            md.add(layers[p] <= big_l * act[p])
            for o in range(no):
                if t.layer_cap[p, o] < 1:
                    md.add(opt[p][o] == 0)
                    continue
                md.add(layers[p] <= int(t.layer_cap[p, o])).only_enforce_if(opt[p][o])
                if t.layer_cap_first[p, o] < t.layer_cap[p, o]:
                    md.add(layers[p] <= int(t.layer_cap_first[p, o])).only_enforce_if(
                        [opt[p][o], first[p]])
        md.add(sum(layers) == big_l)
        self.act, self.dom, self.opt, self.layers, self.first = act, dom, opt, layers, first
        compute = self._compute(self.period_unit, "c", act, opt, layers, first)

        stage_gpus = [sum(int(t.gpus[o]) * opt[p][o] for o in range(no)) for p in range(s)]
        for k in range(nk):
            taken = [md.new_int_var(0, int(t.free_gpus[k]), f"g{p}_{k}") for p in range(s)]
            for p in range(s):
                md.add(taken[p] == stage_gpus[p]).only_enforce_if(dom[p][k])
                md.add(taken[p] == 0).only_enforce_if(~dom[p][k])
            md.add(sum(taken) <= int(t.free_gpus[k]))

        pair = [md.new_int_var(0, (nk + 1) ** 2 - 1, f"pair{p}") for p in range(s - 1)]
        for p in range(s - 1):
            md.add(pair[p] == (nk + 1) * index[p + 1] + index[p])
        self.pair, self.index, self.stage_gpus = pair, index, stage_gpus
        self._build_time_and_cost(compute)
        self.upper = (high, int(t.free_gpus.sum()),  # upper bounds of (T, N, C) in units
                      self.crossings() * max(_pair_table(_ints(t.cost, self.cost_unit))))
        budget = t.instance.constraints.cost_budget
        if budget is not None and self._cost_units(budget) < self.upper[2]:
            md.add(self.cost <= self._cost_units(budget))

    def _build_time_and_cost(self, compute: list[cp_model.IntVar]) -> None:
        """``period``, ``step`` and ``cost`` of plain 1F1B (module docstring)."""
        t, md, high, nk = self.tables, self.model, self.high, self.tables.num_domains
        dom, opt, layers, first = self.dom, self.opt, self.layers, self.first
        delta = self._boundary(_ints(t.delay, self.period_unit, high), "delta")
        link_cost = self._boundary(_ints(t.cost * (1 - np.eye(nk)), self.cost_unit), "cost")
        self.period = self._period(compute, delta)
        allreduce, optimizer = self._epigraphs(dom, opt, layers, first)

        # sum c and 2 sum delta in step units: each term the ceiling of its period-unit
        # value over m - 1 (an epigraph, tight at the optimum).
        coarse = []
        for name, terms in (("cs", compute), ("ds", delta)):
            for p, term in enumerate(terms):
                var = md.new_int_var(0, high, f"{name}{p}")
                md.add(max(self.periods, 1) * var >= term)
                coarse.append(var if name == "cs" else 2 * var)
        self.step = (self.period if self.periods > 0 else 0) + sum(coarse) + allreduce \
            + optimizer
        self.gpus, self.cost = sum(self.stage_gpus), sum(link_cost)

    def _compute(self, unit: float, name: str, act: list, opt: list, layers: list,
                 first: list, times: tuple[np.ndarray, ...] | None = None
                 ) -> list[cp_model.IntVar]:
        """``c[p] = n lt_o + first ft_o + [p = 0] lst_o`` in ``unit`` under ``opt[p,o]``
        (0 when inactive), with the split-by-option valid inequality for the LP; ``times``:
        other per-option (per layer, first stage, last stage) times than the compute's."""
        t, md = self.tables, self.model
        lt, ft, lst = (_ints(x, unit) for x in (times or (t.layer_time, t.first_time,
                                                          t.last_time)))
        out = []
        for p in range(t.positions):
            c = md.new_int_var(0, self.high, f"{name}{p}")
            md.add(c == 0).only_enforce_if(~act[p])
            caps = [max(int(x), 0) for x in t.layer_cap[p]]
            for o in range(t.num_options):
                if caps[o] >= 1:
                    md.add(c == int(lt[o]) * layers[p] + int(ft[o]) * first[p]
                           + (int(lst[o]) if p == 0 else 0)).only_enforce_if(opt[p][o])
            # The LP relaxation never sees enforced constraints: layers split by option
            # bound c below linearly (5x faster proofs on the quick suite).
            split = [md.new_int_var(0, caps[o], f"{name}n{p}_{o}") for o in range(t.num_options)]
            md.add(sum(split) == layers[p])
            for o in range(t.num_options):
                md.add(split[o] <= caps[o] * opt[p][o])
            md.add(c >= sum(int(lt[o]) * split[o] for o in range(t.num_options))
                   + int(ft.min()) * first[p]
                   + (sum(int(lst[o]) * opt[p][o] for o in range(t.num_options))
                      if p == 0 else 0))
            out.append(c)
        return out

    def _boundary(self, values: np.ndarray, name: str,
                  pairs: list | None = None) -> list[cp_model.IntVar]:
        """Per boundary p+1 -> p (or per pair index of ``pairs``), the (K, K) integer
        table's entry for the pair of domains."""
        table, out = _pair_table(values), []
        for p, pair in enumerate(self.pair if pairs is None else pairs):
            var = self.model.new_int_var(min(table), max(table), f"{name}{p}")
            self.model.add_element(pair, table, var)
            out.append(var)
        return out

    def _period(self, compute: list, delta: list) -> cp_model.IntVar:
        """The 1F1B period (period units): an epigraph, or the exact maximum under a WAN cap."""
        t, md, s = self.tables, self.model, self.tables.positions
        period = md.new_int_var(0, self.high, "period")
        share = t.instance.constraints.wan_share_cap
        occupancy = self._boundary(_ints(t.occupancy, self.period_unit, self.high), "occ")
        terms = list(compute) + occupancy
        for k in range(s):
            for j in range(k + 1, s):
                span, total = j - k + 1, sum(compute[k:j + 1]) + 2 * sum(delta[k:j])
                if share is None:
                    md.add(span * period >= total)
                else:  # the exact ceiling of total / span
                    ceil = md.new_int_var(0, self.high, f"window{k}_{j}")
                    md.add(span * ceil >= total)
                    md.add(span * ceil <= total + span - 1)
                    terms.append(ceil)
        if share is None:
            for term in terms:
                md.add(period >= term)
            return period
        md.add_max_equality(period, terms)
        e_period = self._error_units()[0]
        needed = np.floor(t.occupancy / self.period_unit / share - e_period - 1)
        needed = np.where(np.eye(t.num_domains, dtype=bool), 0,
                          np.clip(needed, 0, self.high))
        for threshold in self._boundary(needed.astype(np.int64), "wan"):
            md.add(period >= threshold)
        return period

    def _epigraphs(self, dom: list, opt: list, layers: list,
                   first: list) -> tuple[cp_model.IntVar, cp_model.IntVar]:
        """All-reduce and optimizer times (step units): epigraphs above every stage's affine
        time."""
        t, md = self.tables, self.model
        params = (t.layer_params, t.embedding_params, t.head_params)
        ar = [_ints(t.allreduce_per_param * x, self.unit) for x in params]
        ar.append(_ints(t.allreduce_fixed, self.unit))
        op = [_ints(t.optimizer_per_param * x, self.unit) for x in params]
        allreduce = md.new_int_var(0, self.high, "allreduce")
        optimizer = md.new_int_var(0, self.high, "optimizer")
        for p in range(t.positions):
            last = int(p == 0)
            for o in range(t.num_options):
                md.add(optimizer >= int(op[0][o]) * layers[p] + int(op[1][o]) * first[p]
                       + last * int(op[2][o])).only_enforce_if(opt[p][o])
                for k in range(t.num_domains):
                    c = [int(x[k, o]) for x in ar]
                    if any(c):
                        md.add(allreduce >= c[0] * layers[p] + c[1] * first[p] + last * c[2]
                               + c[3]).only_enforce_if([dom[p][k], opt[p][o]])
        return allreduce, optimizer

    def _cost_units(self, cap: float) -> int:
        return math.floor(cap * (1 + 1e-12) / self.cost_unit + self._error_units()[2])

    # -- one solve ------------------------------------------------------------------------
    def apply(self, model: cp_model.CpModel, request: SolveRequest) -> None:
        """The request's caps (rounded outwards) and floors (rounded inwards) on a clone;
        the step cap is always there (at most the range the unit was chosen for)."""
        e_period, e_step, _ = self._error_units()
        step_cap = request.capped(request.step_cap)
        step_high = 2 ** TIME_RANGE_BITS * self.unit if step_cap is None \
            else min(step_cap, 2 ** TIME_RANGE_BITS * self.unit)
        caps = (math.floor(step_high * (1 + 1e-12) / self.unit + e_step),
                None if request.gpu_cap is None else math.floor(request.gpu_cap + 1e-9),
                None if request.cost_cap is None else self._cost_units(request.cost_cap))
        for expr, cap, upper in zip((self.step, self.gpus, self.cost), caps, self.upper,
                                    strict=True):
            if cap is not None and cap < upper:
                model.add(expr <= cap)
        if request.period_floor is not None and math.isfinite(request.period_floor):
            floor = math.floor(request.period_floor / self.period_unit - e_period)
            if 0 < floor < self.high:
                model.add(self.period >= floor)
        if request.step_floor is not None and math.isfinite(request.step_floor):
            floor = math.floor(request.step_floor / self.unit - e_step)
            if 0 < floor < self.high:
                model.add(self.step >= floor)

    def objective(self, weights: tuple[float, float, float]
                  ) -> tuple[list[int], Callable[[float], float]]:
        """Integer coefficients for (T, N, C) and the map from a proven integer bound to a
        valid bound of the float objective."""
        per_unit = np.array([weights[0] * self.unit, weights[1], weights[2] * self.cost_unit])
        upper = np.array(self.upper, dtype=float)
        nonzero = np.flatnonzero(per_unit)
        e_step, e_cost = self.error_bound()
        slack = float(np.abs(weights) @ [e_step, 0.0, e_cost])
        if len(nonzero) == 0:
            return [0, 0, 0], lambda bound: bound
        if len(nonzero) == 1:
            lam = 1 / abs(per_unit[nonzero[0]])
        else:
            lam = min(WEIGHT_RESOLUTION / np.abs(per_unit[nonzero]).min(),
                      2.0 ** OBJECTIVE_BITS / float(np.abs(per_unit) @ upper))
        coefficients = [int(c) if c or not a else int(np.sign(a))
                        for c, a in zip(np.rint(lam * per_unit), per_unit, strict=True)]
        divisor = math.gcd(*coefficients)
        coefficients = [c // divisor for c in coefficients]
        lam /= divisor
        over = np.array(coefficients) / lam - per_unit  # > 0: a weight rounded up
        relative = np.abs(over[nonzero]) / np.abs(per_unit[nonzero])
        if min(weights) < 0:
            return coefficients, lambda bound: bound / lam - slack - float(np.abs(over) @ upper)

        def valid(bound: float) -> float:
            # Two valid forms: every term is at most the objective, so the integer objective
            # overstates it by at most the largest relative rounding; or each rounded-up
            # term overstates it by at most its rounding times its range.
            shrunk = (bound / lam - slack * (1 + relative.max())) / (1 + relative.max())
            shifted = bound / lam - slack - float(np.clip(over, 0, None) @ upper)
            return max(shrunk, shifted)

        return coefficients, valid

    def hint(self, model: cp_model.CpModel, plan: Plan) -> None:
        """CP-SAT hints for the assignment that encodes ``plan`` (if this pair's)."""
        chosen = plan_choices(self.tables, plan)
        if chosen is None:
            return
        for p, active in enumerate(self.act):
            d = chosen.get(p)
            model.add_hint(active, d is not None)
            model.add_hint(self.layers[p], 0 if d is None else d.layers)
            for k, var in enumerate(self.dom[p]):
                model.add_hint(var, d is not None and d.domain == k)
            for o, var in enumerate(self.opt[p]):
                model.add_hint(var, d is not None and d.option == o)

    def choices(self, solver: cp_model.CpSolver) -> dict[int, StageChoice]:
        chosen = {}
        for p, active in enumerate(self.act):
            if solver.boolean_value(active):
                (k,) = [k for k, x in enumerate(self.dom[p]) if solver.boolean_value(x)]
                (o,) = [o for o, x in enumerate(self.opt[p]) if solver.boolean_value(x)]
                chosen[p] = StageChoice(k, o, int(solver.value(self.layers[p])))
        return chosen


class CpSatNoPresolveEngine(CpSatEngine):
    """The same model with CP-SAT's presolve off, where every wrong claim measured in
    issue 13 arose: the second opinion on CP-SAT's claims."""

    name = "cpsat-nopresolve"
    presolve = False
