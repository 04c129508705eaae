"""How a Hi-PPO decision searches (:class:`DecisionSettings`), beyond the upper level's
greedy episode: the lower level's pairs and limits, sampled and polished episodes, the
policy's own plan. :mod:`rl.scheduler` makes the decisions; the evaluation, the scripts and
``python -m rl.decide`` read the settings from here too."""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass

import numpy as np

from solvers.chain import MAX_DEADLINE_S, MAX_WORK

# bounds on a decision's work: each sampled episode holds its environment in memory
MAX_SAMPLES = 1024
MAX_POLISH = 1000


class StateKind(enum.Enum):
    """What a scheduler knows of a request's instance state when it decides (the value:
    the :class:`Deadlines` field)."""

    NEW_INSTANCE = "new_instance"
    """No decision on the instance yet (its cold start falls inside the decision). An
    instance is all of it but its free GPUs and its links' bandwidth and latency
    (:meth:`rl.env.InstanceStatics.key`): a change of the links' prices makes a new one."""
    NEW_STATE = "new_state"
    """The instance was decided on other states only: its links' bandwidth or latency or
    its free GPUs changed (the lower level starts from the plans kept from those
    states)."""
    KNOWN_STATE = "known_state"
    """A decision on this very state was made before: a new preference or budget."""


@dataclass(frozen=True)
class Deadlines:
    """Seconds from a decision's start until which its lower level may run, by what the
    scheduler knows of the state (:class:`StateKind`). The defaults are issue 14's
    latency targets at the p99 (100, 20 and 10 ms) less 10, 6 and 3 ms for what a
    decision does after its lower level stops (the run in progress finishing its step,
    the candidates scored), set from ``scripts/bench_hippo.py --deadlines`` runs at K = 20
    here so that the p99s stay below the targets (README, "Decisions under a deadline").
    Past its deadline a pair keeps the best plan its runs found; the decision is cut short
    (:meth:`rl.scheduler.Scheduler.resume` goes on from it, without the deadlines)."""

    new_instance: float = 0.09
    new_state: float = 0.014
    known_state: float = 0.007

    def __post_init__(self):
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if not (isinstance(value, int | float) and not isinstance(value, bool)
                    and 0 < value <= MAX_DEADLINE_S):
                raise ValueError(f"deadlines.{field.name} must be a number of seconds in "
                                 f"(0, {MAX_DEADLINE_S:g}], got {value!r}")

    def of(self, kind: StateKind) -> float:
        return getattr(self, kind.value)


@dataclass(frozen=True)
class DecisionSettings:
    """How a decision searches beyond the upper level's greedy episode (:data:`POLICY_ONLY`:
    the policy alone, building every stage itself)."""

    pairs: int = 1
    """The lower level (:mod:`rl.lower`) places the stages of this many (dp, micro-batch)
    pairs, those the upper level ranks first, whatever the bound says, except that with
    ``exhaust`` one a plan already known for the state proves slower is skipped (README:
    1 and 2 give the same coverage with the exhaust, 1 the shorter fronts)."""
    lower_time: float | None = 0.95
    """Seconds from the start of a decision until which the lower level may run, all its
    pairs together (None: no limit); past it, a pair keeps the best plan its DP runs
    found. The seeds' bound on an inter-domain decision is 1 s: the DP runs stop at the
    deadline within milliseconds, and the rest is for the policy's own plan after them
    where they ran out of time. The policy's ranking, and any ``samples``, ``starts`` and
    ``polish`` episodes, run before the lower level within this time."""
    lower_work: int | None = None
    """Units of DP work (:data:`solvers.chain.WORK_PER_SECOND` about a second here) the
    lower level may spend in one decision, all its pairs together (None: no limit): a
    limit counted, not timed, so that a decision is the same on any machine (the online
    re-plans use it); with ``lower_time`` too, whichever ends first."""
    samples: int = 0
    """Episodes sampled from the policy besides the greedy one."""
    seed: int = 0
    """Seed of the sampling."""
    polish: int = 0
    """Rounds of local search on each episode's plan (:mod:`solvers.local_search`)."""
    starts: bool = False
    """One greedy episode per (dp, micro-batch) pair, as POMO's multiple starts."""
    exhaust: bool = True
    """After the first ``pairs`` pairs, the lower level also places, in the upper level's
    order while time is left, every further pair that one DP feasibility run cannot prove
    slower than the best plan found (:func:`rl.lower.beaten`, by more than the period
    precision)."""
    policy_plan: bool = False
    """Whether the upper level also builds a plan of its own (the greedy episode, one
    forward pass per segment: about 30 ms at K = 20) where the lower level places pairs.
    Off, the upper level only ranks the pairs (one forward pass) and builds its plan only
    where the lower level finds none or (with ``fallback``) runs out of ``lower_time``;
    always on with ``pairs`` 0, ``samples``, ``starts`` or ``polish``."""
    fallback: bool = True
    """Whether the upper level builds its own plan (the greedy episode) where the lower
    level ran out of ``lower_time`` or work with a plan found: at the 1 s limit on the
    full space the policy's plan is sometimes the better one (README); under a deadline
    of milliseconds its episode would cost more than the deadline. Where the lower level
    found no plan, the policy's is built regardless."""
    deadlines: Deadlines | None = None
    """Where set, the lower level's time is the deadline of the request's kind of state
    (at most ``lower_time``): decisions within milliseconds, at the cost the README
    measures (:data:`REAL_TIME`); a resumed decision has ``lower_time`` instead. A front
    sweeps with the settings it is given: with these, each of its decisions after the
    first has the known state's deadline."""

    def __post_init__(self):
        for name, most in (("pairs", 2 ** 31), ("samples", MAX_SAMPLES),
                           ("polish", MAX_POLISH)):
            value = getattr(self, name)
            if not isinstance(value, int | np.integer) or isinstance(value, bool) \
                    or value < 0:
                raise ValueError(f"{name} must be an integer >= 0, got {value!r}")
            if value > most:
                raise ValueError(f"{name} must be <= {most}, got {value!r}")
        if self.lower_time is not None and not (isinstance(self.lower_time, int | float)
                                                and 0 < self.lower_time <= MAX_DEADLINE_S):
            raise ValueError(f"lower_time must be a number of seconds in (0, "
                             f"{MAX_DEADLINE_S:g}], got {self.lower_time!r}")
        if self.lower_work is not None and not (
                isinstance(self.lower_work, int) and not isinstance(self.lower_work, bool)
                and 1 <= self.lower_work <= MAX_WORK):
            raise ValueError(f"lower_work must be an integer in [1, {MAX_WORK}], got "
                             f"{self.lower_work!r}")
        if self.deadlines is not None and not isinstance(self.deadlines, Deadlines):
            raise ValueError(f"deadlines must be Deadlines or None, got {self.deadlines!r}")
        for name in ("exhaust", "policy_plan", "fallback", "starts"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be true or false, got "
                                 f"{getattr(self, name)!r}")

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


HIERARCHICAL = DecisionSettings()
POLICY_ONLY = DecisionSettings(pairs=0)
# decisions within issue 14's latency targets: the lower level until the deadline of the
# request's kind, and no episode of the policy's after it where it found a plan
REAL_TIME = DecisionSettings(deadlines=Deadlines(), fallback=False)
