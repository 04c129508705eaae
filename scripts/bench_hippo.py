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
- a front: ``Scheduler.front`` (the budget sweep), its wall time and decisions;
- from the front: after it, requests of a random preference and GPU budget (a cost budget
  half of the time) on the same state, which the scheduler reads off the front it built
  (:mod:`rl.front_book`); and the "new budget" requests asked again, read off the front:
  their step times against those the decisions before the front found.

Decisions draw a random GPU budget half of the time (the sweep's kind of decision), and
hand the lower level ``--pairs`` pairs within ``--lower-time`` seconds (defaults:
``rl.decide``'s). One instance of another seed is decided first, untimed, as a running
scheduler would have (imports, first calls). Prints p50 / p99 / max in milliseconds per
kind.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from pathlib import Path

import numpy as np

from formulation.evaluator import evaluate_plans
from formulation.presets import model_preset
from formulation.schema import (
    SEED,
    SEED_MAX,
    CliParser,
    InputError,
    integer_arg,
    number_arg,
    run_cli,
)
from instances.generate import MAX_DOMAINS, MIN_DOMAINS, generate_instance
from rl.decide import DEFAULT_CHECKPOINT, HIERARCHICAL, DecisionSettings, Scheduler
from rl.env import InstanceCache, InstanceStatics, NoPlanWithinBudget
from rl.masks import Budgets
from rl.tasks import BudgetRange, perturb

TOPOLOGIES = ("random", "cn-hubs", "aws-10")
INSTANCE_SEED_BASE = 900_000  # instance seed S is generator seed 900,000 + S
MAX_REPEATS = 100_000
MAX_PAIRS = 10_000
MAX_LOWER_TIME = 3600.0


def percentiles(values: list[float]) -> str:
    ms = 1e3 * np.asarray(values)
    return (f"p50 {np.percentile(ms, 50):7.1f}  p99 {np.percentile(ms, 99):7.1f}  "
            f"max {ms.max():7.1f} ms  (n = {len(ms)})")


def main(argv: list[str] | None = None) -> int:
    parser = CliParser(prog="python scripts/bench_hippo.py",
                       description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", type=Path, default=DEFAULT_CHECKPOINT,
                        help="the Hi-PPO checkpoint to decide with")
    parser.add_argument("--domains", type=integer_arg(MIN_DOMAINS, MAX_DOMAINS), default=20,
                        help="domains K of the generated instances (aws-10: at most 10)")
    parser.add_argument("--model", default="70b", help="model preset of the instances")
    parser.add_argument("--instance-seeds", dest="seeds", nargs="+",
                        type=integer_arg(0, SEED_MAX - INSTANCE_SEED_BASE), default=[1, 2, 3],
                        help="generator seeds of the instances (one instance per topology "
                             "and seed)")
    parser.add_argument("--repeats", type=integer_arg(1, MAX_REPEATS), default=50,
                        help="timed decisions per kind and instance")
    parser.add_argument("--seed", type=SEED, default=0,
                        help="one seed: of the budgets and perturbations drawn")
    parser.add_argument("--pairs", type=integer_arg(0, MAX_PAIRS), default=HIERARCHICAL.pairs,
                        help="pairs the lower level places (0: the policy builds every stage)")
    parser.add_argument("--lower-time", type=number_arg(0, MAX_LOWER_TIME, low_open=True),
                        default=HIERARCHICAL.lower_time,
                        help="seconds from a decision's start until which the lower level "
                        "may run")
    args = parser.parse_args(argv)
    return run_cli(lambda: _bench(args))


def _bench(args: argparse.Namespace) -> None:
    try:
        model_preset(args.model)
    except KeyError as err:
        raise InputError(f"--model: {err.args[0]}") from None
    settings = DecisionSettings(pairs=args.pairs, lower_time=args.lower_time)
    rng = np.random.default_rng(args.seed)
    scheduler = Scheduler(args.checkpoint)
    times: dict[str, list[float]] = {key: [] for key in (
        "cold start", "cold decision", "bandwidth change", "load change",
        "warm, same request", "warm, new budget", "front", "from the front")}
    decisions = []
    # the "new budget" requests' step times, decided before the front / read off it
    before, looked_up = [], []
    warm_up = generate_instance(min(args.domains, 10), args.model, 800_000, "random")
    scheduler.front(warm_up, settings=settings)
    for seed in args.seeds:
        for topology in TOPOLOGIES:
            domains = min(args.domains, 10) if topology == "aws-10" else args.domains
            instance = generate_instance(domains, args.model, INSTANCE_SEED_BASE + seed,
                                         topology)
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
            new_budgets = []
            for _ in range(args.repeats):
                new_budgets.append(timed(instance, "warm, new budget", Budgets(gpus=int(
                    rng.integers(limits.least_gpus, limits.free_gpus + 1)))))
            asked += new_budgets
            for _ in range(args.repeats):
                timed(instance, "warm, same request", asked[int(rng.integers(len(asked)))])
            for _ in range(args.repeats):
                timed(perturb(instance, rng, 0.3), "bandwidth change")
            free = instance.free_gpus
            for _ in range(max(1, args.repeats // 5)):
                moved = np.rint(free * rng.uniform(0.8, 1.2, size=len(free))).astype(int)
                timed(instance.with_link_state(free_gpus=moved), "load change")
            start = time.perf_counter()
            front = scheduler.front(instance, settings=settings)
            times["front"].append(time.perf_counter() - start)
            decisions.append(front.provenance["decisions"])
            for _ in range(args.repeats):
                weights = rng.dirichlet(np.ones(3))
                budgets = Budgets(gpus=int(rng.integers(limits.least_gpus,
                                                        limits.free_gpus + 1)))
                if rng.random() < 0.5:
                    budgets = Budgets(gpus=budgets.gpus, cost=float(
                        rng.uniform(0, 1) * max(p.objectives[2] for p in front.points)))
                start = time.perf_counter()
                with contextlib.suppress(NoPlanWithinBudget):
                    scheduler.plans(instance, weights, budgets, settings)
                times["from the front"].append(time.perf_counter() - start)
            for budgets in new_budgets:
                pairs = [_fastest(instance, scheduler.plans(instance, (1.0, 0.0, 0.0), budgets,
                                                  settings)),
                         _fastest(instance, scheduler.fronts.answer(
                             scheduler._front_key(instance, settings),
                             np.array([1.0, 0.0, 0.0]), budgets, scheduler.multipliers))]
                if all(step < np.inf for step in pairs):
                    before.append(pairs[0])
                    looked_up.append(pairs[1])
            print(f"{instance.name}: front of {len(front.points)} points, "
                  f"{front.provenance['decisions']} decisions, "
                  f"{times['front'][-1]:.2f} s", flush=True)
    for kind, values in times.items():
        print(f"{kind:19s} {percentiles(values)}")
    print(f"decisions per front: median {int(np.median(decisions))}, max {max(decisions)}")
    if before:
        ratio = np.asarray(looked_up) / np.asarray(before) - 1
        print(f"new budgets read off the front against decided before it (n = {len(ratio)}): "
              f"faster {np.mean(ratio < -1e-9):.1%}, the same {np.mean(abs(ratio) <= 1e-9):.1%}"
              f", slower {np.mean(ratio > 1e-9):.1%} (median {np.median(ratio):+.2%}, "
              f"at most {max(ratio.max(), 0):.2%} slower, {abs(min(ratio.min(), 0.0)):.2%} faster)")


def _fastest(instance, candidates) -> float:
    """The least step time among a decision's candidate plans (inf: none)."""
    plans = [plan for plan, _ in candidates or ()]
    return float(evaluate_plans(instance, plans).step_time_s.min()) if plans else np.inf


if __name__ == "__main__":
    sys.exit(main())
