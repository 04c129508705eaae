"""Hi-PPO decision latencies: cold start, after a bandwidth or load change, warm, a front.

    python scripts/bench_hippo.py [--checkpoint FILE] [--domains 20] [--model 70b]
                                  [--instance-seeds 1 2 3] [--repeats 50] [--seed 0] [--pairs N]
                                  [--lower-time S] [--deadlines] [--no-fallback]
                                  [--resume] [--record FILE] [--against FILE]

On generated instances (the generator's full search space, one per topology and seed):

- cold start: what the agent builds for an instance state it has not seen (the pairs'
  tables, the single-domain plans, the reward bases, the masks' rules), alone;
- cold decision: the first decision on that state (cold start included), made
  ``--repeats`` / 5 times (at least once), each after the scheduler forgot everything
  (:meth:`~rl.scheduler.Scheduler.forget`, and its instance caches);
- after a bandwidth change: every WAN link's bandwidth scaled within +-30 % (the lower
  level places the stages by the new delays: its DP runs start cold);
- after a load change: every domain's free GPUs moved within +-20 %;
- warm, same request: a decision the state has answered before (the same preference and
  budgets);
- warm, new budget: the same state, a random GPU budget (mostly one not asked before);
- a cold front: ``Scheduler.front`` (the budget sweep) on the instance right after the
  scheduler forgot everything, as the evaluation builds each front: its wall time and
  decisions (made before the cold decisions, which forget it);
- a front: the same sweep after the decisions above on the state (their plans and
  floors start its placements), its wall time and decisions;
- from the front: after it, requests of a random preference and GPU budget (a cost budget
  half of the time) on the same state, which the scheduler reads off the front it built
  (:mod:`rl.front_book`; those it decides instead, where no point is within the budgets
  or the front was not kept, are counted apart), each also decided by a second
  scheduler that keeps no front (the lower level's memory is the process's, so it is as
  warm): the scalarised cost ``J`` of their best plans compared; and the "new budget"
  requests read off the front: their step times against the decisions' before it.

Where the time of each kind goes: the shares of its decisions' time (of the fronts', for
the front) spent making what the lower level's DP runs read (layer caps and bound tables),
in its label DP runs and in its dives (:class:`solvers.chain.KernelSeconds`); the rest is
the policy, the masks and the Python around them.

It also times the garbage collector's collections that fall inside the decisions timed
above (not the front and the reads off it): their number, the full ones apart, the
longest. The first scheduler of a process freezes what the process holds out of them
(:class:`rl.scheduler.Scheduler`, ``freeze_gc``); with ``--unfreeze`` its schedulers do
not, as before this round, to compare.

Decisions draw a random GPU budget half of the time (the sweep's kind of decision), and
hand the lower level ``--pairs`` pairs within ``--lower-time`` seconds (defaults:
``rl.decide``'s); with ``--deadlines`` the lower level runs until the deadline of the
request's kind of state instead, at most that (:class:`rl.decision_settings.Deadlines`:
issue 14's latency targets less a margin); with ``--no-fallback`` the policy builds no
plan of its own where the lower level ran out of time with one
(:attr:`rl.decision_settings.DecisionSettings.fallback`: a deadline of milliseconds then
holds).

What a shorter deadline costs: ``--record FILE`` writes each timed decision (kind,
instance, a digest of its state and budgets, latency, the least scalarised cost ``J`` of
its plans, with the preference (1, 0, 0) the step time over ``T_base``) and the run's
protocol; ``--against FILE`` reads such a record of another run of the same protocol
(checkpoint, instances, repeats, seed: the same requests, which the digests check) and
compares this run's ``J`` with it, decision by decision, per kind. With ``--resume``
each timed decision that was cut short is then resumed
(:meth:`~rl.scheduler.Scheduler.resume`: its search goes on without the deadlines, as a
scheduler would in the time it has after answering), timed apart ("resumed"), and its
``J`` after that is recorded and compared too. The later decisions start from what the
resumed ones found. One instance of another seed is decided first, untimed, as a running
scheduler would have (imports, first calls). Prints p50 / p99 / max in milliseconds per
kind.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import hashlib
import sys
import time
from pathlib import Path

import numpy as np

from formulation.evaluator import evaluate_plans
from formulation.outputs import output_path, write_atomic
from formulation.presets import model_preset
from formulation.reward import preference, scalarised_cost
from formulation.schema import (
    SEED,
    SEED_MAX,
    CliParser,
    InputError,
    Reader,
    check_number,
    dumps,
    integer_arg,
    number_arg,
    read_json,
    run_cli,
)
from instances.generate import MAX_DOMAINS, MIN_DOMAINS, generate_instance
from rl.decision_settings import HIERARCHICAL, Deadlines, DecisionSettings
from rl.env import InstanceCache, InstanceStatics, NoPlanWithinBudget
from rl.masks import Budgets
from rl.scheduler import DEFAULT_CHECKPOINT, Scheduler
from rl.tasks import BudgetRange, perturb
from solvers.chain import KERNEL_SECONDS
from solvers.label_kernels import table_threads

TOPOLOGIES = ("random", "cn-hubs", "aws-10")
INSTANCE_SEED_BASE = 900_000  # instance seed S is generator seed 900,000 + S
MAX_REPEATS = 100_000
MAX_PAIRS = 10_000
MAX_LOWER_TIME = 3600.0


def percentiles(values: list[float]) -> str:
    if not values:
        return "(n = 0)"
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
    parser.add_argument("--deadlines", action="store_true",
                        help="the lower level until the deadline of the request's kind of "
                        "state (rl.decision_settings.Deadlines: issue 14's targets less a "
                        "margin), at most --lower-time")
    parser.add_argument("--no-fallback", dest="fallback", action="store_false",
                        help="the policy builds no plan of its own where the lower level "
                        "ran out of time with one")
    parser.add_argument("--resume", action="store_true",
                        help="after each timed decision cut short, resume it (untimed "
                        "there; its own row), as a scheduler would with idle time")
    parser.add_argument("--record", type=Path,
                        help="write each timed decision's kind, latency and J here (JSON)")
    parser.add_argument("--against", type=Path,
                        help="a --record of a run of the same protocol: compare each "
                        "decision's J with it")
    parser.add_argument("--unfreeze", action="store_true",
                        help="schedulers that leave the process's objects to the garbage "
                        "collector (freeze_gc=False), to compare")
    args = parser.parse_args(argv)
    return run_cli(lambda: _bench(args))


class Breakdown:
    """Per kind of call timed: each call's seconds, and the seconds of them spent in the
    lower level's kernels, summed (:class:`solvers.chain.KernelSeconds`: inputs, runs,
    dives)."""

    PARTS = ("layer caps and bound tables", "DP runs", "dives")

    def __init__(self, kinds: tuple[str, ...] = ()):
        self.calls: dict[str, list[float]] = {kind: [] for kind in kinds}
        self.kernels: dict[str, np.ndarray] = {}  # kind -> (inputs, runs, dives)

    @contextlib.contextmanager
    def timing(self, kind: str):
        before, start = KERNEL_SECONDS.reading(), time.perf_counter()
        try:
            yield
        finally:
            self.calls.setdefault(kind, []).append(time.perf_counter() - start)
            spent = [after - then for after, then in zip(KERNEL_SECONDS.reading(), before,
                                                          strict=True)]
            self.kernels[kind] = self.kernels.get(kind, np.zeros(3)) + spent

    def summary(self, kind: str) -> str:
        """``kind``'s shares of time, or "" where its calls took no time."""
        total = sum(self.calls.get(kind, ()))
        if total <= 0:
            return ""
        shares = [part / total for part in self.kernels[kind]]
        named = ", ".join(f"{name} {share:.0%}"
                          for name, share in zip(self.PARTS, shares, strict=True))
        return f"{kind}: {named}, the rest {1 - sum(shares):.0%}"


class Collections:
    """The garbage collector's collections while :attr:`timing` is set: how many, how
    many of them full (generation 2), and how long each took."""

    def __init__(self):
        self.timing = False
        self.seconds: list[float] = []
        self.full = 0
        self._start = 0.0
        gc.callbacks.append(self._callback)

    def _callback(self, phase: str, info: dict) -> None:
        if not self.timing:
            return
        if phase == "start":
            self._start = time.perf_counter()
            return
        self.seconds.append(time.perf_counter() - self._start)
        self.full += info["generation"] == 2

    def close(self) -> None:
        gc.callbacks.remove(self._callback)

    def summary(self) -> str:
        longest = 1e3 * max(self.seconds, default=0.0)
        return (f"garbage collections inside the decisions timed (not the front's): "
                f"{len(self.seconds)} ({self.full} full), the longest {longest:.1f} ms, "
                f"{1e3 * sum(self.seconds):.1f} ms in all; objects frozen out of them: "
                f"{gc.get_freeze_count():,}")


def _bench(args: argparse.Namespace) -> None:
    try:
        model_preset(args.model)
    except KeyError as err:
        raise InputError(f"--model: {err.args[0]}") from None
    settings = DecisionSettings(pairs=args.pairs, lower_time=args.lower_time,
                                fallback=args.fallback,
                                deadlines=Deadlines() if args.deadlines else None)
    protocol = {"checkpoint_sha256": hashlib.sha256(args.checkpoint.read_bytes()).hexdigest()
                if args.checkpoint.is_file() else None,
                "domains": args.domains, "model": args.model,
                "instance_seeds": list(args.seeds), "repeats": args.repeats, "seed": args.seed}
    record = output_path(args.record, [args.against, args.checkpoint], "--record",
                         stdout=False)
    reference = None if args.against is None else _reference(args.against, protocol)
    # [kind, instance, request, latency s, J or None, J resumed or None] of each timed
    # decision (J only where a record is written or compared: it is not free)
    recorded = []
    comparing = args.record is not None or args.against is not None
    rng = np.random.default_rng(args.seed)
    scheduler = Scheduler(args.checkpoint, freeze_gc=not args.unfreeze)
    collections = Collections()
    # each call timed, by kind
    breakdown = Breakdown(("cold start", "cold decision", "bandwidth change", "load change",
                           "warm, same request", "warm, new budget", "cold front", "front",
                           "from the front"))
    decisions = {"cold front": [], "front": []}  # decisions per front
    # keeps no front: decides what the first reads
    fresh = Scheduler(args.checkpoint, freeze_gc=not args.unfreeze)
    costs = []  # (J read off the front, J decided) of the requests after the front
    # (J read off the front, J decided before it) of the "new budget" requests: with the
    # preference (1, 0, 0), J is the step time over T_base
    new_budget_costs = []
    unanswered = 0  # requests after the front that it did not answer

    def least_of(state, candidates) -> float | None:  # J of a decision's best plan
        return _least_cost(state, candidates, np.array([1.0, 0.0, 0.0]),
                           scheduler.env.cache_of(state).scale) \
            if candidates and comparing else None

    warm_up = generate_instance(min(args.domains, 10), args.model, 800_000, "random")
    scheduler.front(warm_up, settings=settings)
    for seed in args.seeds:
        for topology in TOPOLOGIES:
            domains = min(args.domains, 10) if topology == "aws-10" else args.domains
            instance = generate_instance(domains, args.model, INSTANCE_SEED_BASE + seed,
                                         topology)
            with breakdown.timing("cold start"):
                InstanceCache(instance, InstanceStatics.of(instance))
            limits = BudgetRange.of(instance)

            def timed(state, kind: str, budgets: Budgets | None = None,
                      limits: BudgetRange = limits) -> tuple[Budgets, list]:
                if budgets is None:
                    budgets = Budgets() if rng.random() < 0.5 else Budgets(gpus=int(
                        rng.integers(limits.least_gpus, limits.free_gpus + 1)))
                collections.timing = True
                try:
                    candidates = []
                    with breakdown.timing(kind), contextlib.suppress(NoPlanWithinBudget):
                        candidates = scheduler.plans(state, (1.0, 0.0, 0.0), budgets,
                                                     settings)
                finally:
                    collections.timing = False
                least = least_of(state, candidates)
                resumed = None
                if args.resume:  # untimed above, as in a scheduler's idle time
                    resumed = least
                    if scheduler._request(state, (1.0, 0.0, 0.0), budgets, settings) \
                            in scheduler.cut_short:  # timed: only the decisions that resume
                        with breakdown.timing("resumed"), \
                                contextlib.suppress(NoPlanWithinBudget):
                            again = scheduler.resume(state, (1.0, 0.0, 0.0), budgets,
                                                     settings)
                            if again is not None:
                                resumed = least_of(state, again)
                request = hashlib.sha256(f"{state.content_hash()} {budgets.to_dict()}".encode()
                                         ).hexdigest()[:16] if comparing else None
                recorded.append([kind, state.name, request, breakdown.calls[kind][-1],
                                 least, resumed])
                return budgets, candidates

            scheduler.forget()
            scheduler.env.caches.clear()
            with breakdown.timing("cold front"):
                cold = scheduler.front(instance, settings=settings)
            decisions["cold front"].append(cold.provenance["decisions"])
            for _ in range(max(1, args.repeats // 5)):
                scheduler.forget()
                scheduler.env.caches.clear()
                asked = [timed(instance, "cold decision")[0]]  # the one remembered
            new_budgets = []
            for _ in range(args.repeats):
                new_budgets.append(timed(instance, "warm, new budget", Budgets(gpus=int(
                    rng.integers(limits.least_gpus, limits.free_gpus + 1)))))
            asked += [budgets for budgets, _ in new_budgets]
            for _ in range(args.repeats):
                timed(instance, "warm, same request", asked[int(rng.integers(len(asked)))])
            for _ in range(args.repeats):
                timed(perturb(instance, rng, 0.3), "bandwidth change")
            free = instance.free_gpus
            for _ in range(max(1, args.repeats // 5)):
                moved = np.rint(free * rng.uniform(0.8, 1.2, size=len(free))).astype(int)
                timed(instance.with_link_state(free_gpus=moved), "load change")
            with breakdown.timing("front"):
                front = scheduler.front(instance, settings=settings)
            decisions["front"].append(front.provenance["decisions"])
            key = scheduler._front_key(instance, settings)
            scale = scheduler.env.cache_of(instance).scale
            for _ in range(args.repeats):
                weights = preference(rng.dirichlet(np.ones(3)))
                budgets = Budgets(gpus=int(rng.integers(limits.least_gpus,
                                                        limits.free_gpus + 1)))
                if rng.random() < 0.5:
                    budgets = Budgets(gpus=budgets.gpus, cost=float(
                        rng.uniform(0, 1) * max(p.objectives[2] for p in front.points)))
                if scheduler.fronts.answer(key, weights, budgets,
                                           scheduler.multipliers) is None:
                    unanswered += 1
                    continue
                with breakdown.timing("from the front"):
                    read = scheduler.plans(instance, weights, budgets, settings)
                with contextlib.suppress(NoPlanWithinBudget):
                    decided = fresh.plans(instance, weights, budgets, settings)
                    costs.append((_least_cost(instance, read, weights, scale),
                                  _least_cost(instance, decided, weights, scale)))
            least_time = np.array([1.0, 0.0, 0.0])
            for budgets, candidates in new_budgets:
                read = scheduler.fronts.answer(key, least_time, budgets,
                                               scheduler.multipliers)
                if candidates and read:
                    new_budget_costs.append(
                        (_least_cost(instance, read, least_time, scale),
                         _least_cost(instance, candidates, least_time, scale)))
            print(f"{instance.name}: front of {len(front.points)} points, "
                  f"{front.provenance['decisions']} decisions, "
                  f"{breakdown.calls['front'][-1]:.2f} s; cold: {len(cold.points)} points, "
                  f"{cold.provenance['decisions']} decisions, "
                  f"{breakdown.calls['cold front'][-1]:.2f} s", flush=True)
    for kind, values in breakdown.calls.items():
        print(f"{kind:19s} {percentiles(values)}")
    for kind, counts in decisions.items():
        print(f"decisions per {kind}: median {int(np.median(counts))}, max {max(counts)}")
    print("where the time goes, as shares of each kind's time:")
    print(f"  (bound tables: {table_threads()})")
    for kind in breakdown.calls:
        if line := breakdown.summary(kind):
            print(f"  {line}")
    print(collections.summary())
    collections.close()
    print(f"requests after the front decided instead of read off it: {unanswered}")
    _compare("requests after the front, J read off it against decided", costs)
    _compare("new budgets, step time read off the front against decided before it",
             new_budget_costs)
    if record is not None:  # before the comparison, which may find other requests
        write_atomic(record, lambda path: path.write_text(dumps(
            {"protocol": protocol, "settings": settings.to_dict(),
             "decisions": recorded}), encoding="utf-8"))
    if reference is not None:
        _against(args.against, reference, recorded)


def _compare(what: str, pairs: list[tuple[float, float]]) -> None:
    """How a figure read off the front compares with the decision's (lower is better)."""
    if pairs:
        print(f"{what} {_ratios(pairs)}")


def _reference(path: Path, protocol: dict) -> list[list]:
    """The decisions of a ``--record`` file, checked to be of ``protocol``'s run."""
    document = read_json(path, "--against")
    try:
        document = Reader(document, "")
        theirs = document.raw("protocol")
        for field, value in protocol.items():
            if not isinstance(theirs, dict) or theirs.get(field) != value:
                raise InputError(f"protocol.{field} is not this run's ({value!r}): its "
                                 "decisions are of other requests")
        document.raw("settings")
        decisions = document.items("decisions", _recorded)
        document.finish()
    except InputError as err:
        raise InputError(f"--against {path}: {err}") from None
    return decisions


def _recorded(value, field: str) -> list:
    """One decision of a record: [kind, instance, request, latency s, J or None, J
    resumed or None] (request: a digest of the state and the budgets)."""
    if not (isinstance(value, list) and len(value) == 6
            and all(isinstance(v, str) for v in value[:3])):
        raise InputError(f"{field} must be [kind, instance, request, latency s, J or null, "
                         "J resumed or null]")
    check_number(value[3], f"{field}[3]", low=0)
    for i in (4, 5):
        if value[i] is not None:
            check_number(value[i], f"{field}[{i}]", low=0, low_open=True)
    return value


def _against(path: Path, reference: list[list], recorded: list[list]) -> None:
    """Each kind's J (and with ``--resume`` its J resumed) against the reference run's J,
    decision by decision (lower is better)."""
    if [r[:3] for r in reference] != [r[:3] for r in recorded]:
        raise InputError(f"--against {path}: its decisions are not this run's requests "
                         "(their states or budgets differ)")
    resumed = any(r[5] is not None for r in recorded)
    for column, what in ((4, "J"), (5, "J resumed")) if resumed else ((4, "J"),):
        print(f"{what} against {path}'s J (each decision against the same request's "
              "there):")
        for kind in dict.fromkeys(r[0] for r in recorded):
            pairs = [(mine[column], theirs[4])
                     for mine, theirs in zip(recorded, reference, strict=True)
                     if mine[0] == kind]
            print(f"  {kind} {_ratios(pairs)}")


def _ratios(pairs: list[tuple[float | None, float | None]]) -> str:
    """How the first of each pair compares with the second (lower is better)."""
    both = [(a, b) for a, b in pairs if a is not None and b is not None]
    ratio = np.asarray([a / b - 1 for a, b in both])
    alone = sum((a is None) != (b is None) for a, b in pairs)
    line = f"(n = {len(pairs)}" + (f"; {alone} with a plan in one run only)" if alone
                                   else ")")
    if len(ratio):
        line += (f": the same {np.mean(abs(ratio) <= 1e-9):.1%}, worse "
                 f"{np.mean(ratio > 1e-9):.1%}, better {np.mean(ratio < -1e-9):.1%}; "
                 f"mean {ratio.mean():+.2%}, p90 {np.percentile(ratio, 90):+.2%}, "
                 f"from {ratio.min():+.2%} to {ratio.max():+.2%}")
    return line


def _least_cost(instance, candidates, weights, scale) -> float:
    """The least scalarised cost J (:func:`formulation.reward.scalarised_cost`) among a
    decision's candidate plans."""
    plans = [plan for plan, _ in candidates]
    objectives = evaluate_plans(instance, plans).objectives
    return float(scalarised_cost(objectives, weights, scale).min())


if __name__ == "__main__":
    sys.exit(main())
