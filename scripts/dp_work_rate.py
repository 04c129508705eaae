"""The DP's work rate: units of work a second of a label-DP run (solvers.chain.WORK_PER_SECOND).

    python scripts/dp_work_rate.py [--suites bench full] [--points 2] [--cap 3e8]

Runs the Hi-PPO lower level (rl.lower.place, no time limit, cold per instance) on every
pair of each suite instance at the budgets of up to ``--points`` points of its committed
exact front, timing each DP run (solvers.label_kernels.label_dp; a run stops at ``--cap``
units of work, a few seconds, so that the script ends in minutes). Prints, per suite and
overall, the runs' work per second (total, and the 1st / 50th percentile of runs of at
least 10 ms) beside their labels per second, and the candidates a second of the dives
before feasibility runs (solvers.chain.PROBE_SPEED): a counted allowance (the online
re-plans') turns seconds into units of work at the rate the slowest runs reach. Also the
wall time of the placements per suite.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

import solvers.chain
from formulation.instance import Instance
from formulation.schema import CliParser, integer_arg, number_arg, run_cli
from instances.suites import FRONTS_DIR, SUITES, SUITES_DIR
from rl.lower import forget, place
from rl.masks import COST_TOLERANCE, Budgets
from solvers.front import Front
from solvers.tables import all_pair_tables

RUNS: list[tuple[float, int, int]] = []  # (seconds, work, labels) per DP run
PLACED: dict[str, float] = {}  # seconds of the placements (DP runs, dives, the rest), by suite
DIVES: list[tuple[float, int]] = []  # (seconds, candidates) per dive before a feasibility run
MAX_POINTS = 10_000
MAX_CAP = 1e12  # units of work of one DP run: hours at the measured rates
# label_dp's work budget, by position (its arguments end: work budget, deadline, feasibility)
WORK_BUDGET = -3


def _timed(kernel, cap: int):
    def run(*args):
        args = list(args)
        args[WORK_BUDGET] = min(args[WORK_BUDGET], cap)
        start = time.perf_counter()
        out = kernel(*args)
        RUNS.append((time.perf_counter() - start, int(out[3]), int(out[2])))
        return out
    return run


def main(argv: list[str] | None = None) -> int:
    parser = CliParser(prog="python scripts/dp_work_rate.py",
                       description=__doc__.splitlines()[0])
    parser.add_argument("--suites", nargs="+", choices=sorted(SUITES), default=["bench", "full"],
                        help="the committed suites whose instances are run")
    parser.add_argument("--points", type=integer_arg(1, MAX_POINTS), default=2,
                        help="front points per instance whose budgets are run at most "
                             f"(1..{MAX_POINTS:,})")
    parser.add_argument("--cap", type=number_arg(1, MAX_CAP), default=3e8,
                        help=f"units of work one DP run stops at (1..{MAX_CAP:g})")
    args = parser.parse_args(argv)
    return run_cli(lambda: _measure(args))


def _timed_dive(kernel):
    def run(*args):
        start = time.perf_counter()
        out = kernel(*args)
        DIVES.append((time.perf_counter() - start, int(out[1])))
        return out
    return run


def _measure(args: argparse.Namespace) -> None:
    kernel, dive = solvers.chain.label_dp, solvers.chain.probe
    solvers.chain.label_dp = _timed(kernel, int(args.cap))
    solvers.chain.probe = _timed_dive(dive)
    RUNS.clear()
    DIVES.clear()
    try:
        _rates(args)
    finally:  # the DP runs untimed again for whatever runs next in this process
        solvers.chain.label_dp, solvers.chain.probe = kernel, dive


def _rates(args: argparse.Namespace) -> None:
    rows = {}
    for suite in args.suites:
        first = len(RUNS)
        for path in sorted((SUITES_DIR / suite).glob("*.json")):
            if path.name == "manifest.json":
                continue
            instance = Instance.load(path)
            front = Front.load(FRONTS_DIR / suite / f"{path.stem}.front.json", instance)
            forget()
            start = time.perf_counter()
            pairs = all_pair_tables(instance)
            step = max(1, len(front.points) // args.points)
            for point in front.points[::step][:args.points]:
                _, gpus, cost = point.objectives
                budgets = Budgets(gpus=int(gpus), cost=cost * (1 + COST_TOLERANCE))
                for tables in pairs:
                    place(tables, budgets)
            PLACED[suite] = PLACED.get(suite, 0.0) + time.perf_counter() - start
            print(f"{suite}/{path.stem}: {len(RUNS) - first} runs", flush=True)
        rows[suite] = RUNS[first:]
    rows["all"] = RUNS
    for suite, seconds in PLACED.items():
        print(f"{suite}: the placements took {seconds:.1f} s in all")
    for name, runs in rows.items():
        if not runs:
            print(f"{name:6s} {0:6d} runs")
            continue
        seconds, work, labels = np.array(runs, dtype=float).T
        long = seconds >= 0.01
        rate = work[long] / seconds[long]
        if long.any():
            slow = (f"work/s p1 {np.percentile(rate, 1) / 1e6:.1f} M, "
                    f"p50 {np.percentile(rate, 50) / 1e6:.1f} M; labels/s p1 "
                    f"{np.percentile(labels[long] / seconds[long], 1) / 1e6:.2f} M, p50 "
                    f"{np.percentile(labels[long] / seconds[long], 50) / 1e6:.2f} M")
        else:
            slow = "none"
        print(f"{name:6s} {len(runs):6d} runs, {seconds.sum():7.1f} s: "
              f"{work.sum() / seconds.sum() / 1e6:6.1f} M work/s, "
              f"{labels.sum() / seconds.sum() / 1e6:5.2f} M labels/s; runs >= 10 ms "
              f"({long.sum()}): {slow}")
    if DIVES:  # what solvers.chain.PROBE_SPEED is set from
        seconds, work = np.array(DIVES, dtype=float).T
        long = seconds >= 0.001
        slow = (f"p1 {np.percentile(work[long] / seconds[long], 1) / 1e6:.0f} M, p50 "
                f"{np.percentile(work[long] / seconds[long], 50) / 1e6:.0f} M"
                if long.any() else "none")
        rate = work.sum() / seconds.sum() / 1e6
        print(f"dives  {len(DIVES):6d}, {seconds.sum():7.1f} s: {rate:6.1f} M candidates/s; "
              f"dives >= 1 ms ({long.sum()}): {slow}")


if __name__ == "__main__":
    sys.exit(main())
