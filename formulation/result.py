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

from formulation.costmodel import GB
from formulation.evaluator import cost_model
from formulation.instance import Instance
from formulation.plan import Plan


@dataclass(frozen=True)
class Scores:
    """What every plan family's evaluation has: objectives, feasibility with named
    violations, derived metrics and the parts of the step time."""

    step_time_s: float
    gpus: int
    comm_cost: float
    feasible: bool
    violations: list[str]
    derived: dict[str, float]
    breakdown: dict[str, float]

    @property
    def objectives(self) -> tuple[float, int, float]:
        return (self.step_time_s, self.gpus, self.comm_cost)

    @property
    def violation_kinds(self) -> set[str]:
        return {message.split(":", 1)[0] for message in self.violations}

    def to_dict(self) -> dict[str, Any]:
        return {"feasible": self.feasible, "violations": self.violations,
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
                 "in_flight": int(self.stage_in_flight[j]),
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
    """Objectives, derived metrics, per-stage memory and violations of one plan."""
    cm = cost_model(instance)
    training, model = instance.training, instance.model
    b, dp, count = plan.micro_batch, plan.dp, plan.num_stages
    m = training.global_batch / (dp * b)
    compute, memory, allreduce, optimizer, in_flight = [], [], [], [], []
    recompute_flops = 0.0
    for j, stage in enumerate(plan.stages):
        (per_layer, edge, state, activation, workspace, logits, edge_params,
         layer_recompute_flops) = cm.stage_terms(b, stage.tp, stage.recompute, dp, j == 0,
                                                 j == count - 1)
        compute.append(stage.layers * per_layer + edge)
        in_flight.append(min(m, count - j))
        memory.append(cm.stage_memory_bytes(stage.layers, in_flight[-1], state, activation,
                                            workspace, logits, j == 0, j == count - 1))
        params = stage.layers * cm.layer_params + edge_params
        allreduce.append(cm.allreduce_seconds(stage.domain, params, stage.tp, dp))
        optimizer.append(cm.optimizer_time(params, stage.tp, dp))
        recompute_flops += stage.layers * layer_recompute_flops
    boundaries = [cm.boundary_terms(a.domain, z.domain, b, dp)
                  for a, z in zip(plan.stages, plan.stages[1:], strict=False)]
    occupancy = [x[0] for x in boundaries]
    delay = [x[1] for x in boundaries]
    wan_gb = m * sum(x[2] for x in boundaries)
    comm_cost = m * sum(x[2] * x[3] for x in boundaries)

    period = max(max(compute), max(occupancy, default=0.0),
                 latency_bound(compute[::-1], [0.0] + delay[::-1]))
    pipeline = (m - 1) * period + sum(compute) + 2 * sum(delay)
    step = pipeline + max(allreduce) + max(optimizer)
    gpus = plan.gpus()

    model_flops = cm.model_flops_per_step()
    peak = instance.gpu.peak_tflops * 1e12
    run_hours = training.steps * step / 3600
    violations = _violations(instance, plan, memory, occupancy, period, comm_cost)
    return Evaluation(
        step_time_s=step, gpus=gpus, comm_cost=comm_cost, feasible=not violations,
        violations=violations,
        derived={"mfu": model_flops / (gpus * peak * step),
                 "tokens_per_s": training.global_batch * model.seq_len / step,
                 "wan_gb_per_step": wan_gb,
                 "cluster_utilisation": model_flops / step / (peak * cm.free_gpus_total),
                 "achieved_tflops_per_gpu": (model_flops + training.global_batch
                                             * recompute_flops) / (gpus * step) / 1e12},
        breakdown={"period_s": period, "pipeline_s": pipeline, "allreduce_s": max(allreduce),
                   "optimizer_s": max(optimizer), "micro_batches": m},
        run={"steps": training.steps, "time_h": run_hours, "gpu_hours": gpus * run_hours,
             "cost_usd": gpus * run_hours * training.gpu_hour_usd + training.steps * comm_cost},
        plan=plan, domain_names=cm.domain_names, stage_compute_s=compute,
        stage_memory_gb=[x / GB for x in memory], stage_in_flight=in_flight,
        usable_memory_gb=cm.usable_memory / GB)


def _violations(instance: Instance, plan: Plan, memory: list[float], occupancy: list[float],
                period: float, comm_cost: float) -> list[str]:
    """Every violated constraint as ``kind: explanation`` (kinds as in ``VIOLATIONS``)."""
    cm = cost_model(instance)
    names = cm.domain_names
    search, training, model = instance.search, instance.training, instance.model
    node = instance.gpu.gpus_per_node
    out: list[str] = []
    layers = sum(s.layers for s in plan.stages)
    if layers != model.layers:
        out.append(f"layers: the stages hold {layers} layers, the model has {model.layers}")
    if training.global_batch % (plan.dp * plan.micro_batch):
        out.append(f"microbatch: global batch {training.global_batch} is not divisible by "
                   f"dp * micro_batch = {plan.dp * plan.micro_batch}")
    for j, stage in enumerate(plan.stages):
        if stage.tp > node:
            out.append(f"tp: stage {j} has tp={stage.tp} > {node} GPUs per node")
        elif model.heads % stage.tp:
            out.append(f"tp: stage {j} has tp={stage.tp}, which does not divide "
                       f"{model.heads} heads")
    if plan.dp not in search.dp:
        out.append(f"search: dp={plan.dp} is not in the allowed {list(search.dp)}")
    if plan.micro_batch not in search.micro_batch:
        out.append(f"search: micro_batch={plan.micro_batch} is not in the allowed "
                   f"{list(search.micro_batch)}")
    for j, stage in enumerate(plan.stages):
        if stage.tp not in search.tp:
            out.append(f"search: stage {j} tp={stage.tp} is not in {list(search.tp)}")
        if stage.recompute not in search.recompute:
            out.append(f"search: stage {j} recompute={stage.recompute!r} is not allowed")
    if plan.num_stages > search.max_stages:
        out.append(f"search: {plan.num_stages} stages > max_stages {search.max_stages}")
    for j, stage in enumerate(plan.stages):
        if memory[j] > cm.usable_memory:
            out.append(f"memory: stage {j} (domain {names[stage.domain]!r}) needs "
                       f"{memory[j] / GB:.1f} GB per GPU > {cm.usable_memory / GB:.1f} GB usable")
    used = [0] * instance.num_domains
    for stage in plan.stages:
        used[stage.domain] += plan.dp * stage.tp
    for k, count in enumerate(used):
        if count > instance.domains[k].free_gpus:
            out.append(f"gpus: domain {names[k]!r} uses {count} GPUs > "
                       f"{instance.domains[k].free_gpus} free")
    cap = instance.constraints.wan_share_cap
    if cap is not None:
        for j, (a, z) in enumerate(zip(plan.stages, plan.stages[1:], strict=False)):
            if a.domain != z.domain and occupancy[j] > cap * period:
                out.append(f"wan_cap: link {names[a.domain]!r}->{names[z.domain]!r} is busy "
                           f"{occupancy[j] / period:.0%} of the period > cap {cap:.0%}")
    budget = instance.constraints.cost_budget
    if budget is not None and comm_cost > budget * (1 + 1e-12):
        out.append(f"cost_budget: comm_cost {comm_cost:.4f} USD/step > budget {budget:.4f}")
    return out
