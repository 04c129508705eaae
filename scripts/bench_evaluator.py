"""Evaluator speed: single-plan latency and batched throughput on a K = 20, 80-layer instance.

    python scripts/bench_evaluator.py [--plans 20000] [--repeat 2000]

Targets (issue 16): single-plan evaluation median <= 100 us; batched >= 100,000 plans/s.
"""

import argparse
import statistics
import sys
import time

import numpy as np

from formulation import PlanBatch, SearchSpace, evaluate_batch
from formulation.instance import ATTENTION_KERNELS
from formulation.result import evaluate  # not "formulation.evaluate": also the CLI module
from formulation.schema import CliParser, InputError, integer_arg, run_cli
from instances.generate import generate_instance
from instances.sample import random_plan

# 100,000 plans hold about 1.2 GB (plans and batch arrays): the bound keeps a run in memory
MAX_PLANS = 200_000
MAX_REPEAT = 100_000


def main(argv: list[str] | None = None) -> int:
    parser = CliParser(prog="python scripts/bench_evaluator.py",
                       description=__doc__.splitlines()[0])
    parser.add_argument("--plans", type=integer_arg(1, MAX_PLANS), default=20_000,
                        help=f"random plans drawn for the batch (1..{MAX_PLANS:,})")
    parser.add_argument("--repeat", type=integer_arg(1, MAX_REPEAT), default=2_000,
                        help=f"single-plan evaluations timed per kind (1..{MAX_REPEAT:,})")
    parser.add_argument("--attention", choices=ATTENTION_KERNELS, default="flash",
                        help="the instance's attention kernel (default %(default)s; eager: "
                             "the instances of the rounds before FlashAttention)")
    args = parser.parse_args(argv)
    return run_cli(lambda: _bench(args))


def _bench(args: argparse.Namespace) -> None:
    # Chains may use all 20 domains (max_stages 20), so long pipelines are timed too.
    instance = generate_instance(20, "70b", seed=7, topology="cn-hubs",
                                 search=SearchSpace(max_stages=20), attention=args.attention)
    rng = np.random.default_rng(0)
    plans = [p for p in (random_plan(instance, rng) for _ in range(args.plans)) if p]
    if not plans:
        raise InputError(f"--plans {args.plans}: no random plan was drawn; ask for more")
    stages = np.mean([p.num_stages for p in plans])
    print(f"instance {instance.name}: K={instance.num_domains}, "
          f"{instance.model.layers} layers; {len(plans)} random plans, {stages:.1f} stages avg")

    batch = PlanBatch.from_plans(plans)
    evaluate_batch(instance, batch)  # warm the coefficient cache
    timings = []
    for _ in range(5):
        start = time.perf_counter()
        result = evaluate_batch(instance, batch)
        timings.append(time.perf_counter() - start)
    best = min(timings)
    print(f"batched: {len(plans)} plans in {best * 1e3:.1f} ms -> {len(plans) / best:,.0f} plans/s"
          f" ({result.feasible.mean():.0%} feasible)")

    for name, call in (("evaluate_batch, N=1", lambda p: evaluate_batch(
            instance, PlanBatch.from_plans([p]))), ("evaluate (with detail)",
                                                    lambda p: evaluate(instance, p))):
        samples = []
        for plan in plans[:args.repeat]:  # warm-up pass: coefficient caches filled
            call(plan)
        for i in range(args.repeat):
            plan = plans[i % len(plans)]
            start = time.perf_counter()
            call(plan)
            samples.append(time.perf_counter() - start)
        long = [x for x, i in zip(samples, range(args.repeat), strict=True)
                if plans[i % len(plans)].num_stages >= 12]
        samples.sort()
        longest = (f"median {statistics.median(long) * 1e6:.0f} us" if long
                   else "none timed")
        print(f"single plan, {name}: median {statistics.median(samples) * 1e6:.0f} us, "
              f"p95 {samples[int(0.95 * len(samples))] * 1e6:.0f} us; plans with >= 12 "
              f"stages: {longest}")


if __name__ == "__main__":
    sys.exit(main())
