"""Exact-solver speed: model size and solve times per K, with and without each strengthening.

    python scripts/bench_exact.py [--suite bench] [--k 10 ...] [--time-limit 60]
                                  [--engines highs,cpsat] [--pair largest|smallest]
    python scripts/bench_exact.py --fronts instances/fronts/bench
    python scripts/bench_exact.py --scaleout INSTANCE.json [--units 4] [--time-limit S]
    python scripts/bench_exact.py --symmetry

The first form takes the first instance of each K in the suite, the tables of its largest
(or smallest) (dp, micro-batch) pair, and times one min-step-time solve per engine in four
variants: ``plain`` (the model alone), ``floors`` (the capacity-DP period and step-time
floors of :mod:`solvers.bounds` as cuts), ``start`` (a warm start from the best baseline
plan of the pair, the way the sweep seeds it) and ``both``. It prints the model's size
(HiGHS columns and rows, CP-SAT variables and constraints), the status, the time, the step
time found and the gap. The second form prints, for committed fronts, points, status,
solves, wall time and the largest per-point gap. The third computes one front cut into
``--units`` GPU intervals three ways, in this process and on a Dask ``LocalCluster`` of 1 and
of 2 single-threaded worker processes, and prints each wall time, the speed-up of 2 workers
over 1, and whether the fronts agree. The fourth counts, per committed suite, the pairs of
interchangeable domains (equal free GPUs, intra-domain network and links to every other
domain): symmetry breaking among identical domains can only pay where there are some.
"""

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import pyomo.environ as pyo

from formulation.evaluator import evaluate_plans
from formulation.instance import MAX_DOMAINS, Instance
from formulation.schema import (
    CliParser,
    InputError,
    integer_arg,
    number_arg,
    read_json,
    run_cli,
)
from instances.suites import SUITES, suite_paths
from solvers.bounds import PairBounds
from solvers.engine import SolveRequest, make_engine
from solvers.exact import seed_plans
from solvers.front import Front
from solvers.tables import all_pair_tables

VARIANTS = ("plain", "floors", "start", "both")
# the engines whose model model_size() can count: a Pyomo MILP on HiGHS, a CP-SAT model
SIZED_ENGINES = ("highs", "highs-nopresolve", "cpsat", "cpsat-nopresolve")
MAX_TIME_LIMIT = 1e6  # seconds (11.6 days)
MAX_UNITS = 100_000


def model_size(engine) -> str:
    if engine.name.startswith("highs"):
        model = engine.model
        rows = sum(1 for _ in model.component_data_objects(pyo.Constraint, active=True))
        return f"{model.nvariables():>6} {rows:>6}"
    proto = engine.scale_for(SolveRequest()).model.proto
    return f"{len(proto.variables):>6} {len(proto.constraints):>6}"


def solve_table(suite: str, time_limit: float, engines: list[str], pair: str,
                ks: set[int] | None) -> None:
    seen = set()
    chosen = []  # the first instance of each K asked for, every one read before any solve
    for path in suite_paths(suite):
        instance = Instance.load(path)
        if instance.num_domains in seen or (ks and instance.num_domains not in ks):
            continue
        seen.add(instance.num_domains)
        chosen.append(instance)
    if not chosen:
        raise InputError(f"--k: suite {suite!r} has no instance of K in {sorted(ks or ())}")
    print(f"{'K':>3} {'instance':34} {'pair':>5} {'engine':>6} {'vars':>6} {'cons':>6} "
          f"{'variant':>7} {'status':>10} {'solve s':>8} {'step s':>10} {'gap':>9}")
    for instance in chosen:
        pairs = sorted(all_pair_tables(instance), key=lambda t: (t.dp, t.micro_batch))
        tables = pairs[-1] if pair == "largest" else pairs[0]
        bounds = PairBounds(tables)
        own = [p for p in seed_plans(instance, "baselines")
               if (p.dp, p.micro_batch) == (tables.dp, tables.micro_batch)]
        start_plan = None
        if own:
            result = evaluate_plans(instance, own)
            feasible = [(t, p) for t, ok, p in zip(result.step_time_s, result.admissible, own,
                                                     strict=True) if ok]
            start_plan = min(feasible, key=lambda x: x[0])[1] if feasible else None
        for name in engines:
            engine = make_engine(name, tables, 2)
            size = model_size(engine)
            for variant in VARIANTS:
                floors = variant in ("floors", "both")
                request = SolveRequest(
                    time_limit=time_limit,
                    hint=start_plan if variant in ("start", "both") else None,
                    period_floor=bounds.period_floor() if floors else None,
                    step_floor=bounds.step_floor() if floors else None)
                began = time.perf_counter()
                result = engine.solve(request)
                wall = time.perf_counter() - began
                step = f"{result.values.step_time_s:10.3f}" if result.values else f"{'-':>10}"
                gap = f"{result.gap:9.2e}" if result.gap is not None else f"{'-':>9}"
                print(f"{instance.num_domains:>3} {instance.name:34} "
                      f"{tables.dp:>2}/{tables.micro_batch:<2} {name:>6} {size} {variant:>7} "
                      f"{result.status.value:>10} {wall:8.2f} {step} {gap}", flush=True)


def provenance_figure(path: Path, front: Front, *keys: str, default=None) -> float:
    """A number of the front's provenance (``keys``: its path); a front without it is bad
    input, named by file and field (None: ``default``)."""
    value = front.provenance
    for key in keys:
        if not isinstance(value, dict) or key not in value:
            if default is not None:
                return default
            raise InputError(f"front {str(path)!r}: provenance.{'.'.join(keys)} is missing")
        value = value[key]
    if isinstance(value, bool) or not isinstance(value, int | float) or not np.isfinite(value):
        raise InputError(f"front {str(path)!r}: provenance.{'.'.join(keys)} must be a "
                         "finite number")
    return value


def front_table(directory: Path) -> None:
    """One row per committed front, ordered by K: size, status, solves, wall time, worst gap."""
    instances = {path.stem: path for suite in SUITES for path in suite_paths(suite)}
    rows = []
    for path in sorted(directory.glob("*.front.json")):
        document = read_json(path, "front")
        name = document.get("instance") if isinstance(document, dict) else None
        if not isinstance(name, str) or name not in instances:  # its plans name its domains
            raise InputError(f"front {str(path)!r}: instance {name!r} is not an instance of "
                             "the committed suites")
        instance = Instance.load(instances[name])
        front = Front.load(path, instance)
        figures = [provenance_figure(path, front, *keys, default=default) for keys, default in
                   ((("steps",), 0), (("sweep", "solves"), None), (("unproven_steps",), None),
                    (("wall_time_s",), None))]
        rows.append((instance.num_domains, front.instance, front, figures))
    if not rows:
        raise InputError(f"--fronts {str(directory)!r} holds no *.front.json")
    print(f"{'K':>3} {'front':34} {'points':>6} {'status':>10} {'steps':>5} {'solves':>6} "
          f"{'unproven':>8} {'wall s':>8} {'s/point':>8} {'med gap':>9} {'max gap':>9}")
    for k, name, front, figures in sorted(rows, key=lambda row: (row[0], row[1])):
        steps, solves, unproven, wall = figures
        points = len(front.points)
        gaps = [p.gap for p in front.points if p.gap is not None]
        median, largest = (f"{np.median(gaps):9.2e}", f"{max(gaps):9.2e}") if gaps \
            else (f"{'-':>9}", f"{'-':>9}")
        print(f"{k:>3} {name:34} {points:>6} {front.status:>10} "
              f"{steps:>5} {solves:>6} "
              f"{unproven:>8} {wall:8.1f} "
              f"{wall / max(1, points):8.1f} {median} {largest}")


def scaleout_table(path: Path, units: int, time_limit: float | None) -> None:
    from distributed import LocalCluster

    from solvers.exact import ExactSettings, exact_front
    from solvers.front import fronts_agree

    instance = Instance.load(path)
    settings = ExactSettings(units=units, threads=1, time_limit=time_limit)
    fronts, times = {}, {}
    for label, workers in (("in-process", 0), ("dask 1 worker", 1), ("dask 2 workers", 2)):
        began = time.perf_counter()
        if workers == 0:
            fronts[label] = exact_front(instance, settings=settings)
        else:
            with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                              dashboard_address=None) as cluster:
                fronts[label] = exact_front(instance, settings=settings,
                                            scheduler=cluster.scheduler_address)
        times[label] = time.perf_counter() - began
        front = fronts[label]
        print(f"{label:16} {times[label]:8.1f} s  {len(front.points):4} points  {front.status}",
              flush=True)
    base = fronts["in-process"]
    print(f"speed-up of 2 Dask workers over 1: "
          f"{times['dask 1 worker'] / times['dask 2 workers']:.2f}x; fronts agree: "
          f"{all(fronts_agree(f, base) for f in fronts.values())}")


def interchangeable(instance: Instance) -> list[tuple[int, int]]:
    """Pairs of domains that swapping leaves the instance unchanged (but for names)."""
    links = instance.links
    matrices = (links.bandwidth_gbps, links.latency_ms, links.price_per_gb)
    pairs = []
    for a in range(instance.num_domains):
        for b in range(a + 1, instance.num_domains):
            da, db = instance.domains[a], instance.domains[b]
            if (da.free_gpus, da.intra_bandwidth_gbps, da.intra_latency_ms) != \
                    (db.free_gpus, db.intra_bandwidth_gbps, db.intra_latency_ms):
                continue
            order = list(range(instance.num_domains))
            order[a], order[b] = b, a
            if all(np.array_equal(m, m[np.ix_(order, order)]) for m in matrices):
                pairs.append((a, b))
    return pairs


def symmetry_table() -> None:
    print(f"{'suite':>6} {'instances':>9} {'with a pair':>11} {'pairs':>6}")
    for suite in SUITES:
        counts = [len(interchangeable(Instance.load(path))) for path in suite_paths(suite)]
        print(f"{suite:>6} {len(counts):>9} {sum(c > 0 for c in counts):>11} {sum(counts):>6}")


def main(argv: list[str] | None = None) -> int:
    parser = CliParser(prog="python scripts/bench_exact.py",
                       description=__doc__.splitlines()[0])
    parser.add_argument("--suite", choices=sorted(SUITES), default="bench",
                        help="the committed suite the first form times")
    parser.add_argument("--time-limit", type=number_arg(0, MAX_TIME_LIMIT, low_open=True),
                        default=None,
                        help="seconds per solve (default 60), or for the whole --scaleout front")
    parser.add_argument("--engines", default="highs,cpsat",
                        help=f"comma-separated engines, of {', '.join(SIZED_ENGINES)}")
    parser.add_argument("--fronts", type=Path,
                        help="a directory of fronts: print the cost of each (*.front.json)")
    parser.add_argument("--pair", choices=["largest", "smallest"], default="largest",
                        help="which (dp, micro-batch) pair to time (smallest: dp 1, b 1)")
    parser.add_argument("--k", type=integer_arg(1, MAX_DOMAINS), action="append",
                        help="only these K (repeatable)")
    parser.add_argument("--scaleout", type=Path, metavar="INSTANCE",
                        help="an instance JSON: time one front on 1 and 2 Dask workers")
    parser.add_argument("--units", type=integer_arg(1, MAX_UNITS), default=4,
                        help="with --scaleout: GPU intervals")
    parser.add_argument("--symmetry", action="store_true",
                        help="count interchangeable domains in the committed suites")
    args = parser.parse_args(argv)
    return run_cli(lambda: _bench(args))


def _engines(text: str) -> list[str]:
    engines = text.split(",")
    for name in engines:
        if name not in SIZED_ENGINES:
            raise InputError(f"--engines: {name!r} is not an engine whose model this script "
                             f"sizes; choose from {', '.join(SIZED_ENGINES)}")
    return engines


def _bench(args: argparse.Namespace) -> None:
    if args.symmetry:
        symmetry_table()
    elif args.scaleout:
        scaleout_table(args.scaleout, args.units, args.time_limit)
    elif args.fronts:
        if not args.fronts.is_dir():
            raise InputError(f"--fronts {str(args.fronts)!r}: no such directory")
        front_table(args.fronts)
    else:
        solve_table(args.suite, args.time_limit or 60.0, _engines(args.engines), args.pair,
                    set(args.k) if args.k else None)


if __name__ == "__main__":
    sys.exit(main())
