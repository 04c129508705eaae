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
from formulation.evaluator import cost_model
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
                value, instance, where), min_len=1)))
        r.finish()
        return plan

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
    cm = cost_model(instance)
    names = cm.domain_names
    count = len(plan.workers)
    violations: list[str] = []
    batch = instance.training.global_batch
    if batch % count:
        violations.append(f"microbatch: global batch {batch} is not divisible by {count} "
                          f"DiLoCo workers")
    inner = worker_instance(instance, count)
    workers = [evaluate(inner, worker) for worker in plan.workers]
    domains = [plan.worker_domain(i) for i in range(count)]
    for i, (worker, evaluation) in enumerate(zip(plan.workers, workers, strict=True)):
        where = f"worker {i} ({names[domains[i]]!r})"
        if len({s.domain for s in worker.stages}) > 1:
            violations.append(f"diloco: {where} spans several domains; a worker lives in one")
        violations += [f"{message.split(':', 1)[0]}: {where}:{message.split(':', 1)[1]}"
                       for message in evaluation.violations]
    for k in sorted(set(domains)):
        if domains.count(k) > 1:
            violations.append(f"diloco: domain {names[k]!r} hosts {domains.count(k)} workers; "
                              f"use dp inside one worker instead")
    sync_s, sync_cost, sync_gb = ring_sync(instance, domains)
    inner_step = max(w.step_time_s for w in workers)
    step = inner_step + sync_s / plan.sync_every
    comm_cost = sync_cost / plan.sync_every
    cap = instance.constraints.wan_share_cap
    if cap is not None and count > 1:
        # The sync uses each ring link for the whole of T_sync; averaged over H steps.
        share = sync_s / plan.sync_every / step
        if share > cap:
            violations.append(f"wan_cap: the DiLoCo sync keeps the ring busy {share:.0%} of the "
                              f"time > cap {cap:.0%}")
    budget = instance.constraints.cost_budget
    if budget is not None and comm_cost > budget * (1 + 1e-12):
        violations.append(f"cost_budget: comm_cost {comm_cost:.4f} USD/step > budget "
                          f"{budget:.4f}")
    gpus = plan.gpus()
    peak = instance.gpu.peak_tflops * 1e12
    model_flops = cm.model_flops_per_step()
    return DilocoEvaluation(
        step_time_s=step, gpus=gpus, comm_cost=comm_cost, feasible=not violations,
        violations=violations,
        derived={"mfu": model_flops / (gpus * peak * step),
                 "tokens_per_s": batch * instance.model.seq_len / step,
                 "wan_gb_per_step": sync_gb / plan.sync_every,
                 "cluster_utilisation": model_flops / step / (peak * cm.free_gpus_total)},
        breakdown={"inner_step_s": inner_step, "sync_s": sync_s,
                   "sync_every": plan.sync_every, "workers": count},
        workers=workers, plan=plan)
