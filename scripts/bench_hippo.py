"""Hi-PPO decision latencies: cold start, after a bandwidth or load change, warm, a front.

    python scripts/bench_hippo.py [--checkpoint FILE] [--domains 20] [--model 70b]
                                  [--instance-seeds 1 2 3] [--repeats 50] [--seed 0] [--pairs N]
                                  [--lower-time S]

On generated instances (the generator's full search space, one per topology and seed):

- cold start: what the agent builds for an instance state it has not seen (the pairs'
  tables, the single-domain plans, the reward bases, the masks' rules), alone;
- cold decision: the first decision on that state (cold start included);
- after a bandwidth change: every WAN link's bandwidth scaled within +-30 % (the lower
  level places the stages by the new delays: its DP runs start cold);
- after a load change: every domain's free GPUs moved within +-20 %;
- warm, same request: a decision the state has answered before (the same preference and
  budgets);
- warm, new budget: the same state, a random GPU budget (mostly one not asked before);
- a front: ``Scheduler.front`` (the budget sweep), its wall time and decisions.

Decisions draw a random GPU budget half of the time (the sweep's kind of decision), and
hand the lower level ``--pairs`` pairs within ``--lower-time`` seconds (defaults:
``rl.decide``'s). One instance of another seed is decided first, untimed, as a running
scheduler would have (imports, first calls). Prints p50 / p99 / max in milliseconds per
kind.
"""

from __future__ import annotations

import argparse
import contextlib
import time

import numpy as np

from formulation.schema import SEED
from instances.generate import generate_instance
from rl.decide import DEFAULT_CHECKPOINT, HIERARCHICAL, DecisionSettings, Scheduler
from rl.env import InstanceCache, InstanceStatics, NoPlanWithinBudget
from rl.masks import Budgets
from rl.tasks import BudgetRange, perturb

TOPOLOGIES = ("random", "cn-hubs", "aws-10")


def percentiles(values: list[float]) -> str:
    ms = 1e3 * np.asarray(values)
    return (f"p50 {np.percentile(ms, 50):7.1f}  p99 {np.percentile(ms, 99):7.1f}  "
            f"max {ms.max():7.1f} ms  (n = {len(ms)})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", default=str(DEFAULT_CHECKPOINT))
    parser.add_argument("--domains", type=int, default=20)
    parser.add_argument("--model", default="70b")
    parser.add_argument("--instance-seeds", dest="seeds", type=int, nargs="+",
                        default=[1, 2, 3], help="generator seeds of the instances")
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--seed", type=SEED, default=0)
    parser.add_argument("--pairs", type=int, default=HIERARCHICAL.pairs)
    parser.add_argument("--lower-time", type=float, default=HIERARCHICAL.lower_time)
    args = parser.parse_args()
    settings = DecisionSettings(pairs=args.pairs, lower_time=args.lower_time)
    rng = np.random.default_rng(args.seed)
    scheduler = Scheduler(args.checkpoint)
    times: dict[str, list[float]] = {key: [] for key in (
        "cold start", "cold decision", "bandwidth change", "load change",
        "warm, same request", "warm, new budget", "front")}
    decisions = []
    warm_up = generate_instance(min(args.domains, 10), args.model, 800_000, "random")
    scheduler.front(warm_up, settings=settings)
    for seed in args.seeds:
        for topology in TOPOLOGIES:
            domains = min(args.domains, 10) if topology == "aws-10" else args.domains
            instance = generate_instance(domains, args.model, 900_000 + seed, topology)
            start = time.perf_counter()
            InstanceCache(instance, InstanceStatics.of(instance))
            times["cold start"].append(time.perf_counter() - start)
            limits = BudgetRange.of(instance)

            def timed(state, kind: str, budgets: Budgets | None = None,
                      limits: BudgetRange = limits) -> Budgets:
                if budgets is None:
                    budgets = Budgets() if rng.random() < 0.5 else Budgets(gpus=int(
                        rng.integers(limits.least_gpus, limits.free_gpus + 1)))
                start = time.perf_counter()
                with contextlib.suppress(NoPlanWithinBudget):
                    scheduler.plans(state, (1.0, 0.0, 0.0), budgets, settings)
                times[kind].append(time.perf_counter() - start)
                return budgets

            scheduler.env.caches.clear()
            asked = [timed(instance, "cold decision")]
            for _ in range(args.repeats):
                asked.append(timed(instance, "warm, new budget", Budgets(gpus=int(
                    rng.integers(limits.least_gpus, limits.free_gpus + 1)))))
            for _ in range(args.repeats):
                timed(instance, "warm, same request", asked[int(rng.integers(len(asked)))])
            for _ in range(args.repeats):
                timed(perturb(instance, rng, 0.3), "bandwidth change")
            free = np.array([d.free_gpus for d in instance.domains])
            for _ in range(max(1, args.repeats // 5)):
                moved = np.rint(free * rng.uniform(0.8, 1.2, size=len(free))).astype(int)
                timed(instance.with_link_state(free_gpus=moved), "load change")
            start = time.perf_counter()
            front = scheduler.front(instance, settings=settings)
            times["front"].append(time.perf_counter() - start)
            decisions.append(front.provenance["decisions"])
            print(f"{instance.name}: front of {len(front.points)} points, "
                  f"{front.provenance['decisions']} decisions, "
                  f"{times['front'][-1]:.2f} s", flush=True)
    for kind, values in times.items():
        print(f"{kind:19s} {percentiles(values)}")
    print(f"decisions per front: median {int(np.median(decisions))}, max {max(decisions)}")


if __name__ == "__main__":
    main()
