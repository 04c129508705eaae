"""One plan's evaluation with per-stage detail and named violations (the CLI's JSON)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from formulation.batch import PlanBatch
from formulation.costmodel import GB
from formulation.evaluator import VIOLATIONS, BatchEvaluation, cost_model, evaluate_batch
from formulation.instance import Instance
from formulation.plan import Plan


@dataclass(frozen=True)
class Evaluation:
    step_time_s: float
    gpus: int
    comm_cost: float
    feasible: bool
    violations: list[str]
    derived: dict[str, float]
    breakdown: dict[str, float]
    run: dict[str, float]
    stages: list[dict[str, Any]] = field(default_factory=list)

    @property
    def objectives(self) -> tuple[float, int, float]:
        return (self.step_time_s, self.gpus, self.comm_cost)

    def to_dict(self) -> dict[str, Any]:
        return {"feasible": self.feasible, "violations": self.violations,
                "step_time_s": self.step_time_s, "gpus": self.gpus, "comm_cost": self.comm_cost,
                **self.derived, "breakdown": self.breakdown, "run": self.run,
                "stages": self.stages}


def evaluate(instance: Instance, plan: Plan) -> Evaluation:
    """Objectives, derived metrics, per-stage memory and violations of one plan."""
    result = evaluate_batch(instance, PlanBatch.from_plans([plan]))
    return _single(instance, plan, result)


def _single(instance: Instance, plan: Plan, r: BatchEvaluation) -> Evaluation:
    cm = cost_model(instance)
    step = float(r.step_time_s[0])
    gpus = int(r.gpus[0])
    steps = instance.training.steps
    run_hours = steps * step / 3600
    stages = []
    for j, stage in enumerate(plan.stages):
        memory = float(r.stage_memory_bytes[0, j])
        stages.append({
            "domain": instance.domains[stage.domain].name, "layers": stage.layers,
            "tp": stage.tp, "recompute": stage.recompute, "gpus": plan.dp * stage.tp,
            "compute_s": float(r.stage_compute_s[0, j]),
            "in_flight": int(r.stage_in_flight[0, j]),
            "memory_gb": memory / GB, "memory_headroom_gb": (cm.usable_memory - memory) / GB,
        })
    return Evaluation(
        step_time_s=step, gpus=gpus, comm_cost=float(r.comm_cost[0]),
        feasible=bool(r.feasible[0]), violations=violation_messages(instance, plan, r),
        derived={"mfu": float(r.mfu[0]), "tokens_per_s": float(r.tokens_per_s[0]),
                 "wan_gb_per_step": float(r.wan_gb_per_step[0]),
                 "cluster_utilisation": float(r.cluster_utilisation[0]),
                 "achieved_tflops_per_gpu": float(r.achieved_tflops_per_gpu[0])},
        breakdown={"period_s": float(r.period_s[0]), "pipeline_s": float(r.pipeline_s[0]),
                   "allreduce_s": float(r.allreduce_s[0]),
                   "optimizer_s": float(r.optimizer_s[0]),
                   "micro_batches": instance.training.global_batch
                   / (plan.dp * plan.micro_batch)},
        run={"steps": steps, "time_h": run_hours, "gpu_hours": gpus * run_hours,
             "cost_usd": gpus * run_hours * instance.training.gpu_hour_usd
             + steps * float(r.comm_cost[0])},
        stages=stages)


def violation_messages(instance: Instance, plan: Plan, r: BatchEvaluation,
                       row: int = 0) -> list[str]:
    """Human-readable violations of row ``row`` of a batch result, each prefixed by its kind."""
    flags = dict(zip(VIOLATIONS, r.violation[row].tolist(), strict=True))
    cm = cost_model(instance)
    names = [d.name for d in instance.domains]
    search, training, model = instance.search, instance.training, instance.model
    out: list[str] = []
    if flags["layers"]:
        out.append(f"layers: the stages hold {sum(s.layers for s in plan.stages)} layers, "
                   f"the model has {model.layers}")
    if flags["microbatch"]:
        out.append(f"microbatch: global batch {training.global_batch} is not divisible by "
                   f"dp * micro_batch = {plan.dp * plan.micro_batch}")
    for j, stage in enumerate(plan.stages):
        if stage.tp > instance.gpu.gpus_per_node:
            out.append(f"tp: stage {j} has tp={stage.tp} > {instance.gpu.gpus_per_node} "
                       "GPUs per node")
        elif model.heads % stage.tp:
            out.append(f"tp: stage {j} has tp={stage.tp}, which does not divide "
                       f"{model.heads} heads")
    if flags["search"]:
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
        memory = float(r.stage_memory_bytes[row, j])
        if memory > cm.usable_memory:
            out.append(f"memory: stage {j} (domain {names[stage.domain]!r}) needs "
                       f"{memory / GB:.1f} GB per GPU > {cm.usable_memory / GB:.1f} GB usable")
    for k, used in enumerate(r.domain_gpus[row].tolist()):
        if used > instance.domains[k].free_gpus:
            out.append(f"gpus: domain {names[k]!r} uses {used} GPUs > "
                       f"{instance.domains[k].free_gpus} free")
    if flags["wan_cap"]:
        cap = instance.constraints.wan_share_cap
        period = float(r.period_s[row])
        for j in range(plan.num_stages - 1):
            a, b = plan.stages[j].domain, plan.stages[j + 1].domain
            share = float(r.boundary_occupancy_s[row, j]) / period
            if a != b and share > cap:
                out.append(f"wan_cap: link {names[a]!r}->{names[b]!r} is busy {share:.0%} "
                           f"of the period > cap {cap:.0%}")
    if flags["cost_budget"]:
        out.append(f"cost_budget: comm_cost {float(r.comm_cost[row]):.4f} USD/step > budget "
                   f"{instance.constraints.cost_budget:.4f}")
    return out

