"""Local search on one plan for one preference vector: best-improvement moves, scored by the
evaluator.

Each round builds every neighbour of the current plan, evaluates them in one batch
(:func:`formulation.evaluator.evaluate_plans`, about a millisecond for a few hundred plans)
and moves to the feasible neighbour with the highest reward ``R`` of the seeds
(:func:`formulation.reward.reward`, preference ``w``), until no neighbour improves or
``rounds`` run out. A neighbour differs from the plan in one of these ways:

- a cut between two adjacent stages moved by a number of layers in ``SHIFTS``;
- one stage's (tp, recompute) option replaced by another of the search space;
- one stage moved to another domain;
- another (dp, micro-batch) pair of the search space, stages unchanged, or with every
  stage's tp scaled inversely to dp (the same GPUs regrouped);
- one stage split into two halves in its domain, or two adjacent stages of one domain
  with one option merged.

The result is a local optimum of ``R``: it polishes a baseline's plan toward the exact
optimum of one preference (the Hi-PPO demonstrations use it, :mod:`rl.imitation`) but
promises nothing globally.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from formulation.evaluator import evaluate_plans
from formulation.instance import Instance
from formulation.plan import Plan, Stage
from formulation.reward import RewardScale, reward

SHIFTS = (1, 2, 3, 5, 8)


def neighbours(instance: Instance, plan: Plan) -> list[Plan]:
    """The plans one move away from ``plan`` (module doc), without repeats; they may be
    infeasible (the evaluator says which)."""
    stages = list(plan.stages)
    search = instance.search
    out: dict[Plan, None] = {}

    def add(new_stages: list[Stage], dp: int = plan.dp,
            micro_batch: int = plan.micro_batch) -> None:
        if len(new_stages) <= search.max_stages and all(s.layers >= 1 for s in new_stages):
            out[dataclasses.replace(plan, dp=dp, micro_batch=micro_batch,
                                    stages=tuple(new_stages))] = None

    for j in range(len(stages) - 1):  # move a cut
        for delta in (*SHIFTS, *(-d for d in SHIFTS)):
            moved = stages.copy()
            moved[j] = dataclasses.replace(stages[j], layers=stages[j].layers + delta)
            moved[j + 1] = dataclasses.replace(stages[j + 1],
                                               layers=stages[j + 1].layers - delta)
            add(moved)
    options = [(tp, rc) for tp in search.tp for rc in search.recompute]
    for j, stage in enumerate(stages):
        for tp, recompute in options:  # another option
            if (tp, recompute) != (stage.tp, stage.recompute):
                add([*stages[:j], dataclasses.replace(stage, tp=tp, recompute=recompute),
                     *stages[j + 1:]])
        for domain in range(instance.num_domains):  # another domain
            if domain != stage.domain:
                add([*stages[:j], dataclasses.replace(stage, domain=domain),
                     *stages[j + 1:]])
        if stage.layers >= 2:  # split in two
            front = stage.layers // 2
            add([*stages[:j], dataclasses.replace(stage, layers=front),
                 dataclasses.replace(stage, layers=stage.layers - front), *stages[j + 1:]])
        if j + 1 < len(stages) and dataclasses.replace(stages[j + 1],
                                                       layers=stage.layers) == stage:
            add([*stages[:j], dataclasses.replace(stage, layers=stage.layers
                                                  + stages[j + 1].layers), *stages[j + 2:]])
    batch = instance.training.global_batch
    for dp in search.dp:  # another pair (of whole micro-batches)
        for micro_batch in search.micro_batch:
            if batch % (dp * micro_batch):
                continue
            if (dp, micro_batch) != (plan.dp, plan.micro_batch):
                add(stages, dp, micro_batch)
            if dp != plan.dp and all(s.tp * plan.dp % dp == 0 for s in stages):
                add([dataclasses.replace(s, tp=s.tp * plan.dp // dp) for s in stages], dp,
                    micro_batch)
    out.pop(plan, None)
    return list(out)


def local_search(instance: Instance, plan: Plan, weights, scale: RewardScale,
                 rounds: int = 100, limits=None) -> tuple[Plan, float]:
    """The local optimum reached from ``plan`` and its reward (module doc); ``plan`` itself
    when it is infeasible and no neighbour is feasible. ``limits``: the largest step time,
    GPUs and cost a plan may have (``inf``: none); a plan beyond them counts as infeasible,
    so a plan within them stays within them."""
    weights = np.asarray(weights, dtype=float)
    limits = np.full(3, np.inf) if limits is None else np.asarray(limits, dtype=float)

    def allowed(result) -> np.ndarray:
        return result.admissible & np.all(result.objectives <= limits * (1 + 1e-12), axis=1)

    start = evaluate_plans(instance, [plan])
    best = float(reward(start.objectives, weights, scale)[0]) if allowed(start)[0] \
        else -np.inf
    for _ in range(rounds):
        candidates = neighbours(instance, plan)
        if not candidates:
            break
        result = evaluate_plans(instance, candidates)
        value = np.where(allowed(result), reward(result.objectives, weights, scale), -np.inf)
        index = int(np.argmax(value))
        if not value[index] > best + 1e-12:
            break
        plan, best = candidates[index], float(value[index])
    return plan, best
