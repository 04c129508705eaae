"""Robustness of fixed plans: bandwidth swings through the 1F1B simulator, load swings."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from evaluation.robustness import (
    RobustnessSettings,
    bandwidth_loss,
    bandwidth_trace,
    domain_gpus,
    load_stability,
)
from formulation.instance import Instance
from formulation.plan import Plan, Stage
from formulation.reference import simulated_step_time
from instances.suites import SUITES_DIR, reference_front_path
from solvers.baselines import baseline_front
from solvers.front import Front

NAME = "cn-hubs-k6-llama2-7b-s130"
FAST = RobustnessSettings(traces=2, steps=2, load_intervals=200)


@pytest.fixture(scope="module")
def instance() -> Instance:
    return Instance.load(SUITES_DIR / "quick" / f"{NAME}.json")


@pytest.fixture(scope="module")
def front(instance: Instance) -> Front:
    return Front.load(reference_front_path(SUITES_DIR / "quick" / f"{NAME}.json"), instance)


def _cross_domain(front: Front) -> Plan:
    return next(p.plan for p in front.points if len(p.plan.domains_used()) > 1)


def test_bandwidth_trace_moves_only_the_bandwidth_within_the_swing(instance: Instance):
    trace = bandwidth_trace(instance, 3, 400, FAST)
    off = ~np.eye(instance.num_domains, dtype=bool)
    factors = trace.bandwidth_factor[:, off]
    assert factors.min() >= 0.7 - 1e-9 and factors.max() <= 1.3 + 1e-9
    assert factors.min() < 0.85 and factors.max() > 1.15  # the walk does roam
    assert np.all(trace.latency_factor == 1) and np.all(trace.free_gpu_factor == 1)
    assert trace.failures == ()
    again = bandwidth_trace(instance, 3, 400, FAST)
    assert np.array_equal(trace.bandwidth_factor, again.bandwidth_factor)


def test_loss_lies_between_the_constant_best_and_worst_bandwidth(instance: Instance,
                                                                 front: Front):
    """With latency fixed a slower link never speeds a step up (max-plus schedule), so the
    traced loss is bounded by the losses at B (1 + swing) and B (1 - swing) throughout."""
    plan = _cross_domain(front)
    loss = bandwidth_loss(instance, plan, seed=0, settings=FAST)
    nominal = simulated_step_time(instance, plan)
    bounds = []
    for factor in (1.3, 0.7):
        scaled = instance.with_link_state(bandwidth_gbps=instance.links.bandwidth_gbps * factor)
        bounds.append(1 - nominal / simulated_step_time(scaled, plan))
    assert bounds[0] - 1e-9 <= loss <= bounds[1] + 1e-9
    assert bounds[1] > 0.005  # the plan is bandwidth-sensitive, so the bound has teeth
    assert loss == bandwidth_loss(instance, plan, seed=0, settings=FAST)
    assert loss != bandwidth_loss(instance, plan, seed=7, settings=FAST)


def test_a_plan_without_wan_traffic_loses_nothing(instance: Instance, front: Front):
    plan = next(p.plan for p in front.points if len(p.plan.domains_used()) == 1)
    assert bandwidth_loss(instance, plan, seed=0, settings=FAST) == pytest.approx(0, abs=1e-12)


def test_no_swing_means_no_loss(instance: Instance, front: Front):
    calm = dataclasses.replace(FAST, bandwidth_swing=0.0)
    assert bandwidth_loss(instance, _cross_domain(front), 0, calm) == pytest.approx(0, abs=1e-9)


def test_diloco_plans_are_scored_quasi_statically(instance: Instance):
    plan = baseline_front(instance, "diloco").points[0].plan
    loss = bandwidth_loss(instance, plan, seed=0, settings=FAST)
    assert -0.05 < loss < 0.05  # one WAN sync per 500 steps barely shows


def test_domain_gpus_of_both_plan_families(instance: Instance):
    plan = Plan(dp=2, micro_batch=1, stages=(Stage(0, 16, 2, "full"), Stage(3, 16, 4, "full")))
    assert domain_gpus(plan, instance.num_domains).tolist() == [4, 0, 0, 8, 0, 0]
    diloco = baseline_front(instance, "diloco").points[0].plan
    used = domain_gpus(diloco, instance.num_domains)
    assert used.sum() == diloco.gpus() and (used > 0).sum() == len(diloco.workers)


def test_load_stability_counts_intervals_with_room(instance: Instance):
    free = np.array([d.free_gpus for d in instance.domains])
    k = int(np.argmax(free))
    whole = Plan(dp=1, micro_batch=1, stages=(Stage(k, 32, int(free[k]), "full"),))
    roomy = Plan(dp=1, micro_batch=1, stages=(Stage(k, 32, int(0.75 * free[k]), "full"),))
    # the load walk stays within +-20 %: 75 % of the free GPUs always fit
    assert load_stability(instance, roomy, 0, FAST) == 1.0
    taking_all = load_stability(instance, whole, 0, FAST)
    assert 0.0 < taking_all < 1.0  # interrupted whenever the load rises


def test_a_trace_of_days_long_steps_stays_within_a_traces_length():
    """The bandwidth trace covers the simulated steps every 10 s, or every longer interval
    where that would pass a trace's most samples (a plan of 1e11 s steps asked for 40 TiB)."""
    from evaluation.robustness import RobustnessSettings, _sampled
    from formulation.trace import MAX_INTERVALS

    settings = RobustnessSettings()
    assert _sampled(3200.0, 2, settings) == (322, settings)  # the usual: unchanged
    length, stretched = _sampled(8 * 1e11, 2, settings)
    assert length <= MAX_INTERVALS and stretched.interval_s * (length - 2) >= 8 * 1e11
