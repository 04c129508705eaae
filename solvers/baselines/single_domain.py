"""``single-domain``: the best plan inside one domain, as a traditional scheduler makes it.

Every domain, every valid (dp, micro-batch) pair, every stage count that fits the domain's
free GPUs and every uniform (tp, recompute) option, with the layers split by
:func:`~solvers.baselines.common.min_max_layers` (balanced compute within the memory caps,
as Megatron-LM's uneven first/last-stage splits do). No WAN link is used, so the plans cost
nothing in traffic. The fastest of them gives ``T_base`` of the sponsor's KPIs (SPEC 4);
the decisions are the plans that are best for some GPU budget.

If the model fits no single domain, the attempt with the most memory for the model (in the
largest domain: largest tp, full recompute, as many stages as fit) is returned and
reported infeasible with its violations.
"""

from __future__ import annotations

import numpy as np

from formulation.evaluator import evaluate_plans
from formulation.instance import Instance
from formulation.plan import Plan, Stage
from instances.sample import split_layers
from solvers.baselines.common import (
    Decisions,
    Slot,
    domains_by_free_gpus,
    min_max_layers,
    slots_plan,
)
from solvers.front import nondominated_mask
from solvers.tables import PairTables, all_pair_tables


def domain_plans(tables: PairTables, domain: int) -> list[Plan]:
    """The balanced uniform plans of one (dp, micro-batch) pair inside ``domain``."""
    free = int(tables.free_gpus[domain])
    plans = []
    for option in range(tables.num_options):
        most = min(tables.positions, free // int(tables.gpus[option]))
        for count in range(1, most + 1):
            slots = [Slot(domain, option)] * count
            layers = min_max_layers(tables, slots)
            if layers is not None:
                plans.append(slots_plan(tables, slots, layers))
    return plans


def single_domain_candidates(instance: Instance, domains: list[int] | None = None) -> list[Plan]:
    """Every balanced uniform one-domain plan (of ``domains``, default all)."""
    domains = range(instance.num_domains) if domains is None else domains
    return [plan for tables in all_pair_tables(instance) for k in domains
            for plan in domain_plans(tables, k)]


def single_domain(instance: Instance) -> Decisions:
    candidates = single_domain_candidates(instance)
    if not candidates:
        attempt = one_domain_attempt(instance, domains_by_free_gpus(instance)[0])
        return Decisions([attempt], 0, {"fits_one_domain": False})
    result = evaluate_plans(instance, candidates)
    objectives = result.objectives[:, :2]  # no traffic inside a domain
    keep = np.flatnonzero(result.feasible)
    keep = keep[nondominated_mask(objectives[keep])]
    return Decisions([candidates[i] for i in keep], len(candidates), {"fits_one_domain": True})


def one_domain_attempt(instance: Instance, domain: int) -> Plan:
    """The plan inside ``domain`` with the most memory for the model: the largest tp that
    fits at the smallest dp, full recompute if allowed, as many stages as fit."""
    search = instance.search
    free = instance.domains[domain].free_gpus
    dp = min(search.dp)
    tps = [t for t in search.tp if t <= instance.gpu.gpus_per_node
           and instance.model.heads % t == 0 and dp * t <= free] or [min(search.tp)]
    tp = max(tps)
    count = max(1, min(search.max_stages, instance.model.layers, free // (dp * tp)))
    recompute = "full" if "full" in search.recompute else search.recompute[0]
    layers = split_layers(instance.model.layers, np.ones(count))
    return Plan(dp=dp, micro_batch=min(search.micro_batch), stages=tuple(
        Stage(domain=domain, layers=n, tp=tp, recompute=recompute) for n in layers))
