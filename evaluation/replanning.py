"""Re-planning policies: when a training run changes its plan, and with which planner.

A policy (:class:`formulation.run_record.Policy`) is asked at the run's start, at every
state change and timer it asks for, and when its plan is interrupted; it keeps its plan or
returns a new decision. Every policy here is one of three *kinds* with any *planner* (a
method of :mod:`evaluation.methods` that re-plans: Hi-PPO, Sailor-like, greedy, the exact
engine with a time limit, NSGA-II, ...):

* ``static``: plans once at the start, never again; an interrupted plan waits until its
  GPUs are free again (the static evaluation's situation).
* ``periodic``: re-plans every ``period_s``, and when its plan is interrupted or cannot run.
* ``event``: re-plans when a change is large enough to matter, when its plan is interrupted
  or cannot run: the predicted slowdown of its plan in the new state (closed form) reaches
  ``threshold``, or the free GPUs moved by ``threshold`` of what it planned with, or its
  plan has lost its headroom.

The re-planning kinds plan with ``headroom``: the planner sees each domain's free GPUs less
that share, so that a load swing does not take the plan's GPUs at once. Where a plan runs,
a decision weighs the planner's plan for the state, its plan within the running plan's
domains (little state to move) and the running plan itself (where it still fits within its
headroom) by the tokens each would train within ``payback_s`` (closed-form rates in the
state) less those lost while training stops to move state: a migration happens only where
it pays for itself, and only where it stops training at most ``max_stop_s``, unless the
running plan must go and no candidate is that quick. On a notice that the running plan
must go, one more is weighed the same way: keeping it, so that the change stops it and
the job restarts on the planner's plan, prepared during the notice
(:mod:`formulation.training_run`), its stop estimated as the run charges it where the
state it reads is written once: where the plan's nodes can fetch the weights and the
optimizer's states during the notice (after the running plan's state is written), their
copy to the GPUs and the read of the gradients, else the read of the whole state, from
host memory where a layer stays and from the store otherwise; then the cut-over. (Where
steps end inside the notice, the job checkpoints at each step boundary before the change,
each after the first the step's gradients alone, which the fetch reads too: the estimate
leaves those reads out, and the wait for the first boundary. The work the change rolls
back is left out; the plan is the planner's for the
announced state, where the job restarts on its plan for the GPUs free both now and after
the change, which may be smaller.) Where no plan leaves the headroom, the
planner is asked again without it.

:class:`Oracle`: re-plans at every change with the exact engine, no headroom, for free
(:mod:`formulation.training_run` charges it nothing): the upper bound of the KPIs.

Planner answers are kept per process by (planner, state): the same state asks the same
planner once (the oracle and the exact planner share them). The run is charged each
planner's declared decision bound (:attr:`evaluation.methods.Method.decision_bound_s`);
the measured wall time is reported apart (a kept answer reports the time it took first).
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass

import numpy as np

from evaluation.methods import METHODS, REFERENCE, MethodOptions
from formulation.costmodel import PERSISTENT_BYTES_PER_PARAM
from formulation.evaluator import evaluate_plans
from formulation.instance import Instance
from formulation.plan import Plan
from formulation.run_costs import (
    DEFAULT_COSTS,
    MID_STEP_BYTES_PER_PARAM,
    RunCosts,
    kept_share,
    migration_bytes,
    migration_time,
    read_after_fetch,
    restore_time,
    storage_time,
)
from formulation.run_record import Replan, Trigger

KINDS = ("static", "periodic", "event")
ORACLE = "oracle"
MAX_ANSWERS = 100_000


@dataclass(frozen=True)
class PolicySettings:
    """How the re-planning kinds decide (module doc)."""

    period_s: float = 1800.0
    """Periodic: seconds between re-planning decisions."""
    threshold: float = 0.1
    """Event-triggered: the predicted slowdown or move of free GPUs that triggers."""
    headroom: float = 0.0
    """Share of each domain's free GPUs a re-planning kind leaves unused, so that a load
    swing takes a plan's GPUs less often (0: announced load changes are met by switching
    before they take effect, the quick suite's best; README)."""
    payback_s: float = 1800.0
    """A migration must pay for itself within this time."""
    max_stop_s: float = 20.0
    """A switch may stop training at most this long (the seeds' 20 s recovery); a plan that
    must go takes a longer one only where no candidate is this quick."""
    checkpoint_interval_s: float = 90.0
    """Checkpoints of every policy's runs (none for the oracle): a failure loses at most
    this much work and the store's write. The copy of the state to host memory runs
    alongside the next step (the state holds still until its update); inside a long step,
    training stops only while the gradients are copied
    (:mod:`formulation.training_run`), so checkpoints this often cost little. On the quick
    suite, 90 s keeps the failure interruption of the 70B instance's 9-minute steps within
    the seeds' 10 minutes and 300 s does not, for about half a point of stability
    (README)."""


POLICY_RANGES = {"period_s": (1.0, 1e7), "threshold": (0.0, 10.0), "headroom": (0.0, 0.95),
                 "payback_s": (0.0, 1e7), "max_stop_s": (0.0, 1e7),
                 "checkpoint_interval_s": (1.0, 1e7)}

_ANSWERS: dict[tuple, tuple[Plan | None, float]] = {}  # (planner, state) -> plan, seconds


class Planner:
    """A method of the registry deciding for one state, its answers kept per process."""

    def __init__(self, method: str, options: MethodOptions, seed: int = 0):
        self.method = METHODS[method]
        if not self.method.replans:
            raise ValueError(f"{method} cannot re-plan")
        self.name, self.options, self.seed = method, options, seed
        self.bound_s = self.method.bound_s(options)
        self.method.prepare(options)

    def decide(self, state: Instance) -> tuple[Plan | None, float, float]:
        """(its plan for ``state``, the wall time the decision took when it was made, the
        wall time spent now: 0 for a kept answer)."""
        key = (self.name, repr(self.options), self.seed, state.content_hash())
        spent = 0.0
        if key not in _ANSWERS:
            start = time.perf_counter()
            plan = self.method.replan(state, self.seed, self.options)
            spent = time.perf_counter() - start
            if len(_ANSWERS) >= MAX_ANSWERS:
                _ANSWERS.clear()
            _ANSWERS[key] = (plan, spent)
        plan, seconds = _ANSWERS[key]
        return plan, seconds, spent


def with_headroom(state: Instance, headroom: float) -> Instance:
    """``state`` with each domain's free GPUs less ``headroom`` of them (rounded down)."""
    if headroom <= 0:
        return state
    free = np.floor(state.free_gpus * (1.0 - headroom) + 1e-9).astype(np.int64)
    return state.with_link_state(free_gpus=free)


def rate(state: Instance, plan: Plan) -> float:
    """Tokens per second of ``plan`` in ``state`` (closed form; free GPUs aside)."""
    step = float(evaluate_plans(state.replace(trace=None), [plan]).step_time_s[0])
    return state.training.global_batch * state.model.seq_len / step


def resize_in_place(state: Instance, plan: Plan) -> Plan | None:
    """``plan`` resized to ``state`` with no state crossing the WAN: every layer stays in
    its domain, the data parallelism and every stage's tensor parallelism scale (within the
    search space), the widest stages of a domain short of GPUs narrow until it fits, and
    recomputation rises where memory then needs it. The fastest such plan the evaluator
    admits, or None: a load change is met by growing or shrinking in place."""
    search = state.search
    variants = []
    for dp in search.dp:
        if state.training.global_batch % (dp * plan.micro_batch):
            continue
        for scale in (0.25, 0.5, 1.0, 2.0, 4.0):
            stages = [dataclasses.replace(stage, tp=_nearest(search.tp, stage.tp * scale))
                      for stage in plan.stages]
            stages = _narrow(state, dataclasses.replace(plan, dp=dp), stages)
            if stages is None:
                continue
            for recompute in (None, *search.recompute):
                variants.append(dataclasses.replace(plan, dp=dp, stages=tuple(
                    stage if recompute is None
                    else dataclasses.replace(stage, recompute=recompute) for stage in stages)))
    variants = list(dict.fromkeys(variants))
    if not variants:
        return None
    result = evaluate_plans(state, variants)
    ok = np.flatnonzero(result.admissible)
    return variants[int(ok[np.argmin(result.step_time_s[ok])])] if len(ok) else None


def _nearest(values: tuple[int, ...], target: float) -> int:
    return min(values, key=lambda v: (abs(math.log(v / target)), v))


def _narrow(state: Instance, plan: Plan, stages: list) -> list | None:
    """``stages`` with the widest stage of a domain short of GPUs halved until each fits."""
    while True:
        used = dataclasses.replace(plan, stages=tuple(stages)).gpus_by_domain(
            state.num_domains)
        short = set(np.flatnonzero(used > state.free_gpus).tolist())
        if not short:
            return stages
        narrower = [(stage.tp, j) for j, stage in enumerate(stages)
                    if stage.domain in short and stage.tp // 2 in state.search.tp
                    and stage.tp > 1]
        if not narrower:
            return None
        _, j = max(narrower)
        stages[j] = dataclasses.replace(stages[j], tp=stages[j].tp // 2)


class ReplanningPolicy:
    """One kind (static, periodic, event) with one planner (module doc)."""

    oracle = False

    def __init__(self, kind: str, planner: Planner, settings: PolicySettings = PolicySettings(),
                 costs: RunCosts = DEFAULT_COSTS):
        if kind not in KINDS:
            raise ValueError(f"policy kind must be one of {KINDS}, got {kind!r}")
        self.kind, self.planner, self.settings, self.costs = kind, planner, settings, costs
        self.name = f"{kind}:{planner.name}"
        self.checkpoint_interval_s = settings.checkpoint_interval_s
        self.headroom = 0.0 if kind == "static" else settings.headroom
        self.planned_in: Instance | None = None  # the state the current plan was made in

    def next_timer(self, now: float) -> float:
        if self.kind != "periodic":
            return math.inf
        return (math.floor(now / self.settings.period_s + 1e-9) + 1) * self.settings.period_s

    def _decide(self, state: Instance, plan: Plan | None, time_left: float = math.inf
                ) -> tuple[Plan | None, float]:
        """The plan to run in ``state`` instead of ``plan`` (the same one: keep it), and the
        planners' wall time. Candidates: the planner's plan for the state (less headroom)
        and, where a plan runs, its plan within the running plan's domains (little state
        to move) and the running plan resized in place (:func:`resize_in_place`: none to
        move); each scores its closed-form rate over ``payback_s`` less the time
        training stops to switch to it. The running plan stays a candidate where it fits
        within its headroom. With ``time_left`` (a notice), a switch must be decided,
        prepared and done in that time; where the running plan must go, keeping it
        stands for the restart on the planner's plan that the change then brings,
        prepared meanwhile, scored by that plan's rate less the restart's stop. The wall
        time is the decision's: the planner's (two requests side by side count once, the
        longer) and the weighing."""
        started, spent = time.perf_counter(), 0.0
        planned = with_headroom(state, self.headroom)
        new, seconds, now = self.planner.decide(planned)
        spent += now
        if new is None and self.headroom > 0:  # no plan leaves the headroom: use it all
            planned = state
            new, more, now = self.planner.decide(planned)
            seconds, spent = seconds + more, spent + now
        candidates = [new]
        if plan is not None:
            inside = np.zeros(state.num_domains, dtype=bool)
            inside[[stage.domain for stage in plan.stages]] = True
            local, more, now = self.planner.decide(planned.with_link_state(
                free_gpus=np.where(inside, planned.free_gpus, 0)))
            candidates += [local, resize_in_place(state, plan)]
            seconds, spent = max(seconds, more), spent + now
        if plan is None:
            return new, seconds + time.perf_counter() - started - spent
        must_go = bool(np.any(plan.gpus_by_domain(state.num_domains) > state.free_gpus))
        scored = []  # (within the stop bound, score, candidate)
        if not self._at_risk(state, plan):
            scored.append((True, rate(state, plan) * self.settings.payback_s, plan))
        for candidate in candidates:
            if candidate is None or candidate == plan:
                continue
            stop = migration_time(state, migration_bytes(state, plan, candidate)) \
                + self.costs.switch_s
            if self.planner.bound_s + self.costs.prepare_s + stop > time_left:
                continue
            within = stop <= self.settings.max_stop_s
            if within or must_go:
                scored.append((within, rate(state, candidate)
                               * max(0.0, self.settings.payback_s - stop), candidate))
        if must_go and new is not None and new != plan \
                and self.planner.bound_s + self.costs.prepare_s <= time_left < math.inf:
            # let the announced change stop the plan and restart on ``new``, prepared
            # meanwhile: the stages that stay read their state from host memory
            stop = self._prepared_restart_stop(state, plan, new, time_left)
            scored.append((stop <= self.settings.max_stop_s,
                           rate(state, new) * max(0.0, self.settings.payback_s - stop), plan))
        # within the stop bound if any candidate is (a plan that must go may exceed it)
        best = max(scored, key=lambda item: item[:2], default=(True, 0.0, plan))[2]
        return best, seconds + time.perf_counter() - started - spent

    def _prepared_restart_stop(self, state: Instance, plan: Plan, new: Plan,
                               time_left: float) -> float:
        """The stop of a restart on ``new`` that the announced change forces, prepared from
        the decision on (:mod:`formulation.training_run`): where the running plan's state
        can be written to the store and the nodes' fetch of it (from the store, or host
        memory where a layer stays) end within ``time_left`` after the decision, only
        their copy to the GPUs and the gradients of a checkpoint inside the step are left
        at the change; else the whole read. The cut-over follows. (The fetch begins once
        the state is durable; the write counted is that of a checkpoint taken at the
        decision, its copy to host memory, the wait for its step boundary and the store's
        other writes left out. Where steps end inside the notice, the run checkpoints each
        later step's gradients too, which the fetch reads before the change: they are
        left out as well, so the estimate is optimistic there.)"""
        kept = kept_share(plan, state.free_gpus)
        fetch = storage_time(state, plan, self.costs) \
            + restore_time(state, new, self.costs, PERSISTENT_BYTES_PER_PARAM, plan, kept)
        if self.planner.bound_s + fetch <= time_left:
            read = read_after_fetch(state, new, self.costs, MID_STEP_BYTES_PER_PARAM, plan,
                                    kept)
        else:
            read = restore_time(state, new, self.costs, MID_STEP_BYTES_PER_PARAM, plan, kept)
        return read + self.costs.switch_s

    def observe(self, now: float, state: Instance, plan: Plan | None, trigger: Trigger,
                deadline_s: float | None = None) -> Replan | None:
        if trigger is Trigger.START or (self.kind != "static" and trigger in (
                Trigger.INTERRUPTED, Trigger.WAITING)):
            new, seconds = self._decide(state, None)
            self.planned_in = state
            return Replan(new, self.planner.bound_s, seconds)
        if self.kind == "static" or plan is None:
            return None
        if self.kind == "event" and not self._triggered(state, plan):
            return None
        if self.kind == "periodic" and trigger is not Trigger.TIMER:
            return None  # a notice or a change: only the clock makes it re-plan
        new, seconds = self._decide(state, plan,
                                    math.inf if deadline_s is None else deadline_s - now)
        self.planned_in = state
        return Replan(new, self.planner.bound_s, seconds)

    def _at_risk(self, state: Instance, plan: Plan) -> bool:
        """Whether ``plan`` uses GPUs beyond the headroom of ``state`` (or beyond them)."""
        used = plan.gpus_by_domain(state.num_domains)
        return bool(np.any(used > with_headroom(state, self.headroom).free_gpus))

    def _triggered(self, state: Instance, plan: Plan) -> bool:
        before = self.planned_in
        if before is None or self._at_risk(state, plan):
            return True
        threshold = self.settings.threshold
        if rate(state, plan) < rate(before, plan) * (1 - threshold):
            return True
        moved = np.abs(state.free_gpus - before.free_gpus).sum()
        return bool(moved >= threshold * max(1, before.free_gpus.sum()))


class Oracle:
    """Re-plans at every change with the exact engine, for free (module doc). A change that
    leaves its plan's links and GPUs as they were and makes no other link or domain better
    (every other plan is then no faster, and none fits where it did not) keeps its plan
    optimal: it is kept without asking the engine."""

    oracle = True
    name = ORACLE
    checkpoint_interval_s = math.inf

    def __init__(self, options: MethodOptions | None = None):
        self.planner = Planner(REFERENCE, options or METHODS[REFERENCE].options_type())
        self.proven: tuple[Instance, Plan] | None = None  # a state and its optimal plan

    def next_timer(self, now: float) -> float:
        return math.inf

    def observe(self, now: float, state: Instance, plan: Plan | None, trigger: Trigger,
                deadline_s: float | None = None) -> Replan | None:
        if self.proven is not None and plan == self.proven[1] \
                and still_optimal(self.proven[0], state, plan):
            return Replan(plan, 0.0, 0.0)
        new, seconds, _ = self.planner.decide(state)
        self.proven = None if new is None else (state, new)
        return Replan(new, 0.0, seconds)


def still_optimal(before: Instance, after: Instance, plan: Plan) -> bool:
    """Whether ``plan``, optimal in ``before``, is optimal in ``after``: its GPUs are free
    and its links (both directions of every boundary) are as they were, and no link got
    faster nor any domain more free GPUs."""
    used = plan.gpus_by_domain(after.num_domains)
    a, b = before.links, after.links
    if np.any(used > after.free_gpus) or np.any(after.free_gpus > before.free_gpus) \
            or np.any(b.bandwidth_gbps > a.bandwidth_gbps) \
            or np.any(b.latency_ms < a.latency_ms):
        return False
    ends = [stage.domain for stage in plan.stages]
    if plan.virtual_stages > 1:  # the last stage feeds the first chunk of the next round
        ends.append(ends[0])
    hops = [(i, j) for i, j in zip(ends, ends[1:], strict=False) if i != j]
    return all(b.bandwidth_gbps[i, j] == a.bandwidth_gbps[i, j]
               and b.bandwidth_gbps[j, i] == a.bandwidth_gbps[j, i]
               and b.latency_ms[i, j] == a.latency_ms[i, j]
               and b.latency_ms[j, i] == a.latency_ms[j, i] for i, j in hops)
