"""One plan's evaluation with per-stage detail and named violations (the CLI's JSON).

This is the scalar twin of :func:`formulation.evaluator.evaluate_batch`: numpy's per-call
overhead makes a one-row batch cost about a millisecond, while a decision loop (the RL agent,
checking a MILP solution) needs one plan in under 100 us. Both paths take every number
from the same :class:`~formulation.costmodel.CostModel` functions and assemble them by the
same formulas; ``tests/test_evaluator.py`` checks that they agree on thousands of plans.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from formulation.costmodel import GB
from formulation.evaluator import (
    cost_model,
    derived_metrics,
    interleaved_period,
    limits,
    micro_batches_in_flight,
    pipeline_time,
)
from formulation.feasibility import (
    DomainFacts,
    Kind,
    LinkFacts,
    Mismatch,
    PlanFacts,
    Role,
    StageFacts,
    Violation,
    check_micro_batches,
    mismatches,
    violations,
)
from formulation.instance import Instance
from formulation.plan import Plan


@dataclass(frozen=True)
class Scores:
    """What every plan family's evaluation has: objectives, violations and search-space
    mismatches (:mod:`formulation.feasibility`), derived metrics and the parts of the step
    time."""

    step_time_s: float
    gpus: int
    comm_cost: float
    violations: list[Violation]
    mismatches: list[Mismatch]
    derived: dict[str, float]
    breakdown: dict[str, float]

    @property
    def feasible(self) -> bool:
        """No violation: the plan runs as stated (it may lie outside the search space)."""
        return not self.violations

    @property
    def admissible(self) -> bool:
        """Feasible and within the instance's search space."""
        return not self.violations and not self.mismatches

    @property
    def objectives(self) -> tuple[float, int, float]:
        return (self.step_time_s, self.gpus, self.comm_cost)

    @property
    def violation_kinds(self) -> set[Kind]:
        return {violation.kind for violation in self.violations}

    def to_dict(self) -> dict[str, Any]:
        return {"feasible": self.feasible,
                "violations": [violation.to_dict() for violation in self.violations],
                "within_search_space": not self.mismatches,
                "search_mismatches": [mismatch.to_dict() for mismatch in self.mismatches],
                "step_time_s": self.step_time_s, "gpus": self.gpus, "comm_cost": self.comm_cost,
                **self.derived, "breakdown": self.breakdown}


@dataclass(frozen=True)
class Evaluation(Scores):
    run: dict[str, float]
    plan: Plan
    domain_names: list[str]
    stage_compute_s: list[float]
    stage_memory_bytes: list[float]
    stage_in_flight: list[float]
    usable_memory_gb: float

    @property
    def stage_memory_gb(self) -> list[float]:
        return [x / GB for x in self.stage_memory_bytes]

    @property
    def stages(self) -> list[dict[str, Any]]:
        """Per-stage detail: placement, GPUs, compute per micro-batch, memory and headroom."""
        return [{"domain": self.domain_names[s.domain], "layers": s.layers, "tp": s.tp,
                 "recompute": s.recompute, "gpus": self.plan.dp * s.tp,
                 "compute_s": self.stage_compute_s[j],
                 "in_flight": float(self.stage_in_flight[j]),
                 "memory_gb": memory,
                 "memory_headroom_gb": self.usable_memory_gb - memory}
                for (j, s), memory in zip(enumerate(self.plan.stages), self.stage_memory_gb,
                                          strict=True)]

    def to_dict(self) -> dict[str, Any]:
        return {**super().to_dict(), "run": self.run, "stages": self.stages}


def latency_bound(compute_from_end: list[float], delay_from_end: list[float]) -> float:
    """Scalar form of :func:`formulation.evaluator.latency_bound` (same indexing)."""
    # A window k..j's mean is that of {c_k} and {w_i = c_i + 2 d_i : k < i <= j}. Single
    # windows give max(c) =: b, and a window beats b only if (c_k - b) + sum (w_i - b) > 0:
    # a start whose best such sum (``gain``, a suffix scan) stays <= 0 is skipped (a
    # chain without a slow link after that start).
    count = len(compute_from_end)
    widened = [c + 2 * d for c, d in zip(compute_from_end, delay_from_end, strict=True)]
    best = max(compute_from_end, default=0.0)
    gain = [0.0] * count  # gain[k]: max over j > k of sum_{k<i<=j} (w_i - best)
    ahead = -math.inf
    for k in range(count - 1, -1, -1):
        gain[k] = ahead
        ahead = widened[k] - best + max(0.0, ahead)
    round_trip, total = [], 0.0
    for w in widened:
        total += w
        round_trip.append(total)
    # round_trip[j] - round_trip[k] + compute[k] is the window k..j (its links are
    # delay[k+1..j]; delay[k] joins k to k-1, outside the window).
    floor = best
    for k in range(count - 1):
        if compute_from_end[k] - floor + gain[k] <= 0:
            continue
        base = round_trip[k] - compute_from_end[k]
        for j in range(k + 1, count):
            value = (round_trip[j] - base) / (j - k + 1)
            if value > best:
                best = value
    return best


def evaluate(instance: Instance, plan: Plan) -> Evaluation:
    """Objectives, derived metrics, per-stage memory, violations and search-space
    mismatches of one plan. A plan whose dp x micro_batch does not divide the global batch
    raises :class:`~formulation.schema.InputError` (no whole number of micro-batches)."""
    cm = cost_model(instance)
    training = instance.training
    b, dp, count = plan.micro_batch, plan.dp, plan.num_stages
    check_micro_batches(instance, dp, b)
    m = training.global_batch / (dp * b)
    v = plan.virtual_stages
    compute, memory, in_flight, stage_facts = [], [], [], []
    allreduce = optimizer = recompute_flops = 0.0
    used: dict[int, int] = {}  # GPUs by domain
    for j, stage in enumerate(plan.stages):
        (compute_per_layer, compute_edge, memory_per_layer, activation_per_layer, memory_fixed,
         allreduce_per_layer, allreduce_fixed, optimizer_per_layer, optimizer_fixed,
         layer_recompute_flops) = cm.stage_terms(b, stage.tp, stage.recompute, dp, j == 0,
                                                 j == count - 1, stage.domain)
        layers = stage.layers
        compute.append(layers * compute_per_layer + compute_edge)
        in_flight.append(float(micro_batches_in_flight(m, count - 1 - j, count, v)) if v > 1
                         else min(m, count - j))
        memory.append(layers * (memory_per_layer + activation_per_layer * in_flight[-1])
                      + memory_fixed)
        stage_facts.append(StageFacts(stage.tp, memory[-1], stage.domain))
        used[stage.domain] = used.get(stage.domain, 0) + dp * stage.tp
        allreduce = max(allreduce, layers * allreduce_per_layer + allreduce_fixed)
        optimizer = max(optimizer, layers * optimizer_per_layer + optimizer_fixed)
        recompute_flops += layers * layer_recompute_flops
    ends = [stage.domain for stage in plan.stages]
    links = list(zip(ends, ends[1:], strict=False))
    if v > 1:  # the wrap-around boundary, last stage to first, crossed v - 1 times
        links.append((ends[-1], ends[0]))
    occupancy, delay, wan_gb, comm_cost = [], [], 0.0, 0.0
    for j, (k_from, k_to) in enumerate(links):
        crossings = v - 1 if j == count - 1 else v
        link_occupancy, link_delay, traffic_gb, price = cm.boundary_terms(k_from, k_to, b, dp)
        occupancy.append(crossings * link_occupancy)
        delay.append(link_delay)
        wan_gb += crossings * traffic_gb
        comm_cost += crossings * traffic_gb * price
    wan_gb, comm_cost = m * wan_gb, m * comm_cost

    if v == 1:
        period = max(max(compute), max(occupancy, default=0.0),
                     latency_bound(compute[::-1], [0.0] + delay[::-1]))
        pipeline = (m - 1) * period + sum(compute) + 2 * sum(delay)
    else:
        windows = interleaved_period(cm, b, dp, [s.layers for s in plan.stages],
                                     [s.tp for s in plan.stages], ends, compute, v)
        period, pipeline = (float(x) for x in pipeline_time(
            m, v, sum(compute), max(max(compute), max(occupancy)), windows,
            2 * sum(delay[:-1]), delay[-1]))
    step = pipeline + allreduce + optimizer
    gpus = sum(used.values())

    run_hours = training.steps * step / 3600
    found = violations(
        limits(instance), cm.domain_names,
        PlanFacts(sum(s.layers for s in plan.stages), min(s.layers for s in plan.stages), count, v,
                  training.global_batch // (dp * b), comm_cost),
        stage_facts,
        ((k, DomainFacts(n, instance.domains[k].free_gpus)) for k, n in used.items()),
        (LinkFacts(busy, period, k_from != k_to, k_from, k_to,
                   Role.WRAP if j == count - 1 else Role.BOUNDARY)
         for j, (busy, (k_from, k_to)) in enumerate(zip(occupancy, links, strict=True))))
    hardware_flops = cm.model_flops_per_step() + training.global_batch * recompute_flops
    return Evaluation(
        step_time_s=step, gpus=gpus, comm_cost=comm_cost, violations=found,
        mismatches=mismatches(instance.search, dp, b, v, plan.stages),
        derived={**derived_metrics(instance, cm, step, gpus, hardware_flops),
                 "wan_gb_per_step": wan_gb},
        breakdown={"period_s": period, "pipeline_s": pipeline, "allreduce_s": allreduce,
                   "optimizer_s": optimizer, "micro_batches": m},
        run={"steps": training.steps, "time_h": run_hours, "gpu_hours": gpus * run_hours,
             "cost_usd": gpus * run_hours * training.gpu_hour_usd + training.steps * comm_cost},
        plan=plan, domain_names=cm.domain_names, stage_compute_s=compute,
        stage_memory_bytes=memory, stage_in_flight=in_flight,
        usable_memory_gb=cm.usable_memory / GB)

