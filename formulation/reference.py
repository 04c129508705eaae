"""Reference execution of a plan: the event-level 1F1B simulation fed by the cost model.

The closed form of SPEC 3.1 and this simulation share every per-stage and per-link number;
they differ only in how the schedule is timed. The data-parallel all-reduce and the optimizer
step follow the pipeline flush in both.
"""

from __future__ import annotations

import dataclasses

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


class StepTimes:
    """Step times of plans through ``instance``'s trace: ``at(plan, t)`` is the simulated
    step time of ``plan`` starting ``t`` into the trace (``simulated_step_time(instance,
    plan, t, use_trace=True)``), made cheap for a training run's many steps.

    Where the factors of the plan's WAN boundaries hold still over the whole step (the
    scenarios change links every few minutes; steps take seconds to minutes), the step is
    the one simulated with those factors held constant: simulated once per plan and factor
    values, and independent of where the step starts. Elsewhere every step is simulated on
    the trace. The two agree up to rounding (a message across a sample boundary is timed in
    two parts at the same rate)."""

    def __init__(self, instance: Instance):
        if instance.trace is None:
            raise ValueError("StepTimes needs an instance with a trace")
        self.instance, self.trace = instance, instance.trace
        self._held: dict[tuple, float] = {}  # (plan, factors) -> step time
        self._traced: dict[tuple[Plan, float], float] = {}  # (plan, start) -> step time
        self._factors: dict[Plan, tuple[np.ndarray, np.ndarray]] = {}

    def serves(self, instance: Instance) -> bool:
        """Whether these are the step times of ``instance`` (the same instance and trace)."""
        mine, theirs = self.trace, instance.trace
        return theirs is not None and mine.interval_s == theirs.interval_s \
            and mine.failures == theirs.failures \
            and all(np.array_equal(getattr(mine, name), getattr(theirs, name))
                    for name in ("bandwidth_factor", "latency_factor", "free_gpu_factor")) \
            and self.instance.replace(trace=None).content_hash() \
            == instance.replace(trace=None).content_hash()

    def _wan_factors(self, plan: Plan) -> tuple[np.ndarray, np.ndarray]:
        """The trace's (bandwidth, latency) factors over time of the plan's WAN boundaries,
        both directions, one column each (taken once a plan: every step reads them)."""
        if plan not in self._factors:
            v = plan.virtual_stages
            ends = [s.domain for s in plan.stages] + ([plan.stages[0].domain] if v > 1 else [])
            pairs = {(a, z) for a, z in zip(ends[:-1], ends[1:], strict=True) if a != z}
            pairs |= {(z, a) for a, z in pairs}
            ordered = sorted(pairs)
            a = np.array([a for a, _ in ordered], dtype=np.int64)
            z = np.array([z for _, z in ordered], dtype=np.int64)
            self._factors[plan] = (self.trace.bandwidth_factor[:, a, z],
                                   self.trace.latency_factor[:, a, z])
        return self._factors[plan]

    def at(self, plan: Plan, start_s: float) -> float:
        trace = self.trace
        bandwidth, latency = self._wan_factors(plan)
        first = trace.index_at(start_s)
        key = (plan, bandwidth[first].tobytes(), latency[first].tobytes())
        held = self._held.get(key)
        if held is None:
            held = self._held[key] = self._simulate_held(plan, first)
        last = trace.index_at(start_s + held)
        if (bandwidth[first:last + 1] == bandwidth[first]).all() \
                and (latency[first:last + 1] == latency[first]).all():
            return held
        key = (plan, start_s)
        if key not in self._traced:  # runs that share a plan share its steps until they part
            self._traced[key] = simulated_step_time(self.instance, plan, start_s,
                                                    use_trace=True)
        return self._traced[key]

    def _simulate_held(self, plan: Plan, index: int) -> float:
        """The step with every factor held at its value in trace interval ``index``."""
        spec = pipeline_spec(self.instance, plan, 0.0, use_trace=True)
        held = {name: getattr(spec, name)[index:index + 1] for name in (
            "bandwidth_factor", "latency_factor", "backward_bandwidth_factor",
            "backward_latency_factor")}
        result = evaluate_plans(self.instance, [plan])
        return simulate_pipeline(dataclasses.replace(spec, **held)).makespan_s \
            + float(result.allreduce_s[0]) + float(result.optimizer_s[0])
