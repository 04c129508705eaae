"""Distribution of the closed-form 1F1B step time's error against the event-level simulation.

    python scripts/closed_form_vs_simulation.py [--suite bench|quick] [--plans 8] [--chains 4]

Target (issue 2): median |error| <= 5 %, max |error| <= 15 % over the benchmark suite.
"""

import argparse

import numpy as np

from formulation.schema import SEED
from instances.suites import suite_paths
from instances.validation import compare_suite


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", default="bench")
    parser.add_argument("--plans", type=int, default=8, help="random feasible plans per instance")
    parser.add_argument("--chains", type=int, default=4, help="fastest chain plans per instance")
    parser.add_argument("--seed", type=SEED, default=0)
    args = parser.parse_args()
    rows = compare_suite(suite_paths(args.suite), args.plans, args.chains, args.seed)
    errors = np.array([r.relative_error for r in rows])
    magnitude = np.abs(errors)
    print(f"{len(rows)} plans on {len({r.instance for r in rows})} instances of '{args.suite}'")
    print("relative error closed form / simulation - 1:")
    for q in (50, 90, 99):
        print(f"  p{q} |error| {np.percentile(magnitude, q):.2%}")
    print(f"  max |error| {magnitude.max():.2%}  (signed range {errors.min():+.2%} .. "
          f"{errors.max():+.2%})")
    spec_only = np.abs([r.spec_term_only_s / r.simulated_s - 1 for r in rows])
    print(f"  with the SPEC's k = 0 latency windows only: median {np.median(spec_only):.2%}, "
          f"max {spec_only.max():.2%}")
    worst = rows[int(np.argmax(magnitude))]
    print(f"  worst: {worst.instance}, {worst.stages} stages, m={worst.micro_batches}, "
          f"closed {worst.closed_form_s:.2f} s vs simulated {worst.simulated_s:.2f} s")
    edges = [0, 0.01, 0.02, 0.05, 0.1, 0.15, 1.0]
    counts, _ = np.histogram(magnitude, bins=edges)
    print("  histogram: " + ", ".join(f"[{a:.0%},{b:.0%}): {c}"
                                      for a, b, c in zip(edges, edges[1:], counts, strict=False)))


if __name__ == "__main__":
    main()
