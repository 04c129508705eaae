"""Valid lower bounds on a pair's 1F1B period and step time under caps, by a capacity DP.

A plan whose period is ``P`` has every stage's compute at most ``P``, so the stage at
position ``p`` with option ``o`` holds at most

    kappa(p, o, P) = min(layer_cap[p, o], floor((P - e_p,o) / layer_time[o]))

layers (``e`` the LM head on the last stage; the embedding is left out, which only
loosens the bound). The plan's stages are positions 0..S-1 with options whose GPUs sum to
at most the cap, so the layers fit only if the best such choice of options reaches ``L``:
a multiple-choice knapsack over positions, solved exactly by dynamic programming over the
GPU budget. Capacity grows with ``P`` and changes only where some ``(P - e) / layer_time``
crosses an integer, so the least feasible ``P`` is one of those values and a binary search
over them finds it. That is ``period_floor``; it ignores domains, links and windows, and is
nevertheless tight on the single-domain plans that dominate the fronts' low GPU counts
(issue 13: on the K = 10 full-space instance it equals the optimum's period).

Domains enter as branches: a plan either stays in one domain (the DP runs on the largest
domain's free GPUs: every floor falls with the budget and the stages allowed, so that branch
bounds every other domain's) or crosses a WAN boundary, which the traffic-cost cap must pay
for. Across domains, every stage must still fit one domain, the GPUs come from at most as
many domains as the cost cap pays boundaries plus one, and the period also covers the
cheapest WAN boundary's occupancy and its delay (the window of the two stages it joins).
The floor is the least over the branches.

``step_floor`` is the better of two bounds of ``T = (m - 1) P + sum c + 2 sum delta + AR +
OPT``. *Apart*: the period floor, the least total compute, the least boundary delays of the
fewest stages the memory allows (at least one WAN delay across domains), and the least
all-reduce and optimizer time of the stage that must hold the most layers. *Together*: a
second DP over positions, layers and tp units gives, for a period ``P``, the least
``sum c`` of stages that fit it, each stage also carrying ``1/S`` of its own all-reduce and
optimizer time (a maximum over stages is at least their mean over the S positions);
between consecutive candidate periods that least value is constant and it falls as ``P``
grows, so a branch and bound over candidate intervals finds the least of
``(m - 1) P + C(P)``. Measured on the K = 10 full-space instance of issue 13 (dp 8,
micro-batch 1, at most 367 GPUs): apart 18.16 s, together 18.89 s, optimum 18.98 s.

These bounds prune pairs that cannot win an epsilon step, prove a step cap infeasible
without a solve (a "bound check", :mod:`solvers.certify`), and enter the models as cuts.
"""

from __future__ import annotations

import functools
import math
import time
from typing import NamedTuple

import numpy as np

from solvers.chain import LabelBudgetExceeded, chain_of
from solvers.engine import NO_CAP, OutOfTime
from solvers.tables import PairTables

_NEG = -(1 << 40)
_SLACK = 1e-9  # relative: a floor is lowered by this much against rounding in the DP
CUTOFF_MARGIN = 1e-7  # relative: the chain floor proves a step time this far above a cutoff


def _window_min(values: np.ndarray, span: int) -> np.ndarray:
    """``out[., l] = min(values[., max(0, l - span + 1) .. l])`` along the last axis."""
    out, width = values.copy(), 1
    while width * 2 <= span:  # out holds windows of ``width``; double it
        np.minimum(out[:, width:], out[:, :-width].copy(), out=out[:, width:])
        width *= 2
    if width < span:  # two overlapping windows of ``width`` cover ``span``
        rest = span - width
        shifted = np.full_like(out, np.inf)
        shifted[:, rest:] = out[:, :-rest]
        np.minimum(out, shifted, out=out)
    return out


class Branch(NamedTuple):
    """One kind of plan: at most ``budget`` tp units, stages of at most ``largest`` GPUs, a
    period of at least ``period`` and boundary delays of at least ``delays`` (2 sum delta)."""

    budget: int
    largest: int
    period: float
    delays: float


class PairBounds:
    """Lower bounds for one pair (see the module docstring)."""

    deadline: float | None = None
    """``time.perf_counter()`` seconds past which the capacity DP stops
    (:class:`~solvers.engine.OutOfTime`, nothing cached of it): the caller's time limit,
    set by the caller."""

    def __init__(self, tables: PairTables):
        t = self.tables = tables
        self.unit = t.dp  # every stage takes dp * tp GPUs
        self.tp = (t.gpus // t.dp).astype(np.int64)
        edge = np.zeros((t.positions, t.num_options))
        edge[0] = t.last_time
        self.edge = edge
        # All-reduce and optimizer times are maxima over stages, at least the mean over the
        # S positions of any plan (inactive positions add nothing), which is additive over
        # stages: each stage carries 1/S of its own (the least over the domains it fits).
        fits = t.free_gpus[:, None] >= t.gpus[None, :]
        per_param = np.where(fits, t.allreduce_per_param, np.inf).min(axis=0) \
            + t.optimizer_per_param
        fixed = np.where(fits, t.allreduce_fixed, np.inf).min(axis=0)
        self.sync_per_layer = np.where(np.isfinite(per_param),
                                       per_param * t.layer_params / t.positions, 0.0)
        self.sync_edge = np.zeros_like(edge) + np.where(np.isfinite(fixed),
                                                        fixed / t.positions, 0.0)
        self.sync_edge[0] += np.where(np.isfinite(per_param),
                                      per_param * t.head_params / t.positions, 0.0)
        # The values at which some stage's capacity steps up: n layers of an option, with
        # or without the LM head.
        stacked = np.arange(1, t.layers + 1)[:, None] * t.layer_time[None, :]
        self.candidates = np.unique(np.concatenate([stacked.ravel(),
                                                    (stacked + t.last_time).ravel()]))
        free = np.sort(t.free_gpus.astype(np.int64))[::-1]
        self.free_sorted = free
        off = ~np.eye(t.num_domains, dtype=bool)
        self.min_boundary_cost = float(t.cost[off].min()) if off.any() else math.inf
        # Every plan across domains has a WAN boundary: its period covers that link's
        # occupancy and, in the window of the two stages it joins, its delay.
        self.wan_occupancy = float(t.occupancy[off].min()) if off.any() else math.inf
        self.wan_delay = float(t.delay[off].min()) if off.any() else math.inf

    # -- capacity DP ----------------------------------------------------------------------
    def _capacity(self, period: float, budget: int, largest: int) -> int:
        """Most layers that stages of period <= ``period`` hold with at most ``budget`` GPUs
        per replica, each stage's ``dp * tp`` at most ``largest``."""
        t = self.tables
        budget = min(budget, self.widest)  # no plan uses more: 10 M free GPUs cost no time
        usable = (t.gpus <= largest) & (self.tp <= budget)
        if budget < 1 or not usable.any():
            return 0
        room = np.floor((period - self.edge) / t.layer_time[None, :] * (1 + 1e-12))
        kappa = np.minimum(t.layer_cap, room).astype(np.int64)
        best = np.full(budget + 1, _NEG, dtype=np.int64)
        best[0] = 0
        most = 0
        for p in range(t.positions):
            step = np.full(budget + 1, _NEG, dtype=np.int64)
            for o in np.flatnonzero(usable & (kappa[p] >= 1)):
                width = int(self.tp[o])
                np.maximum(step[width:], best[:budget + 1 - width] + kappa[p, o],
                           out=step[width:])
            best = step
            top = int(best.max())
            if top < 0:
                break
            most = max(most, top)
            if most >= t.layers:
                break
        return most

    @functools.lru_cache(maxsize=4096)  # noqa: B019 (one PairBounds per pair and sweep)
    def _period_floor(self, budget: int, largest: int) -> float:
        if self._capacity(math.inf, budget, largest) < self.tables.layers:
            return math.inf
        cands = self.candidates
        lo, hi = 0, len(cands) - 1
        while lo < hi:
            mid = (lo + hi) // 2
            if self._capacity(float(cands[mid]), budget, largest) >= self.tables.layers:
                hi = mid
            else:
                lo = mid + 1
        return float(cands[lo]) * (1 - _SLACK)

    def _branches(self, gpu_cap: float | None, cost_cap: float | None) -> list[Branch]:
        """Each kind of plan the caps allow: plans in one domain, and, if the cost cap pays
        for a WAN boundary, plans across domains, whose period also covers a WAN boundary's
        occupancy and delay. Every floor falls with the budget and with the stages allowed,
        so of the plans in one domain those in the largest bound all the others."""
        t, cap = self.tables, NO_CAP if gpu_cap is None else gpu_cap
        out = []
        largest = int(self.free_sorted[0])
        budget = int(min(cap, largest)) // self.unit
        if budget >= 1:
            out.append(Branch(budget, largest, self._period_floor(budget, self._fitting(largest)),
                              self.delays))
        if len(self.free_sorted) > 1 and (
                cost_cap is None or cost_cap >= self.min_boundary_cost * (1 - 1e-9)):
            crossings = (t.positions - 1 if cost_cap is None or cost_cap >= NO_CAP
                         else int(min(t.positions - 1,
                                      cost_cap / self.min_boundary_cost * (1 + 1e-9))))
            budget = int(min(cap, self.free_sorted[:crossings + 1].sum())) // self.unit
            if budget >= 1:
                period = max(self._period_floor(budget, self._fitting(largest)), self.wan_occupancy,
                             self.wan_delay)
                out.append(Branch(budget, largest, period,
                                  max(self.delays, 2 * self.wan_delay)))
        return out

    # -- least compute at a period: the period and sum c together ---------------------------
    @functools.cached_property
    def widest(self) -> int:
        """The most tp units a plan can use: beyond this a larger budget changes nothing."""
        return int(self.tables.positions * self.tp.max())

    def _fitting(self, largest: int) -> int:
        """The widest stage (GPUs) of the pair's options at most ``largest``: branches whose
        ``largest`` differ but admit the same options share their DP tables."""
        fits = self.tables.gpus[self.tables.gpus <= largest]
        return int(fits.max()) if fits.size else 0

    @functools.lru_cache(maxsize=4096)  # noqa: B019
    def _least_compute(self, period: float, largest: int) -> np.ndarray:
        """Per budget b (tp units, 0..widest): the least sum over stages of compute (layers and
        LM head, the embedding left out) and 1/S of all-reduce and optimizer time, of stages
        of period <= ``period`` that hold all L layers with at most b tp units, each stage's
        ``dp * tp`` at most ``largest`` (inf: none). A DP over positions from the end, every
        active position one stage; a stage of option o taking n <= kappa layers costs
        ``n s_o + e``, so a position's step is a sliding-window minimum of
        ``best[., l'] - l' s_o`` over l - kappa <= l' < l
        (by doubling, log kappa array operations)."""
        t, top, layers = self.tables, self.widest, self.tables.layers
        usable = t.gpus <= largest
        room = np.floor((period - self.edge) / t.layer_time[None, :] * (1 + 1e-12))
        kappa = np.minimum(np.minimum(t.layer_cap, room), layers)
        index = np.arange(layers + 1)
        best = np.full((top + 1, layers + 1), np.inf)
        best[0, 0] = 0.0
        least = np.full(top + 1, np.inf)
        for p in range(t.positions):
            if self.deadline is not None and time.perf_counter() >= self.deadline:
                raise OutOfTime  # a position costs up to a second on large instances
            step = np.full_like(best, np.inf)
            for o in np.flatnonzero(usable & (kappa[p] >= 1)):
                width, span = int(self.tp[o]), int(kappa[p, o])
                slope = t.layer_time[o] + self.sync_per_layer[o]
                shifted = best[:top + 1 - width] - index * slope
                window = _window_min(shifted, span)  # [., l]: min over l' in (l - span, l]
                reach = np.full_like(shifted, np.inf)
                reach[:, 1:] = window[:, :-1]  # over l - span <= l' < l
                np.minimum(step[width:], reach + index * slope + self.edge[p, o]
                           + self.sync_edge[p, o], out=step[width:])
            best = step
            np.minimum(least, best[:, layers], out=least)
            if not np.isfinite(best).any():
                break
        return np.minimum.accumulate(least)

    def _period_and_compute(self, budget: int, largest: int, low: float) -> float:
        """A lower bound on ``(m - 1) P + sum c`` over the plans of the branch whose period is
        at least ``low``. Capacity, hence the least compute C, is constant between
        consecutive candidate periods P_j and falls as P grows, so over candidates
        ``ja..jb`` the bound is at least ``(m - 1) max(low, P_ja) + C(P_jb)``: a branch and
        bound over candidate intervals, pruned by the best value found, finds the least of
        ``(m - 1) max(low, P_j) + C(P_j)`` with few DP runs."""
        cands, periods = self.candidates, self.tables.micro_batches - 1
        b, largest = min(budget, self.widest), self._fitting(largest)

        def least(j: int) -> float:
            return float(self._least_compute(float(cands[j]), largest)[b])

        unbounded = float(self._least_compute(math.inf, largest)[b])
        if math.isinf(unbounded) or math.isinf(low):
            return math.inf
        if periods == 0:  # one micro-batch: the period is not in the step time
            return unbounded
        first = max(0, int(np.searchsorted(cands, low, side="right")) - 1)
        best = periods * max(low, float(cands[first])) + least(first)
        # No candidate whose period term alone, with the least compute, reaches best.
        last = int(np.searchsorted(cands, (best - unbounded) / periods, side="left"))
        last = min(last, len(cands) - 1)
        intervals = [(first + 1, last)] if first + 1 <= last else []
        while intervals:
            ja, jb = intervals.pop()
            if periods * max(low, float(cands[ja])) + least(jb) >= best:
                continue
            if ja == jb:
                best = min(best, periods * max(low, float(cands[ja])) + least(ja))
                continue
            mid = (ja + jb) // 2
            intervals += [(mid + 1, jb), (ja, mid)]
        return best

    def period_floor(self, gpu_cap: float | None = None, cost_cap: float | None = None) -> float:
        """A lower bound on the period of every plan of the pair under the caps (inf: no
        plan fits)."""
        return min((branch.period for branch in self._branches(gpu_cap, cost_cap)),
                   default=math.inf)

    # -- the other step-time terms ---------------------------------------------------------
    @functools.cached_property
    def _rest_floor(self) -> tuple[float, float]:
        """Floors independent of the caps: (the embedding's compute; the least total compute,
        all-reduce and optimizer of the stage that must hold the most layers)."""
        t = self.tables
        usable = t.gpus <= self.free_sorted[0]
        if not usable.any():
            return math.inf, math.inf
        embedding = float(t.first_time[usable].min())
        compute = t.layers * t.layer_time[usable].min() + embedding + t.last_time[usable].min()
        most = math.ceil(t.layers / t.positions)  # the fullest stage holds at least this many
        ar = t.allreduce_per_param[:, usable] * most * t.layer_params + t.allreduce_fixed[:, usable]
        ar_usable = ar[t.free_gpus[:, None] >= t.gpus[usable][None, :]]
        allreduce = float(ar_usable.min()) if ar_usable.size else 0.0
        optimizer = float((t.optimizer_per_param[usable] * most * t.layer_params).min())
        return embedding, compute + max(0.0, allreduce) + optimizer

    @functools.cached_property
    def delays(self) -> float:
        """Least 2 sum delta: the fewest stages memory allows, each boundary at the least
        delay."""
        t = self.tables
        usable = t.gpus <= self.free_sorted[0]
        fewest = 1
        while fewest < t.positions and (
                not usable.any() or t.layer_cap[:fewest, usable].max(axis=1).sum() < t.layers):
            fewest += 1
        return 2 * (fewest - 1) * float(t.delay.min())

    def step_floor(self, gpu_cap: float | None = None, cost_cap: float | None = None,
                   cutoff: float | None = None) -> float:
        """A lower bound on the step time of every plan of the pair under the caps: the
        better of the period and the stages' compute and synchronisation found together
        (the DP), and the period floor with separate floors of the other terms.

        With a ``cutoff`` that these floors do not exceed, the chain relaxation
        (:mod:`solvers.chain`) is asked whether any plan has a period at which the step
        time could stay within the cutoff; if none has, the floor is just above it."""
        branches = self._branches(gpu_cap, cost_cap)
        if not branches or math.isinf(min(b.period for b in branches)):
            return math.inf
        embedding, rest = self._rest_floor
        apart = min((self.tables.micro_batches - 1) * b.period + b.delays
                    for b in branches) + rest
        together = min(self._period_and_compute(b.budget, b.largest, b.period) + b.delays
                       for b in branches) + embedding
        floor = max(apart, together) * (1 - _SLACK)
        periods = self.tables.micro_batches - 1
        if cutoff is None or cutoff >= NO_CAP or floor > cutoff or periods == 0:
            return floor
        # T = (m - 1) P + S + A + O with S + A + O >= ``rest``: a plan within the cutoff
        # has a period at most this.
        above = cutoff * (1 + CUTOFF_MARGIN)
        period = (above - rest) / periods
        try:
            if chain_of(self.tables).period_above(gpu_cap, cost_cap, period):
                return max(floor, above)
        except LabelBudgetExceeded:  # the question is too large to settle here
            pass
        return floor


class CellBounds:
    """The bounds of an interleaved cell (:mod:`solvers.tables`): zero. The capacity DP and
    the chain relaxation price plain 1F1B (its windows and its step time), and an
    interleaved plan's period may lie below a window's, so they do not hold there; the
    cell's engine proves what it claims by its own bound."""

    deadline: float | None = None

    def __init__(self, tables: PairTables):
        self.tables = tables

    def period_floor(self, gpu_cap: float | None = None, cost_cap: float | None = None) -> float:
        return 0.0

    def step_floor(self, gpu_cap: float | None = None, cost_cap: float | None = None,
                   cutoff: float | None = None) -> float:
        return 0.0


def pair_bounds(tables: PairTables) -> PairBounds | CellBounds:
    """The floors of a pair, or of an interleaved cell (none)."""
    return CellBounds(tables) if tables.interleaved else PairBounds(tables)
