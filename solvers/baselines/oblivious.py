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

from formulation.batch import RECOMPUTE_CODE, PlanBatch
from formulation.evaluator import evaluate_batch
from formulation.instance import Instance
from solvers.baselines.common import Decisions, roomiest
from solvers.front import nondominated_mask
from solvers.tables import PairTables, all_pair_tables


def flat_network(instance: Instance) -> Instance:
    """The instance as a network-oblivious scheduler sees it: each WAN link with the
    bandwidth and latency of the intra-domain networks it joins."""
    bandwidth = np.array([d.intra_bandwidth_gbps for d in instance.domains])
    latency = np.array([d.intra_latency_ms for d in instance.domains])
    return instance.with_link_state(bandwidth_gbps=np.minimum.outer(bandwidth, bandwidth),
                                    latency_ms=np.maximum.outer(latency, latency))


def oblivious_candidates(instance: Instance,
                         tables: list[PairTables] | None = None) -> PlanBatch | None:
    """One chain per (pair, option), as a batch (None: no domain has room for one stage);
    ``tables``: the instance's pair tables if already built (their ``free_gpus`` must be
    the instance's)."""
    rows = []
    for pair in all_pair_tables(instance) if tables is None else tables:
        for option, (tp, recompute) in enumerate(pair.options):
            usable = np.flatnonzero(pair.gpus[option] <= pair.free_gpus)
            chain = usable[:min(pair.positions, pair.layers)]
            if len(chain):
                rows.append((pair.dp, pair.micro_batch, chain, tp, RECOMPUTE_CODE[recompute]))
    if not rows:
        return None
    width = max(len(chain) for _, _, chain, _, _ in rows)
    domain = np.zeros((len(rows), width), np.int64)
    count = np.array([len(chain) for _, _, chain, _, _ in rows])
    for i, (_, _, chain, _, _) in enumerate(rows):
        domain[i, :len(chain)] = chain
    # equal shares (instances.sample.split_layers with equal weights): the extra layers on
    # the front stages
    layers = instance.model.layers
    stage = np.arange(width)[None, :]
    base, extra = divmod(layers - count, count)
    split = np.where(stage < count[:, None], 1 + base[:, None] + (stage < extra[:, None]), 0)
    dp, micro_batch, _, tp, recompute = zip(*rows, strict=True)
    return PlanBatch.from_arrays(dp, micro_batch, domain, split,
                                 np.repeat(np.array(tp)[:, None], width, axis=1),
                                 np.repeat(np.array(recompute)[:, None], width, axis=1))


def oblivious(instance: Instance, tables: list[PairTables] | None = None) -> Decisions:
    candidates = oblivious_candidates(instance, tables)
    if candidates is None:
        return Decisions([], 0, {"note": "no domain has room for one stage"})
    believed = evaluate_batch(flat_network(instance), candidates)
    ok = np.flatnonzero(believed.admissible)
    if not len(ok):  # nothing fits even in its own view: deploy the roomiest attempt
        return Decisions([roomiest(candidates.to_plans())], len(candidates))
    view = np.stack([believed.step_time_s[ok], believed.gpus[ok].astype(float)], axis=1)
    chosen = ok[nondominated_mask(view)]
    fastest = int(ok[np.argmin(believed.step_time_s[ok])])
    return Decisions([candidates.plan(i) for i in chosen], len(candidates),
                     {"believed_fastest": candidates.plan(fastest).to_dict(instance)})
