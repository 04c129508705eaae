"""The second plan family of SPEC section 2: DiLoCo-style local training with rare WAN syncs.

A :class:`DilocoPlan` runs ``R`` whole-model replicas ("workers"), each an ordinary pipeline
:class:`~formulation.plan.Plan` inside one domain, on an equal share ``G / R`` of the global
batch. Every ``H`` inner steps the workers average their pseudo-gradients (the change of the
weights since the last sync) with a ring all-reduce over the WAN, in the order the workers
are listed, and take an outer optimizer step (Douillard et al., "DiLoCo: Distributed
Low-Communication Training of Language Models", 2023; H = 500 in their main runs).

This changes the optimisation algorithm: a DiLoCo step is not a synchronous SGD step, and
the objectives below say nothing about loss per step. They are scored on the same
objectives so that a user sees what the WAN saves, and every evaluation carries
``changes_optimizer = True`` so that no report compares it on convergence.

Per inner step (all terms from :class:`~formulation.costmodel.CostModel` and the evaluator):

    T_inner = max over workers of the worker's 1F1B step time on G / R sequences
    T_sync  = 2 (R - 1) max_ring_links (P_bytes / R / B_link + L_link)   ring all-reduce
    T_step  = T_inner + T_sync / H
    C       = sum_ring_links 2 (R - 1) / R P_bytes / GB * price_link / H

with ``P_bytes`` the model's parameters in bf16 (pseudo-gradients are sent in bf16, as in
OpenDiLoCo). The outer optimizer state (fp32 weights and Nesterov momentum) is kept in host
memory and its step is not counted; both are small next to ``T_sync``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from formulation.costmodel import BYTES_PER_VALUE, GB
from formulation.evaluator import cost_model, derived_metrics, limits
from formulation.feasibility import (
    COST_BUDGET_RULE,
    WAN_CAP_RULE,
    Kind,
    LinkFacts,
    PlanFacts,
    Role,
    Violation,
    check_micro_batches,
)
from formulation.feasibility import violations as rule_violations
from formulation.instance import Instance
from formulation.plan import Plan
from formulation.result import Evaluation, Scores, evaluate
from formulation.schema import InputError, Reader

DILOCO_SCHEMA = "xdsched.diloco-plan/1"


@dataclass(frozen=True)
class DilocoPlan:
    sync_every: int  # H: inner steps between two WAN syncs
    workers: tuple[Plan, ...]  # one per domain, in ring order

    def gpus(self) -> int:
        return sum(worker.gpus() for worker in self.workers)

    def worker_domain(self, i: int) -> int:
        return self.workers[i].stages[0].domain

    def domains_used(self) -> list[int]:
        return sorted({s.domain for worker in self.workers for s in worker.stages})

    @staticmethod
    def from_dict(document: Any, instance: Instance | None = None, path: str = "") -> DilocoPlan:
        r = Reader(document, path)
        schema = r.string("schema")
        if schema != DILOCO_SCHEMA:
            raise InputError(f"schema must be {DILOCO_SCHEMA!r}, got {schema!r}")
        plan = DilocoPlan(
            sync_every=r.integer("sync_every", low=1),
            workers=tuple(r.items("workers", lambda value, where: Plan.from_dict(
                value, instance, where, whole_batch=False), min_len=1)))
        r.finish()
        if instance is not None:
            plan.check_batches(instance, f"{path}.workers" if path else "workers")
        return plan

    def check_batches(self, instance: Instance, where: str = "workers") -> None:
        """Refuse a plan whose workers cannot share the global batch in whole micro-batches
        (:func:`formulation.feasibility.check_micro_batches`)."""
        count, batch = len(self.workers), instance.training.global_batch
        if batch % count:
            raise InputError(f"{where}: training.global_batch {batch} is not divisible by "
                             f"{count} DiLoCo workers")
        inner = worker_instance(instance, count)
        for i, worker in enumerate(self.workers):
            check_micro_batches(inner, worker.dp, worker.micro_batch, f"{where}[{i}]")

    def to_dict(self, instance: Instance | None = None) -> dict[str, Any]:
        return {"schema": DILOCO_SCHEMA, "sync_every": self.sync_every,
                "workers": [worker.to_dict(instance) for worker in self.workers]}


@dataclass(frozen=True)
class DilocoEvaluation(Scores):
    workers: list[Evaluation]
    plan: DilocoPlan
    changes_optimizer: bool = True  # not comparable on convergence (see the module doc)

    def to_dict(self) -> dict[str, Any]:
        return {**super().to_dict(), "changes_optimizer": self.changes_optimizer,
                "workers": [worker.to_dict() for worker in self.workers]}


def worker_instance(instance: Instance, workers: int) -> Instance:
    """The instance one of ``workers`` replicas sees: the global batch split equally."""
    batch = instance.training.global_batch // workers
    return instance.replace(training=dataclasses.replace(instance.training, global_batch=batch))


def ring_sync(instance: Instance, domains: list[int]) -> tuple[float, float, float]:
    """(seconds, USD, WAN GB) of one ring all-reduce of the model's bf16 pseudo-gradients
    among workers in ``domains`` (ring order)."""
    count = len(domains)
    if count < 2:
        return 0.0, 0.0, 0.0
    cm = cost_model(instance)
    model_bytes = instance.model.total_params * BYTES_PER_VALUE
    ring = list(zip(domains, domains[1:] + domains[:1], strict=True))
    chunk_time = max(model_bytes / count / cm.link_bandwidth(a, z) + cm.link_latency(a, z)
                     for a, z in ring)
    per_link_gb = 2 * (count - 1) / count * model_bytes / GB
    cost = sum(per_link_gb * (cm.price[a, z] if a != z else 0.0) for a, z in ring)
    return float(2 * (count - 1) * chunk_time), float(cost), per_link_gb * count


def evaluate_diloco(instance: Instance, plan: DilocoPlan) -> DilocoEvaluation:
    """Objectives, derived metrics and violations of a DiLoCo plan (module doc)."""
    plan.check_batches(instance)
    cm = cost_model(instance)
    names = cm.domain_names
    count = len(plan.workers)
    violations: list[Violation] = []
    inner = worker_instance(instance, count)
    workers = [evaluate(inner, worker) for worker in plan.workers]
    domains = [plan.worker_domain(i) for i in range(count)]
    for i, (worker, evaluation) in enumerate(zip(plan.workers, workers, strict=True)):
        where = f"worker {i} ({names[domains[i]]!r})"
        if len({s.domain for s in worker.stages}) > 1:
            violations.append(Violation(Kind.DILOCO,
                                        f"{where} spans several domains; a worker lives in one"))
        violations += [Violation(v.kind, f"{where}: {v.message}")
                       for v in evaluation.violations]
    for k in sorted(set(domains)):
        if domains.count(k) > 1:
            violations.append(Violation(Kind.DILOCO, f"domain {names[k]!r} hosts "
                                                     f"{domains.count(k)} workers; use dp "
                                                     f"inside one worker instead"))
    sync_s, sync_cost, sync_gb = ring_sync(instance, domains)
    inner_step = max(w.step_time_s for w in workers)
    step = inner_step + sync_s / plan.sync_every
    comm_cost = sync_cost / plan.sync_every
    # The sync uses each ring link for the whole of T_sync; averaged over H steps, the same
    # WAN-share and budget rules as a pipeline's links (one "boundary": the ring).
    violations += rule_violations(
        limits(instance), names, PlanFacts(0, 0, 0, 1, 0, comm_cost), (), (),
        [LinkFacts(sync_s / plan.sync_every, step, count > 1, 0, 0, Role.RING)],
        rules=(WAN_CAP_RULE, COST_BUDGET_RULE))
    gpus = plan.gpus()
    # a worker's FLOPs of one inner step: its achieved TFLOP/s over its own step
    hardware_flops = sum(w.derived["achieved_tflops_per_gpu"] * 1e12 * w.gpus * w.step_time_s
                         for w in workers)
    mismatches = [dataclasses.replace(m, message=f"worker {i}: {m.message}")
                  for i, w in enumerate(workers) for m in w.mismatches]
    return DilocoEvaluation(
        step_time_s=step, gpus=gpus, comm_cost=comm_cost, violations=violations,
        mismatches=mismatches,
        derived={**derived_metrics(instance, cm, step, gpus, hardware_flops),
                 "wan_gb_per_step": sync_gb / plan.sync_every},
        breakdown={"inner_step_s": inner_step, "sync_s": sync_s,
                   "sync_every": plan.sync_every, "workers": count},
        workers=workers, plan=plan)
