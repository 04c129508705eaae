"""``sailor``: a dynamic-programming planner in the spirit of Sailor (Strati et al., SOSP'25).

Sailor searches over data-parallel degree, micro-batch, the regions a pipeline spans and
the layer ranges of its stages, and keeps the search small with pruning rules. This baseline
follows that outline on the SPEC problem:

* for every valid (dp, micro-batch) pair,
* region chains ranked by bottleneck bandwidth: ordered sets of 1 .. S domains built by a
  beam search that keeps the ``beam`` chains with the widest slowest link (then the most free
  GPUs) at each length,
* stages per domain (every split of at most S stages over the chain that fits the domains'
  free GPUs) and one recompute mode for the whole pipeline (a global setting, as activation
  checkpointing is in Megatron-LM and Sailor),
* tensor-parallel pruning, per domain: the minimum-memory tp (the smallest that holds a
  layer at all), and the largest tp that fits the domain's stages only if it makes a layer
  at least 1.5x faster,
* a dynamic programme over (stage, start layer) that splits the layers so that the slowest
  stage is as fast as possible within each stage's memory cap
  (:func:`~solvers.baselines.common.min_max_layers`).

Like Sailor's planner, it ranks layouts by its own estimate, the 1F1B period (the slowest
stage from the DP, or the busiest link of the chain), and keeps for every GPU count and
region chain (which fixes the traffic cost) the layout it estimates fastest. The evaluator
scores those. Sailor optimises one objective under a budget; minimising step time under
every budget of GPUs and traffic cost, swept over all levels, selects exactly the
non-dominated plans, which are the decisions.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from functools import cache

from formulation.instance import Instance
from formulation.plan import Plan
from solvers.baselines.common import (
    Decisions,
    Slot,
    keep_feasible,
    min_max_layers,
    slots_plan,
    stage_time,
)
from solvers.tables import PairTables, all_pair_tables

SPEEDUP_FOR_MORE_TP = 1.5
DEFAULT_BEAM = 8
MAX_LAYOUTS = 200_000
"""Layouts estimated per pair, at most: the splits of stages over domains grow
combinatorially with the stages and the domains' room (the full-space suite needs up to
157,000; domains of thousands of free GPUs and 16 stages, billions). Chains come shortest
and widest first, so a cut keeps those."""
MAX_SPLIT_WORK = 600_000_000
"""Stage-layers (stages x layers of each distinct stage sequence the DP splits: its cost)
an instance's search may spend, shared over its pairs: a pair may spend what is left over
the pairs still to come. Set so that a pair's first share (the budget over the pairs) is
several times what any pair of a committed suite or held-out instance spends, so that none
is cut; 64 stages over 1,024 free GPUs a domain did not end in 2 minutes without it."""


def mode_options(tables: PairTables) -> dict[str, list[int]]:
    """Per recompute mode, its options that hold a layer at all, by increasing tp (the first
    is the minimum-memory tp)."""
    out: dict[str, list[int]] = {}
    for o in sorted(range(tables.num_options), key=lambda o: tables.options[o][0]):
        if tables.layer_cap[0, o] >= 1:
            out.setdefault(tables.options[o][1], []).append(o)
    return out


def tp_candidates(tables: PairTables, options: list[int], domain: int, count: int) -> list[int]:
    """Sailor's tp rules for ``count`` stages in ``domain``: the minimum-memory tp, and the
    largest tp whose ``count`` stages fit the domain's GPUs if it makes a layer at least
    1.5x faster."""
    low = options[0]
    fits = [o for o in options if count * tables.gpus[o] <= tables.free_gpus[domain]]
    if not fits or fits[0] != low:
        return []
    high = fits[-1]
    faster = tables.layer_time[low] >= SPEEDUP_FOR_MORE_TP * tables.layer_time[high]
    return [low, high] if high != low and faster else [low]


def ranked_chains(tables: PairTables, length: int, beam: int) -> list[tuple[int, ...]]:
    """Ordered chains of ``length`` distinct usable domains with the widest bottleneck link
    (then the most free GPUs), by beam search."""
    bandwidth = tables.instance.links.bandwidth_gbps
    usable = [k for k in range(tables.num_domains) if tables.gpus.min() <= tables.free_gpus[k]]

    def rank(chain: tuple[int, ...]) -> tuple:
        bottleneck = min((bandwidth[a, z] for a, z in itertools.pairwise(chain)),
                         default=float("inf"))
        return (-bottleneck, -sum(int(tables.free_gpus[k]) for k in chain), chain)

    chains = [(k,) for k in usable]
    for _ in range(length - 1):
        chains = sorted((c + (k,) for c in chains for k in usable if k not in c), key=rank)
        chains = chains[:beam]
    return chains


@cache
def stage_counts(most: tuple[int, ...], limit: int) -> list[tuple[int, ...]]:
    """Every number of stages per domain, at least one and at most ``most[i]`` in domain
    ``i``, at most ``limit`` in all."""
    if not most:
        return [()]
    rest = len(most) - 1  # every later domain needs at least one stage
    return [(c, *tail) for c in range(1, min(most[0], limit - rest) + 1)
            for tail in stage_counts(most[1:], limit - c)]


def layouts(tables: PairTables, beam: int) -> Iterator[tuple[tuple[int, ...], list[Slot]]]:
    """Every (region chain, stages front to back) the rules admit for one pair."""
    limit = min(tables.positions, tables.layers)
    for length in range(1, min(limit, tables.num_domains) + 1):
        for chain in ranked_chains(tables, length, beam):
            for options in mode_options(tables).values():
                most = tuple(int(tables.free_gpus[k] // tables.gpus[options[0]]) for k in chain)
                if min(most) < 1:
                    continue
                for counts in stage_counts(most, limit):
                    choices = [tp_candidates(tables, options, k, c)
                               for k, c in zip(chain, counts, strict=True)]
                    for chosen in itertools.product(*choices):
                        yield chain, [Slot(k, o) for k, o, c in zip(chain, chosen, counts,
                                                                   strict=True)
                                      for _ in range(c)]


def sailor_candidates(instance: Instance, beam: int = DEFAULT_BEAM,
                      deadline: float | None = None) -> list[Plan]:
    """Per (dp, micro-batch) pair, GPU count and region chain, the layout the DP estimates
    fastest (its slowest stage or busiest link: the 1F1B period). With ``deadline``
    (``time.perf_counter()`` seconds), the layouts estimated before it (a search that seeds
    another under a time limit)."""
    plans = []
    pairs = all_pair_tables(instance)
    spent = 0  # stage-layers split so far (MAX_SPLIT_WORK)
    for index, tables in enumerate(pairs):
        if deadline is not None and time.perf_counter() >= deadline:
            break
        allowance = spent + (MAX_SPLIT_WORK - spent) // (len(pairs) - index)

        @cache
        def split(sequence: tuple[int, ...], tables=tables) -> tuple[tuple[int, ...], float]:
            # The DP depends on the options only, not on which domains host them.
            nonlocal spent
            spent += len(sequence) * tables.layers
            layers = min_max_layers(tables, [Slot(0, o) for o in sequence])
            if layers is None:
                return (), float("inf")
            slowest = max(stage_time(tables, o, n, j == 0, j == len(sequence) - 1)
                          for j, (o, n) in enumerate(zip(sequence, layers, strict=True)))
            return tuple(layers), slowest

        best: dict[tuple, tuple[float, list[Slot], tuple[int, ...]]] = {}
        for count, (chain, slots) in enumerate(layouts(tables, beam)):
            if count >= MAX_LAYOUTS or spent >= allowance or deadline is not None \
                    and time.perf_counter() >= deadline:
                break
            layers, slowest = split(tuple(s.option for s in slots))
            if not layers:
                continue
            busiest_link = max((float(tables.occupancy[a, z])
                                for a, z in itertools.pairwise(chain)), default=0.0)
            estimate = max(slowest, busiest_link)
            key = (int(sum(tables.gpus[s.option] for s in slots)), chain)
            if estimate < best.get(key, (float("inf"),))[0]:
                best[key] = (estimate, slots, layers)
        plans += [slots_plan(tables, slots, layers) for _, slots, layers in best.values()]
    return plans


def sailor(instance: Instance, beam: int = DEFAULT_BEAM,
           deadline: float | None = None) -> Decisions:
    return keep_feasible(instance, sailor_candidates(instance, beam, deadline),
                         {"beam": beam})
