"""Exact Pareto fronts: ``python -m solvers.exact``.

    python -m solvers.exact INSTANCE.json --out FRONT.json [--engine NAME] [--threads N]
        [--time-limit S] [--solve-limit S] [--gap G] [--seed-plans none|fast|baselines|nsga2]
        [--seed-front FRONT.json]
        [--units U] [--workers W | --scheduler ADDRESS] [--resume] [--export mps|lp]
    python -m solvers.exact --suite quick|bench|full --out DIR [...] [--workers N] [--match TEXT]
        [--skip-existing]

The epsilon-constraint sweep (:mod:`solvers.epsilon`) runs on the registered engine
(:data:`solvers.engine.ENGINES`) over the (dp, micro-batch) pairs and, where the search space
lists interleaving, its cells (:mod:`solvers.tables`); each claim an engine makes is certified
(:mod:`solvers.certify`) before it prunes a pair or closes a step. The sweep starts from the
plans of fast heuristics (``--seed-plans``: the baselines, only those that take seconds, or the
baselines and NSGA-II) and of an earlier front (``--seed-front``), which warm-start the
solves and refute false claims.

Scale-out: ``--units U`` cuts the sweep into U GPU intervals, balanced on the seeds' GPU
counts, that run independently in this process, in ``--workers`` local processes or on a
Dask cluster (``--scheduler``); their union is the front. ``--time-limit`` bounds the whole
run (the seeding stops at half of it, no step or floor starts after it; one that is running
finishes): what was found is written as a ``best_known`` front and the sweep's position beside it
(``FRONT.json.state``); ``--resume`` continues from there, and reaches the front an
uninterrupted run reaches.

A front is labelled ``exact`` only if every interval was swept and every step proven;
otherwise ``best_known``, each point carrying its certified bound and gap, and NSGA-II's and
the baselines' plans that no solver point matched joined in as ``heuristic`` points.
``--gap G`` lets each step stop once its bound is within G of its plan (for fronts that do
not finish exactly): the front is then ``best_known``, every point's gap at most G, and
every point of the exact front has one of this front within G of its step time with no
more GPUs and cost (:class:`solvers.epsilon.PairPool`).
``--export`` writes each (dp, micro-batch) model beside ``--out`` for use with other solvers.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import math
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from formulation.evaluator import evaluate_plans
from formulation.instance import Instance
from formulation.outputs import output_directory, output_path, write_atomic, write_json
from formulation.plan import Plan
from formulation.schema import (
    MAX_WORKERS,
    CliParser,
    InputError,
    integer_arg,
    number_arg,
    read_json,
    run_cli,
)
from solvers.bounds import pair_bounds
from solvers.certify import TOLERANCE, Certifier, KnownPlans
from solvers.engine import (
    ENGINES,
    NO_CAP,
    EngineStatistics,
    OutOfTime,
    Solve,
    SolveRequest,
    make_engine,
)
from solvers.epsilon import PairPool, SweepState, SweepStats, sweep
from solvers.exact_state import (
    check_resumable,
    engine_statistics,
    resumed_counters,
    state_document,
    state_path,
)
from solvers.front import Front, command_line, dominated_by, reference_box, versions
from solvers.parallel import map_tasks, worker_pool
from solvers.tables import all_pair_tables

SEED_KINDS = ("none", "fast", "baselines", "nsga2")
# The baselines that take seconds on any instance: Sailor-like takes 110 s on the K = 10
# full-space instance of issue 13 (measured), an eighth of its 15-minute budget.
FAST_SEED_METHODS = ("single-domain", "greedy")
# The label-setting DP proves K = 20 full-space solves that the MILP and CP-SAT do not
# (issue 13); its claims that fail their checks still go to CP-SAT.
DEFAULT_ENGINE = "labels"


@dataclass(frozen=True)
class ExactSettings:
    """How an exact front is computed (all of it lands in the front's provenance)."""

    engine: str = DEFAULT_ENGINE
    """A registered engine (:data:`solvers.engine.ENGINES`)."""
    threads: int = 2
    """Threads per engine (HiGHS threads, CP-SAT workers: at least 2)."""
    time_limit: float | None = None
    """Seconds for the whole run; past it the front is best known and resumable."""
    solve_limit: float | None = None
    """Seconds per solve; a solve stopped there leaves its step unproven (best known)."""
    seeds: str = "baselines"
    """Heuristic plans the sweep starts from: none, the fast baselines
    (:data:`FAST_SEED_METHODS`), all the seeding baselines, or those and NSGA-II."""
    units: int = 1
    """GPU intervals the sweep is cut into."""
    seed_front: str | None = None
    """A front JSON of the same instance whose plans join the seeds, so that a best-known
    front keeps every plan an earlier run found (its union with this run's)."""
    gap: float = 0.0
    """Relative optimality gap a step may stop at (0: exact). With ``gap > 0`` a step ends
    once its bound is within ``gap`` of its best plan: the front is ``best_known`` with
    every point's gap at most ``gap`` (where the sweep completes)."""

    def __post_init__(self):
        if self.engine not in ENGINES:
            raise InputError(f"--engine must be one of {sorted(ENGINES)}, got {self.engine!r}")
        if self.seeds not in SEED_KINDS:
            raise InputError(f"--seed-plans must be one of {list(SEED_KINDS)}, got {self.seeds!r}")
        if self.units < 1 or self.threads < 1:
            raise InputError("--units and --threads must be >= 1")
        for name in ("time_limit", "solve_limit"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise InputError(f"--{name.replace('_', '-')} must be > 0, got {value}")
        if not 0.0 <= self.gap < 1.0:
            raise InputError(f"--gap must be in [0, 1), got {self.gap}")


# -- the pieces of a sweep ----------------------------------------------------------------
def certifiers(instance: Instance, settings: ExactSettings) -> list[Certifier]:
    """One certifier per valid (dp, micro-batch) pair and interleaved cell: engine,
    confirmer, bounds, plans."""
    out = []
    for tables in all_pair_tables(instance, interleaved=True):
        out.append(Certifier(
            make_engine(settings.engine, tables, settings.threads),
            lambda name, tables=tables: make_engine(name, tables, settings.threads),
            pair_bounds(tables), KnownPlans()))
    return out


def cell_key(dp: int, micro_batch: int, virtual_stages: int, stages: int) -> tuple:
    """The pair or interleaved cell a plan belongs to (a pair holds every plain plan of its
    dp and micro-batch; a cell the interleaved ones with its v and S)."""
    return (dp, micro_batch, virtual_stages, stages if virtual_stages > 1 else 0)


def add_known(pool: PairPool, instance: Instance, plans: list[Plan]) -> None:
    """File the feasible ``plans`` under their pairs' known plans."""
    if not plans:
        return
    result = evaluate_plans(instance, plans)
    index = {cell_key(c.tables.dp, c.tables.micro_batch, c.tables.virtual_stages,
                      c.tables.positions): c for c in pool.certifiers}
    for plan, ok, row in zip(plans, result.admissible, result.objectives, strict=True):
        certifier = index.get(cell_key(plan.dp, plan.micro_batch, plan.virtual_stages,
                                       plan.num_stages))
        if ok and certifier is not None:
            certifier.known.add(plan, tuple(row))


def seed_plans(instance: Instance, kind: str, deadline: float | None = None) -> list[Plan]:
    """The plans of fast heuristics that a sweep starts from (``ExactSettings.seeds``);
    with ``deadline`` (``time.perf_counter()`` seconds), those found before it (NSGA-II,
    when asked for, runs whole if it starts before it)."""
    if kind == "none":
        return []
    from solvers.baselines import SEED_METHODS
    from solvers.baselines import seed_plans as baseline_seeds

    plans = baseline_seeds(instance, FAST_SEED_METHODS if kind == "fast" else SEED_METHODS,
                           deadline)
    if kind == "nsga2" and (deadline is None or time.perf_counter() < deadline):
        from solvers.nsga2 import nsga2_front

        plans += [p.plan for p in nsga2_front(instance).points]
    return list(dict.fromkeys(plans))


def front_plans(instance: Instance, path: str | None) -> list[Plan]:
    """The pipeline plans of the front at ``path`` (none without one; a DiLoCo plan is no
    seed), checked against ``instance``."""
    if path is None:
        return []
    front = Front.load(path, instance)
    if front.instance != instance.name:
        raise InputError(f"--seed-front {path!r} is a front of {front.instance!r}, "
                         f"not of {instance.name!r}")
    return [point.plan for point in front.points if isinstance(point.plan, Plan)]


def split_intervals(units: int, gpu_counts: list[int]) -> list[tuple[float, float]]:
    """``units`` GPU intervals (low, high] covering (0, inf), cut at quantiles of the GPU
    counts of the seeds' front so that each holds about as many front points."""
    counts = sorted(set(gpu_counts))
    if units <= 1 or len(counts) < 2:
        return [(0.0, NO_CAP)]
    cuts = sorted({counts[int(len(counts) * i / units)] for i in range(1, units)})
    bounds = [0.0, *[float(c) for c in cuts], NO_CAP]
    return list(zip(bounds[:-1], bounds[1:], strict=True))


# -- one unit: a GPU interval swept in one process ---------------------------------------------
def run_unit(task: dict) -> dict:
    """Sweep one interval (a JSON-able task, so that it travels to any worker) until it is
    done or the run's deadline (epoch seconds) passes; with ``verbose``, each step found is
    printed to standard error (where the worker's output goes)."""
    start = time.perf_counter()
    instance = Instance.from_dict(task["instance"])
    settings = ExactSettings(**task["settings"])
    deadline = task["deadline"]
    pool = PairPool(certifiers(instance, settings),
                    None if deadline is None else start + (deadline - time.time()),
                    settings.solve_limit, gap=settings.gap)
    add_known(pool, instance, [Plan.from_dict(p, instance) for p in task["seeds"]])
    state = SweepState.from_dict(task["state"], instance)
    pool.steps.extend(state.candidates)  # with a gap, a resumed sweep reuses them too
    low, high = state.low, state.high
    progress = (lambda line: print(f"  ({low:g}, {high:g}] {line}", file=sys.stderr,
                                   flush=True)) if task.get("verbose") else None
    with contextlib.suppress(OutOfTime):
        sweep(pool, state, progress)
    engines = EngineStatistics()
    for certifier in pool.certifiers:
        engines.merge(certifier.engine.statistics)
        for confirmer in certifier.confirmers.values():
            engines.merge(confirmer.statistics)
    return {"state": state.to_dict(instance), "stats": pool.stats.to_dict(),
            "engines": engines.to_dict(), "wall_time_s": time.perf_counter() - start}


# -- a whole front ---------------------------------------------------------------------------
def exact_front(instance: Instance, engine: str = DEFAULT_ENGINE, time_limit: float | None = None,
                threads: int = 2, progress: Callable[[str], None] | None = None,
                command: str | None = None, solve_limit: float | None = None, *,
                settings: ExactSettings | None = None, workers: int = 1,
                scheduler: str | None = None, resume: dict | None = None) -> Front:
    """The exact (or best known) front of ``instance``; ``resume`` is a state document a
    time-limited run left (:func:`solvers.exact_state.state_document`), which the front's
    provenance then carries on as ``state`` if the run stops short again."""
    settings = settings or ExactSettings(engine=engine, threads=threads, time_limit=time_limit,
                                         solve_limit=solve_limit)
    if instance.search.virtual_stages != (1,) and instance.constraints.wan_share_cap is not None:
        raise InputError(f"search.virtual_stages {list(instance.search.virtual_stages)} with "
                         f"constraints.wan_share_cap: the exact engines search interleaving "
                         f"only without a WAN share cap")
    start = time.perf_counter()
    # The time limit covers the whole run: seeding (at most half of it), the sweep and the
    # bounds of the front.
    deadline = None if settings.time_limit is None else time.time() + settings.time_limit
    ends = None if deadline is None else start + settings.time_limit  # perf_counter's
    seeding_ends = None if deadline is None else start + settings.time_limit / 2
    document = instance.to_dict()
    if resume is None:
        seeds = list(dict.fromkeys(seed_plans(instance, settings.seeds, seeding_ends)
                                   + front_plans(instance, settings.seed_front)))
        seed_front = Front.from_plans(instance, seeds, "heuristic")
        intervals = split_intervals(settings.units, [int(p.objectives[1])
                                                     for p in seed_front.points])
        states = [SweepState.start(low, high) for low, high in intervals]
        previous = {"wall_time_s": 0.0, "runs": 0, "stats": SweepStats(),
                    "engines": EngineStatistics()}
    else:
        check_resumable(resume, instance, settings.engine)
        try:  # the checksum only shows the file unchanged since a writer signed it
            seeds = [Plan.from_dict(p, instance) for p in resume["seeds"]]
            states = [SweepState.from_dict(s, instance) for s in resume["states"]]
            previous = resumed_counters(resume)
        except InputError as err:
            raise InputError(f"--resume: the state cannot be read ({err})") from None
        except (KeyError, TypeError, ValueError, AttributeError) as err:
            raise InputError(f"--resume: the state cannot be read ({type(err).__name__}: "
                             f"{err})") from None
    tasks = [{"instance": document, "settings": dataclasses.asdict(settings),
              "deadline": deadline, "seeds": [p.to_dict() for p in seeds],
              "state": state.to_dict(), "verbose": progress is not None}
             for state in states if not state.done]
    if progress:
        progress(f"{len(tasks)} of {len(states)} GPU intervals to sweep, {len(seeds)} seed plans")
    results = map_tasks(run_unit, tasks, workers, scheduler, on_done=(
        lambda i, r: progress(f"interval {i + 1}: {len(r['state']['candidates'])} candidates, "
                              f"{'done' if r['state']['done'] else 'stopped'}, "
                              f"{r['wall_time_s']:.1f} s")) if progress else None)
    finished = iter(results)
    states = [state if state.done else SweepState.from_dict(next(finished)["state"], instance)
              for state in states]
    stats, engines = previous["stats"], previous["engines"]
    for result in results:
        stats.merge(SweepStats(**result["stats"]))
        engines.merge(engine_statistics(result["engines"]))
    all_tables = all_pair_tables(instance, interleaved=True)
    floors = [pair_bounds(tables) for tables in all_tables]
    for bounds in floors:
        bounds.deadline = ends
    front = assemble(instance, states, seeds, stats,
                     lambda n, c: min((f.step_floor(n, c) for f in floors), default=math.inf),
                     ends)
    wall = previous["wall_time_s"] + time.perf_counter() - start
    front.provenance = {
        "command": command or f"solvers.exact.exact_front(engine={settings.engine!r})",
        "versions": versions(),
        "parameters": {**dataclasses.asdict(settings),
                       "workers": workers, "scheduler": scheduler,
                       "tolerance": TOLERANCE,
                       "pairs": [[t.dp, t.micro_batch] for t in all_tables
                                 if not t.interleaved],
                       **({"cells": [[t.dp, t.micro_batch, t.virtual_stages, t.positions]
                                     for t in all_tables if t.interleaved]}
                          if any(t.interleaved for t in all_tables) else {})},
        "wall_time_s": round(wall, 3), "runs": previous["runs"] + 1,
        "complete": all(s.done for s in states),
        "intervals": [[s.low, s.high, s.done] for s in states],
        "seed_plans": len(seeds), "steps": sum(len(s.candidates) for s in states),
        "unproven_steps": stats.unproven, "largest_gap": front.largest_gap,
        "sweep": stats.to_dict(), "engines": engines.to_dict(),
    }
    if not front.provenance["complete"]:
        front.provenance["state"] = state_document(instance, settings.engine, seeds, states,
                                                   stats, engines, wall,
                                                   previous["runs"] + 1)
    if front.points:
        front.normalisation = reference_box(front.objectives)
    return front


def assemble(instance: Instance, states: list[SweepState], seeds: list[Plan],
             stats: SweepStats, floor: Callable[[float, float], float] | None = None,
             deadline: float | None = None) -> Front:
    """The front of the sweeps' candidates: ``exact`` if every interval is done and every
    step proven; else ``best_known``, with the seeds no candidate matched as heuristic
    points, each bounded by the steps whose caps cover it and by ``floor(gpus, cost)``, a
    certified lower bound on the step time of every plan under those caps (until
    ``deadline``, ``time.perf_counter()`` seconds: a floor costs a DP)."""
    candidates = sorted((c for s in states for c in s.candidates), key=lambda c: not c.proven)
    exact = all(s.done for s in states) and stats.unproven == 0 \
        and all(c.proven for c in candidates)
    plans = [c.plan for c in candidates]
    proofs = [("optimal" if c.proven else "unproven", c.bound) for c in candidates]
    if not exact and seeds:
        result = evaluate_plans(instance, seeds)
        ok = result.admissible
        found = np.array([(c.values.step_time_s, c.values.gpus, c.values.comm_cost)
                          for c in candidates]).reshape(-1, 3)
        # Only seeds that can end up on the front are bounded (a floor costs a DP).
        kept = np.zeros(len(seeds), dtype=bool)
        kept[ok] = ~dominated_by(result.objectives[ok], np.vstack([found, result.objectives[ok]]))
        for plan, keep, (t, n, c) in zip(seeds, kept, result.objectives, strict=True):
            if keep:
                bounds = [x.bound for x in candidates if x.gpu_cap >= n and x.cost_cap >= c]
                if floor is not None and (deadline is None
                                          or time.perf_counter() < deadline):
                    with contextlib.suppress(OutOfTime):  # no time left for its DP
                        bounds.append(floor(n, c))
                plans.append(plan)
                proofs.append(("heuristic", min(t, max(bounds)) if bounds else None))
    front = Front.from_plans(instance, plans, "exact" if exact else "best_known",
                             proofs=proofs)
    if exact and seeds:
        result = evaluate_plans(instance, seeds)
        # a point that a seed beats by more than the tolerance was not optimal, unless
        # another certified point beats it as much (the front keeps points closer than
        # the tolerance: the step times of one 0.001-TFLOP/s GPU's plans differ by 5e-9)
        beaten = dominated_by(front.objectives, result.objectives[result.admissible],
                              rtol=TOLERANCE) \
            & ~dominated_by(front.objectives, front.objectives, rtol=TOLERANCE)
        if beaten.any():
            raise RuntimeError(f"{instance.name}: a seed plan dominates a certified point "
                               f"{front.objectives[np.flatnonzero(beaten)[0]].tolist()}")
    return front


# -- one weighted optimum ----------------------------------------------------------------------
def best_plan(instance: Instance, weights: tuple[float, float, float] = (1.0, 0.0, 0.0),
              gpu_cap: float | None = None, cost_cap: float | None = None,
              engine: str = DEFAULT_ENGINE, threads: int = 2) -> Solve | None:
    """The certified optimum over all (dp, micro-batch) pairs of ``w . (step_time_s, gpus,
    comm_cost)`` under optional caps; None if no plan satisfies the caps. Raises if a pair's
    optimum cannot be certified."""
    best: Solve | None = None
    settings = ExactSettings(engine=engine, threads=threads)
    request = SolveRequest(weights=tuple(float(w) for w in weights), gpu_cap=gpu_cap,
                           cost_cap=cost_cap)
    for certifier in certifiers(instance, settings):
        certified = certifier.solve(request)
        if not certified.proven:
            raise RuntimeError(f"pair dp={certifier.tables.dp} "
                               f"b={certifier.tables.micro_batch}: optimum not certified")
        solve = certified.solve
        if solve.values is not None and (best is None or solve.objective < best.objective):
            best = solve
    return best


def export_models(instance: Instance, out: Path, fmt: str,
                  inputs: Iterable[Path | str | None] = ()) -> list[Path]:
    """Write each (dp, micro-batch) MILP as MPS or LP beside ``out`` (every path checked
    first: none is one of ``inputs`` or something other than a regular file)."""
    from solvers.milp import build_model, stage_cells

    # a pair no stage fits has no plan and no model
    pairs = [t for t in all_pair_tables(instance, interleaved=True) if stage_cells(t)]
    paths = [output_path(out.with_name(f"{out.stem}-dp{t.dp}-b{t.micro_batch}"
                                       + (f"-v{t.virtual_stages}-s{t.positions}"
                                          if t.interleaved else "") + f".{fmt}"),
                         inputs, flag="--export", stdout=False) for t in pairs]
    for tables, path in zip(pairs, paths, strict=True):
        model = build_model(tables)
        write_atomic(path, lambda p, model=model: model.write(
            str(p), format=fmt, io_options={"symbolic_solver_labels": True}))
    return paths


# -- command line --------------------------------------------------------------------------------
def _run_one(path: Path, out: Path, args: argparse.Namespace, command: str,
             workers: int) -> None:
    """One instance's front into ``out``, its units on ``workers`` local processes."""
    instance = Instance.load(path)
    seed_front = args.seed_front
    if seed_front is not None and args.suite is not None:  # a directory of fronts
        seed_front = seed_front / f"{path.stem}.front.json"
        seed_front = seed_front if seed_front.exists() else None
    settings = ExactSettings(engine=args.engine, threads=args.threads,
                             time_limit=args.time_limit, solve_limit=args.solve_limit,
                             seeds=args.seeds, units=args.units or workers,
                             gap=args.gap,
                             seed_front=None if seed_front is None else str(seed_front))
    resume = None
    if args.resume:
        if not state_path(out).exists():
            raise InputError(f"--resume: no state file {str(state_path(out))!r} (a run that "
                             f"stops at --time-limit leaves one)")
        resume = read_json(state_path(out), "state")
    if args.export:
        for written in export_models(instance, out, args.export, [path, seed_front]):
            print(f"wrote {written}")
    front = exact_front(instance, settings=settings, command=command, workers=workers,
                        scheduler=args.scheduler, resume=resume,
                        progress=(lambda line: print("  " + line, file=sys.stderr))
                        if args.verbose else None)
    state = front.provenance.pop("state", None)
    front.save(out, instance)
    if state is not None:
        write_json(state_path(out), state)
    else:
        state_path(out).unlink(missing_ok=True)
    p = front.provenance
    gap = "" if p["largest_gap"] is None else f", largest gap {p['largest_gap']:.2e}"
    if args.quiet:
        return
    print(f"{instance.name}: {len(front.points)} points, {front.status}{gap}, "
          f"{p['sweep']['solves']} solves, {p['wall_time_s']:.1f} s -> {out}"
          + ("" if state is None else " (stopped at the time limit; --resume continues)"))


def main(argv: list[str] | None = None) -> int:
    parser = CliParser(prog="python -m solvers.exact",
                       description="Exact Pareto front of an instance.")
    parser.add_argument("instance", nargs="?", type=Path, help="instance JSON")
    parser.add_argument("--suite", help="compute the reference fronts of a committed suite "
                        "(quick, bench or full) instead")
    parser.add_argument("--out", type=str, required=True,
                        help="front JSON (one instance) or directory (--suite)")
    parser.add_argument("--engine", default=DEFAULT_ENGINE, help=f"one of {sorted(ENGINES)}")
    parser.add_argument("--time-limit", type=number_arg(0, low_open=True), default=None,
                        help="seconds for the whole run (seeding at most half of it); past "
                             "it the front is best_known and --resume continues it")
    parser.add_argument("--solve-limit", type=number_arg(0, low_open=True), default=None,
                        help="seconds per solve; a sweep continues from incumbents (best_known)")
    parser.add_argument("--gap", type=number_arg(0.0, 0.999), default=0.0,
                        help="relative gap at which a step stops (default 0: exact); the "
                             "front is then best_known with every point's gap <= GAP")
    parser.add_argument("--threads", type=integer_arg(1, 256), default=2,
                        help="HiGHS threads and CP-SAT workers per engine (CP-SAT: >= 2)")
    parser.add_argument("--seed-plans", dest="seeds", default="baselines",
                        help=f"the plans that seed the sweep: one of {list(SEED_KINDS)}")
    parser.add_argument("--seed-front", type=Path, default=None,
                        help="a front JSON whose plans join the seeds (with --suite: a "
                             "directory of INSTANCE.front.json)")
    parser.add_argument("--units", type=integer_arg(1, 100_000), default=None,
                        help="GPU intervals the sweep is cut into (default: --workers; with "
                             "--suite, 1)")
    parser.add_argument("--workers", type=integer_arg(1, MAX_WORKERS), default=1,
                        help="local worker processes: for the units of one instance; with "
                             "--suite, for the fronts, largest K first (default 1)")
    parser.add_argument("--scheduler", default=None,
                        help="run the units on this Dask scheduler instead")
    parser.add_argument("--resume", action="store_true",
                        help="continue the run that left OUT.state")
    parser.add_argument("--export", choices=["mps", "lp"], help="also write the models")
    parser.add_argument("--match", action="append", default=[],
                        help="with --suite: only instances whose name contains this (repeatable)")
    parser.add_argument("--skip-existing", action="store_true",
                        help="with --suite: keep fronts already in --out")
    parser.add_argument("--quiet", action="store_true", help="no report line")
    parser.add_argument("--verbose", action="store_true",
                        help="print each point found (on stderr)")
    args = parser.parse_args(argv)
    if (args.instance is None) == (args.suite is None):
        parser.error("give either INSTANCE or --suite")
    if args.suite is None and (args.match or args.skip_existing):
        parser.error("--match and --skip-existing go with --suite")
    return run_cli(lambda: _run(args))


def _run(args: argparse.Namespace) -> None:
    command = command_line("solvers.exact")
    if args.instance is not None:
        inputs = [args.instance, args.seed_front]
        out = output_path(args.out, inputs=inputs, stdout=False)
        # the state file beside it is the run's own: --resume reads it and writes it anew
        output_path(state_path(out), inputs=inputs, flag="--out (its .state)", stdout=False)
        try:
            _run_one(args.instance, out, args, command, args.workers)
        except ConnectionError as err:
            raise InputError(str(err)) from None
        return
    from instances.suites import SUITES, SUITES_DIR, suite_paths

    if args.suite not in SUITES:
        raise InputError(f"--suite must be one of {list(SUITES)}, got {args.suite!r}")
    # the directory of the fronts, never the suite's own (or one holding it)
    args.out = output_directory(args.out, inputs=[SUITES_DIR / args.suite], into=True)
    todo = []
    matched = False
    for path in suite_paths(args.suite):
        out = args.out / f"{path.stem}.front.json"
        if args.match and not any(m in path.stem for m in args.match):
            continue
        matched = True
        if args.skip_existing and out.exists() and not state_path(out).exists():
            continue
        todo.append((path, out))
    if not matched:
        raise InputError(f"--match {' '.join(args.match)}: no instance of suite "
                         f"{args.suite!r} matches")
    args.out.mkdir(exist_ok=True)  # a directory output: made, its parent must exist
    if args.workers == 1:
        for path, out in todo:
            _run_one(path, out, args, command, 1)
        return
    # The largest instances first, so that the last front to finish is a small one.
    todo.sort(key=lambda job: -Instance.load(job[0]).num_domains)
    with worker_pool(args.workers) as pool:  # HiGHS and CP-SAT state stays per process
        for future in [pool.submit(_run_one, path, out, args, command, 1)
                       for path, out in todo]:
            future.result()


if __name__ == "__main__":
    sys.exit(main())
