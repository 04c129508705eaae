"""``python -m formulation.evaluate INSTANCE.json PLAN.json``: a plan's objectives as JSON.

Add ``--robust`` to evaluate with every WAN link at its worst case (B (1 - eps), L x 1.5).
PLAN may be a pipeline plan or a DiLoCo plan (``formulation.diloco``).
Malformed input gives one line on stderr and exit code 2; so does a plan whose dp x
micro_batch does not divide the global batch. A plan outside the instance's search space is
scored physically, with one warning line on stderr per value the space does not list
(``within_search_space`` and ``search_mismatches`` in the JSON).
"""

from __future__ import annotations

import argparse
import sys

from formulation.evaluator import robust_instance
from formulation.families import evaluate_any, load_plan
from formulation.instance import Instance
from formulation.schema import CliParser, dumps, run_cli


def main(argv: list[str] | None = None) -> int:
    parser = CliParser(prog="python -m formulation.evaluate",
                       description="Evaluate a training plan on an instance.")
    parser.add_argument("instance", help="instance JSON file")
    parser.add_argument("plan", help="plan JSON file")
    parser.add_argument("--robust", action="store_true",
                        help="evaluate at worst-case link bandwidth and latency")
    args = parser.parse_args(argv)
    return run_cli(lambda: _evaluate(args))


def _evaluate(args: argparse.Namespace) -> None:
    instance = Instance.load(args.instance)
    plan = load_plan(args.plan, instance)
    if args.robust:
        instance = robust_instance(instance)
    evaluation = evaluate_any(instance, plan)
    for mismatch in evaluation.mismatches:  # scored all the same: see formulation.feasibility
        print(f"warning: outside the instance's search space: {mismatch.message}",
              file=sys.stderr)
    sys.stdout.write(dumps(evaluation.to_dict()))


if __name__ == "__main__":
    sys.exit(main())
