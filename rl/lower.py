"""The lower level of Hi-PPO: the stages of one (dp, micro-batch) pair, placed by exact DP.

The seeds' hierarchy (002, section 2) splits a decision in two: the upper level decides
between domains, the lower level the parallel layout inside them. Here the upper level is
the policy's PAIR decision (:mod:`rl.env`): it ranks the (dp, micro-batch) pairs for the
instance state, the preference and the budgets. For each of the pairs it ranks first, the
lower level places the stages (domain, tp, recompute, layers, in pipeline order) with the
label-setting DP of the exact engine (:mod:`solvers.chain`, :func:`~solvers.label_kernels
.label_dp`): given a cap on the 1F1B period, that DP finds the plan of least compute and
boundary delay ``S = sum c + 2 sum delta`` whose every stage, window and link fits the cap,
within the GPU and cost budgets, exactly.

The lower level:

1. **least period** of the pair within the budgets, by bisection on the DP's feasibility
   run, to ``PERIOD_PRECISION``; it starts from the period of a hint (the constructive
   episode's plan, when it is of this pair) or of any plan, and from the period floors that
   earlier decisions on the same instance state proved (a :class:`~solvers.chain.Chain` is
   kept per pair and state, so a warm decision or the next step of a budget sweep starts
   with a narrow interval);
2. **the plan of least S** at that period.

The step time is ``(m - 1) P + S + A + O``; step 1 and 2 minimise the first two terms, the
largest ones. What it leaves to the exact engine's branch and bound is the trade of a
slightly longer period for a smaller ``S``, all-reduce ``A`` or optimizer time ``O``, and the
last ``PERIOD_PRECISION`` of the period: the plan is within about 1 % of the pair's best,
not certified. Other preferences than least step time get the same plan; the decision keeps
whichever of its candidates has the best reward.

The DP's relaxation (a domain entered again has all its GPUs again, unless tracked) is
repaired as the engine does: a plan that overuses a domain makes that domain tracked and the
run is repeated. A plan that breaks the instance's WAN share cap is never returned.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from formulation.plan import Plan
from rl.masks import COST_TOLERANCE, Budgets
from solvers.chain import OPEN, LabelBudgetExceeded, Terms, chain_of
from solvers.tables import PairTables, choices_plan, plan_choices

PERIOD_PRECISION = 0.01  # relative width at which the period's bisection stops
MIN_STEP = (1.0, 0.0, 0.0)  # DP weights: least S (the period is capped, not weighed)


@dataclass(frozen=True)
class Placement:
    """The lower level's answer for one pair: its plan (None: no plan of the pair within
    the budgets was found) and the DP runs it took."""

    plan: Plan | None
    step_time_s: float
    runs: int


class _Runs:
    """DP runs on one pair under fixed budgets, repairing the relaxation as they go."""

    def __init__(self, tables: PairTables, budgets: Budgets):
        self.chain = chain_of(tables)
        self.gpu_cap = budgets.gpus
        self.cost_cap = budgets.cost
        self.runs = 0
        self.best: Terms | None = None  # the best plan found within the budgets

    def caps(self):
        return self.chain.caps(self.gpu_cap, self.cost_cap)

    def within(self, terms: Terms) -> bool:
        values, caps = terms.values, self.caps()
        return values.gpus <= caps.gpus \
            and values.comm_cost <= caps.cost * (1 + COST_TOLERANCE)

    def offer(self, terms: Terms) -> None:
        if self.within(terms) and self.chain.violations(terms) is None and (
                self.best is None or terms.values.step_time_s < self.best.values.step_time_s):
            self.best = terms

    def at(self, period: float, feasibility: bool, tables_at: float | None) -> Terms | None:
        """A plan of the relaxation with period at most ``period`` (with ``feasibility``,
        any; otherwise the one of least S), repaired: None if there is none. A plan that
        only breaks the WAN share cap is returned, not kept (:meth:`offer`)."""
        chain = self.chain
        while True:
            self.runs += 1
            found = chain.run(self.caps(), period, MIN_STEP, feasibility=feasibility,
                              tables_at=tables_at)
            if found is None:
                return None
            over = chain.violations(found)
            if not over:  # feasible, or over the share cap only
                self.offer(found)
                return found
            chain.critical |= set(over)


def place(tables: PairTables, budgets: Budgets, hint: Plan | None = None,
          precision: float = PERIOD_PRECISION) -> Placement:
    """The lower level on one pair (module docstring)."""
    runs = _Runs(tables, budgets)
    choices = None if hint is None else plan_choices(tables, hint)
    high = math.inf
    if choices is not None:
        terms = runs.chain.terms(choices)
        runs.offer(terms)
        if runs.best is terms:
            high = terms.period
    try:
        if high == math.inf:
            found = runs.at(OPEN, True, None)
            if found is None:
                return Placement(None, math.inf, runs.runs)
            high = found.period
        top = high * (1 + 1e-9)  # bound tables made once, at the top of the interval
        low = runs.chain.known_period_floor(runs.caps())
        while high - low > precision * high:
            mid = (low + high) / 2
            found = runs.at(mid, True, top)
            if found is None:
                low = mid
                runs.chain.period_floors.append((runs.caps(), mid))  # a proven floor
            else:
                high = min(mid, found.period)
        runs.at(high * (1 + 1e-9), False, top)
    except LabelBudgetExceeded:  # a run too large for a decision: keep what was found
        pass
    best = runs.best
    if best is None:
        return Placement(None, math.inf, runs.runs)
    return Placement(choices_plan(tables, best.choices), best.values.step_time_s, runs.runs)
