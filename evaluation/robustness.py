"""How a fixed plan holds up when the network and the load move (the sponsor's KPIs).

* :func:`bandwidth_loss`: throughput loss when every WAN link's bandwidth follows a bounded
  random walk within +-``swing`` (:func:`instances.traces.generate_trace`; latency and load
  held at nominal, no failures). A pipeline plan runs ``steps`` consecutive training steps
  through the event-level 1F1B simulator (:mod:`formulation.reference`), each step starting
  where the last ended, so bandwidth changes inside a step; the loss is
  ``1 - steps * T_sim_nominal / sum(T_sim_trace)``, averaged over ``traces`` seeded traces.
  A DiLoCo plan has no WAN pipeline to simulate: its step time is re-evaluated by the
  closed form at the bandwidth of every interval its steps cover (its WAN sync is rare).
* :func:`load_stability`: share of trace intervals in which the plan still fits when each
  domain's free GPUs follow the generator's +-20 % load walk: a plan that needs more GPUs of
  a domain than are free at that moment is interrupted ("training progress without
  interruption", seeds/003 topic 3).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from formulation.diloco import DilocoPlan
from formulation.families import AnyPlan, score
from formulation.instance import Instance
from formulation.reference import simulated_step_time
from formulation.trace import MAX_INTERVALS, Trace
from instances.traces import generate_trace


@dataclass(frozen=True)
class RobustnessSettings:
    """How the robustness KPIs are measured."""

    bandwidth_swing: float = 0.3
    """Bound of the bandwidth walk: B(t) in [B (1 - swing), B (1 + swing)] (sponsor: +-30 %)."""
    traces: int = 3
    """Seeded traces per plan."""
    steps: int = 4
    """Consecutive training steps simulated per trace."""
    interval_s: float = 10.0
    """Seconds between bandwidth changes (a step of a quick-suite plan takes 50-400 s, so
    the bandwidth changes many times inside one step)."""
    load_intervals: int = 500
    """Intervals of the load walk per trace for the stability KPI."""


def _sampled(seconds: float, extra: int, settings: RobustnessSettings
             ) -> tuple[int, RobustnessSettings]:
    """The samples of a trace covering ``seconds`` (and ``extra`` more), every
    ``settings.interval_s``, or every longer interval where that would pass a trace's
    :data:`~formulation.trace.MAX_INTERVALS` (a plan whose steps take days), with the
    settings of that interval."""
    interval = max(settings.interval_s, seconds / (MAX_INTERVALS - extra - 1))
    return (math.ceil(seconds / interval) + extra,
            dataclasses.replace(settings, interval_s=interval))


def _trace(instance: Instance, seed: int, length: int, settings: RobustnessSettings,
           swing: float) -> Trace:
    return generate_trace(np.random.default_rng(seed), instance.links.bandwidth_gbps,
                          instance.num_domains, length, settings.interval_s, swing)


def bandwidth_trace(instance: Instance, seed: int, length: int,
                    settings: RobustnessSettings) -> Trace:
    """A trace in which only the WAN bandwidth moves."""
    trace = _trace(instance, seed, length, settings, settings.bandwidth_swing)
    return dataclasses.replace(trace, latency_factor=np.ones_like(trace.latency_factor),
                               free_gpu_factor=np.ones_like(trace.free_gpu_factor),
                               failures=())


def bandwidth_loss(instance: Instance, plan: AnyPlan, seed: int,
                   settings: RobustnessSettings = RobustnessSettings()) -> float:
    """Mean throughput loss of ``plan`` over seeded bandwidth traces (module doc)."""
    if isinstance(plan, DilocoPlan):
        return _quasi_static_loss(instance, plan, seed, settings)
    nominal = simulated_step_time(instance, plan)
    length, settings = _sampled(2 * settings.steps * nominal, 2, settings)
    losses = []
    for index in range(settings.traces):
        traced = instance.replace(trace=bandwidth_trace(instance, seed + index, length,
                                                        settings))
        elapsed = 0.0
        for _ in range(settings.steps):
            elapsed += simulated_step_time(traced, plan, elapsed, use_trace=True)
        losses.append(1 - settings.steps * nominal / elapsed)
    return float(np.mean(losses))


def _quasi_static_loss(instance: Instance, plan: DilocoPlan, seed: int,
                       settings: RobustnessSettings) -> float:
    nominal = float(score(instance, [plan])[0][0, 0])
    length, settings = _sampled(settings.steps * nominal, 1, settings)
    losses = []
    for index in range(settings.traces):
        factors = bandwidth_trace(instance, seed + index, length, settings).bandwidth_factor
        states = [instance.with_link_state(bandwidth_gbps=instance.links.bandwidth_gbps * f)
                  for f in factors]
        times = [float(score(state, [plan])[0][0, 0]) for state in states]
        losses.append(1 - nominal / float(np.mean(times)))
    return float(np.mean(losses))


def domain_gpus(plan: AnyPlan, num_domains: int) -> np.ndarray:
    """GPUs the plan takes from each domain."""
    pipelines = plan.workers if isinstance(plan, DilocoPlan) else (plan,)
    return sum((pipeline.gpus_by_domain(num_domains) for pipeline in pipelines),
               np.zeros(num_domains, dtype=np.int64))


def load_stability(instance: Instance, plan: AnyPlan, seed: int,
                   settings: RobustnessSettings = RobustnessSettings()) -> float:
    """Share of intervals in which the plan fits the free GPUs of a +-20 % load walk."""
    used = domain_gpus(plan, instance.num_domains)
    free = instance.free_gpus.astype(float)
    shares = []
    for index in range(settings.traces):
        trace = _trace(instance, seed + index, settings.load_intervals, settings, 0.0)
        available = np.floor(free[None] * trace.free_gpu_factor + 1e-9)
        shares.append(float(np.all(used[None] <= available, axis=1).mean()))
    return float(np.mean(shares))
