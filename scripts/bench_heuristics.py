"""Heuristics and baselines against the exact reference fronts: quality and wall time.

    python scripts/bench_heuristics.py [--suite quick|bench] [--seeds 3] [--generations 100]
                                       [--population 100] [--mutation structure|reset|...]
                                       [--descent 100] [--islands 1]
                                       [--methods nsga2,single-domain,...]
                                       [--match TEXT]

Per instance and method: front points, wall time, coverage at 2 % (the share of reference
points that a point of the method reaches within 2 % on every objective; NSGA-II: mean over
seeds), hypervolume ratio to the reference front (NSGA-II: mean and worst over seeds), IGD+,
additive epsilon, the median and worst step-time gap at no more GPUs and cost, and how many
reference points the method dominates (0 for every method in the plan space; DiLoCo changes
the optimiser and may). Then the mean per method. Reference fronts labelled ``best_known``
are flagged with ``*``.
"""

import argparse
import sys
import time
from collections import defaultdict

import numpy as np

from evaluation.metrics import (
    ReferenceSet,
    coverage,
    epsilon_additive,
    hypervolume_ratio,
    igd_plus,
    step_time_gaps,
)
from formulation.instance import Instance
from formulation.schema import CliParser, InputError, integer_arg, run_cli
from instances.suites import reference_front_path, suite_paths
from solvers.baselines import METHODS, baseline_front
from solvers.front import Front, dominated_by
from solvers.nsga2 import MUTATIONS, Nsga2Settings, nsga2_front

COVERAGE_EPS = 0.02
MAX_SEEDS = 10_000


def main(argv: list[str] | None = None) -> int:
    parser = CliParser(prog="python scripts/bench_heuristics.py",
                       description=__doc__.splitlines()[0])
    parser.add_argument("--suite", default="quick", choices=["quick", "bench"],
                        help="the committed suite whose reference fronts are compared to")
    parser.add_argument("--seeds", type=integer_arg(1, MAX_SEEDS), default=3,
                        help="a COUNT, not a seed: NSGA-II runs with seeds 0..N-1 "
                             f"(1..{MAX_SEEDS:,})")
    parser.add_argument("--generations", type=integer_arg(1, 1_000_000),
                        default=Nsga2Settings.generations, help="NSGA-II generations")
    parser.add_argument("--population", type=integer_arg(2, 100_000),
                        default=Nsga2Settings.population, help="NSGA-II population")
    parser.add_argument("--mutation", choices=MUTATIONS, default=Nsga2Settings.mutation,
                        help="NSGA-II mutation operator")
    parser.add_argument("--descent", type=integer_arg(0, 100_000),
                        default=Nsga2Settings.descent,
                        help="plans NSGA-II's final Pareto descent expands (0: none)")
    parser.add_argument("--islands", type=integer_arg(1, 64), default=Nsga2Settings.islands,
                        help="NSGA-II searches per run, one process each")
    parser.add_argument("--methods", default=",".join(["nsga2", *METHODS]),
                        help=f"comma-separated methods, of {', '.join(['nsga2', *METHODS])}")
    parser.add_argument("--match", action="append", default=[],
                        help="only instances whose name contains this (repeatable)")
    args = parser.parse_args(argv)
    return run_cli(lambda: _bench(args))


def _methods(text: str) -> list[str]:
    known = ["nsga2", *METHODS]
    methods = text.split(",")
    for name in methods:
        if name not in known:
            raise InputError(f"--methods: unknown method {name!r}; known: {', '.join(known)}")
    return methods


def _bench(args: argparse.Namespace) -> None:
    methods = _methods(args.methods)
    paths = [path for path in suite_paths(args.suite)
             if not args.match or any(m in path.stem for m in args.match)]
    if not paths:
        raise InputError(f"--match: no instance of suite {args.suite!r} matches {args.match}")
    summary: dict[str, list[tuple[float, float, float, int]]] = defaultdict(list)
    print(f"{'instance':32} {'method':13} {'pts':>4} {'wall s':>7} {'cov 2%':>6} "
          f"{'HV ratio':>13} "
          f"{'IGD+':>6} {'eps+':>6} {'gap med':>8} {'gap max':>8} {'dom':>4}")
    for path in paths:
        instance = Instance.load(path)
        reference = Front.load(reference_front_path(path), instance)
        name = path.stem + ("*" if reference.status != "exact" else "")
        reference_set = ReferenceSet.of_front(reference)
        for method in methods:
            runs = []
            for seed in range(args.seeds if method == "nsga2" else 1):
                start = time.perf_counter()
                if method == "nsga2":
                    settings = Nsga2Settings(population=args.population,
                                             generations=args.generations,
                                             seed=seed * args.islands,
                                             mutation=args.mutation, descent=args.descent,
                                             islands=args.islands)
                    front = nsga2_front(instance, settings, reference.normalisation)
                else:
                    front = baseline_front(instance, method)
                runs.append((front, time.perf_counter() - start))
            ratios = [hypervolume_ratio(f.objectives, reference_set) for f, _ in runs]
            covered = float(np.mean([coverage(f.objectives, reference_set, COVERAGE_EPS)
                                     for f, _ in runs]))
            wall = float(np.mean([w for _, w in runs]))
            front = runs[0][0]
            gaps = step_time_gaps(front.objectives, reference_set)
            gaps = gaps[np.isfinite(gaps)]
            dominated = int(dominated_by(reference.objectives, front.objectives).sum()
                            if front.points else 0)
            ratio = (f"{np.mean(ratios):6.3f} ({min(ratios):.3f})" if len(ratios) > 1
                     else f"{ratios[0]:13.3f}")
            print(f"{name:32} {method:13} {len(front.points):4} {wall:7.2f} {covered:6.3f} "
                  f"{ratio:>13} "
                  f"{igd_plus(front.objectives, reference_set):6.3f} "
                  f"{epsilon_additive(front.objectives, reference_set):6.3f} "
                  f"{_percent(gaps, np.median):>8} {_percent(gaps, np.max):>8} "
                  f"{dominated:4}", flush=True)
            summary[method].append((float(np.mean(ratios)), wall, covered,
                                    len(reference.points)))
    print("\nmean over instances:")
    for method, rows in summary.items():
        values = np.array(rows)
        points = values[:, 3]
        print(f"  {method:13} coverage at 2 % {values[:, 2].mean():.3f} per instance (worst "
              f"{values[:, 2].min():.3f}), {(values[:, 2] * points).sum() / points.sum():.3f} "
              f"of all {int(points.sum())} points; HV ratio {values[:, 0].mean():.3f} (worst "
              f"{values[:, 0].min():.3f}); wall {values[:, 1].mean():.2f} s (most "
              f"{values[:, 1].max():.2f} s)")


def _percent(values: np.ndarray, reduce) -> str:
    return f"{100 * reduce(values):7.1f}%" if len(values) else "-"


if __name__ == "__main__":
    sys.exit(main())
