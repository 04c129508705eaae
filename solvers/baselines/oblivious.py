"""``oblivious``: the network-oblivious static scheduler (reference for the cost KPI).

It chains all usable domains in index order, one stage each (up to the stage limit), with one
tp and recompute mode for every stage, and splits the layers by the GPUs of each stage (equal
shares, since every stage has ``dp * tp`` GPUs). It chooses among its configurations (dp,
micro-batch, tp, recompute) by the step time it *believes*, computed by the evaluator on a
flat view of the network in which every WAN link looks like the intra-domain network; the
evaluator then scores its choices on the real network. One decision per GPU budget: the
configuration it believes fastest within that budget. Its fastest decision gives ``C_base``
of the sponsor's KPIs (SPEC 4).
"""

from __future__ import annotations

import numpy as np

from formulation.evaluator import evaluate_plans
from formulation.instance import Instance
from formulation.plan import Plan
from instances.sample import split_layers
from solvers.baselines.common import Decisions, Slot, roomiest, slots_plan
from solvers.front import nondominated_mask
from solvers.tables import all_pair_tables


def flat_network(instance: Instance) -> Instance:
    """The instance as a network-oblivious scheduler sees it: each WAN link with the
    bandwidth and latency of the intra-domain networks it joins."""
    bandwidth = np.array([d.intra_bandwidth_gbps for d in instance.domains])
    latency = np.array([d.intra_latency_ms for d in instance.domains])
    return instance.with_link_state(bandwidth_gbps=np.minimum.outer(bandwidth, bandwidth),
                                    latency_ms=np.maximum.outer(latency, latency))


def oblivious_candidates(instance: Instance) -> list[Plan]:
    plans = []
    for tables in all_pair_tables(instance):
        for option in range(tables.num_options):
            usable = [k for k in range(tables.num_domains)
                      if tables.gpus[option] <= tables.free_gpus[k]]
            chain = usable[:min(tables.positions, tables.layers)]
            if chain:
                slots = [Slot(k, option) for k in chain]
                plans.append(slots_plan(tables, slots,
                                        split_layers(tables.layers, np.ones(len(chain)))))
    return plans


def oblivious(instance: Instance) -> Decisions:
    candidates = oblivious_candidates(instance)
    if not candidates:
        return Decisions([], 0, {"note": "no domain has room for one stage"})
    believed = evaluate_plans(flat_network(instance), candidates)
    ok = np.flatnonzero(believed.feasible)
    if not len(ok):  # nothing fits even in its own view: deploy the roomiest attempt
        return Decisions([roomiest(candidates)], len(candidates))
    view = np.stack([believed.step_time_s[ok], believed.gpus[ok].astype(float)], axis=1)
    chosen = ok[nondominated_mask(view)]
    fastest = int(ok[np.argmin(believed.step_time_s[ok])])
    return Decisions([candidates[i] for i in chosen], len(candidates),
                     {"believed_fastest": candidates[fastest].to_dict(instance)})
