"""The methods the evaluation scores, behind one interface.

A method turns one instance state into its plans: a *decision* is one call, and its
wall time is the method's decision latency (a whole front for NSGA-II and the baselines).
Each :class:`Method` returns a :class:`MethodRun`: the front of its feasible plans (scored
by the evaluator), how many plans it returned and how many were feasible, and for anytime
methods the hypervolume it had reached over time.

``hippo`` is the learned scheduler (:mod:`rl.decide`), scored with the shipped checkpoint;
where that file is missing the evaluation reports the method as missing instead of scoring
it.
"""

from __future__ import annotations

import importlib.util
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from formulation.families import score
from formulation.instance import Instance
from solvers.baselines import METHODS as BASELINES
from solvers.baselines import GaSettings, baseline_front
from solvers.front import Front
from solvers.nsga2 import Nsga2Settings, nsga2_front


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
class Method:
    name: str
    seeded: bool  # whether different seeds give different results
    run: Callable[[Instance, int, dict | None, dict], MethodRun] | None
    """(instance, seed, reference normalisation, options) -> MethodRun; None for the
    reference itself."""
    description: str


def _nsga2(instance: Instance, seed: int, normalisation: dict | None,
           options: dict) -> MethodRun:
    settings = Nsga2Settings(seed=seed, **options.get("nsga2", {}))
    front = nsga2_front(instance, settings, normalisation)
    provenance = front.provenance
    anytime = list(zip(provenance["elapsed_s_per_generation"],
                       provenance["hypervolume_per_generation"], strict=True))
    if provenance["descent"] is not None:  # the descent's archive is the last anytime point
        anytime.append((provenance["wall_time_s"], provenance["hypervolume_after_descent"]))
    return MethodRun(front, len(front.points), len(front.points), anytime)


def _baseline(name: str) -> Callable[[Instance, int, dict | None, dict], MethodRun]:
    def run(instance: Instance, seed: int, normalisation: dict | None,
            options: dict) -> MethodRun:
        extra = {"settings": GaSettings(seed=seed)} if name == "dtfm" else {}
        front = baseline_front(instance, name, **extra)
        decisions = front.provenance["decisions"]
        return MethodRun(front, decisions,
                         decisions - len(front.provenance["infeasible_decisions"]))
    return run


_SCHEDULERS: dict[str, object] = {}  # loaded policies, one per checkpoint and process


def _hippo(instance: Instance, seed: int, normalisation: dict | None,
           options: dict) -> MethodRun:
    from formulation.evaluator import evaluate_plans
    from rl.decide import (
        DEFAULT_CHECKPOINT,
        SWEEP_PREFERENCES,
        DecisionSettings,
        Scheduler,
        sweep_front,
    )
    from rl.env import NoPlanWithinBudget
    from rl.masks import NO_BUDGETS

    hippo = options.get("hippo", {})
    checkpoint = str(hippo.get("checkpoint") or DEFAULT_CHECKPOINT)
    scheduler = _SCHEDULERS.get(checkpoint)
    if scheduler is None:
        scheduler = _SCHEDULERS[checkpoint] = Scheduler(checkpoint)
    settings = DecisionSettings(**{**hippo.get("settings", {}), "seed": seed})
    scheduler.forget()  # every front a cold one: nothing found for an earlier one kept
    latencies = []

    def decide(weights, budgets):  # one timed decision
        start = time.perf_counter()
        try:
            return scheduler.plans(instance, weights, budgets, settings)
        finally:
            latencies.append(time.perf_counter() - start)

    # the budget sweep (epsilon-constraint-like), then one decision per suite preference
    plans, _ = sweep_front(decide, lambda plan: float(evaluate_plans(instance, [plan])
                                                       .comm_cost[0]),
                           SWEEP_PREFERENCES, hippo.get("cost_steps", 4))
    for weights in options["preferences"]:
        try:
            plans += [plan for plan, _ in decide(weights, NO_BUDGETS)]
        except NoPlanWithinBudget:  # the instance's own cost budget admits no plan
            break
    front = Front.from_plans(instance, plans, "heuristic")
    feasible = int(score(instance, plans)[1].sum()) if plans else 0
    return MethodRun(front, len(plans), feasible, decision_latencies=latencies)


DESCRIPTIONS = {
    "nsga2": "NSGA-II with repair (solvers.nsga2)",
    "single-domain": "best plan inside one domain",
    "oblivious": "network-oblivious static chain",
    "greedy": "network-aware greedy placement",
    "sailor": "Sailor-like DP planner",
    "dtfm": "DT-FM-like GA with open-loop TSP order",
    "diloco": "DiLoCo replicas synchronised every H steps (changes the optimiser)",
    "hippo": "Hi-PPO agent: a budget sweep (GPU budget below each plan's GPUs, cost budgets "
             "at each GPU level) and one plan per suite preference (rl.decide); each "
             "decision: the lower level's plans (exact DP) for the --hippo-pairs pairs the "
             "policy ranks first, then, in its order within --hippo-lower-time, every pair a "
             "DP run cannot prove slower, and the policy's own plan where the lower level "
             "finds none or runs out of time (always with --hippo-policy-plan); "
             "--hippo-samples adds sampled plans, --hippo-polish their local-search optima",
}
METHODS: dict[str, Method] = {
    # The committed exact front, scored like a method so that every table shows what the
    # ground truth achieves; its latency is the solver wall time in the front's provenance.
    "exact": Method("exact", False, None, "the committed exact front (reference)"),
    "nsga2": Method("nsga2", True, _nsga2, DESCRIPTIONS["nsga2"]),
    **{name: Method(name, name == "dtfm", _baseline(name), DESCRIPTIONS[name])
       for name in BASELINES},
}
# Methods the evaluation should score but cannot yet: reported, never silently dropped.
MISSING: dict[str, str] = {}
_RL = importlib.util.find_spec("rl")  # found without importing torch
HIPPO_CHECKPOINT = (Path(_RL.submodule_search_locations[0]) / "checkpoints" / "hi_ppo.pt"
                    if _RL is not None else None)
if HIPPO_CHECKPOINT is None:
    MISSING["hippo"] = "the Hi-PPO agent (package rl) is not installed"
else:
    METHODS["hippo"] = Method("hippo", False, _hippo, DESCRIPTIONS["hippo"])
    if not HIPPO_CHECKPOINT.is_file():  # scored only with --checkpoint then
        MISSING["hippo"] = (f"no Hi-PPO checkpoint at {HIPPO_CHECKPOINT} (train one with "
                            "python -m rl.train --out that path, or pass --checkpoint)")
ALL_METHODS = [*METHODS, *(name for name in MISSING if name not in METHODS)]


def check_methods(names: list[str]) -> list[str]:
    """The known names among ``names``; raises ValueError naming an unknown one."""
    for name in names:
        if name not in METHODS and name not in MISSING:
            raise ValueError(f"--methods: unknown method {name!r}; choose from "
                             f"{', '.join(ALL_METHODS)}")
    return names
