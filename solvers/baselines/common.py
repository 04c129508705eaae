"""What the baselines share: stage layouts, layer splits, chains, and their decisions.

A baseline builds :class:`~formulation.plan.Plan` objects (or DiLoCo plans) by its own
rules and hands them over as :class:`Decisions`; only the evaluator scores them
(:func:`solvers.baselines.baseline_front`). The coefficients a baseline reasons with (layer
times, memory caps, GPUs per option) come from :func:`solvers.tables.pair_tables`, the same
tables the exact models use, so a baseline never keeps a private cost model.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from formulation.evaluator import evaluate_plans
from formulation.families import AnyPlan
from formulation.instance import Instance
from formulation.plan import Plan, Stage
from solvers.tables import PairTables


@dataclass
class Decisions:
    """What a baseline outputs: the plans it would deploy (one per budget where it ranks by
    its own estimate; all its feasible plans where the evaluator is its ranking, since
    the front then keeps exactly those best under some budget), how many candidate plans it
    scored on the way, and its settings."""

    plans: list[AnyPlan]
    candidates: int
    parameters: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Slot:
    """A pipeline stage before it has layers: its domain and its option index in the pair's
    tables (an option is a (tp, recompute) pair)."""

    domain: int
    option: int


def stage_time(tables: PairTables, option: int, layers: int, first: bool, last: bool) -> float:
    """Forward + backward seconds per micro-batch of a stage (the evaluator's ``c_j``)."""
    return float(layers * tables.layer_time[option] + first * tables.first_time[option]
                 + last * tables.last_time[option])


def min_max_layers(tables: PairTables, slots: Sequence[Slot]) -> list[int] | None:
    """Layer counts for ``slots`` (front to back) that minimise the slowest stage's compute
    and, among those, the total compute, within every stage's memory cap; None if the
    model does not fit.

    A dynamic programme over (stage, start layer): ``best[j][l]`` is the least possible
    slowest stage among stages ``j..S-1`` when stage ``j`` starts at layer ``l``. The
    memory cap of a stage depends on its position from the end (micro-batches in flight)
    and on whether it is the first stage (embedding), as in the exact models.
    """
    count, total = len(slots), tables.layers
    if not 1 <= count <= min(total, tables.positions):
        return None
    caps, times = [], []
    for j, slot in enumerate(slots):
        position = count - 1 - j
        cap = (tables.layer_cap_first if j == 0 else tables.layer_cap)[position, slot.option]
        caps.append(int(cap))
        n = np.arange(total + 1)
        times.append(n * tables.layer_time[slot.option]
                     + (j == 0) * tables.first_time[slot.option]
                     + (j == count - 1) * tables.last_time[slot.option])
    # Two passes: the least slowest stage, then the least total compute under that maximum.
    slowest, _ = _split_dp(caps, times, total, np.maximum)
    if not np.isfinite(slowest):
        return None
    limit = slowest * (1 + 1e-12)
    bounded = [int(min(cap, np.searchsorted(t, limit, side="right") - 1))
               for cap, t in zip(caps, times, strict=True)]
    _, layers = _split_dp(bounded, times, total, np.add)
    return layers


def _split_dp(caps: list[int], times: list[np.ndarray], total: int,
              combine: Callable[[np.ndarray, np.ndarray], np.ndarray]
              ) -> tuple[float, list[int] | None]:
    """Best ``combine``-aggregate (max or sum) of stage times over splits of ``total``
    layers with ``1 <= n_j <= caps[j]``, and the split (None if there is none).

    ``best[l]`` holds the value of the stages after ``j`` from start layer ``l``; one
    (start layer x layer count) array per stage keeps the recursion in numpy."""
    count = len(caps)
    best = np.full(total + 2, np.inf)  # index total + 1: past the end, infeasible
    best[total] = 0.0
    starts = np.arange(total + 1)[:, None]
    choices = []
    for j in reversed(range(count)):
        n = np.arange(1, max(caps[j], 0) + 1)[None, :]
        if n.size == 0:
            return float("inf"), None
        ends = np.minimum(starts + n, total + 1)
        value = combine(times[j][n.ravel()][None, :], best[ends])
        pick = np.argmin(value, axis=1)
        best = np.append(value[np.arange(total + 1), pick], np.inf)
        choices.append(pick + 1)
    choices.reverse()
    if not np.isfinite(best[0]):
        return float("inf"), None
    layers, start = [], 0
    for pick in choices:
        layers.append(int(pick[start]))
        start += layers[-1]
    return float(best[0]), layers


def roomiest(plans: Sequence[Plan]) -> Plan:
    """The plan with the most memory for the model (most GPUs, then full recompute): what a
    baseline deploys as its attempt when none of its plans fits, so that the attempt is
    reported infeasible with its violations rather than silently dropped."""
    return max(plans, key=lambda plan: (plan.gpus(), sum(s.recompute == "full"
                                                         for s in plan.stages)))


def keep_feasible(instance: Instance, candidates: list[Plan],
                  parameters: dict[str, Any] | None = None) -> Decisions:
    """The feasible candidates as decisions, or the roomiest attempt if none is feasible."""
    if not candidates:
        return Decisions([], 0, parameters or {})
    ok = evaluate_plans(instance, candidates).admissible
    plans = [plan for plan, fits in zip(candidates, ok, strict=True) if fits]
    return Decisions(plans or [roomiest(candidates)], len(candidates), parameters or {})


def slots_plan(tables: PairTables, slots: Sequence[Slot], layers: Sequence[int]) -> Plan:
    stages = []
    for slot, n in zip(slots, layers, strict=True):
        tp, recompute = tables.options[slot.option]
        stages.append(Stage(domain=int(slot.domain), layers=int(n), tp=int(tp),
                            recompute=recompute))
    return Plan(dp=tables.dp, micro_batch=tables.micro_batch, stages=tuple(stages))


def domains_by_free_gpus(instance: Instance) -> list[int]:
    """Domain indices, most free GPUs first (index order among equals)."""
    free = [d.free_gpus for d in instance.domains]
    return sorted(range(instance.num_domains), key=lambda k: (-free[k], k))


def nearest_neighbour_chain(start: int, members: Sequence[int],
                            distance: Callable[[int, int], float]) -> list[int]:
    """An order of ``members`` that begins at ``start`` and always moves to the nearest
    member not yet visited (ties by index)."""
    chain, rest = [start], sorted(set(members) - {start})
    while rest:
        nearest = min(rest, key=lambda k: (distance(chain[-1], k), k))
        chain.append(nearest)
        rest.remove(nearest)
    return chain
