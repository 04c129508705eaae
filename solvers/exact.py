"""Exact Pareto fronts: ``python -m solvers.exact``.

    python -m solvers.exact INSTANCE.json --out FRONT.json [--engine highs|cpsat]
                            [--time-limit S] [--threads N] [--export mps|lp]
    python -m solvers.exact --suite quick|bench --out DIR [--engine ...] [--time-limit S]
                            [--solve-limit S] [--jobs N] [--match TEXT] [--skip-existing]

A front is labelled ``exact`` only if the epsilon-constraint enumeration completed and no
solve stopped at a limit; otherwise it is ``best_known``, with the per-point MIP gaps. Every
returned plan was re-evaluated by the evaluator during the run (``solvers.epsilon``).
``--export`` writes each (dp, micro-batch) model beside ``--out`` for use with other solvers.
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from formulation.instance import Instance
from formulation.schema import CliParser, InputError, run_cli
from solvers.engine import Solve
from solvers.epsilon import check_values, epsilon_front
from solvers.front import Front, command_line, reference_box, versions
from solvers.tables import all_pair_tables

ENGINES = ("highs", "cpsat", "portfolio")


def make_engine(name: str, tables, threads: int):
    if name == "highs":
        from solvers.highs import HighsEngine

        return HighsEngine(tables, threads=threads)
    if name == "cpsat":
        from solvers.cpsat import CpSatEngine

        return CpSatEngine(tables, workers=threads)
    if name == "portfolio":
        from solvers.portfolio import PortfolioEngine

        return PortfolioEngine(tables, threads=threads)
    raise InputError(f"--engine must be one of {list(ENGINES)}, got {name!r}")


def best_plan(instance: Instance, weights: tuple[float, float, float] = (1.0, 0.0, 0.0),
              gpu_cap: float | None = None, cost_cap: float | None = None,
              engine: str = "highs", threads: int = 1) -> Solve | None:
    """The optimum over all (dp, micro-batch) pairs of ``w . (step_time_s, gpus, comm_cost)``
    under optional caps: min step time by default, any weighted scalarisation otherwise.
    None if no plan satisfies the caps. The returned values were checked against the
    evaluator."""
    best: Solve | None = None
    best_value = float("inf")
    for tables in all_pair_tables(instance):
        result = make_engine(engine, tables, threads).solve(weights, gpu_cap, cost_cap)
        if result.values is None:
            continue
        check_values(tables, result)
        v = result.values
        value = weights[0] * v.step_time_s + weights[1] * v.gpus + weights[2] * v.comm_cost
        if value < best_value:
            best, best_value = result, value
    return best


def normalisation(front: Front) -> dict:
    """Ideal, nadir and hypervolume reference point of a front, fixed once with it."""
    return reference_box(front.objectives)


def exact_front(instance: Instance, engine: str = "highs", time_limit: float | None = None,
                threads: int = 1, progress: Callable[[str], None] | None = None,
                command: str | None = None, solve_limit: float | None = None) -> Front:
    start = time.perf_counter()
    engines = [make_engine(engine, tables, threads) for tables in all_pair_tables(instance)]
    candidates, stats = epsilon_front(engines, progress, time_limit, solve_limit)
    exact = stats.complete and stats.limited == 0
    plans = [c.solve.plan for c in candidates]
    gaps = [c.solve.gap for c in candidates]
    front = Front.from_plans(instance, plans, "exact" if exact else "best_known", gaps=gaps)
    front.provenance = {
        "command": command or f"solvers.exact.exact_front(engine={engine!r})",
        "versions": versions(),
        "parameters": {"engine": engine, "time_limit_s": time_limit,
                       "solve_limit_s": solve_limit, "threads": threads,
                       "pairs": [[e.tables.dp, e.tables.micro_batch] for e in engines]},
        "wall_time_s": round(time.perf_counter() - start, 3),
        "solves": stats.solves, "reused_solves": stats.reused,
        "handed_to_highs": sum(getattr(e, "handed_over", 0) for e in engines),
        "solve_time_s": round(stats.solve_time_s, 3),
        "limited_solves": stats.limited, "complete": stats.complete,
        "mip_gaps": [p.mip_gap for p in front.points],
    }
    if front.points:
        front.normalisation = normalisation(front)
    return front


def export_models(instance: Instance, out: Path, fmt: str) -> list[Path]:
    """Write each (dp, micro-batch) MILP as MPS or LP beside ``out``."""
    from solvers.milp import build_model

    paths = []
    for tables in all_pair_tables(instance):
        path = out.with_name(f"{out.stem}-dp{tables.dp}-b{tables.micro_batch}.{fmt}")
        build_model(tables).write(str(path), format=fmt, io_options={"symbolic_solver_labels":
                                                                    True})
        paths.append(path)
    return paths


def _run_one(path: Path, out: Path, args: argparse.Namespace, command: str) -> None:
    instance = Instance.load(path)
    if args.export:
        for written in export_models(instance, out, args.export):
            print(f"wrote {written}")
    front = exact_front(instance, args.engine, args.time_limit, args.threads,
                        progress=(lambda line: print("  " + line, file=sys.stderr))
                        if args.verbose else None,
                        command=command, solve_limit=args.solve_limit)
    front.save(out, instance)
    print(f"{instance.name}: {len(front.points)} points, {front.status}, "
          f"{front.provenance['solves']} solves, {front.provenance['wall_time_s']:.1f} s "
          f"-> {out}")


def main(argv: list[str] | None = None) -> int:
    parser = CliParser(prog="python -m solvers.exact",
                       description="Exact Pareto front of an instance.")
    parser.add_argument("instance", nargs="?", type=Path, help="instance JSON")
    parser.add_argument("--suite", choices=["quick", "bench"],
                        help="compute the reference fronts of a committed suite instead")
    parser.add_argument("--out", type=Path, required=True,
                        help="front JSON (one instance) or directory (--suite)")
    parser.add_argument("--engine", choices=ENGINES, default="highs")
    parser.add_argument("--time-limit", type=float, default=None,
                        help="seconds for the whole front; past it the front is best_known")
    parser.add_argument("--solve-limit", type=float, default=None,
                        help="seconds per solve; a sweep continues from incumbents (best_known)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--export", choices=["mps", "lp"], help="also write the models")
    parser.add_argument("--match", action="append", default=[],
                        help="with --suite: only instances whose name contains this (repeatable)")
    parser.add_argument("--skip-existing", action="store_true",
                        help="with --suite: keep fronts already in --out")
    parser.add_argument("--jobs", type=int, default=1,
                        help="with --suite: fronts computed in parallel processes, largest K first")
    parser.add_argument("--verbose", action="store_true", help="print each point found")
    args = parser.parse_args(argv)
    if (args.instance is None) == (args.suite is None):
        parser.error("give either INSTANCE or --suite")
    return run_cli(lambda: _run(args))


def _run(args: argparse.Namespace) -> None:
    command = command_line("solvers.exact")
    if args.instance is not None:
        _run_one(args.instance, args.out, args, command)
        return
    from instances.suites import suite_paths

    if args.jobs < 1:
        raise InputError(f"--jobs must be >= 1, got {args.jobs}")
    todo = []
    for path in suite_paths(args.suite):
        out = args.out / f"{path.stem}.front.json"
        if args.match and not any(m in path.stem for m in args.match):
            continue
        if args.skip_existing and out.exists():
            continue
        todo.append((path, out))
    if args.jobs == 1:
        for path, out in todo:
            _run_one(path, out, args, command)
        return
    # The largest instances first, so that the last front to finish is a small one.
    todo.sort(key=lambda job: -Instance.load(job[0]).num_domains)
    context = multiprocessing.get_context("spawn")  # HiGHS and CP-SAT state stays per process
    with ProcessPoolExecutor(args.jobs, mp_context=context) as pool:
        for future in [pool.submit(_run_one, path, out, args, command) for path, out in todo]:
            future.result()


if __name__ == "__main__":
    sys.exit(main())
