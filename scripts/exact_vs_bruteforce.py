"""Agreement of the exact MILP fronts with brute-force enumeration on tiny instances.

    python scripts/exact_vs_bruteforce.py [--seeds 10] [--engine highs|cpsat]

For each tiny instance: the front sizes, whether the fronts agree point for point (objective
vectors within 1e-6 relative), and whether any enumerated plan dominates a MILP point.
"""

import argparse
import time

from instances.tiny import tiny_instance
from solvers.bruteforce import brute_force_front
from solvers.exact import exact_front
from solvers.front import fronts_agree

VARIANTS = {"k4-l12-free1": dict(domains=4, layers=12, free_gpus=(1, 1, 1, 1)),
            "k3-l8-free2": dict(domains=3, layers=8, free_gpus=(2, 2, 2)),
            "k3-l6": dict(domains=3, layers=6)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--engine", default="highs")
    args = parser.parse_args()
    agree = total = 0
    for options in VARIANTS.values():
        for seed in range(args.seeds):
            instance = tiny_instance(seed, **options)
            start = time.perf_counter()
            brute = brute_force_front(instance)
            middle = time.perf_counter()
            exact = exact_front(instance, args.engine)
            end = time.perf_counter()
            same = fronts_agree(exact, brute)
            agree += same
            total += 1
            print(f"{instance.name:28} brute {len(brute.points):2} pts {middle - start:5.1f}s  "
                  f"{args.engine} {len(exact.points):2} pts {end - middle:5.1f}s "
                  f"({exact.provenance['solves']} solves)  "
                  f"{'agree' if same else 'DIFFER'}")
    print(f"{agree}/{total} fronts agree point for point")


if __name__ == "__main__":
    main()
