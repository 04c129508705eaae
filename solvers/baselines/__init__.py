"""The baselines that papers compare against, each a function from an instance to plans.

=================  ==========================================================================
``single-domain``  the best plan inside one domain (``T_base`` of the sponsor's KPIs)
``oblivious``      network-oblivious static chain over all usable domains (``C_base``)
``greedy``         network-aware greedy placement (Atlas / MAST spirit)
``sailor``         DP planner over start layer, stage count, dp and micro-batch (Sailor)
``dtfm``           GA over stage-to-domain assignment with open-loop TSP order (DT-FM)
``diloco``         whole-model replicas synchronised every H steps (DiLoCo; changes the
                   optimiser)
=================  ==========================================================================

:func:`baseline_front` runs one and lets the evaluator score its plans: the feasible ones
form a front (status ``heuristic``); an infeasible one is reported in the provenance with
its violations, never dropped silently.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from formulation.families import evaluate_any
from formulation.instance import Instance
from formulation.plan import Plan
from solvers.baselines.common import Decisions
from solvers.baselines.diloco import diloco
from solvers.baselines.dtfm import GaSettings, dtfm
from solvers.baselines.greedy import greedy
from solvers.baselines.oblivious import oblivious
from solvers.baselines.references import BaselineReferences, baseline_references
from solvers.baselines.sailor import sailor
from solvers.baselines.single_domain import single_domain
from solvers.front import Front, versions

METHODS: dict[str, Callable[..., Decisions]] = {
    "single-domain": single_domain, "oblivious": oblivious, "greedy": greedy,
    "sailor": sailor, "dtfm": dtfm, "diloco": diloco,
}


def baseline_front(instance: Instance, method: str, command: str | None = None,
                   **options: Any) -> Front:
    """Run baseline ``method`` (keyword ``options`` go to its function) and score its plans."""
    if method not in METHODS:
        raise ValueError(f"unknown baseline {method!r}; choose from {list(METHODS)}")
    start = time.perf_counter()
    decisions = METHODS[method](instance, **options)
    front = Front.from_plans(instance, decisions.plans, "heuristic")
    infeasible = []
    for plan in decisions.plans:
        evaluation = evaluate_any(instance, plan)
        if not evaluation.admissible:
            infeasible.append({"plan": plan.to_dict(instance),
                               "violations": [v.to_dict() for v in evaluation.violations],
                               "search_mismatches": [m.to_dict()
                                                     for m in evaluation.mismatches]})
    front.provenance = {
        "command": command or f"solvers.baselines.baseline_front(method={method!r})",
        "method": method, "versions": versions(),
        "parameters": decisions.parameters,
        "wall_time_s": round(time.perf_counter() - start, 3),
        "candidates_scored": decisions.candidates, "decisions": len(decisions.plans),
        "infeasible_decisions": infeasible,
    }
    return front


SEED_METHODS = ("single-domain", "greedy", "sailor")
"""The fast baselines whose plans start the searches of others (the exact sweep's incumbents,
NSGA-II's first population)."""


def seed_plans(instance: Instance, methods: tuple[str, ...] = SEED_METHODS,
               deadline: float | None = None) -> list[Plan]:
    """The feasible pipeline plans of ``methods``, without repeats, in method order. With
    ``deadline`` (``time.perf_counter()`` seconds: a search seeded under a time limit), no
    method after the first starts after it, and Sailor's enumeration, the one that grows
    with the instance, stops at it."""
    plans: list[Plan] = []
    for rank, method in enumerate(methods):
        if rank and deadline is not None and time.perf_counter() >= deadline:
            break
        options = {"deadline": deadline} if method == "sailor" else {}
        plans += [p.plan for p in baseline_front(instance, method, **options).points
                  if isinstance(p.plan, Plan)]
    return list(dict.fromkeys(plans))


__all__ = ["METHODS", "SEED_METHODS", "BaselineReferences", "Decisions", "GaSettings",
           "baseline_front", "baseline_references", "seed_plans"]
