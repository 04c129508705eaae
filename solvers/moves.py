"""Plan moves for the heuristics that search structures: a layer polish, random structural
moves and a Pareto descent.

What the exact fronts are made of (measured on the quick and bench suites, issue 13): a
one-layer relay stage beside a WAN boundary, which shortens the round trip of the windows
that span it; a pipeline mirrored onto another pair of domains; dp and tp regrouped on the
same GPUs; and layer splits tuned to the WAN terms. A min-max compute split of the exact
structures was up to 26 % slower than their exact split, and a genome that draws layer
shares at random rarely meets the right split of a structure it finds. So:

- :func:`polish_layers`: every plan of a batch descends over cut shifts. Moving layers
  across one boundary changes neither the GPUs nor the traffic cost, only the step time,
  so a plan's place on the front only improves; all shifts of all plans of a round are
  scored in one call of the batched evaluator.
- :func:`random_move`: one random structural change (names in ``MOVES``), for mutation.
- :func:`structure_neighbours`: the local-search neighbourhood
  (:func:`solvers.local_search.neighbours`) plus relay stages, domain relabels, halves
  across a WAN and option trades between stages.
- :func:`remaps`: a plan's domains mapped onto other domains all at once.
- :func:`descend`: Pareto local search from a set of plans: each archived plan is expanded
  once (its structure neighbours and its closest remaps, layer-polished; a neighbour that
  breaks only the memory limit is polished too), the archive keeps the non-dominated
  plans, and plans within ``near`` of the archive's step time are expanded too, so that a
  chain of moves through slightly worse structures is open.
"""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass

import numpy as np

from formulation.batch import PlanBatch
from formulation.evaluator import VIOLATIONS, evaluate_batch
from formulation.instance import Instance
from formulation.plan import Plan, Stage
from solvers.encoding import PlanEncoding
from solvers.front import dominated_by, nondominated_mask
from solvers.local_search import neighbours

CUT_SHIFTS = np.array([1, 2, 3, 4, 6, 8, 12, 16, 24])
"""Layers moved across one boundary in a polish step, either way."""
POLISH_ROUNDS = 50
"""Most rounds of :func:`polish_layers` (it stops earlier when no plan improves)."""
POLISH_GAP = 0.6
"""The descent polishes a neighbour only if its own split is within this relative step
time of the archive."""
REMAP_LIMIT = 8000
"""Most domain remaps of one plan the descent scores (:func:`remaps`)."""
REMAP_GAP = 0.1
"""The descent polishes a remap only if its own split is within this relative step time of
the archive, and at most ``REMAP_POLISHED`` of them per expansion, closest first."""
REMAP_POLISHED = 32
MOVES = ("domain", "option", "relay", "merge", "split", "pair", "swap", "relabel", "halve",
         "reverse", "trade")
"""Kinds of :func:`random_move`: a stage to another domain; another (tp, recompute) option;
a one-layer relay stage inserted beside a stage; two adjacent stages merged; a stage split
in two; another (dp, micro-batch) pair (tp regrouped on the same GPUs where it divides);
two stages' domains swapped; every stage of one domain moved to another; a stage split in
two of half its tp (the same GPUs); the pipeline reversed (the embedding and the head
change ends); two stages' (tp, recompute) traded (earlier stages hold more micro-batches'
activations, so which stage gets the larger tp or the recompute matters)."""


def polish_layers(instance: Instance, batch: PlanBatch, rounds: int = POLISH_ROUNDS
                  ) -> PlanBatch:
    """The batch with each plan's layers moved by steepest descent on the step time over cut
    shifts (``CUT_SHIFTS``); an infeasible plan moves only to a feasible one."""
    layers = batch.layers.copy()
    n, width = layers.shape
    if width < 2 or n == 0:
        return batch
    result = evaluate_batch(instance, batch)
    best = np.where(result.admissible, result.step_time_s, np.inf)
    shifts = np.concatenate([CUT_SHIFTS, -CUT_SHIFTS])
    cut = np.arange(width - 1)
    active = np.arange(n)
    for _ in range(rounds):
        if not len(active):
            break
        rows = len(active)
        # candidates[r, j, d] = the layers of plan active[r] with shifts[d] moved over cut j
        candidates = np.broadcast_to(layers[active][:, None, None, :],
                                     (rows, width - 1, len(shifts), width)).copy()
        r, j, d = np.meshgrid(np.arange(rows), cut, np.arange(len(shifts)), indexing="ij")
        candidates[r, j, d, j] += shifts[d]
        candidates[r, j, d, j + 1] -= shifts[d]
        real = (layers[active] > 0)[:, None, None, :]
        valid = np.where(real, candidates >= 1, candidates == 0).all(axis=3)
        valid &= (cut[None, :, None] + 1) < batch.num_stages[active][:, None, None]
        flat = candidates.reshape(-1, width)
        source = np.repeat(active, (width - 1) * len(shifts))
        index = np.flatnonzero(valid.reshape(-1))
        if not len(index):
            break
        rows_of = source[index]
        scored = evaluate_batch(instance, PlanBatch.from_arrays(
            batch.dp[rows_of], batch.micro_batch[rows_of], batch.domain[rows_of], flat[index],
            batch.tp[rows_of], batch.recompute[rows_of]))
        value = np.full(len(flat), np.inf)
        value[index] = np.where(scored.admissible, scored.step_time_s, np.inf)
        value = value.reshape(rows, -1)
        pick = np.argmin(value, axis=1)
        found = value[np.arange(rows), pick]
        better = found < best[active] * (1 - 1e-12)
        moved = active[better]
        layers[moved] = candidates.reshape(rows, -1, width)[np.flatnonzero(better),
                                                           pick[better]]
        best[moved] = found[better]
        active = moved
    return PlanBatch.from_arrays(batch.dp, batch.micro_batch, batch.domain, layers, batch.tp,
                                 batch.recompute)


def random_move(space: PlanEncoding, plan: Plan, rng: np.random.Generator) -> Plan:
    """``plan`` changed by one structural move of a random kind (``MOVES``); the plan itself
    where the drawn move does not apply. Layers stay where they were (the repair and the
    polish place them); the result may be infeasible."""
    stages, count = list(plan.stages), plan.num_stages
    kind = MOVES[int(rng.integers(len(MOVES)))]
    j = int(rng.integers(count))
    domain = int(rng.integers(space.num_domains))
    if kind == "domain":
        return in_domain(plan, j, domain)
    elif kind == "option":
        stages[j] = dataclasses.replace(stages[j], tp=int(rng.choice(space.tps)),
                                        recompute=str(rng.choice(space.modes)))
    elif kind == "relay" and count < space.max_stages and stages[j].layers >= 2:
        relay = Stage(domain=domain if rng.random() < 0.5 else stages[j].domain, layers=1,
                      tp=int(rng.choice(sorted(space.tps)[:2])),
                      recompute=str(rng.choice(space.modes)))
        return with_relay(plan, j, int(rng.integers(2)), relay)
    elif kind == "merge" and count > 1:
        k = j + 1 if j + 1 < count else j - 1
        stages[k] = dataclasses.replace(stages[k], layers=stages[k].layers + stages[j].layers)
        del stages[j]
    elif kind == "split" and count < space.max_stages and stages[j].layers >= 2:
        half = stages[j].layers // 2
        stages[j:j + 1] = [dataclasses.replace(stages[j], layers=stages[j].layers - half),
                           dataclasses.replace(stages[j], layers=half, domain=domain
                                               if rng.random() < 0.5 else stages[j].domain)]
    elif kind == "pair":
        dp, micro_batch = space.pairs[int(rng.integers(len(space.pairs)))]
        if all(s.tp * plan.dp % dp == 0 and s.tp * plan.dp // dp in space.tps for s in stages):
            stages = [dataclasses.replace(s, tp=s.tp * plan.dp // dp) for s in stages]
        return dataclasses.replace(plan, dp=dp, micro_batch=micro_batch, stages=tuple(stages))
    elif kind == "swap" and count > 1:
        k = int(rng.integers(count))
        a, b = stages[j].domain, stages[k].domain
        stages[j], stages[k] = (dataclasses.replace(stages[j], domain=b),
                                dataclasses.replace(stages[k], domain=a))
    elif kind == "trade" and count > 1:
        return traded(plan, j, int(rng.integers(count)))
    elif kind == "halve":
        return halved(space, plan, j) or plan
    elif kind == "reverse":
        stages.reverse()
    elif kind == "relabel":
        return relabelled(plan, stages[j].domain, domain)
    return dataclasses.replace(plan, stages=tuple(stages))


def relabelled(plan: Plan, old: int, new: int) -> Plan:
    """``plan`` with every stage in domain ``old`` moved to domain ``new``."""
    return dataclasses.replace(plan, stages=tuple(
        dataclasses.replace(s, domain=new) if s.domain == old else s for s in plan.stages))


def with_relay(plan: Plan, j: int, side: int, relay: Stage) -> Plan:
    """``plan`` with the one-layer stage ``relay`` inserted before (``side`` 0) or after
    (1) stage ``j``, which gives it one of its layers."""
    stages = list(plan.stages)
    stages[j] = dataclasses.replace(stages[j], layers=stages[j].layers - 1)
    stages.insert(j + side, relay)
    return dataclasses.replace(plan, stages=tuple(stages))


def halved(space: PlanEncoding, plan: Plan, j: int) -> Plan | None:
    """Stage ``j`` split in two halves of half its tp (None where that is not possible)."""
    stage = plan.stages[j]
    if stage.tp // 2 not in space.tps or stage.tp % 2 or stage.layers < 2 \
            or plan.num_stages >= space.max_stages:
        return None
    half = stage.layers // 2
    pair = [dataclasses.replace(stage, tp=stage.tp // 2, layers=stage.layers - half),
            dataclasses.replace(stage, tp=stage.tp // 2, layers=half)]
    return dataclasses.replace(plan, stages=(*plan.stages[:j], *pair, *plan.stages[j + 1:]))


def in_domain(plan: Plan, j: int, domain: int) -> Plan:
    """``plan`` with stage ``j`` moved to ``domain``."""
    stages = list(plan.stages)
    stages[j] = dataclasses.replace(stages[j], domain=domain)
    return dataclasses.replace(plan, stages=tuple(stages))


def traded(plan: Plan, j: int, k: int, with_layers: bool = False) -> Plan:
    """``plan`` with stages ``j`` and ``k`` trading their (tp, recompute), and their layers
    too if ``with_layers``; each keeps its domain."""
    stages = list(plan.stages)
    a, b = stages[j], stages[k]
    stages[j] = dataclasses.replace(a, tp=b.tp, recompute=b.recompute,
                                    layers=b.layers if with_layers else a.layers)
    stages[k] = dataclasses.replace(b, tp=a.tp, recompute=a.recompute,
                                    layers=a.layers if with_layers else b.layers)
    return dataclasses.replace(plan, stages=tuple(stages))


def structure_neighbours(space: PlanEncoding, plan: Plan) -> list[Plan]:
    """:func:`~solvers.local_search.neighbours` plus every one-layer relay stage (either side
    of a stage, any domain, the two smallest tp, any recompute mode), every relabel of one
    domain's stages to another domain, every stage halved in tp (either half in any domain),
    every two stages' (tp, recompute) traded, with and without their layers, and the
    reversed pipeline;
    within the encoded space, without repeats and without ``plan``."""
    out = dict.fromkeys(neighbours(space.instance, plan))
    stages = list(plan.stages)
    out[dataclasses.replace(plan, stages=tuple(reversed(stages)))] = None
    for j in range(len(stages)):
        split = halved(space, plan, j)
        if split is not None:  # and either half in any domain: a stage split across a WAN
            out[split] = None
            for half in (j, j + 1):
                for domain in range(space.num_domains):
                    out[in_domain(split, half, domain)] = None
        for k in range(j + 1, len(stages)):
            out[traded(plan, j, k)] = None
            out[traded(plan, j, k, with_layers=True)] = None
    for old in sorted({s.domain for s in stages}):
        for domain in range(space.num_domains):
            if domain != old:
                out[relabelled(plan, old, domain)] = None
    if len(stages) < space.max_stages:
        relays = [Stage(domain=domain, layers=1, tp=tp, recompute=recompute)
                  for domain in range(space.num_domains) for tp in sorted(space.tps)[:2]
                  for recompute in space.modes]
        for j, stage in enumerate(stages):
            if stage.layers >= 2:
                for side in (0, 1):
                    for relay in relays:
                        out[with_relay(plan, j, side, relay)] = None
    out.pop(plan, None)
    return [p for p in out if space.covers(p)]


def remaps(space: PlanEncoding, plan: Plan) -> list[Plan]:
    """``plan`` with its domains mapped onto other domains all at once: every map of its
    distinct domains to domains (two may merge) where there are at most ``REMAP_LIMIT``,
    else every map of each two of its domains (the others stay). A structure found on one
    set of domains is often best on another (links and free GPUs differ), and reaching that
    set one relabel at a time passes through plans far off the front; one remap is a few
    thousand plans, which the batched evaluator scores in milliseconds."""
    used = list(dict.fromkeys(s.domain for s in plan.stages))
    k = space.num_domains
    groups = [used] if k ** len(used) <= REMAP_LIMIT else \
        [list(g) for g in itertools.combinations(used, 2)]
    out: dict[Plan, None] = {}
    for group in groups:
        for image in itertools.product(range(k), repeat=len(group)):
            mapping = dict(zip(group, image, strict=True))
            out[dataclasses.replace(plan, stages=tuple(
                dataclasses.replace(s, domain=mapping.get(s.domain, s.domain))
                for s in plan.stages))] = None
    out.pop(plan, None)
    return list(out)


def step_time_gaps(values: np.ndarray, front: np.ndarray) -> np.ndarray:
    """Per row of ``values``: how much slower (relative) it is than the fastest point of
    ``front`` with no more GPUs and traffic cost (0 where none has)."""
    values = np.asarray(values, dtype=float).reshape(-1, 3)
    under = (front[None, :, 1] <= values[:, None, 1]) & (front[None, :, 2] <= values[:, None, 2])
    fastest = np.where(under, front[None, :, 0], np.inf).min(axis=1)
    return np.where(np.isfinite(fastest), np.maximum(values[:, 0] / fastest - 1, 0.0), 0.0)


@dataclass
class DescentStats:
    expansions: int = 0  # plans whose neighbourhood was scored
    evaluations: int = 0  # neighbours scored (before their polish)


def descend(space: PlanEncoding, plans: list[Plan], expansions: int, near: float
            ) -> tuple[list[Plan], np.ndarray, DescentStats]:
    """Pareto local search from ``plans`` (module doc), at most ``expansions`` plans
    expanded, archive first; the non-dominated feasible plans found and their objectives.
    Deterministic: plans are expanded in archive order, then the near plans by their step-time
    gap to the archive, smallest first."""
    instance, stats = space.instance, DescentStats()
    archive: dict[Plan, np.ndarray] = {}
    near_plans: dict[Plan, np.ndarray] = {}
    expanded: set[Plan] = set()

    def merge(candidates: list[Plan], objectives: np.ndarray) -> None:
        nonlocal archive
        pool = list(archive) + candidates
        values = np.vstack([np.array(list(archive.values())).reshape(-1, 3), objectives])
        keep = nondominated_mask(values)
        archive = {p: v for p, v, k in zip(pool, values, keep, strict=True) if k}
        relaxed = objectives / np.array([1 + near, 1.0, 1.0])
        close = ~dominated_by(relaxed, np.array(list(archive.values())))
        for plan, value, ok in zip(candidates, objectives, close, strict=True):
            if ok and plan not in archive:
                near_plans[plan] = value

    start = evaluate_batch(instance, PlanBatch.from_plans(plans, space.max_stages))
    merge([p for p, ok in zip(plans, start.admissible, strict=True) if ok],
          start.objectives[start.admissible])
    while stats.expansions < expansions:
        todo = [p for p in archive if p not in expanded]
        if not todo:  # the archive is a local optimum: go on from the plans near it
            front = np.array(list(archive.values()))
            open_plans = [p for p in near_plans if p not in expanded]
            gaps = dict(zip(open_plans, step_time_gaps(
                np.array([near_plans[p] for p in open_plans]), front), strict=True)) \
                if open_plans else {}
            todo = sorted((p for p, gap in gaps.items() if gap <= near),
                          key=lambda p: (gaps[p], tuple(near_plans[p])))
            if not todo:
                break
        plan = todo[0]
        expanded.add(plan)
        stats.expansions += 1
        front = np.array(list(archive.values()))
        # Only neighbours whose own split is already close to the archive are polished (the
        # polish is most of the cost; a move rarely gains more from it).
        chosen = [*_closest(space, structure_neighbours(space, plan), front, POLISH_GAP, None,
                            stats),
                  *_closest(space, remaps(space, plan), front, REMAP_GAP, REMAP_POLISHED,
                            stats)]
        if not chosen:
            continue
        batch = polish_layers(instance, PlanBatch.from_plans(chosen, space.max_stages))
        result = evaluate_batch(instance, batch)
        feasible = np.flatnonzero(result.admissible)
        merge([batch.plan(i) for i in feasible], result.objectives[feasible])
    return list(archive), np.array(list(archive.values())).reshape(-1, 3), stats


def _closest(space: PlanEncoding, plans: list[Plan], front: np.ndarray, gap: float,
             most: int | None, stats: DescentStats) -> list[Plan]:
    """The ``plans`` within ``gap`` relative step time of ``front``, at most ``most`` of them
    (closest first, ties in the given order); feasible ones, or ones that break only the
    memory limit, which the polish may mend by moving layers (a stage halved in tp is often
    such a plan)."""
    if not plans:
        return []
    stats.evaluations += len(plans)
    raw = evaluate_batch(space.instance, PlanBatch.from_plans(plans, space.max_stages))
    others = np.delete(raw.violation, VIOLATIONS.index("memory"), axis=1)
    mendable = ~others.any(axis=1) & ~raw.outside_search
    gaps = np.where(mendable, step_time_gaps(raw.objectives, front), np.inf)
    keep = np.flatnonzero(gaps <= gap)
    if most is not None:
        keep = keep[np.argsort(gaps[keep], kind="stable")][:most]
    return [plans[i] for i in keep]
