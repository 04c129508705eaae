"""Hi-PPO decisions: a plan for an instance state, a preference and budgets, explained.

    python -m rl.decide INSTANCE --weights w1,w2,w3 [--gpus N] [--cost-budget USD]
                        [--step-cap S] [--pairs N] [--lower-time S] [--lower-work UNITS]
                        [--no-exhaust] [--policy-plan] [--no-fallback] [--samples N]
                        [--polish ROUNDS] [--starts] [--seed S] [--checkpoint FILE]
                        [--heatmap FILE.png] [--out PLAN.json] [--quiet]

prints JSON: the plan, its objectives and evaluation (from the evaluator), the decision
latency, the reward decomposition (R_eff, R_util, R_cost and R) and a rule summary: which
budget binds and by how much, which links (bandwidth, latency, share of the 1F1B period
they keep busy), memory limits and GPU counts drove the chain and the cuts, and which term
sets the period. ``--gpus`` and ``--cost-budget`` are met exactly (the masks); a budget no
plan meets is one line, "no plan within budget", and exit status 2. ``--step-cap`` is
soft: the agent was trained to meet it (a Lagrange penalty), and the explanation says
when the plan misses it. A decision is hierarchical: the policy (upper level) ranks the
(dp, micro-batch) pairs and builds a plan itself; the lower level (:mod:`rl.lower`) places
the stages of the ``--pairs`` best-ranked pairs by the exact engine's DP, then, in the
ranking's order, of every further pair that one DP run cannot prove slower than the best
plan so far (``--no-exhaust``: not these), all within ``--lower-time`` seconds (0 pairs:
the policy's own plan only). The policy builds its own plan too with ``--policy-plan``, and
always where the lower level finds none or runs out of time (with ``--no-fallback``, only
where it finds none: under a deadline of milliseconds the policy's episode would outlast
it; README, "Decisions under a deadline"). Where the ranked pairs give
no plan (the masks offer none within the budgets, or the DP places none), the lower level
places every other pair before the decision says there is none: the masks' completion
test is sufficient, not necessary, and plans that mix (tp, recompute) options across
stages may be all a tight state has (a failure on a 70B instance). If its time (or work:
``--lower-work``, counted rather than timed, so that the plan is the same on any machine)
runs out first, the decision says "no plan found within the lower level's limit", which
proves nothing (:class:`NoPlanInTime`). ``--samples N`` also draws N plans from the policy
and keeps the one with the best reward. ``--polish ROUNDS`` also
improves each plan by at most that many rounds of local search on the reward, within the
budgets (:mod:`solvers.local_search`; the decision latency includes it). ``--heatmap``
draws the cross-domain traffic (GB per step between domains).

The decision is :class:`rl.scheduler.Scheduler`'s (the API; re-exported here).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from formulation.instance import Instance
from formulation.outputs import output_path, strict, write_json
from formulation.reward import preference
from formulation.schema import (
    SEED,
    CliParser,
    InputError,
    dumps,
    integer_arg,
    number_arg,
    run_cli,
)
from rl.decision_settings import HIERARCHICAL, MAX_POLISH, MAX_SAMPLES, DecisionSettings
from rl.explain import heatmap
from rl.masks import Budgets
from rl.scheduler import (  # the API, importable from here as before
    DEFAULT_CHECKPOINT,
    NoPlanInTime,
    PlanDecision,
    Scheduler,
)
from solvers.chain import MAX_DEADLINE_S, MAX_WORK, WORK_PER_SECOND

__all__ = ["DEFAULT_CHECKPOINT", "NoPlanInTime", "PlanDecision", "Scheduler", "main",
           "parse_weights"]

MAX_PAIRS = 10_000  # (dp, micro-batch) pairs: far more than any search space holds
MAX_BUDGET_GPUS = 2 ** 40  # a GPU budget above every instance's GPUs is no budget


def parse_weights(text: str) -> np.ndarray:
    try:
        return preference([float(x) for x in text.split(",")])
    except ValueError:
        raise InputError(f"--weights: need three comma-separated numbers >= 0, not all 0; "
                         f"got {text!r}") from None


def main(argv: list[str] | None = None) -> int:
    parser = CliParser(prog="python -m rl.decide",
                       description="A Hi-PPO plan for an instance and a preference.")
    parser.add_argument("instance", type=Path, help="instance JSON")
    parser.add_argument("--weights", required=True, help="w1,w2,w3 (efficiency, "
                        "utilisation, cost)")
    parser.add_argument("--gpus", type=integer_arg(0, MAX_BUDGET_GPUS), default=None,
                        help="GPU budget: the plan takes at most this many GPUs")
    parser.add_argument("--cost-budget", type=number_arg(0), default=None,
                        help="traffic-cost budget, USD per step")
    parser.add_argument("--step-cap", type=number_arg(0, low_open=True), default=None,
                        help="step-time cap, seconds (soft: the explanation says if missed)")
    parser.add_argument("--pairs", type=integer_arg(0, MAX_PAIRS), default=HIERARCHICAL.pairs,
                        help="(dp, micro-batch) pairs the lower level places, the upper "
                        f"level's best first (default {HIERARCHICAL.pairs}; 0: the policy "
                        "builds every stage)")
    parser.add_argument("--lower-time", type=number_arg(0, MAX_DEADLINE_S, low_open=True),
                        default=None,
                        help="seconds from the decision's start until which the lower "
                        f"level may run (default {HIERARCHICAL.lower_time}; none with "
                        "--lower-work alone)")
    parser.add_argument("--lower-work", type=integer_arg(1, MAX_WORK), default=None,
                        metavar="UNITS",
                        help="units of DP work the lower level may spend instead "
                        f"({WORK_PER_SECOND:,} about a second here): a counted limit, so "
                        "that the plan is the same on any machine")
    parser.add_argument("--exhaust", action=argparse.BooleanOptionalAction,
                        default=HIERARCHICAL.exhaust,
                        help="also place every further pair a DP run cannot prove slower, "
                        "while time is left (default: on)")
    parser.add_argument("--policy-plan", action=argparse.BooleanOptionalAction,
                        default=HIERARCHICAL.policy_plan,
                        help="the upper level also builds its own plan where the lower "
                        "level places pairs (default: off; its plan only where the lower "
                        "level finds none or, with --fallback, runs out of time)")
    parser.add_argument("--fallback", action=argparse.BooleanOptionalAction,
                        default=HIERARCHICAL.fallback,
                        help="the upper level builds its own plan where the lower level "
                        "ran out of time or work with one (default: on; off, a deadline "
                        "of milliseconds holds: README)")
    parser.add_argument("--samples", type=integer_arg(0, MAX_SAMPLES), default=0,
                        help=f"plans sampled from the policy (at most {MAX_SAMPLES})")
    parser.add_argument("--starts", action="store_true",
                        help="one greedy episode per (dp, micro-batch) pair, the best kept")
    parser.add_argument("--polish", type=integer_arg(0, MAX_POLISH), default=0,
                        help="rounds of local search on each plan (0: none)")
    parser.add_argument("--seed", type=SEED, default=0,
                        help="one seed of the sampled episodes, 0 to 2^32 - 1 (default 0)")
    parser.add_argument("--checkpoint", type=Path, default=DEFAULT_CHECKPOINT,
                        help="policy checkpoint (default: the shipped one)")
    parser.add_argument("--heatmap", type=str, default=None, help="PNG of WAN traffic")
    parser.add_argument("--out", type=str, default=None, help="write the plan JSON here")
    parser.add_argument("--quiet", action="store_true",
                        help="no decision JSON on standard output (the plan goes to --out)")
    args = parser.parse_args(argv)
    return run_cli(lambda: _decide(args))


def _decide(args: argparse.Namespace) -> None:
    weights = parse_weights(args.weights)
    try:
        lower_time = args.lower_time if args.lower_time is not None or args.lower_work \
            is not None else HIERARCHICAL.lower_time
        settings = DecisionSettings(pairs=args.pairs, lower_time=lower_time,
                                    lower_work=args.lower_work, exhaust=args.exhaust,
                                    policy_plan=args.policy_plan, fallback=args.fallback,
                                    samples=args.samples, seed=args.seed,
                                    polish=args.polish, starts=args.starts)
    except ValueError as err:
        raise InputError(f"--{str(err).replace('_', '-', 1)}") from None
    try:
        budgets = Budgets(args.gpus, args.cost_budget, args.step_cap)
    except ValueError as err:
        flag = {"gpus": "--gpus", "cost": "--cost-budget", "step_time": "--step-cap"}
        name = str(err).split(" ")[0].removeprefix("budgets.")
        raise InputError(f"{flag.get(name, 'budgets')}: {str(err).split(' ', 1)[1]}") \
            from None
    # both outputs checked before the decision; standard output carries the decision
    inputs = [args.instance, args.checkpoint]
    out = output_path(args.out, inputs, stdout=False)
    picture = output_path(args.heatmap, inputs, flag="--heatmap", stdout=False)
    if picture is not None and picture == out:
        raise InputError(f"--heatmap {str(args.heatmap)!r} is also --out")
    if picture is not None and picture.suffix.lower() != ".png":
        raise InputError(f"--heatmap {str(args.heatmap)!r} must name a .png file")
    instance = Instance.load(args.instance)
    decision = Scheduler(args.checkpoint).decide(instance, weights, budgets, settings)
    if picture is not None:
        heatmap(instance, decision.plan, picture)
    if out is not None:
        write_json(out, decision.plan.to_dict(instance))
    if not args.quiet:
        sys.stdout.write(dumps(strict(decision.to_dict(instance))))


if __name__ == "__main__":
    sys.exit(main())
