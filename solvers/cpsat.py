"""A second exact engine: the SPEC problem of one (dp, micro-batch) pair as a native CP-SAT model.

Built from the same :mod:`solvers.tables` as the MILP of :mod:`solvers.milp`, but formulated
independently, the way a constraint model states it, so that the two engines cross-check:

* Positions counted from the end (0 = last stage, LM head): ``act[p]`` with ``act[0] = 1`` and
  ``act[p+1] -> act[p]``; ``first[p] = act[p] - act[p+1]`` marks the first stage (embedding).
* Per position one-hot ``dom[p,k]`` and ``opt[p,o]`` (option = (tp, recompute)), both summing
  to ``act[p]``; an integer domain index ``d[p]`` (``K`` = "no stage"); a layer count
  ``1 <= n[p] <= cap`` with the memory cap of the chosen option (the first-stage cap under
  ``first[p]``), enforced option-wise with ``only_enforce_if``; ``sum n = L``.
* GPUs: ``g[p,k] = r t_p`` if ``dom[p,k]`` else 0, ``sum_p g[p,k] <= a_k``.
* Stage compute ``c[p] = n lt_o + first ft_o + [p = 0] lst_o`` under ``opt[p,o]`` (0 if inactive).
* Links: ``AddElement`` on the pair index ``(K+1) d[p+1] + d[p]`` into (K+1)^2 tables of delay,
  occupancy and cost (zero rows/columns for "no stage"), one per boundary p+1 -> p.
* Period ``P`` (in units of 1/W ns, ``W = lcm(1..S)`` so every window average is an integer):
  above every ``W c[p]``, ``W occ[p]`` and window ``(W / w)(sum c + 2 sum delta)`` over
  consecutive positions; inactive positions contribute 0, so such windows are dominated.
  With a WAN share cap, ``P`` is the exact maximum (``add_max_equality``), because the cap is
  stated against the evaluator's tight period and an inflatable epigraph would satisfy it
  spuriously; each WAN boundary then needs ``P >= occ / share`` (an element threshold).
* All-reduce and optimizer epigraphs above every stage's affine time (``only_enforce_if`` on
  ``dom[p,k] and opt[p,o]`` / ``opt[p,o]``); step ``T = (m-1) P + W (sum c + 2 sum delta + AR +
  OPT)``; cost ``C = sum`` of boundary costs; ``N = sum r t_p``.

Scaling. Every time coefficient is rounded to integer nanoseconds and every cost to integer
nano-USD (each off by at most 1/2 unit). For any plan, with L layers, S positions and m
micro-batches, the model's step time differs from the float one by at most

    e_P = (L + 2)/2 + 1/W            on the period (a stage's compute carries at most n + 2
                                     coefficients, links add (S-1) but windows divide by >= 2;
                                     1/W covers a ceiling when W cannot be lcm(1..S))
    e_T = (m-1) e_P + (L+2)/2 + (S-1) + (L+3)/2 + (L+2)/2     (ns: P, sum c, 2 sum delta, AR, OPT)
    e_C = (S-1)/2                                            (nano-USD)

(``scaling_error_bound``). The plan CP-SAT returns is therefore optimal for the float problem
within ``2 e_T`` (about 1e-7 of the step time on the suites). Values reported in ``Solve`` are
computed in float from the tables (:func:`model_values`), never from the scaled model.

Objective weights ``(w_T, w_N, w_C)`` are per second, GPU and USD. Per integer unit of
``(T, N, C)`` they are ``a = (w_T / (W 1e9), w_N, w_C / 1e9)``; the integer coefficients are
``round(lam a)`` with ``lam`` the largest scale that keeps both every nonzero coefficient at
least ``2^20`` (relative rounding <= 5e-7) and the objective's range below ``2^60``, divided by
their gcd (a single weight becomes coefficient 1, exactly). The reported bound is the proven
integer bound divided by ``lam``, minus the scaling and weight-rounding slack, so it stays a
valid lower bound of the float problem.

Caps are rounded outwards: ``N <= floor(gpu_cap)``, ``C <= floor(1e9 cap + e_C)``,
``T <= floor(W (1e9 cap + e_T))`` (and the instance's cost budget and WAN share cap likewise),
so no plan within a cap in float is excluded; a returned plan may exceed a float cap by less
than the scaling bound (about 1e-5 s, 1e-9 USD). Deterministic for a fixed ``workers``
(``random_seed = 0``); with more than one worker, equal-objective plans may differ run to run.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np
from ortools.sat.python import cp_model

from formulation.plan import Plan, Stage
from solvers.engine import ModelValues, Solve
from solvers.tables import PairTables

TIME_UNIT_S = 1e-9  # integer nanoseconds
COST_UNIT_USD = 1e-9  # integer nano-USD
WEIGHT_RESOLUTION = 2 ** 20  # smallest nonzero integer objective coefficient (if range allows)
OBJECTIVE_LIMIT = 2 ** 60  # largest objective magnitude allowed after weighting
MAX_PERIOD_DIVISOR = 2520  # lcm(1..10): beyond 10 positions some window averages are ceilings

_STATUS = {cp_model.OPTIMAL: "optimal", cp_model.FEASIBLE: "time_limit",
           cp_model.UNKNOWN: "time_limit", cp_model.INFEASIBLE: "infeasible"}


def _ints(values: np.ndarray, unit: float) -> np.ndarray:
    """Round float coefficients (seconds or USD) to integer units."""
    return np.rint(np.asarray(values, dtype=float) / unit).astype(np.int64)


def _pair_table(values: np.ndarray) -> list[int]:
    """A (K, K) integer table padded to (K+1, K+1) with zeros for "no stage", flattened."""
    k = values.shape[0]
    padded = np.zeros((k + 1, k + 1), dtype=np.int64)
    padded[:k, :k] = values
    return [int(x) for x in padded.ravel()]


@dataclass(frozen=True)
class Decision:
    """One active position's choices: domain, option index and layer count."""

    domain: int
    option: int
    layers: int


def model_values(tables: PairTables, chosen: dict[int, Decision]) -> ModelValues:
    """Objective values of a decision in float, from the tables (every epigraph tight), the
    same assembly as :func:`solvers.milp.model_values`; ``chosen`` maps position -> decision."""
    t = tables
    active = sorted(chosen)
    top = max(active)
    compute, allreduce, optimizer = [], [], []
    for p in active:
        k, o, layers = chosen[p].domain, chosen[p].option, chosen[p].layers
        is_first, is_last = p == top, p == 0
        compute.append(layers * t.layer_time[o] + is_first * t.first_time[o]
                       + is_last * t.last_time[o])
        params = layers * t.layer_params + is_first * t.embedding_params + is_last * t.head_params
        allreduce.append(t.allreduce_per_param[k, o] * params + t.allreduce_fixed[k, o])
        optimizer.append(t.optimizer_per_param[o] * params)
    pairs = [(chosen[p + 1].domain, chosen[p].domain) for p in active[:-1]]
    delta = [float(t.delay[a, b]) for a, b in pairs]
    occupancy = [float(t.occupancy[a, b]) for a, b in pairs]
    cost = sum(float(t.cost[a, b]) for a, b in pairs if a != b)
    windows = [(sum(compute[k:j + 1]) + 2 * sum(delta[k:j])) / (j - k + 1)
               for k in range(len(active)) for j in range(k, len(active))]
    period = max([*compute, *occupancy, *windows])
    step = ((t.micro_batches - 1) * period + sum(compute) + 2 * sum(delta)
            + max(allreduce) + max(optimizer))
    gpus = sum(int(t.gpus[chosen[p].option]) for p in active)
    return ModelValues(step_time_s=float(step), gpus=gpus, comm_cost=float(cost))


class CpSatEngine:
    """A pair's CP-SAT model; each solve works on a copy with its caps and objective."""

    name = "cpsat"

    def __init__(self, tables: PairTables, time_limit: float | None = None, workers: int = 2,
                 rel_gap: float = 0.0):
        self.tables = tables
        self.time_limit = time_limit
        self.workers = max(1, int(workers))
        self.rel_gap = rel_gap
        s = tables.positions
        self.divisor = math.lcm(*range(1, s + 1))  # W
        if self.divisor > MAX_PERIOD_DIVISOR:
            self.divisor = MAX_PERIOD_DIVISOR
        start = time.perf_counter()
        self._build()
        self.build_time_s = time.perf_counter() - start

    # -- scaling --------------------------------------------------------------------------
    def _error_units(self) -> tuple[float, float]:
        """(e_T in ns, e_C in nano-USD): see the module docstring."""
        t = self.tables
        big_l, s = t.layers, t.positions
        e_period = (big_l + 2) / 2 + 1 / self.divisor
        e_step = ((t.micro_batches - 1) * e_period + (big_l + 2) / 2 + (s - 1)
                  + (big_l + 3) / 2 + (big_l + 2) / 2)
        return e_step, (s - 1) / 2

    def scaling_error_bound(self) -> tuple[float, float]:
        """Largest difference, over all plans, between the scaled model's step time (seconds)
        and cost (USD) and their float values."""
        e_step, e_cost = self._error_units()
        return e_step * TIME_UNIT_S, e_cost * COST_UNIT_USD

    # -- model ----------------------------------------------------------------------------
    def _build(self) -> None:
        t, w = self.tables, self.divisor
        s, nk, no, big_l = t.positions, t.num_domains, t.num_options, t.layers
        lt, ft, lst = (_ints(x, TIME_UNIT_S) for x in (t.layer_time, t.first_time, t.last_time))
        ar_layer = _ints(t.allreduce_per_param * t.layer_params, TIME_UNIT_S)
        ar_first = _ints(t.allreduce_per_param * t.embedding_params, TIME_UNIT_S)
        ar_last = _ints(t.allreduce_per_param * t.head_params, TIME_UNIT_S)
        ar_fixed = _ints(t.allreduce_fixed, TIME_UNIT_S)
        op_layer, op_first, op_last = (_ints(t.optimizer_per_param * x, TIME_UNIT_S) for x in
                                       (t.layer_params, t.embedding_params, t.head_params))
        delay, occupancy = _ints(t.delay, TIME_UNIT_S), _ints(t.occupancy, TIME_UNIT_S)
        cost = _ints(t.cost * (1 - np.eye(nk)), COST_UNIT_USD)

        md = self.model = cp_model.CpModel()
        act = [md.new_bool_var(f"act{p}") for p in range(s)]
        md.add(act[0] == 1)
        first = []
        for p in range(s):
            if p + 1 < s:
                md.add_implication(act[p + 1], act[p])
                first.append(md.new_bool_var(f"first{p}"))
                md.add(first[p] == act[p] - act[p + 1])
            else:
                first.append(act[p])
        dom = [[md.new_bool_var(f"dom{p}_{k}") for k in range(nk)] for p in range(s)]
        opt = [[md.new_bool_var(f"opt{p}_{o}") for o in range(no)] for p in range(s)]
        layers = [md.new_int_var(0, big_l, f"n{p}") for p in range(s)]
        index = [md.new_int_var(0, nk, f"d{p}") for p in range(s)]
        compute_ub = int(big_l * lt.max() + ft.max() + lst.max())
        compute = [md.new_int_var(0, compute_ub, f"c{p}") for p in range(s)]
        for p in range(s):
            md.add(sum(dom[p]) == act[p])
            md.add(sum(opt[p]) == act[p])
            md.add(index[p] == sum(k * dom[p][k] for k in range(nk)) + nk * (1 - act[p]))
            md.add(layers[p] >= act[p])
            md.add(layers[p] <= big_l * act[p])
            md.add(compute[p] == 0).only_enforce_if(~act[p])
            for o in range(no):
                cap, cap_first = int(t.layer_cap[p, o]), int(t.layer_cap_first[p, o])
                if cap < 1:
                    md.add(opt[p][o] == 0)
                    continue
                md.add(layers[p] <= cap).only_enforce_if(opt[p][o])
                if cap_first < cap:
                    md.add(layers[p] <= cap_first).only_enforce_if([opt[p][o], first[p]])
                md.add(compute[p] == int(lt[o]) * layers[p] + int(ft[o]) * first[p]
                       + (int(lst[o]) if p == 0 else 0)).only_enforce_if(opt[p][o])
        md.add(sum(layers) == big_l)

        # GPUs taken from each domain.
        stage_gpus = [sum(int(t.gpus[o]) * opt[p][o] for o in range(no)) for p in range(s)]
        for k in range(nk):
            taken = []
            for p in range(s):
                g = md.new_int_var(0, int(t.free_gpus[k]), f"g{p}_{k}")
                md.add(g == stage_gpus[p]).only_enforce_if(dom[p][k])
                md.add(g == 0).only_enforce_if(~dom[p][k])
                taken.append(g)
            md.add(sum(taken) <= int(t.free_gpus[k]))

        # Boundaries p+1 -> p: element constraints on the padded pair index.
        def boundary(table: list[int], name: str) -> list[cp_model.IntVar]:
            out = []
            for p in range(s - 1):
                var = md.new_int_var(min(table), max(table), f"{name}{p}")
                md.add_element(pair[p], table, var)
                out.append(var)
            return out

        pair = [md.new_int_var(0, (nk + 1) ** 2 - 1, f"pair{p}") for p in range(s - 1)]
        for p in range(s - 1):
            md.add(pair[p] == (nk + 1) * index[p + 1] + index[p])
        delta = boundary(_pair_table(delay), "delta")
        occ = boundary(_pair_table(occupancy), "occ")
        link_cost = boundary(_pair_table(cost), "cost")

        # 1F1B period in units of 1/W ns.
        period_ub = w * max(compute_ub + 2 * (s - 1) * int(delay.max()), int(occupancy.max()))
        period = md.new_int_var(0, period_ub, "period")
        share = t.instance.constraints.wan_share_cap
        terms = [w * c for c in compute] + [w * x for x in occ]
        for k in range(s):
            for j in range(k + 1, s):
                span = j - k + 1
                total = sum(compute[k:j + 1]) + 2 * sum(delta[k:j])
                if w % span == 0:
                    terms.append((w // span) * total)
                elif share is None:
                    md.add(span * period >= w * total)
                else:  # exact ceiling of w * total / span
                    ceil = md.new_int_var(0, period_ub, f"window{k}_{j}")
                    md.add(span * ceil >= w * total)
                    md.add(span * ceil <= w * total + span - 1)
                    terms.append(ceil)
        if share is None:
            for term in terms:
                md.add(period >= term)
        else:
            md.add_max_equality(period, terms)
            e_period = (big_l + 2) / 2 + 1 / w
            wan = np.floor(w * (t.occupancy / TIME_UNIT_S / share - e_period) - 1)
            wan = np.where(np.eye(nk, dtype=bool), 0, np.maximum(wan, 0)).astype(np.int64)
            for threshold in boundary(_pair_table(wan), "wan"):
                md.add(period >= threshold)

        # All-reduce and optimizer epigraphs (max over stages).
        ar_ub = int((ar_layer * big_l + ar_first + ar_last + ar_fixed).max())
        op_ub = int((op_layer * big_l + op_first + op_last).max())
        allreduce = md.new_int_var(0, ar_ub, "allreduce")
        optimizer = md.new_int_var(0, op_ub, "optimizer")
        for p in range(s):
            last = 1 if p == 0 else 0
            for o in range(no):
                md.add(optimizer >= int(op_layer[o]) * layers[p] + int(op_first[o]) * first[p]
                       + last * int(op_last[o])).only_enforce_if(opt[p][o])
                for k in range(nk):
                    coefficients = (ar_layer[k, o], ar_first[k, o], ar_last[k, o], ar_fixed[k, o])
                    if not any(coefficients):
                        continue
                    md.add(allreduce >= int(ar_layer[k, o]) * layers[p]
                           + int(ar_first[k, o]) * first[p] + last * int(ar_last[k, o])
                           + int(ar_fixed[k, o])).only_enforce_if([dom[p][k], opt[p][o]])

        self.step = ((t.micro_batches - 1) * period
                     + w * (sum(compute) + 2 * sum(delta) + allreduce + optimizer))
        self.gpus = sum(stage_gpus)
        self.cost = sum(link_cost)
        self.upper = (int((t.micro_batches - 1) * period_ub + w * (
            s * compute_ub + 2 * (s - 1) * int(delay.max()) + ar_ub + op_ub)),
            int(t.free_gpus.sum()), int(max(s - 1, 0) * max(int(cost.max()), 0)))
        budget = t.instance.constraints.cost_budget
        if budget is not None:
            md.add(self.cost <= self._cost_cap_units(budget))
        self.act, self.dom, self.opt, self.layers = act, dom, opt, layers

    def _cost_cap_units(self, cap: float) -> int:
        return math.floor(cap * (1 + 1e-12) / COST_UNIT_USD + self._error_units()[1])

    def _objective(self, weights: tuple[float, float, float]) -> tuple[list[int], float, float]:
        """Integer objective coefficients for (T, N, C), the scale lam (integer objective per
        float unit) and the slack that makes a converted bound valid for the float problem."""
        per_unit = np.array([weights[0] * TIME_UNIT_S / self.divisor, weights[1],
                             weights[2] * COST_UNIT_USD])
        upper = np.array(self.upper, dtype=float)
        nonzero = np.flatnonzero(per_unit)
        if len(nonzero) == 0:
            return [0, 0, 0], 1.0, 0.0
        if len(nonzero) == 1:
            i = nonzero[0]
            lam = 1 / abs(per_unit[i])
        else:
            lam = min(WEIGHT_RESOLUTION / np.abs(per_unit[nonzero]).min(),
                      OBJECTIVE_LIMIT / float(np.abs(per_unit) @ upper))
        coefficients = [int(x) for x in np.rint(lam * per_unit)]
        coefficients = [c if c or not a else int(np.sign(a)) for c, a in
                        zip(coefficients, per_unit, strict=True)]
        divisor = math.gcd(*coefficients)
        coefficients = [c // divisor for c in coefficients]
        lam /= divisor
        e_step, e_cost = self.scaling_error_bound()
        slack = (abs(weights[0]) * e_step + abs(weights[2]) * e_cost
                 + float(np.abs(np.array(coefficients) / lam - per_unit) @ upper))
        return coefficients, lam, slack

    # -- solve ----------------------------------------------------------------------------
    def solve(self, weights: tuple[float, float, float] = (1.0, 0.0, 0.0),
              gpu_cap: float | None = None, cost_cap: float | None = None,
              step_cap: float | None = None, time_limit: float | None = None) -> Solve:
        model = self.model.clone()  # the clone shares variable indices with self.model
        if gpu_cap is not None:
            model.add(self.gpus <= math.floor(gpu_cap + 1e-9))
        if cost_cap is not None:
            model.add(self.cost <= self._cost_cap_units(cost_cap))
        if step_cap is not None:
            e_step, _ = self._error_units()
            model.add(self.step <= math.floor(
                self.divisor * (step_cap * (1 + 1e-12) / TIME_UNIT_S + e_step)))
        coefficients, lam, slack = self._objective(weights)
        if any(coefficients):
            model.minimize(coefficients[0] * self.step + coefficients[1] * self.gpus
                           + coefficients[2] * self.cost)
        solver = cp_model.CpSolver()
        params = solver.parameters
        params.num_workers = self.workers
        params.random_seed = 0
        params.relative_gap_limit = self.rel_gap
        limit = time_limit if time_limit is not None else self.time_limit
        if limit is not None:
            params.max_time_in_seconds = float(limit)
        start = time.perf_counter()
        code = solver.solve(model)
        wall = time.perf_counter() - start
        if code == cp_model.MODEL_INVALID:
            raise RuntimeError(f"CP-SAT model invalid: {model.validate()}")
        status = _STATUS[code]
        bound = None
        if any(coefficients) and code in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            bound = solver.best_objective_bound / lam - slack
        if code not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            return Solve(status, None, None, None, bound, wall)
        chosen = self._decisions(solver)
        values = model_values(self.tables, chosen)
        objective = (weights[0] * values.step_time_s + weights[1] * values.gpus
                     + weights[2] * values.comm_cost)
        if not any(coefficients):
            bound = objective
        return Solve(status, self._plan(chosen), values, float(objective), bound, wall)

    def _decisions(self, solver: cp_model.CpSolver) -> dict[int, Decision]:
        chosen = {}
        for p, active in enumerate(self.act):
            if not solver.boolean_value(active):
                continue
            (k,) = [k for k, x in enumerate(self.dom[p]) if solver.boolean_value(x)]
            (o,) = [o for o, x in enumerate(self.opt[p]) if solver.boolean_value(x)]
            chosen[p] = Decision(k, o, int(solver.value(self.layers[p])))
        return chosen

    def _plan(self, chosen: dict[int, Decision]) -> Plan:
        """Stages front to back: the highest active position is the first stage."""
        stages = []
        for p in sorted(chosen, reverse=True):
            tp, recompute = self.tables.options[chosen[p].option]
            stages.append(Stage(domain=chosen[p].domain, layers=chosen[p].layers, tp=int(tp),
                                recompute=recompute))
        return Plan(dp=self.tables.dp, micro_batch=self.tables.micro_batch, stages=tuple(stages))
