"""A second exact engine: one (dp, micro-batch) pair as a native OR-Tools CP-SAT model.

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
* Period ``P`` in units of 1/W ns, ``W = lcm(1..S)``, so that every window average is an
  integer: ``P >= W c[p]``, ``W occ[p]`` and ``(W/w)(sum c + 2 sum delta)`` for every window of
  w consecutive positions (inactive ones add 0, so such windows are dominated). With a WAN
  share cap ``P`` is the exact maximum (``add_max_equality``): the cap is stated against the
  evaluator's tight period, which an inflatable epigraph would satisfy spuriously; every WAN
  boundary then needs ``P >= occ / share`` (an element threshold).
* All-reduce and optimizer: epigraphs above each stage's affine time, under ``dom[p,k] and
  opt[p,o]`` / ``opt[p,o]``. ``T = (m-1) P + W (sum c + 2 sum delta + AR + OPT)``.

Scaling. Times are rounded to integer nanoseconds and costs to integer nano-USD, each
coefficient off by at most 1/2 unit (pico-USD would tighten cost caps but cost a weighted
objective 1000x in weight resolution). For any plan (L layers, S positions,
m micro-batches) the scaled step time and cost differ from the float ones by at most

    e_P = (L + 2)/2 + 1/W     period: a stage's compute has <= n + 2 rounded terms; windows of
                              w >= 2 add 2(w-1) link terms but divide by w; 1/W for ceilings
                              (only when S > 10, where W stays lcm(1..10))
    e_T = (m-1) e_P + (L+2)/2 + (S-1) + (L+3)/2 + (L+2)/2    ns (P, sum c, 2 sum delta, AR, OPT)
    e_C = (S-1)/2                                            nano-USD

(``scaling_error_bound``), so the plan CP-SAT returns is optimal in float within ``2 e_T`` (a
few 1e-7 of the step time on the suites). ``Solve.values`` are computed in float from the
tables (:func:`solvers.tables.decision_values`), never read from the scaled model.

Weights ``(w_T, w_N, w_C)`` are per second, GPU and USD, i.e. ``a = (w_T / (W 1e9), w_N,
w_C / 1e9)`` per integer unit. A single nonzero weight becomes coefficient +-1 (exact);
otherwise the coefficients are ``round(lam a)``, ``lam`` as large as keeps the objective's
range below 2^60 but at most what makes the smallest nonzero coefficient 2^20, divided by
their gcd; each weight is then off by a relative ``d <= 0.5 / coefficient`` (up to ~1e-5
where the step time's loose range limits ``lam``). ``Solve.objective`` is the weighted float
values; ``Solve.bound`` is the proven integer bound over ``lam``, less the scaling error,
over ``1 + max d`` (nonnegative weights; a range-based slack otherwise): a valid lower bound
of the float problem, whose gap to the objective shows the scaling and weight resolution.

Caps are rounded outwards: ``N <= floor(gpu_cap)``, ``C <= floor(1e9 cap + e_C)``,
``T <= floor(W (1e9 cap + e_T))`` (the instance's cost budget and WAN share cap likewise), so
no plan within a cap in float is excluded; a returned plan may exceed a float cap by less than
the scaling bound (about 1e-5 s, 1e-9 USD). ``random_seed = 0``; with several workers, plans of
equal objective may differ from run to run.

Note: ortools 9.15 bundles HiGHS 1.12 as ``libhighs.so.1``, the same soname as highspy's; with
highspy 1.15 whichever is imported second fails to load, so run the engines in separate
processes unless highspy matches the bundled version (1.12.0 loads beside it).
"""

from __future__ import annotations

import math
import time

import numpy as np
from ortools.sat.python import cp_model

from solvers.engine import Solve
from solvers.tables import Decision, PairTables, decision_values, decisions_plan

TIME_UNIT_S = 1e-9  # integer nanoseconds
COST_UNIT_USD = 1e-9  # integer nano-USD
WEIGHT_RESOLUTION = 2 ** 20  # the smallest nonzero objective coefficient, range permitting
OBJECTIVE_LIMIT = 2 ** 60  # the largest objective magnitude after weighting
MAX_PERIOD_DIVISOR = 2520  # lcm(1..10)

_STATUS = {cp_model.OPTIMAL: "optimal", cp_model.FEASIBLE: "time_limit",
           cp_model.UNKNOWN: "time_limit", cp_model.INFEASIBLE: "infeasible"}


def _ints(values: np.ndarray | float, unit: float) -> np.ndarray:
    """Float coefficients (seconds or USD) rounded to integer units."""
    return np.rint(np.asarray(values, dtype=float) / unit).astype(np.int64)


def _pair_table(values: np.ndarray) -> list[int]:
    """A (K, K) table padded with zeros to (K+1, K+1) ("no stage" last), flattened."""
    k = values.shape[0]
    padded = np.zeros((k + 1, k + 1), dtype=np.int64)
    padded[:k, :k] = values
    return [int(x) for x in padded.ravel()]


class CpSatEngine:
    """A pair's CP-SAT model; each solve works on a copy with its caps and objective."""

    name = "cpsat"

    def __init__(self, tables: PairTables, time_limit: float | None = None, workers: int = 2,
                 rel_gap: float = 0.0):
        self.tables = tables
        self.time_limit = time_limit
        self.workers = max(1, int(workers))
        self.rel_gap = rel_gap
        self.divisor = min(math.lcm(*range(1, tables.positions + 1)), MAX_PERIOD_DIVISOR)
        start = time.perf_counter()
        self.model = cp_model.CpModel()
        self._build()
        self.build_time_s = time.perf_counter() - start

    # -- scaling --------------------------------------------------------------------------
    def _error_units(self) -> tuple[float, float, float]:
        """(e_P, e_T) in ns and e_C in nano-USD: see the module docstring."""
        t = self.tables
        big_l, s = t.layers, t.positions
        e_period = (big_l + 2) / 2 + 1 / self.divisor
        e_step = ((t.micro_batches - 1) * e_period + (big_l + 2) / 2 + (s - 1)
                  + (big_l + 3) / 2 + (big_l + 2) / 2)
        return e_period, e_step, (s - 1) / 2

    def scaling_error_bound(self) -> tuple[float, float]:
        """The most by which the scaled model's step time (s) and cost (USD) of any plan can
        differ from their float values."""
        _, e_step, e_cost = self._error_units()
        return e_step * TIME_UNIT_S, e_cost * COST_UNIT_USD

    # -- model ----------------------------------------------------------------------------
    def _build(self) -> None:
        t, md = self.tables, self.model
        s, nk, no, big_l = t.positions, t.num_domains, t.num_options, t.layers
        lt, ft, lst = (_ints(x, TIME_UNIT_S) for x in (t.layer_time, t.first_time, t.last_time))
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
        self.compute_ub = int(big_l * lt.max() + ft.max() + lst.max())
        compute = [md.new_int_var(0, self.compute_ub, f"c{p}") for p in range(s)]
        for p in range(s):
            md.add(sum(dom[p]) == act[p])
            md.add(sum(opt[p]) == act[p])
            md.add(index[p] == sum(k * dom[p][k] for k in range(nk)) + nk * (1 - act[p]))
            md.add(layers[p] >= act[p])
            md.add(layers[p] <= big_l * act[p])
            md.add(compute[p] == 0).only_enforce_if(~act[p])
            caps = [max(int(c), 0) for c in t.layer_cap[p]]
            for o in range(no):
                if caps[o] < 1:
                    md.add(opt[p][o] == 0)
                    continue
                md.add(layers[p] <= caps[o]).only_enforce_if(opt[p][o])
                if t.layer_cap_first[p, o] < caps[o]:
                    md.add(layers[p] <= int(t.layer_cap_first[p, o])).only_enforce_if(
                        [opt[p][o], first[p]])
                md.add(compute[p] == int(lt[o]) * layers[p] + int(ft[o]) * first[p]
                       + (int(lst[o]) if p == 0 else 0)).only_enforce_if(opt[p][o])
            # The valid inequality for the LP relaxation: layers split by option.
            split = [md.new_int_var(0, caps[o], f"n{p}_{o}") for o in range(no)]
            md.add(sum(split) == layers[p])
            for o in range(no):
                md.add(split[o] <= caps[o] * opt[p][o])
            md.add(compute[p] >= sum(int(lt[o]) * split[o] for o in range(no))
                   + int(ft.min()) * first[p]
                   + (sum(int(lst[o]) * opt[p][o] for o in range(no)) if p == 0 else 0))
        md.add(sum(layers) == big_l)

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
        self.pair = pair
        delay = _ints(t.delay, TIME_UNIT_S)
        delta = self._boundary(delay, "delta")
        link_cost = self._boundary(_ints(t.cost * (1 - np.eye(nk)), COST_UNIT_USD), "cost")
        period = self._period(compute, delta, int(delay.max()))
        allreduce, optimizer = self._epigraphs(dom, opt, layers, first)

        self.step = ((t.micro_batches - 1) * period
                     + self.divisor * (sum(compute) + 2 * sum(delta) + allreduce + optimizer))
        self.gpus, self.cost = sum(stage_gpus), sum(link_cost)
        self.upper = (  # upper bounds of (T, N, C) in integer units
            int((t.micro_batches - 1) * self.period_ub + self.divisor * (
                s * self.compute_ub + 2 * (s - 1) * int(delay.max())
                + self.allreduce_ub + self.optimizer_ub)),
            int(t.free_gpus.sum()), (s - 1) * max(_pair_table(_ints(t.cost, COST_UNIT_USD))))
        budget = t.instance.constraints.cost_budget
        if budget is not None and self._cost_units(budget) < self.upper[2]:
            md.add(self.cost <= self._cost_units(budget))
        self.act, self.dom, self.opt, self.layers = act, dom, opt, layers

    def _boundary(self, values: np.ndarray, name: str) -> list[cp_model.IntVar]:
        """Per boundary p+1 -> p, the (K, K) integer table's entry for the pair of domains."""
        table, out = _pair_table(values), []
        for p, pair in enumerate(self.pair):
            var = self.model.new_int_var(min(table), max(table), f"{name}{p}")
            self.model.add_element(pair, table, var)
            out.append(var)
        return out

    def _period(self, compute: list, delta: list, max_delay: int) -> cp_model.IntVar:
        """The 1F1B period in 1/W ns: an epigraph, or the exact maximum under a WAN cap."""
        t, md, w, s = self.tables, self.model, self.divisor, self.tables.positions
        occupancy = _ints(t.occupancy, TIME_UNIT_S)
        self.period_ub = w * max(self.compute_ub + 2 * (s - 1) * max_delay,
                                 int(occupancy.max()))
        period = md.new_int_var(0, self.period_ub, "period")
        share = t.instance.constraints.wan_share_cap
        terms = [w * c for c in compute] + [w * x for x in self._boundary(occupancy, "occ")]
        for k in range(s):
            for j in range(k + 1, s):
                span, total = j - k + 1, sum(compute[k:j + 1]) + 2 * sum(delta[k:j])
                if w % span == 0:
                    terms.append((w // span) * total)
                elif share is None:
                    md.add(span * period >= w * total)
                else:  # the exact ceiling of w * total / span
                    ceil = md.new_int_var(0, self.period_ub, f"window{k}_{j}")
                    md.add(span * ceil >= w * total)
                    md.add(span * ceil <= w * total + span - 1)
                    terms.append(ceil)
        if share is None:
            for term in terms:
                md.add(period >= term)
            return period
        md.add_max_equality(period, terms)
        e_period = self._error_units()[0]
        needed = np.floor(w * (t.occupancy / TIME_UNIT_S / share - e_period) - 1)
        needed = np.where(np.eye(t.num_domains, dtype=bool), 0, np.maximum(needed, 0))
        for threshold in self._boundary(needed.astype(np.int64), "wan"):
            md.add(period >= threshold)
        return period

    def _epigraphs(self, dom: list, opt: list, layers: list,
                   first: list) -> tuple[cp_model.IntVar, cp_model.IntVar]:
        """All-reduce and optimizer times: epigraphs above every stage's affine time."""
        t, md, big_l = self.tables, self.model, self.tables.layers
        params = (t.layer_params, t.embedding_params, t.head_params)
        ar = [_ints(t.allreduce_per_param * x, TIME_UNIT_S) for x in params]
        ar.append(_ints(t.allreduce_fixed, TIME_UNIT_S))
        op = [_ints(t.optimizer_per_param * x, TIME_UNIT_S) for x in params]
        self.allreduce_ub = int((ar[0] * big_l + ar[1] + ar[2] + ar[3]).max())
        self.optimizer_ub = int((op[0] * big_l + op[1] + op[2]).max())
        allreduce = md.new_int_var(0, self.allreduce_ub, "allreduce")
        optimizer = md.new_int_var(0, self.optimizer_ub, "optimizer")
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
        return math.floor(cap * (1 + 1e-12) / COST_UNIT_USD + self._error_units()[2])

    def _objective(self, weights: tuple[float, float, float]
                   ) -> tuple[list[int], float, float, float]:
        """Integer coefficients for (T, N, C), the scale ``lam`` (integer objective per float
        unit), and the slack and divisor that turn a proven integer bound into a valid float
        bound: ``(bound / lam - slack) / divisor``."""
        per_unit = np.array([weights[0] * TIME_UNIT_S / self.divisor, weights[1],
                             weights[2] * COST_UNIT_USD])
        upper = np.array(self.upper, dtype=float)
        nonzero = np.flatnonzero(per_unit)
        if len(nonzero) == 0:
            return [0, 0, 0], 1.0, 0.0, 1.0
        if len(nonzero) == 1:
            lam = 1 / abs(per_unit[nonzero[0]])
        else:
            lam = min(WEIGHT_RESOLUTION / np.abs(per_unit[nonzero]).min(),
                      OBJECTIVE_LIMIT / float(np.abs(per_unit) @ upper))
        coefficients = [int(c) if c or not a else int(np.sign(a))
                        for c, a in zip(np.rint(lam * per_unit), per_unit, strict=True)]
        divisor = math.gcd(*coefficients)
        coefficients = [c // divisor for c in coefficients]
        lam /= divisor
        error = np.abs(np.array(coefficients) / lam - per_unit)  # per integer unit
        relative = error[nonzero] / np.abs(per_unit[nonzero])
        e_step, e_cost = self.scaling_error_bound()
        slack = float(np.abs(weights) @ [e_step, 0.0, e_cost]) * (1 + relative.max())
        if min(weights) >= 0:  # each term is at most the objective
            return coefficients, lam, slack, 1 + float(relative.max())
        return coefficients, lam, slack + float(error @ upper), 1.0

    # -- solve ----------------------------------------------------------------------------
    def solve(self, weights: tuple[float, float, float] = (1.0, 0.0, 0.0),
              gpu_cap: float | None = None, cost_cap: float | None = None,
              step_cap: float | None = None, time_limit: float | None = None) -> Solve:
        model = self.model.clone()  # the clone keeps the variable indices of self.model
        e_step = self._error_units()[1]
        caps = (None if step_cap is None else math.floor(
                    self.divisor * (step_cap * (1 + 1e-12) / TIME_UNIT_S + e_step)),
                None if gpu_cap is None else math.floor(gpu_cap + 1e-9),
                None if cost_cap is None else self._cost_units(cost_cap))
        for expr, cap, upper in zip((self.step, self.gpus, self.cost), caps, self.upper,
                                    strict=True):
            if cap is not None and cap < upper:  # a cap beyond the range could overflow
                model.add(expr <= cap)
        coefficients, lam, slack, shrink = self._objective(weights)
        if any(coefficients):
            model.minimize(coefficients[0] * self.step + coefficients[1] * self.gpus
                           + coefficients[2] * self.cost)
        solver = cp_model.CpSolver()
        solver.parameters.num_workers = self.workers
        solver.parameters.random_seed = 0
        solver.parameters.relative_gap_limit = self.rel_gap
        limit = time_limit if time_limit is not None else self.time_limit
        if limit is not None:
            solver.parameters.max_time_in_seconds = max(float(limit), 1e-3)
        start = time.perf_counter()
        code = solver.solve(model)
        wall = time.perf_counter() - start
        if code == cp_model.MODEL_INVALID:
            raise RuntimeError(f"CP-SAT model invalid: {model.validate()}")
        if code not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            return Solve(_STATUS[code], None, None, None, None, wall)
        chosen = self._decisions(solver)
        values = decision_values(self.tables, chosen)
        objective = float(weights[0] * values.step_time_s + weights[1] * values.gpus
                          + weights[2] * values.comm_cost)
        bound = ((solver.best_objective_bound / lam - slack) / shrink if any(coefficients)
                 else objective)
        return Solve(_STATUS[code], decisions_plan(self.tables, chosen), values, objective,
                     float(bound), wall)

    def _decisions(self, solver: cp_model.CpSolver) -> dict[int, Decision]:
        chosen = {}
        for p, active in enumerate(self.act):
            if solver.boolean_value(active):
                (k,) = [k for k, x in enumerate(self.dom[p]) if solver.boolean_value(x)]
                (o,) = [o for o, x in enumerate(self.opt[p]) if solver.boolean_value(x)]
                chosen[p] = Decision(k, o, int(solver.value(self.layers[p])))
        return chosen
