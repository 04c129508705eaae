"""Seeded sample plans for an instance: random cross-domain plans and all simple one-domain plans.

These are not solvers. They give the suite builder a cheap view of what an instance admits
(is a cross-domain plan feasible? how good is the best one-domain plan?), the closed-form vs
simulation check a spread of realistic plans, and a new user a plan to start from:

    python -m instances.sample INSTANCE.json --out PLAN.json [--seed S]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from formulation.evaluator import evaluate_plans
from formulation.instance import Instance
from formulation.outputs import output_path, report_stream
from formulation.plan import Plan, Stage
from formulation.schema import SEED, CliParser, InputError, run_cli


def split_layers(total: int, weights: np.ndarray) -> list[int]:
    """Split ``total`` layers into ``len(weights)`` positive parts proportional to ``weights``
    (largest remainders), each at least one layer."""
    weights = np.asarray(weights, dtype=float)
    count = len(weights)
    if count > total:
        raise ValueError(f"cannot split {total} layers into {count} stages")
    share = (total - count) * weights / weights.sum()
    parts = np.floor(share).astype(int)
    order = np.argsort(-(share - parts), kind="stable")
    parts[order[: total - count - parts.sum()]] += 1
    return (parts + 1).tolist()


def random_plan(instance: Instance, rng: np.random.Generator) -> Plan | None:
    """A random plan in the search space: dp and micro-batch dividing the batch, a random chain
    of domains with room for dp replicas, one or two stages per domain, layers split by the
    GPUs each stage gets, random tp and recompute. Not necessarily feasible."""
    search, batch = instance.search, instance.training.global_batch
    pairs = [(r, b) for r in search.dp for b in search.micro_batch if batch % (r * b) == 0]
    if not pairs:
        return None
    dp, micro_batch = pairs[rng.integers(len(pairs))]
    free = instance.free_gpus
    usable = np.flatnonzero(free >= dp * min(search.tp))
    if len(usable) == 0:
        return None
    chain_length = int(rng.integers(1, min(len(usable), search.max_stages) + 1))
    chain = rng.permutation(usable)[:chain_length]
    stages: list[tuple[int, int, str]] = []  # (domain, tp, recompute)
    for k in chain:
        fitting = [t for t in search.tp
                   if t <= instance.gpu.gpus_per_node and dp * t <= free[k]]
        per_domain = 2 if (rng.random() < 0.3 and len(stages) + 2 <= search.max_stages) else 1
        for _ in range(per_domain):
            tp = fitting[rng.integers(len(fitting))]
            if per_domain == 2 and 2 * dp * tp > free[k]:
                tp = min(fitting)
            stages.append((int(k), int(tp), str(rng.choice(search.recompute))))
    if len(stages) > instance.model.layers:
        stages = stages[: instance.model.layers]
    weights = np.array([tp for _, tp, _ in stages]) * rng.uniform(0.8, 1.25, len(stages))
    layers = split_layers(instance.model.layers, weights)
    return Plan(dp=int(dp), micro_batch=int(micro_batch),
                stages=tuple(Stage(domain=k, layers=n, tp=tp, recompute=rc)
                             for (k, tp, rc), n in zip(stages, layers, strict=True)))


def feasible_sample(instance: Instance, count: int, seed: int,
                    candidates: int = 4000) -> list[Plan]:
    """Up to ``count`` distinct feasible random plans (from ``candidates`` draws)."""
    rng = np.random.default_rng(seed)
    drawn = [p for p in (random_plan(instance, rng) for _ in range(candidates)) if p is not None]
    if not drawn:
        return []
    result = evaluate_plans(instance, drawn)
    out, seen = [], set()
    for plan, ok in zip(drawn, result.admissible.tolist(), strict=True):
        if ok and plan not in seen:
            seen.add(plan)
            out.append(plan)
            if len(out) == count:
                break
    return out


def chain_plans(instance: Instance) -> list[Plan]:
    """Simple cross-domain chains: the n domains with most free GPUs (n = 2 .. max stages),
    ordered greedily along the widest links, one stage per domain with the largest tp that
    fits dp replicas, layers split by the GPUs of each stage, one recompute mode for all."""
    search, batch = instance.search, instance.training.global_batch
    free = instance.free_gpus
    bandwidth = instance.links.bandwidth_gbps
    by_free = list(np.argsort(-free, kind="stable"))
    plans = []
    for dp in search.dp:
        tps = {k: [t for t in search.tp if t <= instance.gpu.gpus_per_node
                   and dp * t <= free[k]] for k in by_free}
        usable = [k for k in by_free if tps[k]]
        for n in range(2, min(len(usable), search.max_stages, instance.model.layers) + 1):
            chosen, chain = set(usable[:n]), [usable[0]]
            while len(chain) < n:  # next: the widest link from the chain's end
                rest = [k for k in chosen if k not in chain]
                chain.append(max(rest, key=lambda k: bandwidth[chain[-1], k]))
            tp = [max(tps[k]) for k in chain]
            layers = split_layers(instance.model.layers, np.array(tp, dtype=float))
            for micro_batch in search.micro_batch:
                if batch % (dp * micro_batch):
                    continue
                for recompute in search.recompute:
                    plans.append(Plan(dp=int(dp), micro_batch=int(micro_batch), stages=tuple(
                        Stage(domain=int(k), layers=n_layers, tp=int(t), recompute=recompute)
                        for k, t, n_layers in zip(chain, tp, layers, strict=True))))
    return plans


def single_domain_plans(instance: Instance, domain: int) -> list[Plan]:
    """Every uniform plan inside one domain: each (dp, micro-batch, tp, recompute, stage
    count) with layers split evenly. The best of them is the one-domain reference."""
    search, batch = instance.search, instance.training.global_batch
    free = instance.domains[domain].free_gpus
    plans = []
    for dp in search.dp:
        for micro_batch in search.micro_batch:
            if batch % (dp * micro_batch):
                continue
            for tp in search.tp:
                max_stages = min(search.max_stages, instance.model.layers, free // (dp * tp))
                for count in range(1, max_stages + 1):
                    layers = split_layers(instance.model.layers, np.ones(count))
                    for recompute in search.recompute:
                        plans.append(Plan(dp=dp, micro_batch=micro_batch, stages=tuple(
                            Stage(domain=domain, layers=n, tp=tp, recompute=recompute)
                            for n in layers)))
    return plans


def best_single_domain(instance: Instance) -> tuple[Plan | None, float]:
    """The fastest feasible one-domain plan over all domains and its step time (inf if none)."""
    best, best_time = None, float("inf")
    for k in range(instance.num_domains):
        plans = single_domain_plans(instance, k)
        if not plans:
            continue
        result = evaluate_plans(instance, plans)
        times = np.where(result.admissible, result.step_time_s, np.inf)
        i = int(np.argmin(times))
        if times[i] < best_time:
            best, best_time = plans[i], float(times[i])
    return best, best_time


def main(argv: list[str] | None = None) -> int:
    parser = CliParser(prog="python -m instances.sample",
                       description="Write a random feasible plan for an instance.")
    parser.add_argument("instance", type=Path, help="instance JSON")
    parser.add_argument("--out", type=str, required=True,
                        help="plan JSON to write (- for standard output)")
    parser.add_argument("--quiet", action="store_true", help="no report line")
    parser.add_argument("--seed", type=SEED, default=0,
                        help="one seed of the sampling, 0 to 2^32 - 1 (default 0)")
    args = parser.parse_args(argv)
    return run_cli(lambda: _sample(args))


def _sample(args: argparse.Namespace) -> int:
    args.out = output_path(args.out, inputs=[args.instance])
    instance = Instance.load(args.instance)
    plans = feasible_sample(instance, 1, args.seed)
    if not plans:
        raise InputError(f"instance {str(args.instance)!r}: no feasible plan found (the "
                         "model fits in no sampled combination of the free GPUs)")
    plans[0].save(args.out, instance)
    print(f"plan with {plans[0].num_stages} stages over domains "
          f"{[instance.domains[k].name for k in plans[0].domains_used()]} written to {args.out}",
          file=report_stream(args.out, args.quiet))
    return 0


if __name__ == "__main__":
    sys.exit(main())
