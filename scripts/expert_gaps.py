"""How close Hi-PPO's demonstrations come to the exact optimum, on committed suite instances.

    python scripts/expert_gaps.py [--suite bench] [--match k5- --match k8- --match k10-]
                                  [--polish 8]

For every instance and each of the suites' seven preference vectors: the scalarised gap
``J / J* - 1`` (formulation.reward) of the best plan of the experts (Sailor-like DP, greedy,
single-domain), and of the best after local search from its ``--polish`` best plans
(solvers.local_search), as :mod:`rl.imitation` chooses demonstrations. Prints one line per
instance, the medians and the local search time.
"""

import argparse
import sys
import time

import numpy as np

from formulation.evaluator import evaluate_plans
from formulation.instance import Instance
from formulation.reward import scalarised_cost
from formulation.schema import CliParser, InputError, integer_arg, run_cli
from instances.suites import PREFERENCES, SUITES, reference_front_path, suite_paths
from rl.imitation import ImitationSettings, choices, expert_plans
from solvers.baselines import baseline_references
from solvers.front import Front

DEFAULT_MATCH = ["k5-", "k8-", "k10-"]
MAX_POLISH = 10_000


def main(argv: list[str] | None = None) -> int:
    parser = CliParser(prog="python scripts/expert_gaps.py",
                       description=__doc__.splitlines()[0])
    parser.add_argument("--suite", choices=sorted(SUITES), default="bench",
                        help="the committed suite whose instances are scored")
    parser.add_argument("--match", action="append", default=None,
                        help="keep instances whose name contains this (repeatable; default: "
                             f"{' '.join(DEFAULT_MATCH)})")
    parser.add_argument("--polish", type=integer_arg(0, MAX_POLISH),
                        default=ImitationSettings.polish,
                        help=f"best expert plans local search starts from (0..{MAX_POLISH:,})")
    args = parser.parse_args(argv)
    return run_cli(lambda: _gaps(args))


def _gaps(args: argparse.Namespace) -> None:
    matches = args.match or DEFAULT_MATCH
    paths = [path for path in suite_paths(args.suite) if any(m in path.name for m in matches)]
    if not paths:
        raise InputError(f"--match: no instance of suite {args.suite!r} matches {matches}")
    before, after, seconds = [], [], 0.0
    for path in paths:
        instance = Instance.load(path)
        front = Front.load(reference_front_path(path), instance)
        exact = np.array([point.objectives for point in front.points])
        scale = baseline_references(instance).scale
        plans = expert_plans(instance, ImitationSettings.experts)
        result = evaluate_plans(instance, plans)
        rows = []
        for weights in PREFERENCES:
            optimum = scalarised_cost(exact, weights, scale).min()
            start = time.perf_counter()
            candidates, value = choices(instance, plans, result, np.array(weights), scale,
                                        args.polish)
            seconds += time.perf_counter() - start
            expert = int(np.argmax(value[:len(plans)]))
            polished = int(np.argmax(value))
            gaps = [scalarised_cost(evaluate_plans(instance, [candidates[i]]).objectives,
                                    weights, scale)[0] / optimum - 1
                    for i in (expert, polished)]
            before.append(gaps[0])
            after.append(gaps[1])
            rows.append(f"{100 * gaps[0]:.1f}->{100 * gaps[1]:.1f}")
        print(f"{path.stem:36s} gap % per preference: {'  '.join(rows)}")
    print(f"median gap over {len(before)} (instance, preference): experts "
          f"{100 * np.median(before):.2f} %, polished {100 * np.median(after):.2f} %; "
          f"mean {100 * np.mean(before):.2f} % -> {100 * np.mean(after):.2f} %; "
          f"local search {seconds:.1f} s")


if __name__ == "__main__":
    sys.exit(main())
