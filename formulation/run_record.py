"""A training run's plain data and its policy's contract (:mod:`formulation.training_run`):
why a policy is asked (:class:`Trigger`), its answer (:class:`Replan`), the re-planning
policy a run asks (:class:`Policy`), the moments a run stops to look (:class:`Point`,
:class:`SavePoint`) and what a run records (:class:`Segment`, :class:`RunRecord`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol

from formulation.instance import Instance
from formulation.plan import Plan


class Trigger(StrEnum):
    """Why a policy is asked."""

    START = "start"  # the run begins
    CHANGE = "change"  # the state changed; the plan still runs
    TIMER = "timer"  # a time the policy asked for (Policy.next_timer)
    NOTICE = "notice"  # a load change is announced; the state given is the announced one
    INTERRUPTED = "interrupted"  # the plan lost GPUs and stopped (after detection)
    WAITING = "waiting"  # no plan runs; the state changed


@dataclass(frozen=True)
class Replan:
    """A policy's answer: the plan to run (None: none found, wait), the decision time the
    run is charged (the planner's declared bound) and the measured wall time (reported)."""

    plan: Plan | None
    charged_s: float
    latency_s: float


class Policy(Protocol):
    """A re-planning policy: stateful, asked at every change, timer and interruption."""

    name: str
    oracle: bool
    checkpoint_interval_s: float

    def observe(self, now: float, state: Instance, plan: Plan | None, trigger: Trigger,
                deadline_s: float | None = None) -> Replan | None:
        """Keep ``plan`` (None) or return a new decision; ``state`` is the instance as it is
        observed at ``now`` (links, free GPUs), or as announced for ``deadline_s`` (a
        notice: a switch must be done by then)."""

    def next_timer(self, now: float) -> float:
        """The next time after ``now`` the policy wants to be asked (inf: never)."""


@dataclass
class Segment:
    start_s: float
    end_s: float
    kind: str  # step, partial, lost, checkpoint, switch, stopped, waiting
    plan: int | None = None  # index into RunRecord.plans
    tokens: float = 0.0
    rolled_back: bool = False


@dataclass
class RunRecord:
    """A run's timeline and what happened in it (plain data)."""

    policy: str
    horizon_s: float
    tokens_per_step: float
    plans: list[Plan] = field(default_factory=list)
    segments: list[Segment] = field(default_factory=list)
    decisions: list[dict] = field(default_factory=list)
    interruptions: list[dict] = field(default_factory=list)
    switches: list[dict] = field(default_factory=list)

    def plan_index(self, plan: Plan) -> int:
        if plan not in self.plans:
            self.plans.append(plan)
        return self.plans.index(plan)


@dataclass(frozen=True)
class Point:
    """A moment the run stops to look: a state change, a policy timer or a notice."""

    time_s: float
    trigger: Trigger
    effective_s: float | None = None  # a notice: when the announced change takes effect


@dataclass(frozen=True)
class SavePoint:
    """A checkpoint inside a step: before an announced change takes the plan's GPUs, or
    the periodic one where a step is longer than the interval."""

    time_s: float  # a micro-batch boundary: the step's micro-batches before it are kept
    change_s: float | None  # the announced change it is for (None: a periodic one)
    kept: float  # the share of the step's micro-batches done by then
    pause_s: float  # training stops: the gradients' copy, the state's beyond the step
    durable_s: float  # when the store holds it
