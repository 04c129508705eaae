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

Domains enter as branches: a plan either stays in one domain (the DP runs on that domain's
free GPUs, one branch per domain size) or crosses a WAN boundary, which the traffic-cost cap
must pay for. Across domains, every stage must still fit one domain, the GPUs come from at
most as many domains as the cost cap pays boundaries plus one, and the period also covers
the cheapest WAN boundary's occupancy and its delay (the window of the two stages it joins).
The floor is the least over the branches.

``step_floor`` adds floors of the other step-time terms: the least total compute, the
least boundary delays of the fewest stages the memory allows (at least one WAN delay across
domains), and the least all-reduce and optimizer time of the stage that must hold the most
layers.

These bounds prune pairs that cannot win an epsilon step, prove a step cap infeasible
without a solve (a "bound check", :mod:`solvers.certify`), and enter the models as cuts.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from solvers.engine import NO_CAP
from solvers.tables import PairTables

_NEG = -(1 << 40)
_SLACK = 1e-9  # relative: a floor is lowered by this much against rounding in the DP


class PairBounds:
    """Lower bounds for one pair (see the module docstring)."""

    def __init__(self, tables: PairTables):
        t = self.tables = tables
        self.unit = t.dp  # every stage takes dp * tp GPUs
        self.tp = (t.gpus // t.dp).astype(np.int64)
        edge = np.zeros((t.positions, t.num_options))
        edge[0] = t.last_time
        self.edge = edge
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

    def _branches(self, gpu_cap: float | None, cost_cap: float | None
                  ) -> list[tuple[float, float]]:
        """(period floor, least 2 sum delta) of each kind of plan the caps allow: plans in
        one domain (one branch per domain size), and, if the cost cap pays for a WAN
        boundary, plans across domains, whose period also covers a WAN boundary's
        occupancy and delay."""
        t, cap = self.tables, NO_CAP if gpu_cap is None else gpu_cap
        out = []
        for free in np.unique(self.free_sorted):
            budget = int(min(cap, free)) // self.unit
            if budget >= 1:
                out.append((self._period_floor(budget, int(free)), self.delays))
        if len(self.free_sorted) > 1 and (
                cost_cap is None or cost_cap >= self.min_boundary_cost * (1 - 1e-9)):
            crossings = (t.positions - 1 if cost_cap is None or cost_cap >= NO_CAP
                         else int(min(t.positions - 1,
                                      cost_cap / self.min_boundary_cost * (1 + 1e-9))))
            budget = int(min(cap, self.free_sorted[:crossings + 1].sum())) // self.unit
            if budget >= 1:
                period = max(self._period_floor(budget, int(self.free_sorted[0])),
                             self.wan_occupancy, self.wan_delay)
                out.append((period, max(self.delays, 2 * self.wan_delay)))
        return out

    def period_floor(self, gpu_cap: float | None = None, cost_cap: float | None = None) -> float:
        """A lower bound on the period of every plan of the pair under the caps (inf: no
        plan fits)."""
        return min((period for period, _ in self._branches(gpu_cap, cost_cap)),
                   default=math.inf)

    # -- the other step-time terms ---------------------------------------------------------
    @functools.cached_property
    def _rest_floor(self) -> float:
        """Floors of sum c, all-reduce and optimizer, independent of caps."""
        t = self.tables
        usable = t.gpus <= self.free_sorted[0]
        if not usable.any():
            return math.inf
        compute = (t.layers * t.layer_time[usable].min() + t.first_time[usable].min()
                   + t.last_time[usable].min())
        most = math.ceil(t.layers / t.positions)  # the fullest stage holds at least this many
        ar = t.allreduce_per_param[:, usable] * most * t.layer_params + t.allreduce_fixed[:, usable]
        ar_usable = ar[t.free_gpus[:, None] >= t.gpus[usable][None, :]]
        allreduce = float(ar_usable.min()) if ar_usable.size else 0.0
        optimizer = float((t.optimizer_per_param[usable] * most * t.layer_params).min())
        return compute + max(0.0, allreduce) + optimizer

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

    def step_floor(self, gpu_cap: float | None = None, cost_cap: float | None = None) -> float:
        """A lower bound on the step time of every plan of the pair under the caps."""
        periods = self.tables.micro_batches - 1
        floors = [periods * period + delays
                  for period, delays in self._branches(gpu_cap, cost_cap)]
        if not floors or math.isinf(min(floors)):
            return math.inf
        return (min(floors) + self._rest_floor) * (1 - _SLACK)
