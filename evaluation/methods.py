"""The methods the evaluation scores: one registry, each method declared once.

A :class:`Method` states its name and description, whether its result depends on the seed,
its options (a frozen dataclass that also declares the command-line flags that set them),
why it cannot run where that is the case, and how it re-plans a changed instance state
online (:attr:`Method.replan`: one decision for least step time, and the decision time an
online run charges for it). The static and the online evaluations, their CLIs and reports
read :data:`METHODS` and nothing else: a new method is one :func:`register` call in this
file.

A method turns one instance state into its plans: a *decision* is one call, and its
wall time is the method's decision latency (a whole front for NSGA-II and the baselines).
Each run returns a :class:`MethodRun`: the front of its feasible plans (scored by the
evaluator), how many plans it returned and how many were feasible, and for anytime methods
the hypervolume it had reached over time.

``exact`` is the reference itself (the committed exact front; no run; online, the exact
engine's least step time of each state within a time limit). ``hippo`` is the
learned scheduler (:mod:`rl.scheduler`), scored with the shipped checkpoint or ``--checkpoint``;
where neither exists, or the package ``rl`` is missing, the evaluation reports it as not
scored instead of scoring it.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from formulation.families import score
from formulation.instance import Instance
from formulation.plan import Plan
from formulation.schema import InputError, integer_arg, number_arg
from solvers.baselines import METHODS as BASELINES
from solvers.baselines import GaSettings, baseline_front
from solvers.chain import MAX_DEADLINE_S, MAX_WORK, WORK_PER_SECOND
from solvers.front import Front
from solvers.nsga2 import Nsga2Settings, nsga2_front

REFERENCE = "exact"  # the method name under which the reference front is scored


@dataclass(frozen=True)
class MethodRun:
    front: Front  # the feasible non-dominated plans the method returned
    decisions: int  # plans it returned
    feasible: int  # of which feasible
    anytime: list[tuple[float, float]] = field(default_factory=list)
    """(seconds since the start, normalised hypervolume of its plans so far); empty for
    one-shot methods."""
    decision_latencies: list[float] | None = None
    """Seconds per single decision, for a method whose call makes several (Hi-PPO: one
    plan per preference vector); None when one call is one decision."""


@dataclass(frozen=True)
class MethodOptions:
    """A method's options. A subclass adds its fields (with defaults: the method's own) and
    the flags that set them; a method without options uses this class itself."""

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser) -> None:
        """Add the flags that set these options (none by default)."""

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> MethodOptions:
        """The options the parsed flags give; raises InputError for a bad one."""
        return cls()

    def inputs(self) -> list[Path]:
        """Files the options read: an output directory must never be one of them."""
        return []


@dataclass(frozen=True)
class Method:
    """One method of the evaluation, declared once (module doc)."""

    name: str
    description: str
    run: Callable[[Instance, int, dict | None, Any, tuple], MethodRun] | None
    """(instance, seed, reference normalisation or None, its options, the suite's
    preference vectors) -> MethodRun; None for the reference front itself."""
    options_type: type[MethodOptions] = MethodOptions
    """Its options' class; ``options_type()`` gives the defaults."""
    seeded: bool | Callable[[Any], bool] = False
    """Whether different seeds give different results (given its options, if callable)."""
    unavailable: Callable[[Any], str | None] = lambda options: None
    """Why it cannot run with these options, or None."""
    replan: Callable[[Instance, int, Any], Plan | None] | None = None
    """One decision for a changed instance state, as a re-planning policy asks it (issue 17's
    online evaluation): (instance state, seed, options) -> its plan of least step time in
    that state, or None where it finds none. None: the method cannot re-plan (DiLoCo: its
    plans change the optimiser)."""
    prepare: Callable[[Any], None] = lambda options: None
    """Loads what its decisions need (Hi-PPO: the checkpoint), so that a decision's measured
    time is the decision's own."""
    decision_bound_s: float | Callable[[Any], float] = 1.0
    """The time an online run charges for one of its re-planning decisions (given its
    options, if callable): a bound it is held to, so that a run does not depend on the
    machine; its measured times are reported apart."""
    replan_fixed: tuple[str, ...] = ()
    """Flags of its options that its re-plans do not read (Hi-PPO's lower-level limits,
    which a re-plan sets to its ``decision_bound_s``, and its fronts' resumed decisions): an
    online run refuses them rather than ignore them (:func:`check_replan_flags`)."""

    def is_seeded(self, options: Any) -> bool:
        return self.seeded(options) if callable(self.seeded) else self.seeded

    @property
    def replans(self) -> bool:
        return self.replan is not None

    def bound_s(self, options: Any) -> float:
        bound = self.decision_bound_s
        return float(bound(options) if callable(bound) else bound)

    @property
    def is_reference(self) -> bool:
        return self.run is None


METHODS: dict[str, Method] = {}


def register(method: Method) -> Method:
    if method.name in METHODS:
        raise ValueError(f"method {method.name!r} is registered twice")
    METHODS[method.name] = method
    return method


# ---- NSGA-II ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Nsga2Options(MethodOptions):
    """Overrides of :class:`solvers.nsga2.Nsga2Settings`; None keeps its default."""

    generations: int | None = None
    population: int | None = None
    descent: int | None = None
    """Plans the final Pareto descent expands."""

    def settings(self, seed: int) -> Nsga2Settings:
        given = {k: v for k, v in dataclasses.asdict(self).items() if v is not None}
        return Nsga2Settings(seed=seed, **given)

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--generations", type=integer_arg(1, 1_000_000), default=None,
                            help="NSGA-II generations")
        parser.add_argument("--population", type=integer_arg(2, 100_000), default=None,
                            help="NSGA-II population")
        parser.add_argument("--descent", type=integer_arg(0, 100_000), default=None,
                            help="NSGA-II: plans its final Pareto descent expands")

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> Nsga2Options:
        return cls(generations=args.generations, population=args.population,
                   descent=args.descent)


def _nsga2(instance: Instance, seed: int, normalisation: dict | None, options: Nsga2Options,
           preferences: tuple) -> MethodRun:
    front = nsga2_front(instance, options.settings(seed), normalisation)
    provenance = front.provenance
    anytime = list(zip(provenance["elapsed_s_per_generation"],
                       provenance["hypervolume_per_generation"], strict=True))
    if provenance["descent"] is not None:  # the descent's archive is the last anytime point
        anytime.append((provenance["wall_time_s"], provenance["hypervolume_after_descent"]))
    return MethodRun(front, len(front.points), len(front.points), anytime)


# ---- the papers' baselines ----------------------------------------------------------------

def _baseline(name: str, genetic: bool) -> Callable[..., MethodRun]:
    """Baseline ``name`` as a method; ``genetic``: its function takes ``GaSettings`` (the
    unit's seed)."""
    def run(instance: Instance, seed: int, normalisation: dict | None,
            options: MethodOptions, preferences: tuple) -> MethodRun:
        extra = {"settings": GaSettings(seed=seed)} if genetic else {}
        front = baseline_front(instance, name, **extra)
        decisions = front.provenance["decisions"]
        return MethodRun(front, decisions,
                         decisions - len(front.provenance["infeasible_decisions"]))
    return run


# ---- Hi-PPO -------------------------------------------------------------------------------

@dataclass(frozen=True)
class HippoOptions(MethodOptions):
    """How Hi-PPO decides (:class:`rl.decision_settings.DecisionSettings`: a None field keeps
    rl.decide's default; ``samples``, ``polish`` and ``starts`` are always passed) and which
    checkpoint it loads."""

    checkpoint: str | None = None
    """A checkpoint file; None: the shipped one."""
    pairs: int | None = None
    """(dp, micro-batch) pairs the lower level places per decision."""
    lower_time: float | None = None
    """Seconds the lower level may take per decision (None: rl.decide's default, or no
    time limit where ``lower_work`` is given)."""
    lower_work: int | None = None
    """Units of DP work the lower level may spend per decision: counted, not timed, so that
    its searches do not depend on the machine's speed or load; alone, it lifts the time
    limit."""
    exhaust: bool | None = None
    """The lower level also places every further pair a DP run cannot prove slower."""
    policy_plan: bool | None = None
    """The upper level also builds its own plan where the lower level places pairs."""
    fallback: bool | None = None
    """The upper level builds its own plan where the lower level ran out of time or work
    with one (off: a deadline of milliseconds holds)."""
    deadlines: bool = False
    """The lower level until the deadline of the request's kind of state
    (:class:`rl.decision_settings.Deadlines`), at most ``lower_time``; the sweep's
    resumed decisions have ``lower_time`` itself."""
    samples: int = 0
    """Sampled plans per preference besides the greedy one (seeded when > 0)."""
    polish: int = 0
    """Rounds of local search on each plan."""
    starts: bool = False
    """One greedy episode per (dp, micro-batch) pair in every decision."""
    cost_steps: int = 4
    """Cost budgets per GPU level of the budget sweep."""
    resume: bool = True
    """After the sweep, each of its decisions whose lower level ran out of time or work
    with plans found decided once more, from where it stopped
    (:meth:`rl.scheduler.Scheduler.resume`)."""

    def decision_settings(self) -> dict:
        """The fields of :class:`rl.decision_settings.DecisionSettings` these options set."""
        names = ("pairs", "lower_time", "lower_work", "exhaust", "policy_plan", "fallback",
                 "samples", "polish", "starts")
        settings = {name: value for name in names if (value := getattr(self, name)) is not None}
        if self.lower_work is not None and self.lower_time is None:
            settings["lower_time"] = None  # the counted limit alone, as rl.decide's
        if self.deadlines:
            from rl.decision_settings import Deadlines  # rl is there where Hi-PPO runs
            settings["deadlines"] = Deadlines()
        return settings

    def inputs(self) -> list[Path]:
        return [] if self.checkpoint is None else [Path(self.checkpoint)]

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--hippo-pairs", type=integer_arg(0, 100_000), default=None,
                            help="Hi-PPO: pairs the lower level places per decision "
                                 "(default: rl.decide's)")
        parser.add_argument("--hippo-lower-time",
                            type=number_arg(0, MAX_DEADLINE_S, low_open=True), default=None,
                            help="Hi-PPO: seconds from a decision's start until which the "
                                 "lower level may run "
                                 "(default: rl.decide's)")
        parser.add_argument("--hippo-lower-work", type=integer_arg(1, MAX_WORK), default=None,
                            metavar="UNITS",
                            help="Hi-PPO: units of DP work the lower level may spend per "
                                 f"decision ({WORK_PER_SECOND:,} about a second here): "
                                 "counted, so that its searches do not depend on the "
                                 "machine's speed or load; alone, no time limit")
        parser.add_argument("--hippo-exhaust", action=argparse.BooleanOptionalAction,
                            default=None,
                            help="Hi-PPO: the lower level also places every further pair a "
                                 "DP run cannot prove slower (default: rl.decide's, on)")
        parser.add_argument("--hippo-policy-plan", action=argparse.BooleanOptionalAction,
                            default=None,
                            help="Hi-PPO: the upper level also builds its own plan where the "
                                 "lower level places pairs (default: rl.decide's, off)")
        parser.add_argument("--hippo-fallback", action=argparse.BooleanOptionalAction,
                            default=None,
                            help="Hi-PPO: the upper level builds its own plan where the "
                                 "lower level ran out of time or work with one (default: "
                                 "rl.decide's, on; off, a deadline of milliseconds holds)")
        parser.add_argument("--hippo-deadlines", action="store_true",
                            help="Hi-PPO: the lower level until the deadline of the "
                                 "request's kind of state (rl.decision_settings.Deadlines), "
                                 "at most --hippo-lower-time; resumed decisions without")
        parser.add_argument("--hippo-samples", type=integer_arg(0, 1024), default=0,
                            help="Hi-PPO: sampled plans per preference besides the greedy one")
        parser.add_argument("--hippo-polish", type=integer_arg(0, 1000), default=0,
                            help="Hi-PPO: rounds of local search on each plan (0: none)")
        parser.add_argument("--hippo-starts", action="store_true",
                            help="Hi-PPO: one greedy episode per (dp, micro-batch) pair in "
                                 "every decision")
        parser.add_argument("--hippo-resume", action=argparse.BooleanOptionalAction,
                            default=True,
                            help="Hi-PPO: after the budget sweep, decide once more each "
                                 "of its decisions whose lower level ran out of time or "
                                 "work with plans found, from where it stopped (default: "
                                 "on)")
        parser.add_argument("--checkpoint", type=Path, default=None,
                            help="Hi-PPO checkpoint (default: the shipped one)")

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> HippoOptions:
        if args.checkpoint is not None and not args.checkpoint.is_file():
            raise InputError(f"--checkpoint: no such file {str(args.checkpoint)!r}")
        return cls(checkpoint=None if args.checkpoint is None else str(args.checkpoint),
                   pairs=args.hippo_pairs, lower_time=args.hippo_lower_time,
                   lower_work=args.hippo_lower_work, exhaust=args.hippo_exhaust,
                   policy_plan=args.hippo_policy_plan, fallback=args.hippo_fallback,
                   deadlines=args.hippo_deadlines,
                   resume=args.hippo_resume,
                   samples=args.hippo_samples, polish=args.hippo_polish,
                   starts=args.hippo_starts)


_RL = importlib.util.find_spec("rl")  # found without importing torch
HIPPO_CHECKPOINT = (Path(_RL.submodule_search_locations[0]) / "checkpoints" / "hi_ppo.pt"
                    if _RL is not None else None)


def _hippo_unavailable(options: HippoOptions) -> str | None:
    if HIPPO_CHECKPOINT is None:
        return "the Hi-PPO agent (package rl) is not installed"
    if options.checkpoint is None and not HIPPO_CHECKPOINT.is_file():
        return (f"no Hi-PPO checkpoint at {HIPPO_CHECKPOINT} (train one with python -m "
                "rl.train --out that path, or pass --checkpoint)")
    return None


_SCHEDULERS: dict[str, object] = {}  # loaded policies, one per checkpoint and process


def _hippo(instance: Instance, seed: int, normalisation: dict | None, options: HippoOptions,
           preferences: tuple) -> MethodRun:
    from formulation.evaluator import evaluate_plans
    from rl.decision_settings import DecisionSettings
    from rl.env import NoPlanWithinBudget
    from rl.masks import NO_BUDGETS
    from rl.sweep import SWEEP_PREFERENCES, sweep_front

    scheduler = _hippo_scheduler(options)
    settings = DecisionSettings(**{**options.decision_settings(), "seed": seed})
    scheduler.forget()  # every front a cold one: nothing found for an earlier one kept
    latencies = []

    def timed(ask):  # ask(instance, weights, budgets, settings), timed where it decides
        def call(weights, budgets):
            start = time.perf_counter()
            decided = True
            try:
                out = ask(instance, weights, budgets, settings)
                decided = out is not None  # a resume with nothing to resume decides nothing
                return out
            finally:
                if decided:
                    latencies.append(time.perf_counter() - start)
        return call

    decide = timed(scheduler.plans)
    # the budget sweep (epsilon-constraint-like), then one decision per suite preference
    plans, _ = sweep_front(decide, lambda plan: float(evaluate_plans(instance, [plan])
                                                       .comm_cost[0]),
                           SWEEP_PREFERENCES, options.cost_steps,
                           timed(scheduler.resume) if options.resume else None)
    for weights in preferences:
        try:
            plans += [plan for plan, _ in decide(weights, NO_BUDGETS)]
        except NoPlanWithinBudget:  # the instance's own cost budget admits no plan
            break
    front = Front.from_plans(instance, plans, "heuristic")
    feasible = int(score(instance, plans)[1].sum()) if plans else 0
    return MethodRun(front, len(plans), feasible, decision_latencies=latencies)


# ---- one re-planning decision -------------------------------------------------------------

def fastest(front: Front) -> Plan | None:
    """The plan of least step time of a front (then fewest GPUs, least cost)."""
    if not front.points:
        return None
    return min(front.points, key=lambda point: point.objectives).plan


EXACT_REPLAN_LIMIT_S = 5.0  # the exact planner's time limit per online decision


def _exact_replan(instance: Instance, seed: int, options: MethodOptions,
                  limit_s: float | None = EXACT_REPLAN_LIMIT_S) -> Plan | None:
    """The certified least step time of the state, within ``limit_s`` (past it, the best
    plan found: then the answer depends on the machine's speed, and the online report
    counts such decisions); seeded by the fast baselines' plans."""
    from solvers.engine import NO_CAP, OutOfTime
    from solvers.epsilon import PairPool
    from solvers.exact import ExactSettings, add_known, certifiers, seed_plans

    deadline = None if limit_s is None else time.perf_counter() + limit_s
    pool = PairPool(certifiers(instance, ExactSettings(threads=1)), deadline)
    seeds = seed_plans(instance, "fast")
    add_known(pool, instance, seeds)
    budget = instance.constraints.cost_budget
    cap = NO_CAP if budget is None else budget
    try:
        found = pool.min_step(NO_CAP, cap)
        return None if found is None else found.plan
    except OutOfTime:  # the best plan the solves and the seeds have found
        best = pool.incumbent(NO_CAP, cap)
        return None if best is None else best[0]


_EXACT_WARMED_UP: list[bool] = []  # once per process: what the warm-up loads is its own


def _exact_warm_up(options: MethodOptions) -> None:
    """One exact re-plan, untimed, on a small generated instance: a process's first one
    otherwise compiles or loads the label-setting DP's kernels within its
    ``EXACT_REPLAN_LIMIT_S`` (10 s on a fresh install, where it answered with a slower plan
    than a warm process does), and the online run's numbers then depend on the machine."""
    if _EXACT_WARMED_UP:
        return
    from instances.generate import warm_up_instance

    # no limit: a compile cut short by one leaves the rest to the first timed decision
    _exact_replan(warm_up_instance(), 0, options, limit_s=None)
    _EXACT_WARMED_UP.append(True)


def _nsga2_replan(instance: Instance, seed: int, options: Nsga2Options) -> Plan | None:
    return fastest(nsga2_front(instance, options.settings(seed)))


def _baseline_replan(name: str, genetic: bool) -> Callable[..., Plan | None]:
    def replan(instance: Instance, seed: int, options: MethodOptions) -> Plan | None:
        extra = {"settings": GaSettings(seed=seed)} if genetic else {}
        return fastest(baseline_front(instance, name, **extra))
    return replan


def _hippo_scheduler(options: HippoOptions):
    """The loaded policy of the options' checkpoint (one per checkpoint and process)."""
    from rl.scheduler import DEFAULT_CHECKPOINT, Scheduler

    checkpoint = options.checkpoint or str(DEFAULT_CHECKPOINT)
    scheduler = _SCHEDULERS.get(checkpoint)
    if scheduler is None:
        scheduler = _SCHEDULERS[checkpoint] = Scheduler(checkpoint)
    return scheduler


HIPPO_REPLAN_BOUND_S = 1.0  # the seeds' bound on an inter-domain decision


def _hippo_replan(instance: Instance, seed: int, options: HippoOptions) -> Plan | None:
    """One Hi-PPO decision for least step time (preference (1, 0, 0), no budgets), its
    lower level held to the DP work of ``HIPPO_REPLAN_BOUND_S`` (counted, not timed, so
    that the decision does not depend on the machine)."""
    from formulation.evaluator import evaluate_plans
    from rl.decision_settings import DecisionSettings
    from rl.env import NoFeasiblePlan

    scheduler = _hippo_scheduler(options)
    settings = DecisionSettings(**{**options.decision_settings(), "seed": seed,
                                   "lower_time": None, "deadlines": None,
                                   "lower_work": int(HIPPO_REPLAN_BOUND_S * WORK_PER_SECOND)})
    # cold: a search stopped by its work limit leaves floors and witnesses in the lower
    # level's memory that would let a later decision on the state reach further
    scheduler.forget()
    try:
        plans = [plan for plan, _ in scheduler.plans(instance, (1.0, 0.0, 0.0),
                                                     settings=settings)]
    except NoFeasiblePlan:  # none found within the work limit, or none within budget
        return None
    if not plans:
        return None
    result = evaluate_plans(instance, plans)
    order = sorted(range(len(plans)), key=lambda i: (result.step_time_s[i],
                                                     result.gpus[i], result.comm_cost[i]))
    return next((plans[i] for i in order if result.admissible[i]), None)


# ---- the registry -------------------------------------------------------------------------

# The committed exact front, scored like a method so that every table shows what the ground
# truth achieves; its latency is the solver wall time in the front's provenance.
# Online, the reference re-plans as the exact engine's least step time of each state.
register(Method(REFERENCE, "the committed exact front (reference); online: the certified "
                f"least step time of each state within {EXACT_REPLAN_LIMIT_S:g} s", None,
                replan=_exact_replan, prepare=_exact_warm_up,
                decision_bound_s=EXACT_REPLAN_LIMIT_S))
register(Method("nsga2", "NSGA-II with repair (solvers.nsga2)", _nsga2, Nsga2Options,
                seeded=True, replan=_nsga2_replan, decision_bound_s=10.0))
_BASELINES = {  # name: (description, a GA seeded per unit, can re-plan)
    "single-domain": ("best plan inside one domain", False, True),
    "oblivious": ("network-oblivious static chain", False, True),
    "greedy": ("network-aware greedy placement", False, True),
    "sailor": ("Sailor-like DP planner", False, True),
    "dtfm": ("DT-FM-like GA with open-loop TSP order", True, True),
    # its plans change the optimiser: no pipeline for the online simulator to run
    "diloco": ("DiLoCo replicas synchronised every H steps (changes the optimiser)", False,
               False),
}
assert set(_BASELINES) == set(BASELINES), "every baseline of solvers.baselines is declared"
for _name, (_description, _seeded, _replans) in _BASELINES.items():
    register(Method(_name, _description, _baseline(_name, genetic=_seeded), seeded=_seeded,
                    replan=_baseline_replan(_name, _seeded) if _replans else None))
register(Method(
    "hippo",
    "Hi-PPO agent: a budget sweep (GPU budget below each plan's GPUs, cost budgets at each "
    "GPU level) and one plan per suite preference (rl.decide); each decision: the lower "
    "level's plans (exact DP) for the --hippo-pairs pairs the policy ranks first, then, in "
    "its order within --hippo-lower-time (or --hippo-lower-work units of DP work; "
    "--hippo-deadlines: the deadline of the state's kind), every pair a DP run cannot prove "
    "slower, and the policy's own plan where the lower level finds none or runs out of time "
    "(not the latter with --no-hippo-fallback; always with --hippo-policy-plan); "
    "--hippo-samples adds sampled plans, --hippo-polish their local-search optima",
    _hippo, HippoOptions, seeded=lambda options: options.samples > 0,
    unavailable=_hippo_unavailable, replan=_hippo_replan, prepare=_hippo_scheduler,
    decision_bound_s=HIPPO_REPLAN_BOUND_S,
    replan_fixed=("--hippo-lower-time", "--hippo-lower-work", "--hippo-deadlines",
                  "--hippo-resume", "--no-hippo-resume")))

ALL_METHODS = list(METHODS)


def default_options() -> dict[str, MethodOptions]:
    return {name: method.options_type() for name, method in METHODS.items()}


def options_from_args(args: argparse.Namespace) -> dict[str, MethodOptions]:
    """Every method's options from flags its options class added to the parser."""
    return {name: method.options_type.from_args(args) for name, method in METHODS.items()}


def add_method_arguments(parser: argparse.ArgumentParser) -> None:
    """Every method's flags, each options class once."""
    for options_type in dict.fromkeys(method.options_type for method in METHODS.values()):
        options_type.add_arguments(parser)


def check_method_flags(args: argparse.Namespace, used: list[str]) -> None:
    """Refuses a method flag set (to other than its default) where no method in ``used``
    reads it: ``--checkpoint`` without Hi-PPO would otherwise be ignored in silence."""
    read = {METHODS[name].options_type for name in used}
    for options_type in dict.fromkeys(method.options_type for method in METHODS.values()):
        if options_type in read:
            continue
        for flag, _ in _flags_set(args, options_type):
            owners = [n for n, m in METHODS.items() if m.options_type is options_type]
            raise InputError(f"{flag}: an option of {' and '.join(owners)}, which "
                             "this run does not use")


def check_replan_flags(args: argparse.Namespace, planners: list[str]) -> None:
    """Refuses a flag that the re-plans of a method in ``planners`` do not read
    (:attr:`Method.replan_fixed`): it would be ignored in silence."""
    for name in dict.fromkeys(planners):
        method = METHODS[name]
        for flag, options in _flags_set(args, method.options_type):
            if set(options) & set(method.replan_fixed):
                raise InputError(f"{flag}: {name}'s online re-plans do not read it (one "
                                 "decision each, its DP work their decision bound's), so "
                                 "it would be ignored; it is for python -m "
                                 "evaluation.pareto_coverage")


def _flags_set(args: argparse.Namespace, options_type: type[MethodOptions]):
    """The flags of ``options_type`` that ``args`` sets to other than their default, each
    as typed (a --no-X of a boolean pair sets False) with all its option strings."""
    flags = argparse.ArgumentParser(add_help=False)
    options_type.add_arguments(flags)
    for action in flags._actions:
        value = getattr(args, action.dest, action.default)
        if value != action.default:
            yield next((o for o in action.option_strings if o.startswith("--no-")
                        and value is False), action.option_strings[0]), action.option_strings


def unavailable_methods(options: dict[str, MethodOptions]) -> dict[str, str]:
    """The methods that cannot run with ``options``, and why."""
    return {name: why for name, method in METHODS.items()
            if (why := method.unavailable(options[name])) is not None}


MISSING: dict[str, str] = unavailable_methods(default_options())
"""The methods that cannot run with their default options in this installation (a
``--checkpoint`` can make Hi-PPO one that can)."""


def check_methods(names: list[str]) -> list[str]:
    """The known names among ``names``; raises ValueError naming an unknown one."""
    for name in names:
        if name not in METHODS:
            raise ValueError(f"--methods: unknown method {name!r}; choose from "
                             f"{', '.join(ALL_METHODS)}")
    return names
