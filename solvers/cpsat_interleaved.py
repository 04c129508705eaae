"""CP-SAT's model of an interleaved cell (:mod:`solvers.tables`: v chunks a stage, exactly S
stages), formulated apart from the MILP's as :mod:`solvers.cpsat` formulates plain 1F1B.

The stage variables are :class:`~solvers.cpsat.ScaledModel`'s, every position active with at
least v layers. Besides each boundary p+1 -> p, the wrap-around joins the last stage
(position 0) to the first (position S - 1), its pair index ``(K+1) d[0] + d[S-1]``. Every
time is in period units ``u / (m - 1)`` as there:

* per stage the compute ``c[p]`` and its forward share ``f[p]`` (the backward is
  ``c - f``); per link (the S - 1 boundaries, then the wrap) element tables of each
  direction's drain and latency;
* the period ``P`` of the schedule graph (:mod:`formulation.schedule_graph`) by integer node
  potentials in units of ``1 / v`` period unit (the chunk terms' ``1 / v`` made integral):
  ``pi_b - pi_a >= sum_q v coef_q term_q - S v tokens_e P`` on every edge, ``P`` also above
  every stage's compute and every link's occupancy (v crossings, v - 1 on the wrap);
* ``T = max((m - 1) P + sum c / v + (1 - 1/v) P, sum c) + 2 (v sum delta + (v - 1)
  delta_wrap) + AR + OPT`` in step units, each quotient an exact ceiling epigraph;
* cost ``v sum cost + (v - 1) cost_wrap``.

Scaling error (:meth:`InterleavedScaledModel._error_units`): a cycle's scaled weight is off by
at most the sum of its edges' rounding bounds (a stage term by ``(L + 2) / 2`` units, its
backward, a difference, by ``L + 2``, a link term by ``1/2``), so the scaled period is off
by at most the largest cycle ratio of those bounds over the graph (computed on the graph
itself, the same Howard iteration), over S, plus 1 for integrality; the step time's other
terms as the module docstring of :mod:`solvers.cpsat` counts them.
"""

from __future__ import annotations

import numpy as np
from ortools.sat.python import cp_model

from formulation.schedule_graph import TERMS, schedule_graph, steady_period
from solvers.cpsat import ScaledModel, _ints, sync_bound
from solvers.tables import PairTables

LINK_TERMS = ("drain_forward", "drain_backward", "latency_forward", "latency_backward")


def loose_interleaved_bound(t: PairTables) -> float:
    """Seconds no plan of the cell exceeds. A simple cycle of the schedule graph meets each
    event of a group at most once and leaves it by an edge no heavier than the event (an
    op's time; a message's drain and latency), over at least one group: the period is at
    most a group's work over S, the model's compute once and each crossing's drains and
    latencies. Each other term at its largest."""
    s, v = t.positions, t.virtual_stages
    compute = t.layers * t.layer_time.max() + t.first_time.max() + t.last_time.max()
    crossings = v * (s - 1) + v - 1
    messages = float((t.drain_forward + t.latency_forward + t.drain_backward
                      + t.latency_backward).max())
    period = compute + crossings * messages
    return (t.micro_batches * period + compute + 2 * crossings * float(t.delay.max())
            + sync_bound(t))


class InterleavedScaledModel(ScaledModel):
    """The CP-SAT model of an interleaved cell at one step-time unit (module docstring)."""

    def crossings(self) -> int:
        v, s = self.tables.virtual_stages, self.tables.positions
        return v * (s - 1) + v - 1

    def _graph_error(self) -> float:
        """The most by which the scaled graph period can differ from the float one, in
        period units, before integrality (module docstring)."""
        t = self.tables
        s, big_l = t.positions, t.layers
        errors = np.concatenate([np.full(s, (big_l + 2) / 2), np.full(s, big_l + 2.0),
                                 np.full(4 * s, 0.5)])
        return steady_period(s, t.virtual_stages, errors)

    def _error_units(self) -> tuple[float, float, float]:
        t = self.tables
        big_l, s, v = t.layers, t.positions, t.virtual_stages
        per = self.periods  # >= 1: a cell has m >= S >= 2
        e_period = max(self._graph_error(), (big_l + 2) / 2, v / 2) + 1
        e_compute = (big_l + 2 * s) / 2  # sum c, period units
        e_steady = e_period + e_compute / (v * per) + 1 + (v - 1) / v * e_period / per + 1
        e_path = e_compute / per + 1
        e_crossings = self.crossings() / per + 1
        e_step = max(e_steady, e_path) + e_crossings + (big_l + 3) / 2 + (big_l + 2) / 2
        return e_period, e_step, self.crossings() / 2

    def _build_time_and_cost(self, compute: list[cp_model.IntVar]) -> None:
        t, md, high = self.tables, self.model, self.high
        s, v, nk = t.positions, t.virtual_stages, t.num_domains
        if t.instance.constraints.wan_share_cap is not None:
            raise ValueError("the CP-SAT model states a WAN share cap for plain 1F1B only")
        for p in range(s):  # a cell has exactly S stages of at least v layers
            md.add(self.act[p] == 1)
            md.add(self.layers[p] >= v)
        forward = self._compute(self.period_unit, "f", self.act, self.opt, self.layers,
                                self.first, (t.forward_time, t.first_forward, t.last_forward))
        wrap = md.new_int_var(0, (nk + 1) ** 2 - 1, "wrap")
        md.add(wrap == (nk + 1) * self.index[0] + self.index[s - 1])
        front = list(range(s - 1, -1, -1))  # positions, front to back
        links = [self.pair[s - 2 - j] for j in range(s - 1)] + [wrap]  # front boundary j
        link = {name: self._boundary(_ints(getattr(t, name), self.period_unit, high), name,
                                     links) for name in (*LINK_TERMS, "delay", "occupancy")}
        terms = ([forward[p] for p in front] + [compute[p] - forward[p] for p in front]
                 + [x for name in LINK_TERMS for x in link[name]])
        assert len(terms) == len(TERMS) * s

        period = md.new_int_var(0, high, "period")
        for p in range(s):
            md.add(period >= compute[p])
        for j, occupancy in enumerate(link["occupancy"]):
            md.add(period >= (v if j < s - 1 else v - 1) * occupancy)
        graph = schedule_graph(s, v)
        bound = int(graph.nodes * v * (high + s * int(np.abs(graph.tokens).max()) * high))
        potential = [md.new_int_var(-bound, bound, f"pi{x}") for x in range(graph.nodes)]
        md.add(potential[0] == 0)  # potentials are defined up to a constant
        for e in range(len(graph.source)):
            weight = sum(int(round(v * graph.coefficient[e, q])) * terms[int(graph.term[e, q])]
                         for q in range(2) if graph.term[e, q] >= 0)
            md.add(potential[int(graph.target[e])] - potential[int(graph.source[e])]
                   >= weight - s * v * int(graph.tokens[e]) * period)
        self.period = period

        per = self.periods
        allreduce, optimizer = self._epigraphs(self.dom, self.opt, self.layers, self.first)

        def ceiling(name: str, divisor: int, numerator) -> cp_model.IntVar:
            var = md.new_int_var(0, high, name)
            md.add(divisor * var >= numerator)
            return var

        compute_sum = sum(compute)
        crossings = ceiling("crossings", per, 2 * (v * sum(link["delay"][:-1])
                                                   + (v - 1) * link["delay"][-1]))
        pipeline = md.new_int_var(0, high, "pipeline")
        md.add(pipeline >= period + ceiling("compute_v", v * per, compute_sum)
               + ceiling("bubble", v * per, (v - 1) * period) + crossings)
        md.add(pipeline >= ceiling("path", per, compute_sum) + crossings)
        self.step = pipeline + allreduce + optimizer
        self.gpus = sum(self.stage_gpus)
        cost = self._boundary(_ints(t.cost * (1 - np.eye(nk)), self.cost_unit), "cost", links)
        self.cost = v * sum(cost[:-1]) + (v - 1) * cost[-1]
