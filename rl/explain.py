"""What a Hi-PPO decision says of its plan (:meth:`rl.scheduler.Scheduler.decide`,
:class:`PlanDecision`: the plan with its evaluation, reward split and explanation): which
budget binds and by how much, which links, memory limits and GPU counts shaped the plan and
what sets its 1F1B period, and a heatmap of its cross-domain traffic."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from formulation.evaluator import cost_model
from formulation.instance import Instance
from formulation.outputs import write_figure
from formulation.plan import Plan
from formulation.result import Evaluation, evaluate
from formulation.reward import RewardScale, reward, reward_terms
from rl.masks import Budgets

TIGHT_MEMORY = 0.1  # a stage with less headroom than this share of memory is memory-bound


@dataclass
class PlanDecision:
    """One Hi-PPO decision: the plan, its evaluation, the preference and budgets it was
    made for, its latency, reward split and explanation."""

    plan: Plan
    evaluation: Evaluation
    weights: np.ndarray
    budgets: Budgets
    latency_s: float
    reward: dict[str, float]
    explanation: list[str]

    def to_dict(self, instance: Instance) -> dict:
        return {"plan": self.plan.to_dict(instance),
                "objectives": list(self.evaluation.objectives),
                "evaluation": self.evaluation.to_dict(), "weights": self.weights.tolist(),
                "budgets": self.budgets.to_dict(), "latency_s": self.latency_s,
                "reward": self.reward, "explanation": self.explanation}

    @classmethod
    def explained(cls, instance: Instance, plan: Plan, weights: np.ndarray,
                  budgets: Budgets, effective: Budgets, latency_s: float,
                  scale: RewardScale) -> PlanDecision:
        """The decision of ``plan`` for ``weights`` and ``budgets`` (``effective``: joined
        with the instance's own cost budget, :func:`rl.env.effective_budgets`): evaluated,
        its reward split under the state's reward ``scale``, explained."""
        result = evaluate(instance, plan)
        objectives = np.array([result.objectives], dtype=float)
        terms = reward_terms(objectives, scale)[0]
        total = float(reward(objectives, weights, scale)[0])
        return cls(plan, result, weights, budgets, latency_s,
                   {"R_eff": float(terms[0]), "R_util": float(terms[1]),
                    "R_cost": float(terms[2]), "R": total,
                    "T_base_s": scale.t_base, "C_base_usd": scale.c_base},
                   explain_budgets(instance, effective, plan, result)
                   + explain(instance, plan, result))


def explain_budgets(instance: Instance, budgets: Budgets, plan: Plan,
                    result: Evaluation) -> list[str]:
    """Which budget binds and by how much (none without budgets); ``budgets`` with the
    instance's own cost budget joined (:func:`rl.env.effective_budgets`)."""
    step_time, gpus, cost = result.objectives
    lines = []
    if budgets.gpus is not None:
        search = instance.search
        tp = min((t for t in search.tp if t <= instance.gpu.gpus_per_node
                  and instance.model.heads % t == 0), default=1)
        stage = plan.dp * tp  # the smallest stage of the plan's dp
        lines.append(binding(f"GPU budget {budgets.gpus}", budgets.gpus, int(gpus), stage,
                             f"another stage (dp {plan.dp} x tp {tp})", "{:d}"))
    if budgets.cost is not None:
        k = instance.num_domains
        m = instance.training.global_batch // (plan.dp * plan.micro_batch)
        ends = np.nonzero(~np.eye(k, dtype=bool))
        crossing = np.asarray(cost_model(instance).boundary_cost(
            ends[0], ends[1], plan.micro_batch, plan.dp, m), dtype=float)
        cheapest = float(crossing[crossing > 0].min()) if (crossing > 0).any() else 0.0
        lines.append(binding(f"cost budget {budgets.cost:.6g} USD/step", budgets.cost, cost,
                             cheapest, "the cheapest further WAN boundary", "{:.6g}"))
    if budgets.step_time is not None:
        if step_time <= budgets.step_time * (1 + 1e-12):
            lines.append(f"step-time cap {budgets.step_time:.6g} s met: {step_time:.6g} s")
        else:
            lines.append(f"step-time cap {budgets.step_time:.6g} s missed by "
                         f"{100 * (step_time / budgets.step_time - 1):.1f} % "
                         f"({step_time:.6g} s; the cap is soft)")
    return lines


def binding(name: str, budget: float, used: float, step: float, what: str,
            number: str) -> str:
    """One line: whether a budget binds, i.e. whether its slack is below the ``step`` the
    plan would need to grow by (``what``)."""
    slack = budget - used
    if slack < step:
        return (f"{name} binds: the plan takes {number.format(used)}, {what} would need "
                f"{number.format(step)} more, {number.format(step - slack)} beyond it")
    return f"{name} does not bind: the plan takes {number.format(used)}"


def explain(instance: Instance, plan: Plan, result: Evaluation) -> list[str]:
    """Which links, memory limits and GPU counts shaped the plan (module doc)."""
    cm = cost_model(instance)
    names = cm.domain_names
    lines = []
    chain = " -> ".join(dict.fromkeys(names[s.domain] for s in plan.stages))
    lines.append(f"chain (front to back): {chain}; dp {plan.dp}, micro-batch "
                 f"{plan.micro_batch}, {plan.num_stages} stages")
    period = result.breakdown["period_s"]
    bandwidth = instance.links.bandwidth_gbps
    for a, z in zip(plan.stages, plan.stages[1:], strict=False):
        if a.domain == z.domain:
            continue
        occupancy, delay, _, _ = cm.boundary_terms(a.domain, z.domain, plan.micro_batch,
                                                   plan.dp)
        others = np.delete(bandwidth[a.domain], a.domain)
        rank = int((others > bandwidth[a.domain, z.domain]).sum()) + 1
        lines.append(f"WAN cut {names[a.domain]} -> {names[z.domain]}: "
                     f"{bandwidth[a.domain, z.domain]:.2f} Gbit/s (rank {rank} of "
                     f"{len(others)} links from {names[a.domain]}), "
                     f"{instance.links.latency_ms[a.domain, z.domain]:.0f} ms, busy "
                     f"{100 * occupancy / period:.0f} % of the period")
    for stage, row in zip(plan.stages, result.stages, strict=True):
        if row["memory_headroom_gb"] < TIGHT_MEMORY * result.usable_memory_gb:
            lines.append(f"memory-bound cut: {row['layers']} layers in {row['domain']} use "
                         f"{row['memory_gb']:.1f} of {result.usable_memory_gb:.1f} GB "
                         f"(tp {stage.tp}, recompute {stage.recompute}, "
                         f"{row['in_flight']} micro-batches in flight)")
    used = plan.gpus_by_domain(instance.num_domains)
    full = [names[k] for k in range(instance.num_domains)
            if used[k] and used[k] == instance.domains[k].free_gpus]
    if full:
        lines.append(f"all free GPUs taken in: {', '.join(full)}")
    compute = max(result.stage_compute_s)
    busiest = max((cm.boundary_terms(a.domain, z.domain, plan.micro_batch, plan.dp)[0]
                   for a, z in zip(plan.stages, plan.stages[1:], strict=False)), default=0.0)
    if period <= compute * (1 + 1e-9):
        cause = "the slowest stage's compute"
    elif period <= busiest * (1 + 1e-9):
        cause = "the busiest link's transfer time"
    else:
        cause = f"a round trip over the WAN (the slowest stage computes {compute:.3f} s)"
    lines.append(f"1F1B period {period:.3f} s per micro-batch, set by {cause}")
    return lines


def heatmap(instance: Instance, plan: Plan, path: Path) -> None:
    """PNG of WAN GB per step between domains."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cm = cost_model(instance)
    m = instance.training.global_batch / (plan.dp * plan.micro_batch)
    traffic = np.zeros((instance.num_domains, instance.num_domains))
    for a, z in zip(plan.stages, plan.stages[1:], strict=False):
        if a.domain != z.domain:
            gb = float(cm.boundary_traffic_gb(a.domain, z.domain, plan.micro_batch, plan.dp, m))
            traffic[a.domain, z.domain] += gb / 2  # forward activations
            traffic[z.domain, a.domain] += gb / 2  # backward gradients
    figure, axis = plt.subplots(figsize=(6, 5))
    image = axis.imshow(traffic, cmap="viridis")
    axis.set_xticks(range(instance.num_domains), cm.domain_names, rotation=60, fontsize=7)
    axis.set_yticks(range(instance.num_domains), cm.domain_names, fontsize=7)
    axis.set_xlabel("to")
    axis.set_ylabel("from")
    figure.colorbar(image, label="WAN GB per step")
    axis.set_title(f"{instance.name}: cross-domain traffic")
    try:
        write_figure(path, figure)
    finally:
        plt.close(figure)
