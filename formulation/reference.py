"""Reference execution of a plan: the event-level 1F1B simulation fed by the cost model.

The closed form of SPEC 3.1 and this simulation share every per-stage and per-link number;
they differ only in how the schedule is timed. The data-parallel all-reduce and the optimizer
step follow the pipeline flush in both.
"""

from __future__ import annotations

import numpy as np

from formulation.evaluator import cost_model, evaluate_plans
from formulation.instance import Instance
from formulation.plan import Plan
from formulation.simulator import PipelineSpec, simulate_pipeline


def pipeline_spec(instance: Instance, plan: Plan, start_time_s: float = 0.0,
                  use_trace: bool = False) -> PipelineSpec:
    """Per-stage forward/backward times and per-boundary links of a plan, for the simulator.

    With ``use_trace`` the instance's trace modulates every WAN boundary's bandwidth and
    latency over time, starting ``start_time_s`` into the trace.
    """
    cm = cost_model(instance)
    b, dp = plan.micro_batch, plan.dp
    last = plan.num_stages - 1
    forward, backward = [], []
    for j, stage in enumerate(plan.stages):
        edge_forward, edge_backward = cm.edge_times(b, stage.tp, j == 0, j == last)
        forward.append(stage.layers * cm.layer_forward_time(b, stage.tp) + edge_forward)
        backward.append(stage.layers * cm.layer_backward_time(b, stage.tp, stage.recompute)
                        + edge_backward)
    k_from = np.array([s.domain for s in plan.stages[:-1]], dtype=np.int64)
    k_to = np.array([s.domain for s in plan.stages[1:]], dtype=np.int64)
    factors = {}
    trace = instance.trace
    if use_trace and trace is not None:
        wan = k_from != k_to
        for prefix, a, z in (("", k_from, k_to), ("backward_", k_to, k_from)):
            factors[prefix + "bandwidth_factor"] = np.where(
                wan, trace.bandwidth_factor[:, a, z], 1.0)
            factors[prefix + "latency_factor"] = np.where(wan, trace.latency_factor[:, a, z], 1.0)
    return PipelineSpec(
        forward_s=np.array(forward), backward_s=np.array(backward),
        transfer_bytes=np.asarray(cm.boundary_bytes(b, dp, k_from == k_to), dtype=float),
        bandwidth_Bps=np.asarray(cm.link_bandwidth(k_from, k_to), dtype=float),
        latency_s=np.asarray(cm.link_latency(k_from, k_to), dtype=float),
        backward_bandwidth_Bps=np.asarray(cm.link_bandwidth(k_to, k_from), dtype=float),
        backward_latency_s=np.asarray(cm.link_latency(k_to, k_from), dtype=float),
        num_micro_batches=instance.training.global_batch // (dp * b), **factors,
        interval_s=trace.interval_s if trace is not None else 1.0, start_time_s=start_time_s)


def simulated_step_time(instance: Instance, plan: Plan, start_time_s: float = 0.0,
                        use_trace: bool = False) -> float:
    """T_step by simulation: the simulated pipeline makespan plus all-reduce and optimizer."""
    result = evaluate_plans(instance, [plan])
    makespan = simulate_pipeline(pipeline_spec(instance, plan, start_time_s,
                                               use_trace)).makespan_s
    return makespan + float(result.allreduce_s[0]) + float(result.optimizer_s[0])
