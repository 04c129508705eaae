"""Heuristic Pareto fronts by NSGA-II (pymoo): ``python -m solvers.nsga2``.

    python -m solvers.nsga2 INSTANCE.json --out FRONT.json [--seed S] [--generations N]
                            [--population N] [--mutation structure|reset|polynomial]
                            [--descent N] [--seed-plans baselines|none] [--islands N]
                            [--verbose]

The genome is :class:`~solvers.encoding.PlanEncoding` (pair, stage count, and per stage a
domain, a layer share, tp and recompute); the population is scored in one call of the
batched evaluator; constraint violation is the number of violated constraint kinds plus the
relative memory and GPU overshoot, so infeasible plans are ranked by how far they are from
feasible. An unbounded archive keeps the feasible non-dominated plans among all that were
scored. Where it stands as ground truth (the exact sweep does not finish), the search is
made structure-aware (:mod:`solvers.moves`):

- the first population holds the fast baselines' plans (``seeds``), the rest is random;
- every child is repaired (:meth:`PlanEncoding.repair`, written back into its genes) and
  scored with its layers polished over cut shifts;
- ``structure`` mutation gives a share of the children one or two structural moves (a relay
  stage, a domain relabel, dp and tp regrouped, ...) and resets genes of the others;
- survival ranks and crowds within each (dp, micro-batch) pair with equal quotas
  (``niching``), so that no pair's pipelines die out early: the exact fronts mix pairs;
- a Pareto descent over the structure neighbourhood and the domain remaps (``descent``
  expansions) finishes the archive;
- ``islands`` independent searches run on as many processes, and the descent starts from
  the union of their archives.

The result is the archive (``status: heuristic``), with the seed, the parameters and the
hypervolume after each generation and after the descent in its provenance. The
hypervolume is taken in the normalisation of the instance's committed reference front where
there is one (so it compares with the exact front), else against a reference point fixed
from the first generation. The same seed gives the same front.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from pymoo.algorithms.moo.nsga2 import NSGA2
from pymoo.core.callback import Callback
from pymoo.core.mutation import Mutation
from pymoo.core.population import Population
from pymoo.core.problem import Problem
from pymoo.core.repair import Repair
from pymoo.core.survival import Survival
from pymoo.operators.mutation.pm import PM
from pymoo.operators.survival.rank_and_crowding import RankAndCrowding
from pymoo.optimize import minimize

from formulation.evaluator import VIOLATIONS, cost_model, evaluate_batch
from formulation.instance import Instance
from formulation.outputs import output_path, report_stream
from formulation.plan import Plan
from formulation.schema import SEED, CliParser, integer_arg, read_json, run_cli
from solvers.encoding import PlanEncoding
from solvers.front import (
    Front,
    command_line,
    nondominated_mask,
    normalised_hypervolume,
    reference_box,
    versions,
)
from solvers.moves import descend, polish_layers, random_move
from solvers.parallel import map_tasks

MUTATIONS = ("structure", "reset", "polynomial")
SEEDS = ("baselines", "none")


@dataclass(frozen=True)
class Nsga2Settings:
    """NSGA-II parameters (pymoo's SBX crossover, binary tournament, rank and crowding
    survival; random-reset or polynomial mutation)."""

    population: int = 100
    """Individuals per generation."""
    generations: int = 100
    """Generations, the initial population included."""
    seed: int = 0
    """Seed of pymoo's random state; the same seed gives the same front."""
    mutation: str = "structure"
    """``structure``: a share ``move_rate`` of the children get one or two random
    structural moves (:func:`solvers.moves.random_move`), the others reset mutation;
    ``reset``: each gene is reset to a uniform random value with probability
    ``reset_genes / n_var``; ``polynomial``: pymoo's polynomial mutation. Most genes are
    categorical, which small polynomial steps rarely change."""
    reset_genes: float = 2.0
    """Mean number of genes per child that reset mutation redraws."""
    move_rate: float = 0.5
    """Share of the children that structure mutation moves instead of resetting genes."""
    niching: bool = True
    """Survival by rank and crowding within each (dp, micro-batch) pair, equal quotas."""
    polish: bool = True
    """Score each child with its layers polished over cut shifts (:mod:`solvers.moves`);
    the archive keeps the polished plan, the child its genes (Baldwinian: re-encoding the
    polish into the genes made pymoo's duplicate elimination re-mate ~6 times a generation,
    each with a polish)."""
    seeds: str = "baselines"
    """``baselines``: the first population holds the plans of the fast baselines
    (:data:`solvers.baselines.SEED_METHODS`); ``none``: it is random."""
    descent: int = 100
    """Plans the final Pareto descent expands (0: none)."""
    near: float = 0.05
    """The descent also expands plans within this relative step time of the archive."""
    islands: int = 1
    """Independent genetic searches (seeds ``seed``, ``seed + 1``, ...), one per process;
    the descent starts from the union of their archives (on bench, issue 13, two islands
    are what lifted the coverage of the exact points above 95 %; see the README)."""


class PlanProblem(Problem):
    """Minimise (step_time_s, gpus, comm_cost) over genomes, one constraint (violation).
    Keeps an archive of the feasible non-dominated genomes among all it has scored (with
    ``polish``: the genomes of the polished plans, which are what is scored)."""

    def __init__(self, encoding: PlanEncoding, polish: bool = False):
        super().__init__(n_var=encoding.num_genes, n_obj=3, n_ieq_constr=1, xl=0.0,
                         xu=np.nextafter(1.0, 0.0))
        self.encoding = encoding
        self.polish = polish
        instance = encoding.instance
        self.usable_memory = cost_model(instance).usable_memory
        self.free = instance.free_gpus.astype(float)
        self.evaluations = 0
        self.archive_objectives = np.zeros((0, 3))
        self.archive_genes = np.zeros((0, encoding.num_genes))

    def _evaluate(self, genes, out, *args, **kwargs):
        batch = self.encoding.decode(genes)
        if self.polish:
            batch = polish_layers(self.encoding.instance, batch)
        result = evaluate_batch(self.encoding.instance, batch)
        self.evaluations += len(batch)
        memory = np.maximum(result.stage_memory_bytes.max(axis=1) / self.usable_memory - 1, 0)
        gpus = np.maximum(result.domain_gpus / np.maximum(self.free, 1) - 1, 0).max(axis=1)
        out["F"] = result.objectives
        out["G"] = (result.violation.sum(axis=1) + memory + gpus)[:, None]
        feasible = np.flatnonzero(result.admissible)
        objectives = np.concatenate([self.archive_objectives, result.objectives[feasible]])
        keep = nondominated_mask(objectives)
        old = len(self.archive_objectives)
        entering = feasible[keep[old:]]
        # With the polish the archive keeps the plans that were scored, encoded only for
        # those that enter it.
        new = np.array([self.encoding.encode(batch.plan(i)) for i in entering]).reshape(
            -1, self.encoding.num_genes) if self.polish else np.asarray(genes)[entering]
        self.archive_objectives = objectives[keep]
        self.archive_genes = np.concatenate([self.archive_genes[keep[:old]], new])


class ResetMutation(Mutation):
    """Each gene is reset to a uniform random value with probability ``genes / n_var``."""

    def __init__(self, genes: float):
        super().__init__()
        self.genes = genes

    def _do(self, problem, X, random_state=None, **kwargs):
        out = np.array(X, dtype=float, copy=True)
        reset = random_state.random(out.shape) < self.genes / out.shape[1]
        out[reset] = random_state.random(int(reset.sum())) * problem.xu[0]
        return out


class PlanRepair(Repair):
    """Repair each decoded plan; genes of changed plans are rewritten (Lamarckian)."""

    def _do(self, problem, X, **kwargs):
        encoding: PlanEncoding = problem.encoding
        batch = encoding.decode(X)
        out = np.array(X, dtype=float, copy=True)
        for i in range(len(batch)):
            plan = batch.plan(i)
            repaired = encoding.repair(plan)
            if repaired != plan:
                out[i] = encoding.encode(repaired)
        return out


class StructureMutation(Mutation):
    """A share ``move_rate`` of the children get one or two random structural moves; the
    genes of the others are reset with probability ``genes / n_var`` each."""

    def __init__(self, move_rate: float, genes: float):
        super().__init__()
        self.move_rate = move_rate
        self.reset = ResetMutation(genes)

    def _do(self, problem, X, random_state=None, **kwargs):
        encoding: PlanEncoding = problem.encoding
        out = self.reset._do(problem, X, random_state=random_state)
        moved = np.flatnonzero(random_state.random(len(out)) < self.move_rate)
        if len(moved):
            out[moved] = X[moved]
            batch = encoding.decode(X[moved])
            for row, i in enumerate(moved):
                plan = batch.plan(row)
                for _ in range(1 + int(random_state.integers(2))):
                    plan = random_move(encoding, plan, random_state)
                if 1 <= plan.num_stages <= encoding.max_stages:
                    out[i] = encoding.encode(plan)
        return out


class PairNiching(Survival):
    """Rank-and-crowding survival within each (dp, micro-batch) pair, with quotas as equal
    as the pairs' sizes allow."""

    def __init__(self):
        super().__init__(filter_infeasible=True)
        self.inner = RankAndCrowding()

    def _do(self, problem, pop, *args, random_state=None, n_survive=None, **kwargs):
        pair = problem.encoding.pair_indices(pop.get("X"))
        groups = [np.flatnonzero(pair == p) for p in np.unique(pair)]
        quota, left = [0] * len(groups), n_survive
        while left > 0:  # water-filling: equal shares, a small group's rest to the others
            open_groups = [g for g in range(len(groups)) if quota[g] < len(groups[g])]
            if not open_groups:
                break
            share = max(left // len(open_groups), 1)
            for g in open_groups:
                add = min(share, len(groups[g]) - quota[g], left)
                quota[g] += add
                left -= add
        parts = [self.inner._do(problem, pop[members], random_state=random_state, n_survive=q)
                 for members, q in zip(groups, quota, strict=True) if q > 0]
        return functools.reduce(Population.merge, parts)


class HypervolumeLog(Callback):
    """The hypervolume of the problem's archive after each generation."""

    def __init__(self, normalisation: dict | None, verbose: bool = False,
                 start: float | None = None):
        super().__init__()
        self.normalisation = normalisation
        self.hypervolume: list[float] = []
        self.elapsed_s: list[float] = []  # since ``start`` (default: now), per generation
        self.verbose = verbose
        self._start = time.perf_counter() if start is None else start

    def notify(self, algorithm):
        archive = algorithm.problem.archive_objectives
        if self.normalisation is None and len(archive):
            self.normalisation = reference_box(archive)
        self.hypervolume.append(normalised_hypervolume(archive, self.normalisation))
        self.elapsed_s.append(time.perf_counter() - self._start)
        if self.verbose:
            print(f"  generation {algorithm.n_gen}: {len(archive)} archived, "
                  f"hypervolume {self.hypervolume[-1]:.4f}", file=sys.stderr)


@dataclass
class GeneticRun:
    """One island's genetic search: its archive and its hypervolume log."""

    plans: list[Plan]
    evaluations: int
    wall_time_s: float
    hypervolume: list[float]
    elapsed_s: list[float]
    normalisation: dict | None


def genetic_search(task: tuple[Instance, Nsga2Settings, dict | None, bool]) -> GeneticRun:
    """NSGA-II with ``settings.seed`` (no descent); picklable, for a process pool."""
    instance, settings, normalisation, verbose = task
    start = time.perf_counter()
    encoding = PlanEncoding(instance)
    problem = PlanProblem(encoding, settings.polish)
    log = HypervolumeLog(normalisation, verbose, start)
    mutation = {"structure": lambda: StructureMutation(settings.move_rate, settings.reset_genes),
                "reset": lambda: ResetMutation(settings.reset_genes),
                "polynomial": PM}[settings.mutation]()
    algorithm = NSGA2(pop_size=settings.population, sampling=first_population(
        encoding, settings), repair=PlanRepair(), mutation=mutation,
        eliminate_duplicates=True, **({"survival": PairNiching()} if settings.niching else {}))
    minimize(problem, algorithm, ("n_gen", settings.generations), seed=settings.seed,
             callback=log, verbose=False, copy_algorithm=False)
    plans = encoding.decode(problem.archive_genes).to_plans() if len(problem.archive_genes) \
        else []
    return GeneticRun(plans, problem.evaluations, time.perf_counter() - start, log.hypervolume,
                      log.elapsed_s, log.normalisation)


def nsga2_front(instance: Instance, settings: Nsga2Settings = Nsga2Settings(),
                normalisation: dict | None = None, verbose: bool = False,
                command: str | None = None) -> Front:
    """The NSGA-II front of an instance (module doc)."""
    start = time.perf_counter()
    if settings.mutation not in MUTATIONS:
        raise ValueError(f"mutation must be one of {MUTATIONS}, got {settings.mutation!r}")
    if settings.seeds not in SEEDS:
        raise ValueError(f"seeds must be one of {SEEDS}, got {settings.seeds!r}")
    if settings.islands < 1:
        raise ValueError(f"islands must be >= 1, got {settings.islands}")
    runs: list[GeneticRun] = map_tasks(genetic_search, [
        (instance, dataclasses.replace(settings, seed=settings.seed + i), normalisation, verbose)
        for i in range(settings.islands)], workers=settings.islands)
    plans = list(dict.fromkeys(p for run in runs for p in run.plans))
    evaluations = sum(run.evaluations for run in runs)
    ga_wall = time.perf_counter() - start
    descent = None
    if settings.descent and plans:
        plans, _, descent = descend(PlanEncoding(instance), plans, settings.descent,
                                    settings.near)
        evaluations += descent.evaluations
    front = Front.from_plans(instance, plans, "heuristic")
    first = runs[0]
    front.provenance = {
        "command": command or "solvers.nsga2.nsga2_front()", "method": "nsga2",
        "versions": versions(), "parameters": asdict(settings),
        "wall_time_s": round(time.perf_counter() - start, 3),
        "genetic_wall_time_s": round(ga_wall, 3),
        "island_wall_time_s": [round(run.wall_time_s, 3) for run in runs],
        "evaluations": evaluations,
        # the first island's (seed ``seed``); with one island, the whole search's
        "hypervolume_per_generation": [round(v, 6) for v in first.hypervolume],
        "elapsed_s_per_generation": [round(v, 4) for v in first.elapsed_s],
        "hypervolume_after_descent": round(normalised_hypervolume(
            front.objectives, first.normalisation), 6) if front.points else 0.0,
        "descent": asdict(descent) if descent is not None else None,
        "hypervolume_normalisation": ("reference front" if normalisation is not None
                                      else "first feasible generation"),
        "violation_kinds": list(VIOLATIONS),
    }
    return front


def first_population(encoding: PlanEncoding, settings: Nsga2Settings) -> np.ndarray:
    """Genes of the first population: the seed plans (at most half of it) and uniform
    random genes drawn from the settings' seed."""
    seeds: list[Plan] = []
    if settings.seeds == "baselines":
        from solvers.baselines import seed_plans

        seeds = [p for p in seed_plans(encoding.instance) if encoding.covers(p)]
        seeds = seeds[:settings.population // 2]
    rng = np.random.default_rng(settings.seed)
    random = rng.random((settings.population - len(seeds), encoding.num_genes))
    random = np.minimum(random, np.nextafter(1.0, 0.0))
    return np.vstack([*(encoding.encode(p)[None] for p in seeds), random])


def committed_normalisation(instance_path: Path) -> dict | None:
    """The normalisation of the committed reference front of a suite instance, if any."""
    from instances.suites import SUITES_DIR, reference_front_path

    try:
        instance_path.resolve().relative_to(SUITES_DIR.resolve())
    except ValueError:
        return None
    front = reference_front_path(instance_path.resolve())
    if not front.exists():
        return None
    return read_json(front, "front").get("normalisation")


def main(argv: list[str] | None = None) -> int:
    parser = CliParser(prog="python -m solvers.nsga2",
                       description="Heuristic Pareto front of an instance by NSGA-II.")
    parser.add_argument("instance", type=Path, help="instance JSON")
    parser.add_argument("--out", type=str, required=True, help="front JSON to write")
    parser.add_argument("--quiet", action="store_true", help="no report line")
    parser.add_argument("--seed", type=SEED, default=Nsga2Settings.seed,
                        help="one seed of the search, 0 to 2^32 - 1 (default %(default)s); "
                             "island i runs with seed + i")
    parser.add_argument("--generations", type=integer_arg(1, 1_000_000),
                        default=Nsga2Settings.generations,
                        help="generations of each island (default %(default)s)")
    parser.add_argument("--population", type=integer_arg(2, 100_000),
                        default=Nsga2Settings.population,
                        help="population of each island (default %(default)s)")
    parser.add_argument("--mutation", choices=MUTATIONS, default=Nsga2Settings.mutation,
                        help="mutation operator (default %(default)s)")
    parser.add_argument("--descent", type=integer_arg(0, 100_000),
                        default=Nsga2Settings.descent,
                        help="plans the final Pareto descent expands (0: none)")
    parser.add_argument("--seed-plans", dest="seeds", choices=SEEDS, default=Nsga2Settings.seeds,
                        help="the first population's seed plans")
    parser.add_argument("--islands", type=integer_arg(1, 64), default=Nsga2Settings.islands,
                        help="independent searches, each in a worker process of its own "
                             "(seeds S, S+1, ...)")
    parser.add_argument("--verbose", action="store_true", help="hypervolume per generation")
    args = parser.parse_args(argv)
    return run_cli(lambda: _run(args))


def _run(args: argparse.Namespace) -> None:
    args.out = output_path(args.out, inputs=[args.instance])
    instance = Instance.load(args.instance)
    settings = Nsga2Settings(population=args.population, generations=args.generations,
                             seed=args.seed, mutation=args.mutation, descent=args.descent,
                             seeds=args.seeds, islands=args.islands)
    front = nsga2_front(instance, settings, committed_normalisation(args.instance),
                        args.verbose, command_line("solvers.nsga2"))
    front.save(args.out, instance)
    hv = front.provenance["hypervolume_after_descent"]
    print(f"{instance.name}: {len(front.points)} points, hypervolume {hv:.4f} "
          f"({front.provenance['evaluations']} evaluations, "
          f"{front.provenance['wall_time_s']:.1f} s) -> {args.out}",
          file=report_stream(args.out, args.quiet))


if __name__ == "__main__":
    sys.exit(main())
