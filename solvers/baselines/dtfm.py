"""``dtfm``: genetic search over stage-to-domain assignment with an open-loop TSP ordering, in
the spirit of DT-FM (Yuan et al., "Decentralized Training of Foundation Models in
Heterogeneous Environments", NeurIPS'22).

DT-FM fixes the parallel configuration, assigns pipeline stages to devices with a genetic
algorithm, and orders the stages along the pipeline by solving an open-loop travelling
salesman problem on the communication cost between them. Here, for every valid (dp,
micro-batch) pair, uniform (tp, recompute) option and stage count S:

* a genome is the multiset of S domains hosting the stages (a domain may host several, as
  far as its free GPUs allow; a repair moves surplus stages to the domain with most room);
* its pipeline order is the open path through the stages of least total round-trip link
  delay (``delta`` forward plus backward), solved exactly by Held-Karp;
* layers are split evenly, as DT-FM does;
* fitness is the evaluator's step time (infeasible plans rank last);
* the GA (tournament selection, uniform crossover, one-gene mutation, elitism) is seeded
  and deterministic.

The best plan of each configuration is a decision; the front keeps the non-dominated ones.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import cache

import numpy as np

from formulation.evaluator import cost_model, evaluate_plans
from formulation.instance import Instance
from formulation.plan import Plan
from instances.sample import split_layers
from solvers.baselines.common import Decisions, Slot, keep_feasible, slots_plan
from solvers.tables import PairTables, all_pair_tables


@dataclass(frozen=True)
class GaSettings:
    """The genetic algorithm's parameters (per configuration)."""

    population: int = 24
    """Genomes per generation."""
    generations: int = 15
    """Generations after the random initial population."""
    mutation: float = 0.3
    """Probability that a child has one stage moved to a random usable domain."""
    seed: int = 0
    """Seed of the GA's random numbers (numpy ``default_rng``)."""


def open_loop_order(stage_domains: tuple[int, ...], distance: np.ndarray) -> tuple[int, ...]:
    """The order of ``stage_domains`` along an open path of least total ``distance``
    (Held-Karp over subsets of stages; two stages in one domain ``k`` are
    ``distance[k, k]`` apart, the intra-domain delay). Among equal paths the
    lexicographically smallest order wins."""
    count = len(stage_domains)
    if count <= 2:
        return tuple(sorted(stage_domains))
    full = (1 << count) - 1
    best: dict[tuple[int, int], tuple[float, tuple[int, ...]]] = {}
    for i in range(count):
        best[(1 << i, i)] = (0.0, (stage_domains[i],))
    for mask in range(1, full + 1):
        for last in range(count):
            entry = best.get((mask, last))
            if entry is None:
                continue
            for nxt in range(count):
                if mask & (1 << nxt):
                    continue
                key = (mask | (1 << nxt), nxt)
                value = (entry[0] + distance[stage_domains[last], stage_domains[nxt]],
                         entry[1] + (stage_domains[nxt],))
                if key not in best or value < best[key]:
                    best[key] = value
    return min(best[(full, last)] for last in range(count))[1]


class _Configuration:
    """One (pair, option, stage count): its genome space and fitness."""

    def __init__(self, tables: PairTables, option: int, stages: int):
        self.tables, self.option, self.stages = tables, option, stages
        self.room = (tables.free_gpus // tables.gpus[option]).astype(int)  # stages per domain
        self.usable = np.flatnonzero(self.room > 0)
        cm = cost_model(tables.instance)
        k = np.arange(tables.num_domains)
        delay = np.asarray(cm.boundary_delay(k[:, None], k[None, :], tables.micro_batch,
                                             tables.dp), dtype=float)
        self.distance = delay + delay.T  # activations forward, gradients backward
        self.layers = split_layers(tables.layers, np.ones(stages))
        self.order = cache(lambda genome: open_loop_order(genome, self.distance))

    def feasible_space(self) -> bool:
        return int(self.room.sum()) >= self.stages

    def repair(self, genome: np.ndarray) -> tuple[int, ...]:
        """Move stages off over-full domains to the usable domain with most room left."""
        used = np.zeros_like(self.room)
        out = []
        for k in genome:
            if used[k] >= self.room[k]:
                k = int(np.argmax(self.room - used))
            used[k] += 1
            out.append(int(k))
        return tuple(sorted(out))

    def plan(self, genome: tuple[int, ...]) -> Plan:
        slots = [Slot(k, self.option) for k in self.order(genome)]
        return slots_plan(self.tables, slots, self.layers)


def _evolve(config: _Configuration, settings: GaSettings, rng: np.random.Generator
            ) -> tuple[Plan, int]:
    """The configuration's best plan and the number of plans scored."""
    instance = config.tables.instance
    scored: dict[tuple[int, ...], float] = {}

    def fitness(genomes: list[tuple[int, ...]]) -> np.ndarray:
        new = [g for g in dict.fromkeys(genomes) if g not in scored]
        if new:
            result = evaluate_plans(instance, [config.plan(g) for g in new])
            for g, t, ok in zip(new, result.step_time_s, result.admissible, strict=True):
                scored[g] = float(t) if ok else float("inf")
        return np.array([scored[g] for g in genomes])

    population = [config.repair(rng.choice(config.usable, config.stages))
                  for _ in range(settings.population)]
    values = fitness(population)
    for _ in range(settings.generations):
        elite = population[int(np.argmin(values))]
        children = [elite]
        while len(children) < settings.population:
            a, b = (min(rng.choice(len(population), 2), key=lambda i: values[i])
                    for _ in range(2))
            mask = rng.random(config.stages) < 0.5
            child = np.where(mask, population[a], population[b])
            if rng.random() < settings.mutation:
                child[rng.integers(config.stages)] = rng.choice(config.usable)
            children.append(config.repair(child))
        population, values = children, fitness(children)
    best = min(scored, key=lambda g: (scored[g], g))
    return config.plan(best), len(scored)


def dtfm(instance: Instance, settings: GaSettings = GaSettings()) -> Decisions:
    rng = np.random.default_rng(settings.seed)
    scored, attempts = 0, []
    for tables in all_pair_tables(instance):
        for option in range(tables.num_options):
            for stages in range(1, min(tables.positions, tables.layers) + 1):
                config = _Configuration(tables, option, stages)
                if not config.feasible_space():
                    continue
                plan, count = _evolve(config, settings, rng)
                scored += count
                attempts.append(plan)
    decisions = keep_feasible(instance, attempts, dataclasses.asdict(settings))
    decisions.candidates = scored
    return decisions

