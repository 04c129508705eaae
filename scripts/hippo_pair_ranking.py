"""How good is the upper level's pair ranking? At the budgets of every exact front point.

    python scripts/hippo_pair_ranking.py [--suite bench] [--checkpoint FILE] [--pairs 4]
                                         [--exhaust] [--seed 0]

For each point (T*, N*, C*) of the suite's committed exact fronts: the policy's PAIR
decision under budgets (GPUs N*, cost C*) ranks the pairs; the lower level (rl.lower, no
time limit) places the first k of them. Prints, for k = 1..--pairs and for every pair, the
share of points whose best placed plan is within 2 % of T* (coverage if the budget sweep
asked exactly the front's budgets), and the decision's latency at k = --pairs.

With ``--exhaust``, what the ranking is worth to the default search (rl.lower.search: the
first ``rl.decide``'s pairs placed, every further one unless proven slower, no time limit),
cold at each point: in the policy's order and in a random one (seeded), the share within
2 % of T*, the pairs placed and the search's time.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

from formulation.instance import Instance
from formulation.schema import SEED, CliParser, integer_arg, run_cli
from instances.suites import FRONTS_DIR, SUITES, SUITES_DIR
from rl.decision_settings import HIERARCHICAL
from rl.lower import forget, place, search
from rl.masks import COST_TOLERANCE, Budgets
from rl.scheduler import DEFAULT_CHECKPOINT, Scheduler
from solvers.front import Front

MAX_PAIRS = 1_000


def main(argv: list[str] | None = None) -> int:
    parser = CliParser(prog="python scripts/hippo_pair_ranking.py",
                       description=__doc__.splitlines()[0])
    parser.add_argument("--suite", choices=sorted(SUITES), default="bench",
                        help="the committed suite whose exact fronts' points are asked")
    parser.add_argument("--checkpoint", type=Path, default=DEFAULT_CHECKPOINT,
                        help="the Hi-PPO checkpoint whose ranking is measured")
    parser.add_argument("--pairs", type=integer_arg(1, MAX_PAIRS), default=4,
                        help=f"the first k = 1..PAIRS ranked pairs are placed (1..{MAX_PAIRS:,})")
    parser.add_argument("--exhaust", action="store_true",
                        help="measure the default search in the policy's and a random order")
    parser.add_argument("--seed", type=SEED, default=0,
                        help="one seed: of the random order (--exhaust)")
    args = parser.parse_args(argv)
    return run_cli(lambda: _rank(args))


def _rank(args: argparse.Namespace) -> None:
    if args.exhaust:
        exhaust(args)
        return
    scheduler = Scheduler(args.checkpoint)
    within = []  # per point: covered by the first k pairs, k = 1..pairs, then by all
    latencies = []
    for instance, budgets, step_time in points(args.suite):
        start = time.perf_counter()
        ranking = scheduler.ranked_pairs(instance, (1.0, 0.0, 0.0), budgets)
        cache, env_budgets = scheduler.env.cache, scheduler.env.budgets
        times = [place(cache.rules.pairs[i], env_budgets).step_time_s for i in ranking]
        best = np.minimum.accumulate(np.array(times))
        latencies.append(time.perf_counter() - start)
        row = [best[min(k, len(best)) - 1] <= step_time * 1.02
               for k in range(1, args.pairs + 1)]
        within.append(row + [best[-1] <= step_time * 1.02])
    share = 100 * np.mean(within, axis=0)
    for k in range(args.pairs):
        print(f"first {k + 1} pair(s): {share[k]:5.1f} % of {len(within)} points")
    print(f"every pair:       {share[-1]:5.1f} %")
    ms = 1e3 * np.asarray(latencies)
    print(f"policy episode + every pair placed: p50 {np.percentile(ms, 50):.0f} ms, "
          f"p99 {np.percentile(ms, 99):.0f} ms")


def points(suite: str):
    """(instance, budgets, T*) of every point of the suite's committed exact fronts."""
    for path in sorted((SUITES_DIR / suite).glob("*.json")):
        if path.name == "manifest.json":
            continue
        instance = Instance.load(path)
        front = Front.load(FRONTS_DIR / suite / f"{path.stem}.front.json", instance)
        for point in front.points:
            step_time, gpus, cost = point.objectives
            yield instance, Budgets(gpus=int(gpus), cost=cost * (1 + COST_TOLERANCE)), step_time


def exhaust(args: argparse.Namespace) -> None:
    scheduler = Scheduler(args.checkpoint)
    rng = np.random.default_rng(args.seed)
    rows: dict[str, list[tuple[bool, int, float]]] = {"policy": [], "random": []}
    for instance, budgets, step_time in points(args.suite):
        ranking = scheduler.ranked_pairs(instance, (1.0, 0.0, 0.0), budgets)
        cache, env_budgets = scheduler.env.cache, scheduler.env.budgets
        orders = {"policy": ranking, "random": list(rng.permutation(ranking))}
        for name, order in orders.items():
            forget()
            start = time.perf_counter()
            placed = search([cache.rules.pairs[i] for i in order], env_budgets,
                            HIERARCHICAL.pairs)
            seconds = time.perf_counter() - start
            best = min(p.step_time_s for p in placed)
            rows[name].append((best <= step_time * 1.02, len(placed), seconds))
    for name, values in rows.items():
        within, placed, seconds = (np.array(column) for column in zip(*values, strict=True))
        print(f"{name:6s} order: {100 * within.mean():5.1f} % of {len(within)} points within "
              f"2 %, pairs placed {placed.mean():.2f} (mean), search p50 "
              f"{1e3 * np.percentile(seconds, 50):.0f} ms, p99 "
              f"{1e3 * np.percentile(seconds, 99):.0f} ms, total {seconds.sum():.1f} s")


if __name__ == "__main__":
    sys.exit(main())
