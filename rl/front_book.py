"""The fronts a scheduler has built, per instance state: a later decision there is a lookup.

Every decision minimises a cost that rises with the step time, the GPUs and the traffic
cost alike (the reward's ``J``, :mod:`formulation.reward`; the soft step-time cap's penalty
rises with the step time too, and a front's plans meet the WAN share cap, so theirs is 0),
under budgets that cap the GPUs and the cost: its best plan is a point of the state's
Pareto front within the budgets. Once :meth:`rl.scheduler.Scheduler.front` has swept a
state's budgets, and none of the sweep's decisions ran out of time or work, the front it
built answers any later request on that state, of any preference and budgets, by reading
it: the best point within the budgets by the request's value (its reward less the soft
step-time cap's penalty, as :meth:`rl.env.PlanEnv.score` values a plan), without an
episode or a DP run. A budget the front holds no plan within is decided as before.

The lookup reads the front the sweep's decisions found, not the exact one: it is not
proven to equal the decision it replaces (that decision ranks and prunes the pairs under
its own budgets, and places each within the period precision of its least period), and
where a sweep's decision ran out, a later decision, starting from what the sweep found,
can do better (a front whose decisions ran out is therefore not kept). README
(``scripts/bench_hippo.py``): the same requests decided before the front and read off it.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Sequence

import numpy as np

from formulation.evaluator import evaluate_plans
from formulation.instance import Instance
from formulation.plan import Plan
from formulation.reward import RewardScale, reward
from rl.env import Multipliers, budget_bucket, constraint_excess
from rl.masks import COST_TOLERANCE, Budgets

STATES = 64  # fronts kept, the least recently read dropped first


class _Entry:
    """One state's front: its plans, their evaluation (one batch) and the reward scale."""

    def __init__(self, instance: Instance, plans: Sequence[Plan], scale: RewardScale):
        self.instance, self.plans, self.scale = instance, list(plans), scale
        self.result = evaluate_plans(instance, self.plans)
        self.objectives = np.asarray(self.result.objectives, dtype=float).reshape(-1, 3)


class FrontBook:
    """Fronts by (instance state, decision settings): :meth:`answer` reads a request's
    candidates off the front built with the same settings (None where there is none)."""

    def __init__(self, states: int = STATES):
        self.states = states
        self._entries: OrderedDict[Hashable, _Entry] = OrderedDict()

    def add(self, key: Hashable, instance: Instance, plans: Sequence[Plan],
            scale: RewardScale) -> None:
        """Keep the front ``plans`` of the state and settings ``key`` (any earlier one of
        it replaced)."""
        self._entries.pop(key, None)
        if plans:
            self._entries[key] = _Entry(instance, plans, scale)
            while len(self._entries) > self.states:
                self._entries.popitem(last=False)

    def drop(self, key: Hashable) -> None:
        self._entries.pop(key, None)

    def clear(self) -> None:
        self._entries.clear()

    def answer(self, key: Hashable, weights: np.ndarray, budgets: Budgets,
               multipliers: Multipliers) -> list[tuple[Plan, float]] | None:
        """The front's plans within the request's GPU and cost budgets (the cost with the
        masks' ``COST_TOLERANCE``), each with its value for ``weights`` and the soft
        step-time cap; None where the book holds no front of ``key`` or none of its plans
        is within the budgets."""
        entry = self._entries.get(key)
        if entry is None:
            return None
        self._entries.move_to_end(key)
        gpus, cost = entry.objectives[:, 1], entry.objectives[:, 2]
        within = np.ones(len(entry.plans), dtype=bool)
        if budgets.gpus is not None:
            within &= gpus <= budgets.gpus
        if budgets.cost is not None:
            within &= cost <= budgets.cost * (1 + COST_TOLERANCE)
        if not within.any():
            return None
        values = reward(entry.objectives, weights, entry.scale)
        penalties = multipliers.of(budget_bucket(budgets, entry.scale.t_base))
        return [(entry.plans[i], float(values[i]) - float(
                    penalties @ constraint_excess(entry.instance, entry.result, budgets, i)))
                for i in np.flatnonzero(within)]
