"""A plan as a vector of genes in [0, 1), for NSGA-II: decoding, encoding and repair.

Genes, for an instance with K domains, at most S stages, P valid (dp, micro-batch) pairs,
T valid tp degrees and R recompute modes:

    x[0]              pair:      index floor(x P) into the valid (dp, micro-batch) pairs
    x[1]              stages:    1 + floor(x S)
    x[2 + 4j + 0]     domain of stage j:     floor(x K)
    x[2 + 4j + 1]     layer share of stage j (layers split in proportion, each >= 1)
    x[2 + 4j + 2]     tp of stage j:         floor(x T)
    x[2 + 4j + 3]     recompute of stage j:  floor(x R)

Genes of stages past the stage count are carried but unused. Decoding is vectorised into
:class:`~formulation.batch.PlanBatch` arrays, so a population is scored in one call of the
batched evaluator. Only tp degrees that are valid for the model and the node are encoded.

:meth:`PlanEncoding.repair` makes a plan feasible where it can, by the smallest changes
(a stage's tp lowered or the stage moved to a domain with room; recompute switched to full
or surplus layers moved to stages with memory to spare), using the memory caps of
:mod:`solvers.tables`, the tables the exact models use.
"""

from __future__ import annotations

import numpy as np

from formulation.batch import RECOMPUTE_CODE, PlanBatch
from formulation.instance import Instance
from formulation.plan import Plan, Stage
from solvers.tables import PairTables, pair_tables

GENES_PER_STAGE = 4


def _index(genes: np.ndarray, count: int) -> np.ndarray:
    return np.minimum((genes * count).astype(np.int64), count - 1)


def _gene(index: int, count: int) -> float:
    """The centre of an index's interval: decodes back to ``index``."""
    return (index + 0.5) / count


class PlanEncoding:
    def __init__(self, instance: Instance):
        self.instance = instance
        search, batch = instance.search, instance.training.global_batch
        self.pairs = [(r, b) for r in search.dp for b in search.micro_batch if batch % (r * b) == 0]
        if not self.pairs:
            raise ValueError(f"{instance.name}: no dp x micro-batch in the search space divides "
                             f"the global batch {batch}")
        self.tps = [t for t in search.tp if t <= instance.gpu.gpus_per_node
                    and instance.model.heads % t == 0]
        if not self.tps:
            raise ValueError(f"{instance.name}: no tp in the search space fits the model")
        self.modes = list(search.recompute)
        self.max_stages = min(search.max_stages, instance.model.layers)
        self.num_domains = instance.num_domains
        self.layers = instance.model.layers
        self.num_genes = 2 + GENES_PER_STAGE * self.max_stages
        self._tables: dict[tuple[int, int], PairTables | None] = {}

    # -- genes -> plans ------------------------------------------------------------------
    def decode(self, genes: np.ndarray) -> PlanBatch:
        genes = np.atleast_2d(np.asarray(genes, dtype=float))
        n = len(genes)
        pair = self.pair_indices(genes)
        stages = 1 + _index(genes[:, 1], self.max_stages)
        per_stage = genes[:, 2:].reshape(n, self.max_stages, GENES_PER_STAGE)
        real = np.arange(self.max_stages)[None, :] < stages[:, None]
        domain = _index(per_stage[:, :, 0], self.num_domains)
        tp = np.array(self.tps)[_index(per_stage[:, :, 2], len(self.tps))]
        codes = np.array([RECOMPUTE_CODE[m] for m in self.modes])
        recompute = codes[_index(per_stage[:, :, 3], len(self.modes))]
        layers = np.where(real, split_by_shares(self.layers, per_stage[:, :, 1], real), 0)
        dp = np.array([r for r, _ in self.pairs])[pair]
        micro_batch = np.array([b for _, b in self.pairs])[pair]
        return PlanBatch.from_arrays(dp, micro_batch, domain, layers, tp, recompute)

    def pair_indices(self, genes: np.ndarray) -> np.ndarray:
        """Index into ``pairs`` of each genome's (dp, micro-batch) pair."""
        return _index(np.atleast_2d(np.asarray(genes, dtype=float))[:, 0], len(self.pairs))

    # -- plans -> genes ------------------------------------------------------------------
    def encode(self, plan: Plan) -> np.ndarray:
        """Genes that decode to ``plan`` (which must lie in the encoded space)."""
        genes = np.full(self.num_genes, 0.5)
        genes[0] = _gene(self.pairs.index((plan.dp, plan.micro_batch)), len(self.pairs))
        count = plan.num_stages
        genes[1] = _gene(count - 1, self.max_stages)
        spare = max(self.layers - count, 1)
        for j, stage in enumerate(plan.stages):
            base = 2 + GENES_PER_STAGE * j
            genes[base] = _gene(stage.domain, self.num_domains)
            genes[base + 1] = (stage.layers - 1) / spare
            genes[base + 2] = _gene(self.tps.index(stage.tp), len(self.tps))
            genes[base + 3] = _gene(self.modes.index(stage.recompute), len(self.modes))
        return genes

    def covers(self, plan: Plan) -> bool:
        """Whether ``plan`` lies in the encoded space (so that :meth:`encode` holds)."""
        return ((plan.dp, plan.micro_batch) in self.pairs
                and 1 <= plan.num_stages <= self.max_stages
                and all(s.tp in self.tps and s.recompute in self.modes
                        and 0 <= s.domain < self.num_domains for s in plan.stages))

    # -- repair --------------------------------------------------------------------------
    def tables(self, dp: int, micro_batch: int) -> PairTables | None:
        key = (dp, micro_batch)
        if key not in self._tables:
            self._tables[key] = pair_tables(self.instance, dp, micro_batch)
        return self._tables[key]

    def repair(self, plan: Plan) -> Plan:
        """The plan with GPU and memory violations removed where small changes can."""
        tables = self.tables(plan.dp, plan.micro_batch)
        if tables is None:
            return plan
        stages = _fit_gpus(tables, list(plan.stages))
        stages = _fit_memory(tables, stages)
        return Plan(dp=plan.dp, micro_batch=plan.micro_batch, stages=tuple(stages))


def split_by_shares(total: int, shares: np.ndarray, real: np.ndarray) -> np.ndarray:
    """Rows of ``total`` layers split over the real stages in proportion to ``shares``
    (largest remainders, each stage >= 1; equal shares where all are 0)."""
    count = real.sum(axis=1)
    weights = np.where(real, shares, 0.0)
    sums = weights.sum(axis=1)
    weights = np.where((sums > 0)[:, None], weights, real.astype(float))
    weights = weights / weights.sum(axis=1, keepdims=True)
    exact = (total - count)[:, None] * weights
    parts = np.floor(exact + 1e-9).astype(np.int64)
    short = total - count - parts.sum(axis=1)
    # Hand the remaining layers to the largest remainders, first stage first among equals.
    order = np.argsort(-(exact - parts) + np.where(real, 0, 2), axis=1, kind="stable")
    rank = np.empty_like(order)
    np.put_along_axis(rank, order, np.arange(order.shape[1])[None, :], axis=1)
    parts += rank < short[:, None]
    return np.where(real, parts + 1, 0)


def _option(tables: PairTables, tp: int, recompute: str) -> int | None:
    try:
        return tables.options.index((tp, recompute))
    except ValueError:
        return None


def _fit_gpus(tables: PairTables, stages: list[Stage]) -> list[Stage]:
    """Front to back: a stage whose domain is out of GPUs first lowers its tp; if even the
    smallest tp does not fit, it moves to the previous stage's domain, else to the domain
    with the most room (widest link from the previous stage among equals)."""
    room = tables.free_gpus.astype(np.int64).copy()
    bandwidth = tables.instance.links.bandwidth_gbps
    tps = sorted({t for t, _ in tables.options})
    out: list[Stage] = []
    for stage in stages:
        domain, tp = stage.domain, stage.tp
        if tables.dp * tp > room[domain]:
            smaller = [t for t in tps if t < tp and tables.dp * t <= room[domain]]
            if smaller:
                tp = max(smaller)
            elif tables.dp * tps[0] <= room.max():
                tp = tps[0]
                previous = out[-1].domain if out else None
                if previous is not None and tables.dp * tp <= room[previous]:
                    domain = previous
                else:
                    domain = max(np.flatnonzero(room >= tables.dp * tp), key=lambda k: (
                        room[k], 0 if previous is None else bandwidth[previous, k], -k))
        room[domain] -= tables.dp * tp
        out.append(Stage(domain=int(domain), layers=stage.layers, tp=int(tp),
                         recompute=stage.recompute))
    return out


def _caps(tables: PairTables, stages: list[Stage]) -> list[int]:
    """Most layers each stage fits at its position (stages that are not a tables option
    keep their layers: the evaluator will name what is wrong with them)."""
    count, out = len(stages), []
    for j, stage in enumerate(stages):
        option = _option(tables, stage.tp, stage.recompute)
        caps = tables.layer_cap_first if j == 0 else tables.layer_cap
        out.append(stage.layers if option is None else int(caps[count - 1 - j, option]))
    return out


def _fit_memory(tables: PairTables, stages: list[Stage]) -> list[Stage]:
    """Stages over their memory cap switch to full recompute (if allowed); if the stages
    still cannot hold the model, capacity is added (:func:`_grow`); then layers over a cap
    move to the stages with most room, nearest first."""
    modes = {rc for _, rc in tables.options}
    caps = _caps(tables, stages)
    stages = [Stage(s.domain, s.layers, s.tp, "full")
              if s.layers > cap and "full" in modes else s
              for s, cap in zip(stages, caps, strict=True)]
    stages = _grow(tables, stages)
    caps = _caps(tables, stages)
    count = len(stages)
    if sum(caps) < tables.layers or min(caps) < 1:
        return stages
    layers = [s.layers for s in stages]
    for j in range(count):
        surplus = layers[j] - caps[j]
        while surplus > 0:
            spare = [i for i in range(count) if layers[i] < caps[i]]
            target = min(spare, key=lambda i: (-(caps[i] - layers[i]), abs(i - j)))
            moved = min(surplus, caps[target] - layers[target])
            layers[target] += moved
            layers[j] -= moved
            surplus -= moved
    return [Stage(s.domain, n, s.tp, s.recompute) for s, n in zip(stages, layers, strict=True)]


def _grow(tables: PairTables, stages: list[Stage]) -> list[Stage]:
    """While the stages' memory caps sum to less than the model's layers, take the one
    change that adds most capacity, among: a stage's next larger tp (if its domain has the
    GPUs), or a new stage beside an existing one (same domain and option, half its layers)
    in a domain with room for it, while the stage limit allows."""
    tps = sorted({t for t, _ in tables.options})
    while sum(_caps(tables, stages)) < tables.layers:
        room = _room(tables, stages)
        moves = []
        for j, s in enumerate(stages):
            larger = [t for t in tps if t > s.tp and _option(tables, t, s.recompute) is not None
                      and tables.dp * (t - s.tp) <= room[s.domain]]
            if larger:
                changed = stages[:j] + [Stage(s.domain, s.layers, larger[0], s.recompute)]
                moves.append(changed + stages[j + 1:])
            if len(stages) < tables.positions and s.layers >= 2:
                host = s.domain if tables.dp * s.tp <= room[s.domain] else int(np.argmax(room))
                if tables.dp * s.tp <= room[host]:
                    half = s.layers // 2
                    moves.append(stages[:j] + [Stage(s.domain, s.layers - half, s.tp,
                                                     s.recompute),
                                               Stage(host, half, s.tp, s.recompute)]
                                 + stages[j + 1:])
        if not moves:
            break
        best = max(moves, key=lambda m: sum(_caps(tables, m)))
        if sum(_caps(tables, best)) <= sum(_caps(tables, stages)):
            break
        stages = best
    return stages


def _room(tables: PairTables, stages: list[Stage]) -> np.ndarray:
    """Free GPUs left in each domain by the stages."""
    room = tables.free_gpus.astype(np.int64).copy()
    for s in stages:
        room[s.domain] -= tables.dp * s.tp
    return room
