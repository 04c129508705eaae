"""``greedy``: network-aware greedy placement in the spirit of Atlas and MAST.

For n = 1 .. the stage limit it takes the n domains with the most free GPUs, starts the chain
at the largest and always continues to the nearest remaining domain, where "nearest" is the
time one micro-batch's activations take over the link (``A / B + L``: bandwidth and latency
together). Each stage gets the largest tp that fits the domain's free GPUs with dp replicas;
the layers are split by compute share (in proportion to each stage's layer throughput).
It does this for every (dp, micro-batch) pair and recompute mode; the evaluator scores
the configurations, and the decisions are those that are best for some budget of GPUs and
traffic cost (the network-aware evaluator is what a greedy scheduler of this kind ranks with).
"""

from __future__ import annotations

import numpy as np

from formulation.evaluator import cost_model
from formulation.instance import Instance
from formulation.plan import Plan
from instances.sample import split_layers
from solvers.baselines.common import (
    Decisions,
    Slot,
    domains_by_free_gpus,
    keep_feasible,
    nearest_neighbour_chain,
    slots_plan,
)
from solvers.tables import PairTables, all_pair_tables


def greedy_chain(tables: PairTables, ranked: list[int], count: int) -> list[int]:
    """The ``count`` largest usable domains, chained by nearest neighbour on link delay."""
    cm = cost_model(tables.instance)
    usable = [k for k in ranked if tables.gpus.min() <= tables.free_gpus[k]][:count]
    if len(usable) < count:
        return []
    return nearest_neighbour_chain(usable[0], usable, lambda a, z: float(
        cm.boundary_delay(a, z, tables.micro_batch, tables.dp)))


def greedy_candidates(instance: Instance) -> list[Plan]:
    ranked = domains_by_free_gpus(instance)
    plans = []
    for tables in all_pair_tables(instance):
        for recompute in instance.search.recompute:
            options = [o for o, (_, rc) in enumerate(tables.options) if rc == recompute]
            for count in range(1, min(tables.positions, tables.layers) + 1):
                chain = greedy_chain(tables, ranked, count)
                if not chain or not options:
                    continue
                # The largest tp that fits each domain: its GPUs are what make it fast.
                slots = [Slot(k, max((o for o in options if tables.usable(k, o)),
                                     key=lambda o: tables.gpus[o])) for k in chain]
                speed = np.array([1.0 / tables.layer_time[s.option] for s in slots])
                plans.append(slots_plan(tables, slots, split_layers(tables.layers, speed)))
    return plans


def greedy(instance: Instance) -> Decisions:
    return keep_feasible(instance, greedy_candidates(instance))
