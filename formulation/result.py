"""One plan's evaluation with per-stage detail and named violations (the CLI's JSON).

This is the scalar twin of :func:`formulation.evaluator.evaluate_batch`: numpy's per-call
overhead makes a one-row batch cost about a millisecond, while a decision loop (the RL agent,
checking a MILP solution) needs one plan in well under 200 us. Both paths take every number
from the same :class:`~formulation.costmodel.CostModel` functions and assemble them by the
same formulas; ``tests/test_evaluator.py`` checks that they agree on thousands of plans.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from formulation.costmodel import GB
from formulation.evaluator import (
    cost_model,
    derived_metrics,
    interleaved_windows,
    micro_batches_in_flight,
    pipeline_time,
)
from formulation.feasibility import (
    Facts,
    Kind,
    Mismatch,
    Violation,
    check_micro_batches,
    mismatches,
    violations,
)
from formulation.instance import RECOMPUTE_MODES, Instance
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
    stage_memory_gb: list[float]
    stage_in_flight: list[float]
    usable_memory_gb: float

    @property
    def stages(self) -> list[dict[str, Any]]:
        """Per-stage detail: placement, GPUs, compute per micro-batch, memory and headroom."""
        return [{"domain": self.domain_names[s.domain], "layers": s.layers, "tp": s.tp,
                 "recompute": s.recompute, "gpus": self.plan.dp * s.tp,
                 "compute_s": self.stage_compute_s[j],
                 "in_flight": float(self.stage_in_flight[j]),
                 "memory_gb": self.stage_memory_gb[j],
                 "memory_headroom_gb": self.usable_memory_gb - self.stage_memory_gb[j]}
                for j, s in enumerate(self.plan.stages)]

    def to_dict(self) -> dict[str, Any]:
        return {**super().to_dict(), "run": self.run, "stages": self.stages}


def latency_bound(compute_from_end: list[float], delay_from_end: list[float]) -> float:
    """Scalar form of :func:`formulation.evaluator.latency_bound` (same indexing)."""
    # round_trip[j] - round_trip[k] + compute[k] is the window k..j (its links are
    # delay[k+1..j]; delay[k] joins k to k-1, outside the window).
    round_trip, total = [], 0.0
    for c, d in zip(compute_from_end, delay_from_end, strict=True):
        total += c + 2 * d
        round_trip.append(total)
    best, count = 0.0, len(round_trip)
    for k in range(count):
        base = round_trip[k] - compute_from_end[k]
        for j in range(k, count):
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
    compute, memory, allreduce, optimizer, in_flight = [], [], [], [], []
    recompute_flops = 0.0
    for j, stage in enumerate(plan.stages):
        (per_layer, edge, state, activation, workspace, logits, edge_params,
         layer_recompute_flops) = cm.stage_terms(b, stage.tp, stage.recompute, dp, j == 0,
                                                 j == count - 1)
        compute.append(stage.layers * per_layer + edge)
        in_flight.append(float(micro_batches_in_flight(m, count - 1 - j, count, v)) if v > 1
                         else min(m, count - j))
        memory.append(cm.stage_memory_bytes(stage.layers, in_flight[-1], state, activation,
                                            workspace, logits, j == 0, j == count - 1))
        params = stage.layers * cm.layer_params + edge_params
        allreduce.append(cm.allreduce_seconds(stage.domain, params, stage.tp, dp, m))
        optimizer.append(cm.optimizer_time(params, stage.tp, dp))
        recompute_flops += stage.layers * layer_recompute_flops
    links = [(a.domain, z.domain) for a, z in zip(plan.stages, plan.stages[1:], strict=False)]
    crossings = [v] * len(links)
    if v > 1:  # the wrap-around boundary, last stage to first
        links.append((plan.stages[-1].domain, plan.stages[0].domain))
        crossings.append(v - 1)
    boundaries = [cm.boundary_terms(a, z, b, dp) for a, z in links]
    occupancy = [n * x[0] for n, x in zip(crossings, boundaries, strict=True)]
    delay = [x[1] for x in boundaries]
    wan_gb = m * sum(n * x[2] for n, x in zip(crossings, boundaries, strict=True))
    comm_cost = m * sum(n * x[2] * x[3] for n, x in zip(crossings, boundaries, strict=True))

    if v == 1:
        period = max(max(compute), max(occupancy, default=0.0),
                     latency_bound(compute[::-1], [0.0] + delay[::-1]))
        pipeline = (m - 1) * period + sum(compute) + 2 * sum(delay)
    else:
        windows = interleaved_windows(np.array([compute]), np.array([delay[:-1]]),
                                      np.array([delay[-1]]), np.array([count]),
                                      np.array([v]))
        period, pipeline = (float(x[0]) for x in pipeline_time(
            m, v, sum(compute), max(max(compute), max(occupancy)), windows,
            2 * sum(delay[:-1]), delay[-1]))
    step = pipeline + max(allreduce) + max(optimizer)
    gpus = plan.gpus()

    run_hours = training.steps * step / 3600
    facts = _facts(instance, plan, memory, occupancy, period, comm_cost)
    hardware_flops = cm.model_flops_per_step() + training.global_batch * recompute_flops
    return Evaluation(
        step_time_s=step, gpus=gpus, comm_cost=comm_cost, violations=violations(facts),
        mismatches=mismatches(facts),
        derived={**derived_metrics(instance, cm, step, gpus, hardware_flops),
                 "wan_gb_per_step": wan_gb},
        breakdown={"period_s": period, "pipeline_s": pipeline, "allreduce_s": max(allreduce),
                   "optimizer_s": max(optimizer), "micro_batches": m},
        run={"steps": training.steps, "time_h": run_hours, "gpu_hours": gpus * run_hours,
             "cost_usd": gpus * run_hours * training.gpu_hour_usd + training.steps * comm_cost},
        plan=plan, domain_names=cm.domain_names, stage_compute_s=compute,
        stage_memory_gb=[x / GB for x in memory], stage_in_flight=in_flight,
        usable_memory_gb=cm.usable_memory / GB)


def _facts(instance: Instance, plan: Plan, memory: list[float], occupancy: list[float],
           period: float, comm_cost: float) -> Facts:
    """The one-row :class:`~formulation.feasibility.Facts` of a plan."""
    cm = cost_model(instance)
    stages = plan.stages
    used = np.zeros((1, instance.num_domains), dtype=np.int64)
    for stage in stages:
        used[0, stage.domain] += plan.dp * stage.tp
    ends = [s.domain for s in stages] + ([stages[0].domain] if plan.virtual_stages > 1 else [])
    link_from, link_to = np.array([ends[:-1]]), np.array([ends[1:]])
    return Facts(instance=instance, dp=np.array([plan.dp]),
                 micro_batch=np.array([plan.micro_batch]),
                 layers=np.array([[s.layers for s in stages]]),
                 tp=np.array([[s.tp for s in stages]]),
                 recompute=np.array([[RECOMPUTE_MODES.index(s.recompute) for s in stages]]),
                 domain=np.array([[s.domain for s in stages]]),
                 memory=np.array([memory]), usable_memory=cm.usable_memory, domain_gpus=used,
                 occupancy=np.array([occupancy]).reshape(1, len(occupancy)),
                 wan=(link_from != link_to).reshape(1, len(occupancy)),
                 link_from=link_from.reshape(1, len(occupancy)),
                 link_to=link_to.reshape(1, len(occupancy)),
                 period=np.array([period]), comm_cost=np.array([comm_cost]),
                 virtual_stages=np.array([plan.virtual_stages]))
