"""Fronts by budget sweeps (issue 14, item 2): Hi-PPO's decisions under GPU and cost budgets
that step down below each decision's plan, the epsilon-constraint method with decisions for
solves (:meth:`rl.scheduler.Scheduler.front`, the evaluation's ``hippo`` method), and the
regular grid of preference vectors the preference-sweep studies use."""

from __future__ import annotations

from formulation.plan import Plan
from rl.env import NoPlanWithinBudget
from rl.masks import NO_BUDGETS, Budgets


def preference_grid(steps: int = 10) -> list[tuple[float, float, float]]:
    """Every (i, j, k) / steps with i + j + k = steps: a regular grid on the simplex of
    preference vectors (66 vectors for 10 steps)."""
    return [(i / steps, j / steps, (steps - i - j) / steps)
            for i in range(steps + 1) for j in range(steps + 1 - i)]


SWEEP_PREFERENCES = ((1.0, 0.0, 0.0),)
"""Preferences of a default front sweep: the step time under GPU and cost budgets is the
epsilon-constraint problem whose solutions are the front (SPEC 4)."""
COST_STEP = 0.02  # a cost budget this much below the last plan's cost
COST_STEPS = 4  # cost budgets tried per GPU level (the last one: 0, a one-domain plan)


def sweep_front(decide, cost_of, preferences, cost_steps: int = COST_STEPS,
                resume=None) -> tuple[list[Plan], int]:
    """Plans of an epsilon-constraint-like sweep of budgets, and the number of decisions.

    ``decide(weights, budgets)`` returns a decision's candidate plans with their rewards
    (raising :class:`~rl.env.NoPlanWithinBudget` when none exists); ``cost_of(plan)`` is a
    plan's traffic cost per step. For each preference:
    no budget first, then a GPU budget one below the GPUs of the last decision's plan,
    until no plan fits; at each GPU level, cost budgets ``COST_STEP`` below the last plan's
    cost, at most ``cost_steps`` of them, the last one 0 (a plan without WAN traffic).

    ``resume(weights, budgets)``, if given, decides again a request the sweep made whose
    lower level ran out of its time or work, going on from where it stopped (None where
    it did not: :meth:`rl.scheduler.Scheduler.resume`); after the sweep, each decision that
    gave plans is resumed once, in the sweep's order, and its plans join the front (one
    that ran out with none ended its part of the sweep and is not). A sweep's budgets
    follow its plans, so a resumed decision's better plan does not move them: on the
    full search space, where decisions run out of time near the fronts' fast end, one
    pass covers most of what the first missed (README)."""
    plans: list[Plan] = []
    decisions = 0
    asked: list[tuple] = []  # the requests decided, in order

    def one(weights, budgets: Budgets) -> Plan | None:
        nonlocal decisions
        try:
            candidates = decide(weights, budgets)
        except NoPlanWithinBudget:
            return None
        decisions += 1
        asked.append((weights, budgets))
        plans.extend(plan for plan, _ in candidates)
        return max(candidates, key=lambda item: item[1])[0] if candidates else None

    for weights in preferences:
        budgets = NO_BUDGETS
        while (plan := one(weights, budgets)) is not None:
            gpus = plan.gpus()
            cost_plan = plan
            for step in range(cost_steps):
                cost = cost_of(cost_plan)
                if not cost > 0:
                    break
                level = 0.0 if step == cost_steps - 1 else cost * (1 - COST_STEP)
                cost_plan = one(weights, Budgets(gpus=gpus, cost=level))
                if cost_plan is None:
                    if level > 0:  # nothing cheaper by a step: try no traffic at all
                        cost_plan = one(weights, Budgets(gpus=gpus, cost=0.0))
                    break
            if gpus <= 1:
                break
            budgets = Budgets(gpus=gpus - 1)
    for weights, budgets in asked if resume is not None else ():
        try:
            candidates = resume(weights, budgets)
        except NoPlanWithinBudget:
            continue
        if candidates is not None:
            decisions += 1
            plans.extend(plan for plan, _ in candidates)
    return plans, decisions
