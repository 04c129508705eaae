"""How good is the upper level's pair ranking? At the budgets of every exact front point.

    python scripts/hippo_pair_ranking.py [--suite bench] [--checkpoint FILE] [--pairs 4]

For each point (T*, N*, C*) of the suite's committed exact fronts: the policy's PAIR
decision under budgets (GPUs N*, cost C*) ranks the pairs; the lower level (rl.lower, no
time limit) places the first k of them. Prints, for k = 1..--pairs and for every pair, the
share of points whose best placed plan is within 2 % of T* (coverage if the budget sweep
asked exactly the front's budgets), and the decision's latency at k = --pairs.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from formulation.instance import Instance
from instances.suites import FRONTS_DIR, SUITES_DIR
from rl.decide import DEFAULT_CHECKPOINT, Scheduler
from rl.lower import place
from rl.masks import COST_TOLERANCE, Budgets
from solvers.front import Front


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", default="bench")
    parser.add_argument("--checkpoint", default=str(DEFAULT_CHECKPOINT))
    parser.add_argument("--pairs", type=int, default=4)
    args = parser.parse_args()
    scheduler = Scheduler(args.checkpoint)
    within = []  # per point: covered by the first k pairs, k = 1..pairs, then by all
    latencies = []
    for path in sorted((SUITES_DIR / args.suite).glob("*.json")):
        if path.name == "manifest.json":
            continue
        instance = Instance.load(path)
        front = Front.load(FRONTS_DIR / args.suite / f"{path.stem}.front.json", instance)
        for point in front.points:
            step_time, gpus, cost = point.objectives
            budgets = Budgets(gpus=int(gpus), cost=cost * (1 + COST_TOLERANCE))
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


if __name__ == "__main__":
    main()
