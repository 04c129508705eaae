"""The ``labels`` engine: exact solves of one (dp, micro-batch) pair by dynamic programming.

Why. On the full search space the MILP and CP-SAT models prove a K = 20 min-step solve in
minutes or not at all (issue 13: no epsilon step proven in 240 s on either K = 20 instance of
the full suite), because their relaxations know little of the 1F1B period, the term that
carries ``m - 1`` of the step time. This engine enumerates plans implicitly instead, and
proves by exhaustion.

The step time of a plan (SPEC 3.1) is ``T = (m - 1) P + S + A + O``: the period ``P``, the
stages' compute and boundary delays ``S = sum c + 2 sum delta``, and the largest all-reduce
``A`` and optimizer time ``O`` of a stage. Fix caps ``(P', A', O')``: every stage's compute,
all-reduce and optimizer time must then stay below them (a cap on its layer count, per
position, domain and option), every window of consecutive stages must fit its round trip in
``P'`` and every link's occupancy too. Under such caps the least ``S`` is a shortest path
through the positions of the pipeline, computed by a label-setting DP
(:func:`solvers.label_kernels.label_dp`): partial plans from the last stage backwards,
kept only if no other is at least as good in every respect that can still matter.

Branch and bound over boxes of caps. Let ``h(P', A', O')`` be that least ``S``. A box
``[Pa, Pb] x [Aa, Ab] x [Oa, Ob]`` holds no plan better than ``(m - 1) Pa + Aa + Oa +
h(Pb, Ab, Ob)``. Solving the DP at the box's upper corner gives a plan x, and its own
``(P, A, O)``: every plan of the sub-box above x's values is no better than x (its ``S`` is
at least x's), so what remains of the box is three boxes, each below x in one of the three
terms; a box whose lower corner alone reaches the incumbent is closed. The period range
starts at the least feasible period (bisection on a DP that only asks whether a plan
exists) and ends where the period term alone reaches the incumbent. General weights
``w . (T, N, C)`` with ``w_T > 0`` enter the DP's value.

Relaxations, and why the result is exact anyway. (1) A domain entered a second time (a
plan may return to a domain after visiting another) is given all its GPUs again, unless it
is *critical*; when the best plan overuses a domain, that domain becomes critical for the
pair (the DP then tracks the GPUs it gave) and the search runs again: decremental state
space relaxation, as for elementary shortest paths. (2) Under a WAN share cap a boundary
may occupy at most ``share * Pb`` of the box, necessary but not sufficient. The best plan
of a relaxation that is feasible for the real problem is optimal for it; one that is not,
under a share cap, ends the solve as ``UNKNOWN`` with the relaxation's value as its bound
(the certifier's confirmer, CP-SAT, then decides). So do requests the boxes cannot order:
no step-time weight, or a step cap with GPU or cost weights.

Measured (issue 13, ``scripts/bench_exact.py``): see the README's exact-front figures.
"""

from __future__ import annotations

import heapq
import math
import time

import numpy as np

from solvers.chain import OPEN, Caps, LabelBudgetExceeded, Terms, chain_of
from solvers.engine import EngineStatistics, OutOfTime, Solve, SolveRequest, SolveStatus, timed
from solvers.tables import PairTables, choices_plan, plan_choices

PERIOD_PRECISION = 1e-3  # relative width at which the least period's bisection stops
STRICT = 1e-12  # relative: "below x's period" (the DP sums windows in another order)


class TargetReached(Exception):
    """The proven bound passed the request's ``bound_target``."""


class LabelEngine:
    """The contract of :class:`solvers.engine.Engine` for the label-setting DP."""

    name = "labels"

    def __init__(self, tables: PairTables, threads: int = 1):
        self.tables = tables
        self.chain = chain_of(tables)
        self.statistics = EngineStatistics()

    def solve(self, request: SolveRequest) -> Solve:
        start = time.perf_counter()
        weights = tuple(float(w) for w in request.weights)
        step_cap = request.capped(request.step_cap)
        if weights[0] <= 0 or min(weights) < 0 or (step_cap is not None
                                                    and (weights[1] or weights[2])):
            # The boxes need the period in the objective; a step cap is a bound on the
            # objective only for min-step weights. Other requests go to the confirmer.
            return self.statistics.record(timed(self.name, start, SolveStatus.UNKNOWN))
        search = _Search(self.chain, request, weights, start)
        try:
            status = search.run()
        except (OutOfTime, LabelBudgetExceeded, TargetReached):
            status = SolveStatus.LIMIT
        best = search.incumbent
        if search.target_binds and status in (SolveStatus.OPTIMAL, SolveStatus.INFEASIBLE) \
                and (best is None or best.weighted(weights) > search.target):
            status = SolveStatus.LIMIT  # no plan below the target, which is thus a bound
            search.bound = max(search.bound or -math.inf, search.target)
        fields = {}
        if best is not None:
            fields = dict(plan=choices_plan(self.tables, best.choices), values=best.values,
                          objective=best.weighted(weights))
        if status == SolveStatus.OPTIMAL:
            fields["bound"] = fields["objective"]
        elif status in (SolveStatus.LIMIT, SolveStatus.UNKNOWN):
            fields["bound"] = search.bound
        return self.statistics.record(timed(self.name, start, status, **fields))


class _Search:
    """One solve of the engine: the loop of relaxations, each searched by bisection on the
    period and branch and bound over boxes (module docstring)."""

    def __init__(self, chain, request: SolveRequest, weights, start: float):
        self.chain = chain
        t = self.tables = chain.tables
        self.weights = weights
        self.m1 = t.micro_batches - 1
        self.gpu_cap, self.cost_cap = request.gpu_cap, request.cost_cap
        self.step_cap = request.capped(request.step_cap)
        self.deadline = None if request.time_limit is None else start + request.time_limit
        self.target = request.bound_target
        self.period_floor = request.period_floor or 0.0
        self.incumbent: Terms | None = None
        self.relaxed_best: Terms | None = None  # of the relaxation being searched
        # A proven lower bound on the objective under the caps (reported if the solve stops)
        self.bound: float | None = None if request.step_floor is None \
            else weights[0] * request.step_floor
        # The objective to beat: the step cap (min-step weights) or the hint.
        self.cap_value = math.inf if self.step_cap is None \
            else weights[0] * self.step_cap * (1 + 1e-12)
        # With a bound target only plans below it are sought: none proves the target a bound.
        self.target_binds = self.target is not None and self.target < self.cap_value
        if self.target_binds:
            self.cap_value = self.target
        if request.hint is not None:
            choices = plan_choices(t, request.hint)
            if choices is not None:
                self.offer(chain.terms(choices))

    # -- incumbents ---------------------------------------------------------------------------
    def within(self, terms: Terms) -> bool:
        v, caps = terms.values, self.chain.caps(self.gpu_cap, self.cost_cap)
        return v.gpus <= caps.gpus and v.comm_cost <= caps.cost * (1 + 1e-12) and (
            self.step_cap is None or v.step_time_s <= self.step_cap * (1 + 1e-12))

    def offer(self, terms: Terms) -> None:
        """Keep ``terms`` if it is a feasible plan under the caps, better than the incumbent."""
        if self.within(terms) and self.chain.violations(terms) is None and (
                self.incumbent is None
                or terms.weighted(self.weights) < self.incumbent.weighted(self.weights)):
            self.incumbent = terms

    def upper(self) -> float:
        best = math.inf if self.incumbent is None else self.incumbent.weighted(self.weights)
        return min(best, self.cap_value)

    def raise_bound(self, value: float) -> None:
        self.bound = value if self.bound is None else max(self.bound, value)
        if self.target is not None and self.bound > self.target:
            raise TargetReached

    # -- the loop of relaxations ---------------------------------------------------------------
    def run(self) -> SolveStatus:
        chain = self.chain
        while True:
            found = self.relaxation(chain.caps(self.gpu_cap, self.cost_cap))
            if found is None:  # nothing, even relaxed, beats the incumbent or the cap
                return SolveStatus.OPTIMAL if self.incumbent is not None \
                    else SolveStatus.INFEASIBLE
            over = chain.violations(found)
            if over is None:
                self.incumbent = found
                return SolveStatus.OPTIMAL
            self.raise_bound(found.weighted(self.weights))  # a relaxation's optimum
            if not over:  # the WAN share cap: this relaxation cannot tell; the confirmer will
                return SolveStatus.UNKNOWN
            chain.critical |= set(over)

    def relaxation(self, caps: Caps) -> Terms | None:
        """The best plan of the relaxation under ``caps`` whose objective is below the
        incumbent's (and the cap), or None."""
        w = self.weights
        self.relaxed_best = None
        ceiling = self.upper()
        if self.m1 == 0:  # the period is not in the step time
            low, top = 0.0, OPEN
        else:
            low = max(self.period_floor, self.chain.known_period_floor(caps))
            # T >= (m - 1) P + least compute: a plan below the ceiling has a period below
            # top. The bisection probes top first: no plan there ends the relaxation in one
            # run (with a bound target, the usual case).
            top = None if ceiling == math.inf \
                else (ceiling / w[0] - self.chain.least_compute) / self.m1
            if top is not None and top < low:
                return None
            found = self.least_period(caps, low, top)
            if found is None:
                return None
            low, top = found
        best = self.relaxed_best  # the best plan of this relaxation seen while bisecting
        # A box: (lower bound, order, caps). Its lower bound is its lower corner's terms plus
        # the least DP value (w_T S + w_N N + w_C C) under its caps, at least that of the box
        # it was cut from: tighter caps never lower the least value.
        boxes = [(w[0] * (self.m1 * low + self.chain.least_compute), 0,
                  (low, top, 0.0, OPEN, 0.0, OPEN))]
        order = 1
        while boxes:
            bound, _, (pa, pb, aa, ab, oa, ob) = heapq.heappop(boxes)
            ceiling = min(self.upper(), math.inf if best is None else best.weighted(w))
            if bound >= ceiling:
                break
            # Nothing open is below the least bound, nothing closed below the best plan
            # found: a bound on this relaxation, hence on the problem.
            self.raise_bound(bound)
            corner = w[0] * (self.m1 * pa + aa + oa)
            terms = self.run_at(caps, pb, ab, ob, ceiling - corner, tables_at=top)
            if terms is None:
                continue
            over = self.chain.violations(terms)
            if over:
                # It overuses a domain: track that domain from now on (a tighter relaxation,
                # so every box's bound still holds) and search this box again. Measured on
                # the K = 20 full-space instance: incumbents come early, not at the end of
                # a relaxation whose every plan overuses a domain.
                self.chain.critical |= set(over)
                caps = self.chain.caps(self.gpu_cap, self.cost_cap)
                heapq.heappush(boxes, (bound, order, (pa, pb, aa, ab, oa, ob)))
                order += 1
                continue
            self.offer(terms)
            if best is None or terms.weighted(w) < best.weighted(w):
                best = terms
            p, a, o = terms.period, terms.allreduce, terms.optimizer
            if not (p <= pb * (1 + 1e-9) and a <= ab and o <= ob):
                raise RuntimeError(f"labels: a plan outside its box ({p}, {a}, {o}) "
                                   f"> ({pb}, {ab}, {ob})")
            value = terms.weighted(w) - w[0] * (self.m1 * p + a + o)  # its DP value
            rest = []
            if p > pa and self.m1 > 0:
                rest.append((pa, p * (1 - STRICT), aa, ab, oa, ob))
            if a > aa:
                rest.append((max(p, pa), pb, aa, float(np.nextafter(a, -1.0)), oa, ob))
            if o > oa:
                rest.append((max(p, pa), pb, max(a, aa), ab, oa, float(np.nextafter(o, -1.0))))
            for box in rest:
                low_bound = w[0] * (self.m1 * box[0] + box[2] + box[4]) + value
                if low_bound < ceiling:
                    heapq.heappush(boxes, (low_bound, order, box))
                    order += 1
        return best if best is not None and best.weighted(w) < self.upper() else None

    def least_period(self, caps: Caps, low: float, top: float | None
                     ) -> tuple[float, float] | None:
        """(a lower bound on the period of every plan of the relaxation, the largest period
        worth a search): bisection on the feasibility DP, to ``PERIOD_PRECISION``."""
        probe = top if top is not None else OPEN
        found = self.feasible_at(caps, probe, probe)
        if found is None:
            return None
        high = found.period
        while high - low > PERIOD_PRECISION * high:
            mid = (low + high) / 2
            found = self.feasible_at(caps, mid, probe)
            if found is None:
                low = mid
                self.raise_bound(self.weights[0] * (self.m1 * low + self.chain.least_compute))
            else:
                high = min(mid, found.period)
        self.chain.period_floors.append((caps, low))
        if self.relaxed_best is None and self.upper() >= math.inf:
            self.feasible_at(caps, high, probe)  # a plan of the relaxation, for a ceiling
        ceiling = self.upper() if self.relaxed_best is None \
            else min(self.upper(), self.relaxed_best.weighted(self.weights))
        if ceiling >= math.inf:  # only plans that overuse a domain so far: no ceiling
            return low, OPEN
        return low, max(low, (ceiling / self.weights[0] - self.chain.least_compute) / self.m1)

    def feasible_at(self, caps: Caps, period: float, tables_at: float) -> Terms | None:
        terms = self.run_at(caps, period, OPEN, OPEN, math.inf, tables_at, feasibility=True)
        if terms is not None:
            self.offer(terms)
            # Only a plan that overuses no domain is a plan of every tighter relaxation
            # (the boxes may track more domains), so only such a plan sets a ceiling.
            if self.within(terms) and not self.chain.violations(terms) and (
                    self.relaxed_best is None or terms.weighted(self.weights)
                    < self.relaxed_best.weighted(self.weights)):
                self.relaxed_best = terms
        return terms

    def run_at(self, caps: Caps, period, allreduce, optimizer, value_cap, tables_at,
               feasibility: bool = False) -> Terms | None:
        """One DP run (within the deadline)."""
        if self.deadline is not None and time.perf_counter() > self.deadline:
            raise OutOfTime
        return self.chain.run(caps, period, self.weights, allreduce, optimizer, value_cap,
                              feasibility, tables_at)
