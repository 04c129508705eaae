"""``diloco``: whole-model replicas inside domains, synchronised over the WAN every H steps.

DiLoCo (Douillard et al. 2023) trains R replicas independently for H inner steps and then
averages their pseudo-gradients; it changes the optimisation algorithm, so its plans are
scored on the SPEC objectives (:mod:`formulation.diloco`) but cannot be compared with the
pipeline methods on convergence. Every front it writes says so in its provenance.

For each worker count R >= 2 that divides the global batch: each domain's fastest one-domain
plan for ``G / R`` sequences (the single-domain baseline's search on that batch); the R
domains with the fastest workers; a ring in nearest-neighbour order on bandwidth (widest
link next). Two decisions per R: every worker at its fastest, and the lean variant in which
each worker takes the fewest GPUs that still keep pace with the slowest worker.
"""

from __future__ import annotations

from collections import defaultdict

from formulation.diloco import DilocoPlan, worker_instance
from formulation.evaluator import evaluate_plans
from formulation.instance import Instance
from formulation.plan import Plan
from solvers.baselines.common import Decisions, domains_by_free_gpus, nearest_neighbour_chain
from solvers.baselines.single_domain import one_domain_attempt, single_domain_candidates

DEFAULT_SYNC_EVERY = 500  # DiLoCo's main setting (H = 500 inner steps)


def worker_options(instance: Instance, workers: int) -> tuple[dict[int, list[tuple]], int]:
    """Per domain, its feasible one-domain plans for ``G / workers`` sequences as
    (step time, GPUs, plan), fastest first; and the number of plans scored."""
    inner = worker_instance(instance, workers)
    candidates = single_domain_candidates(inner)
    options: dict[int, list[tuple]] = defaultdict(list)
    if candidates:
        result = evaluate_plans(inner, candidates)
        for plan, step, gpus, ok in zip(candidates, result.step_time_s, result.gpus,
                                        result.admissible, strict=True):
            if ok:
                options[plan.stages[0].domain].append((float(step), int(gpus), plan))
    for k in options:
        options[k].sort(key=lambda entry: (entry[0], entry[1]))
    return options, len(candidates)


def diloco(instance: Instance, sync_every: int = DEFAULT_SYNC_EVERY) -> Decisions:
    bandwidth = instance.links.bandwidth_gbps
    plans: list[DilocoPlan] = []
    scored = 0
    batch = instance.training.global_batch
    for workers in range(2, instance.num_domains + 1):
        if batch % workers:
            continue
        options, count = worker_options(instance, workers)
        scored += count
        ranked = sorted(options, key=lambda k: (options[k][0][0], k))
        if len(ranked) < workers:
            continue
        members = ranked[:workers]
        ring = nearest_neighbour_chain(members[0], members, lambda a, z: -bandwidth[a, z])
        fastest = [options[k][0][2] for k in ring]
        pace = max(options[k][0][0] for k in ring)
        lean = [min((entry for entry in options[k] if entry[0] <= pace),
                    key=lambda entry: (entry[1], entry[0]))[2] for k in ring]
        plans.append(DilocoPlan(sync_every, tuple(fastest)))
        if lean != fastest:
            plans.append(DilocoPlan(sync_every, tuple(lean)))
    parameters = {"sync_every": sync_every, "changes_optimizer": True,
                  "note": "DiLoCo changes the optimisation algorithm: its step is not a "
                          "synchronous step; compare on time, GPUs and cost, not on "
                          "convergence"}
    if not plans:  # no domain holds a whole replica: report the roomiest attempt
        top = domains_by_free_gpus(instance)[:2]
        inner = worker_instance(instance, len(top))
        attempt: list[Plan] = [one_domain_attempt(inner, k) for k in top]
        plans = [DilocoPlan(sync_every, tuple(attempt))]
    return Decisions(list(plans), scored, parameters)
