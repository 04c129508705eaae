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
    b, dp, v = plan.micro_batch, plan.dp, plan.virtual_stages
    last = plan.num_stages - 1
    forward, backward = np.zeros((plan.num_stages, v)), np.zeros((plan.num_stages, v))
    for j, stage in enumerate(plan.stages):
        edge_forward, edge_backward = cm.edge_times(b, stage.tp, j == 0, j == last)
        chunks = chunk_layers(stage.layers, v)
        forward[j] = chunks * cm.layer_forward_time(b, stage.tp)
        backward[j] = chunks * cm.layer_backward_time(b, stage.tp, stage.recompute)
        # the embedding runs in the model's first chunk, the LM head in its last
        forward[j, 0 if j == 0 else v - 1] += edge_forward
        backward[j, 0 if j == 0 else v - 1] += edge_backward
    ends = [s.domain for s in plan.stages] + ([plan.stages[0].domain] if v > 1 else [])
    k_from = np.array(ends[:-1], dtype=np.int64)
    k_to = np.array(ends[1:], dtype=np.int64)
    factors = {}
    trace = instance.trace
    if use_trace and trace is not None:
        wan = k_from != k_to
        for prefix, a, z in (("", k_from, k_to), ("backward_", k_to, k_from)):
            factors[prefix + "bandwidth_factor"] = np.where(
                wan, trace.bandwidth_factor[:, a, z], 1.0)
            factors[prefix + "latency_factor"] = np.where(wan, trace.latency_factor[:, a, z], 1.0)
    return PipelineSpec(
        forward_s=forward if v > 1 else forward[:, 0],
        backward_s=backward if v > 1 else backward[:, 0],
        transfer_bytes=np.asarray(cm.boundary_bytes(b, dp, k_from == k_to), dtype=float),
        bandwidth_Bps=np.asarray(cm.link_bandwidth(k_from, k_to), dtype=float),
        latency_s=np.asarray(cm.link_latency(k_from, k_to), dtype=float),
        backward_bandwidth_Bps=np.asarray(cm.link_bandwidth(k_to, k_from), dtype=float),
        backward_latency_s=np.asarray(cm.link_latency(k_to, k_from), dtype=float),
        num_micro_batches=instance.training.global_batch // (dp * b), **factors,
        interval_s=trace.interval_s if trace is not None else 1.0, start_time_s=start_time_s,
        virtual_stages=v)


def chunk_layers(layers: int, chunks: int) -> np.ndarray:
    """A stage's layers split into model chunks as evenly as they go, the extra ones first."""
    base, extra = divmod(layers, chunks)
    return np.array([base + (c < extra) for c in range(chunks)], dtype=float)


def simulated_step_time(instance: Instance, plan: Plan, start_time_s: float = 0.0,
                        use_trace: bool = False) -> float:
    """T_step by simulation: the simulated pipeline makespan plus all-reduce and optimizer."""
    result = evaluate_plans(instance, [plan])
    makespan = simulate_pipeline(pipeline_spec(instance, plan, start_time_s,
                                               use_trace)).makespan_s
    return makespan + float(result.allreduce_s[0]) + float(result.optimizer_s[0])
