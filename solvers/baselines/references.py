"""The two baseline plans the sponsor's KPIs and the seeds' reward are measured against.

* single-domain: the fastest plan of the single-domain baseline. Its step time is
  ``T_base``: "training time vs single-domain" and the reward's R_eff refer to it.
* network-oblivious: the plan the oblivious baseline believes fastest (the one it would
  deploy for speed). Its cost is ``C_base``: "communication cost vs the network-oblivious
  plan" and the reward's R_cost refer to it.

Both plans are scored by the evaluator on the real network. Where the model fits no single
domain, the single-domain attempt is infeasible and is still the reference (its step time is
what a single-domain scheduler would get if it ran at all; the flag says so). Where the
oblivious plan lies in one domain (only one domain is usable) it costs nothing; ``C_base``
then falls back to the mean WAN price of one GB (USD), so that R_cost stays finite.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from formulation.families import AnyPlan, score
from formulation.instance import Instance
from formulation.plan import Plan
from formulation.reward import RewardScale
from solvers.baselines.oblivious import oblivious
from solvers.baselines.single_domain import UniformPlans, single_domain, uniform_plans
from solvers.tables import PairTables, all_pair_tables, full_capacity, with_free_gpus


@dataclass(frozen=True)
class BaselineReferences:
    single_domain: AnyPlan
    single_domain_objectives: tuple[float, float, float]
    single_domain_feasible: bool
    oblivious: AnyPlan
    oblivious_objectives: tuple[float, float, float]
    oblivious_feasible: bool
    scale: RewardScale  # T_base, C_base and the MFU constants


def _fastest(instance: Instance, plans: list[AnyPlan]) -> tuple[AnyPlan, np.ndarray, bool]:
    objectives, feasible = score(instance, plans)
    pool = np.flatnonzero(feasible) if feasible.any() else np.arange(len(plans))
    best = int(pool[np.argmin(objectives[pool, 0])])
    return plans[best], objectives[best], bool(feasible[best])


class NoReferencePlan(ValueError):
    """A baseline the references need made no plan at all (no domain has room)."""


def baseline_references(instance: Instance, tables: list[PairTables] | None = None,
                        uniform: UniformPlans | None = None) -> BaselineReferences:
    """The single-domain and oblivious reference plans of an instance (module doc).

    ``tables`` (the pairs' tables at full capacity, :func:`solvers.tables.full_capacity`)
    and ``uniform`` (:func:`~solvers.baselines.single_domain.uniform_plans`) do not depend
    on the free GPUs or the links: a caller that plans for many states of one instance
    (the RL environment) builds them once, and a new state then costs two small batch
    evaluations."""
    if tables is None:
        tables = all_pair_tables(full_capacity(instance))
    uniform = uniform_plans(instance, tables) if uniform is None else uniform
    free = instance.free_gpus
    fastest = uniform.fastest(free)
    if fastest is not None:
        single_plan, single_objectives, single_ok = _fastest(instance, [uniform.plan(*fastest)])
    else:  # fits no single domain: the attempt, reported infeasible
        single = single_domain(instance)
        if not single.plans:
            raise NoReferencePlan(f"{instance.name}: the single-domain baseline made no "
                                  "plan")
        single_plan, single_objectives, single_ok = _fastest(instance, single.plans)

    decisions = oblivious(instance, [with_free_gpus(t, free) for t in tables])
    if not decisions.plans:
        raise NoReferencePlan(f"{instance.name}: the oblivious baseline made no plan "
                              "(no domain has room for one stage)")
    believed = decisions.parameters.get("believed_fastest")
    # where nothing fitted even in its own view, it deploys its one attempt
    chosen = ([Plan.from_dict(believed, instance)] if believed is not None
              else decisions.plans[:1])
    oblivious_objectives, oblivious_ok = score(instance, chosen)

    c_base = float(oblivious_objectives[0, 2])
    if not c_base > 0:
        off_diagonal = ~np.eye(instance.num_domains, dtype=bool)
        prices = instance.links.price_per_gb[off_diagonal]
        c_base = float(prices.mean()) if prices.size and prices.mean() > 0 else 1.0
    return BaselineReferences(
        single_domain=single_plan,
        single_domain_objectives=tuple(float(x) for x in single_objectives),
        single_domain_feasible=single_ok,
        oblivious=chosen[0],
        oblivious_objectives=tuple(float(x) for x in oblivious_objectives[0]),
        oblivious_feasible=bool(oblivious_ok[0]),
        scale=RewardScale.of(instance, float(single_objectives[0]), c_base))
