"""Agreement of the exact MILP fronts with brute-force enumeration on tiny instances.

    python scripts/exact_vs_bruteforce.py [--seeds 10] [--engine highs|cpsat]

For each tiny instance: the front sizes, whether the fronts agree point for point (objective
vectors within 1e-6 relative), and whether any enumerated plan dominates a MILP point.
"""

import argparse
import time

import numpy as np

from formulation.evaluator import evaluate_batch
from instances.tiny import tiny_instance
from solvers.bruteforce import brute_force_front, enumerate_plans
from solvers.exact import exact_front
from solvers.front import dominated_by, fronts_agree

VARIANTS = {"k4-l12-free1": dict(domains=4, layers=12, free_gpus=(1, 1, 1, 1)),
            "k3-l8-free2": dict(domains=3, layers=8, free_gpus=(2, 2, 2)),
            "k3-l6": dict(domains=3, layers=6),
            "k5-l10-free": dict(domains=5, layers=10, free_gpus=(1, 1, 2, 2, 1))}


def dominated_points(instance, points: np.ndarray) -> int:
    """How many MILP points some enumerated feasible plan dominates (must be 0)."""
    hit = np.zeros(len(points), dtype=bool)
    for batch in enumerate_plans(instance):
        result = evaluate_batch(instance, batch)
        hit |= dominated_by(points, result.objectives[result.feasible])
    return int(hit.sum())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--engine", default="highs")
    args = parser.parse_args()
    agree = total = dominated = 0
    for options in VARIANTS.values():
        for seed in range(args.seeds):
            instance = tiny_instance(seed, **options)
            start = time.perf_counter()
            brute = brute_force_front(instance)
            middle = time.perf_counter()
            exact = exact_front(instance, args.engine)
            end = time.perf_counter()
            same = fronts_agree(exact, brute)
            beaten = dominated_points(instance, exact.objectives)
            agree += same
            total += 1
            dominated += beaten
            print(f"{instance.name:30} brute {len(brute.points):2} pts {middle - start:5.1f}s  "
                  f"{args.engine} {len(exact.points):2} pts {end - middle:5.1f}s "
                  f"({exact.provenance['solves']} solves, "
                  f"{sum(p.objectives[2] > 0 for p in exact.points)} cross-domain)  "
                  f"{'agree' if same else 'DIFFER'}, {beaten} dominated")
    print(f"{agree}/{total} fronts agree point for point; "
          f"{dominated} MILP points dominated by an enumerated plan")


if __name__ == "__main__":
    main()
