"""What a scheduler carries from one state of an instance to the next: the lower level's
latest plans, which start its search after a change of the load or the WAN links.

A decision on a state the scheduler has not seen places each pair cold: the lower level's
first plan comes from an open run whose period can be several times the least, and its
descent walks down from there (:mod:`rl.lower`). After a change of the links or the load
a pair's least period moves little, so the plans it placed on the instance's earlier
states, re-timed by the new one (and kept only where they are plans of it within the
budgets: :func:`rl.lower.place`), start it near its end. On the generated K = 20 70B
instances a decision after a bandwidth change took 38.9 ms at the median cold, 26.7 ms so
started (README: ``scripts/bench_hippo.py``). What a placement proves (its period floors)
is not carried: it holds for its own state only.

An instance is its :meth:`rl.env.InstanceStatics.key` (all of it but the free GPUs and the
links' bandwidth and latency): every state of it shares its plans' encoding.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable

import numpy as np

from formulation.plan import Plan
from rl.masks import Budgets

# Plans kept per (dp, micro-batch) pair and instance, the latest first: a budget sweep's
# decisions place a pair at many GPU counts, and a tight budget needs a plan within it
KEPT = 16
OFFERED = 4  # those within a request's GPU budget offered, the fastest first
INSTANCES = 64  # instances kept, the least recently decided dropped first

Pair = tuple[int, int]


class StatesDecided:
    """The states of each instance a scheduler decided on, the ``INSTANCES`` latest
    instances and each one's ``STATES`` latest states (what
    :meth:`rl.scheduler.Scheduler.state_kind` reads; a state is a digest of 16 bytes, so
    the whole is at most about 1.5 MB besides the instances' keys)."""

    STATES = 1024

    def __init__(self):
        self._states: OrderedDict[Hashable, dict[Hashable, None]] = OrderedDict()

    def clear(self) -> None:
        self._states.clear()

    def add(self, instance: Hashable, state: Hashable) -> None:
        states = self._states.pop(instance, {})
        states.pop(state, None)
        states[state] = None  # the latest last
        if len(states) > self.STATES:
            del states[next(iter(states))]
        self._states[instance] = states
        if len(self._states) > INSTANCES:
            self._states.popitem(last=False)

    def knows(self, instance: Hashable, state: Hashable | None = None) -> bool:
        """Whether a state of ``instance`` was decided on (with ``state``: that one)."""
        states = self._states.get(instance)
        return bool(states) and (state is None or state in states)


class LatestPlans:
    """The lower level's latest plans per instance and (dp, micro-batch) pair, each with
    the step time it had on the state it was placed on."""

    def __init__(self):
        self._plans: OrderedDict[Hashable, dict[Pair, list[tuple[Plan, float]]]] = \
            OrderedDict()

    def clear(self) -> None:
        self._plans.clear()

    def pairs(self, instance: Hashable) -> set[Pair]:
        """The pairs that have plans kept for ``instance``."""
        return set(self._plans.get(instance, {}))

    def starts(self, instance: Hashable, budgets: Budgets, free_gpus: np.ndarray
               ) -> dict[Pair, list[Plan]]:
        """Per pair, the ``OFFERED`` fastest plans kept for ``instance`` within the GPU
        budget and the state's free GPUs of each domain (whether they are plans of the
        state in all else, and within its cost budget, the lower level checks)."""
        out = {}
        for pair, kept in self._plans.get(instance, {}).items():
            within = [(time, plan) for plan, time in kept
                      if (budgets.gpus is None or plan.gpus() <= budgets.gpus)
                      and (plan.gpus_by_domain(len(free_gpus)) <= free_gpus).all()]
            within.sort(key=lambda item: item[0])  # stable: the latest first among equals
            if within:
                out[pair] = [plan for _, plan in within[:OFFERED]]
        return out

    def add(self, instance: Hashable, plan: Plan, step_time_s: float) -> None:
        """Keep ``plan`` (its step time on the state it was placed on) as the latest of its
        pair for ``instance``."""
        by_pair = self._plans.pop(instance, None)
        if by_pair is None:
            by_pair = {}
            while len(self._plans) >= INSTANCES:
                self._plans.popitem(last=False)
        self._plans[instance] = by_pair
        kept = by_pair.setdefault((plan.dp, plan.micro_batch), [])
        kept[:] = [(plan, step_time_s)] + [item for item in kept if item[0] != plan]
        del kept[KEPT:]
