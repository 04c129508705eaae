"""Distribution of the closed-form 1F1B step time's error against the event-level simulation.

    python scripts/closed_form_vs_simulation.py [--suite bench|quick|full] [--plans 8] [--chains 4]
                                                [--seed 0] [--virtual-stages V]

Target (issue 2): median |error| <= 5 %, max |error| <= 15 % over the benchmark suite.
"""

import argparse
import sys

import numpy as np

from formulation.plan import MAX_VIRTUAL_STAGES
from formulation.schema import SEED, CliParser, InputError, integer_arg, run_cli
from instances.suites import SUITES, suite_paths
from instances.validation import compare_suite

MAX_PLANS = 10_000
MAX_CHAINS = 1_000


def main(argv: list[str] | None = None) -> int:
    parser = CliParser(prog="python scripts/closed_form_vs_simulation.py",
                       description=__doc__.splitlines()[0])
    parser.add_argument("--suite", choices=sorted(SUITES), default="bench",
                        help="the committed suite whose instances are compared")
    parser.add_argument("--plans", type=integer_arg(0, MAX_PLANS), default=8,
                        help=f"random feasible plans per instance (0..{MAX_PLANS:,})")
    parser.add_argument("--chains", type=integer_arg(0, MAX_CHAINS), default=4,
                        help=f"fastest chain plans per instance (0..{MAX_CHAINS:,})")
    parser.add_argument("--seed", type=SEED, default=0,
                        help="one seed: of the first instance's random plans (the next "
                             "instances take the following seeds)")
    parser.add_argument("--virtual-stages", type=integer_arg(1, MAX_VIRTUAL_STAGES), default=1,
                        help="compare the same plans interleaved with this many chunks per "
                             "stage, those feasible so (default 1: plain 1F1B)")
    args = parser.parse_args(argv)
    return run_cli(lambda: _compare(args))


def _compare(args: argparse.Namespace) -> None:
    if args.plans == 0 and args.chains == 0:
        raise InputError("--plans and --chains are both 0: no plan to compare")
    rows = compare_suite(suite_paths(args.suite), args.plans, args.chains, args.seed,
                         args.virtual_stages)
    if not rows:
        raise InputError(f"no feasible plan to compare on suite {args.suite!r}")
    errors = np.array([r.relative_error for r in rows])
    magnitude = np.abs(errors)
    print(f"{len(rows)} plans on {len({r.instance for r in rows})} instances of '{args.suite}'")
    print("relative error closed form / simulation - 1:")
    for q in (50, 90, 99):
        print(f"  p{q} |error| {np.percentile(magnitude, q):.2%}")
    print(f"  max |error| {magnitude.max():.2%}  (signed range {errors.min():+.2%} .. "
          f"{errors.max():+.2%})")
    if args.virtual_stages == 1:
        spec_only = np.abs([r.spec_term_only_s / r.simulated_s - 1 for r in rows])
        print(f"  with the SPEC's k = 0 latency windows only: median "
              f"{np.median(spec_only):.2%}, max {spec_only.max():.2%}")
    worst = rows[int(np.argmax(magnitude))]
    print(f"  worst: {worst.instance}, {worst.stages} stages, m={worst.micro_batches}, "
          f"closed {worst.closed_form_s:.2f} s vs simulated {worst.simulated_s:.2f} s")
    edges = [0, 0.01, 0.02, 0.05, 0.1, 0.15, 1.0]
    counts, _ = np.histogram(magnitude, bins=edges)
    print("  histogram: " + ", ".join(f"[{a:.0%},{b:.0%}): {c}"
                                      for a, b, c in zip(edges, edges[1:], counts, strict=False)))


if __name__ == "__main__":
    sys.exit(main())
