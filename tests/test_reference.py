"""The reference execution: closed form vs event-level simulation, with and without a trace."""

from __future__ import annotations

import numpy as np

from formulation.costmodel import GBIT
from formulation.evaluator import cost_model, evaluate_plans
from formulation.instance import Instance
from formulation.plan import Plan, Stage
from formulation.reference import pipeline_spec, simulated_step_time
from instances.generate import generate_instance
from instances.sample import feasible_sample
from instances.suites import suite_paths
from instances.validation import compare_instance, compare_suite


def test_closed_form_within_bounds_of_simulation_on_bench_suite():
    """Issue 2: median |error| <= 5 %, max <= 15 % over the benchmark suite."""
    rows = compare_suite(suite_paths("bench"), random_plans=4, chains=2, seed=0)
    errors = np.abs([r.relative_error for r in rows])
    assert len(rows) >= 100
    assert np.median(errors) <= 0.05
    assert errors.max() <= 0.15


def test_closed_form_within_bounds_of_simulation_on_asymmetric_links():
    """Each direction of a WAN link at its own bandwidth, latency and price (activations
    forward, gradients backward): the closed form within the same bounds."""
    rows = []
    for i, path in enumerate(suite_paths("bench")[::3]):
        instance = Instance.load(path)
        rng = np.random.default_rng(i)
        factor = np.exp(rng.uniform(np.log(1 / 3), np.log(3), instance.links.bandwidth_gbps.shape))
        rows += compare_instance(instance.with_link_state(
            bandwidth_gbps=instance.links.bandwidth_gbps * factor), 4, 2, i)
    errors = np.abs([r.relative_error for r in rows])
    assert len(rows) >= 30
    assert np.median(errors) <= 0.05
    assert errors.max() <= 0.15


def test_a_link_is_priced_in_both_directions():
    """A boundary's two crossings use the two directions: reversing a two-domain pipeline
    leaves its boundary terms as they were, and delta is the mean of the directions'."""
    instance = Instance.load(suite_paths("bench")[0])
    bandwidth = instance.links.bandwidth_gbps.copy()
    bandwidth[0, 1], bandwidth[1, 0] = 1.0, 100.0
    asymmetric = instance.with_link_state(bandwidth_gbps=bandwidth)
    cm = cost_model(asymmetric)
    a, z = np.array([0]), np.array([1])
    size = float(cm.boundary_bytes(1, 1, False))
    forward = size / (1.0 * GBIT) + cm.wan_latency[0, 1]
    backward = size / (100.0 * GBIT) + cm.wan_latency[1, 0]
    assert np.isclose(cm.boundary_delay(a, z, 1, 1)[0], (forward + backward) / 2, rtol=1e-12)
    assert cm.boundary_delay(a, z, 1, 1)[0] == cm.boundary_delay(z, a, 1, 1)[0]
    assert cm.boundary_occupancy(a, z, 1, 1)[0] == size / (1.0 * GBIT)
    assert cm.boundary_occupancy(z, a, 1, 1)[0] == size / (1.0 * GBIT)
    # the simulator sends the gradients on the other direction: its slow one when reversed
    plan = Plan(dp=1, micro_batch=1, stages=(Stage(0, 16, 8, "full"), Stage(1, 16, 8, "full")))
    spec = pipeline_spec(asymmetric, plan)
    assert spec.bandwidth_Bps[0] == 1.0 * GBIT and spec.backward_bandwidth_Bps[0] == 100.0 * GBIT


def test_simulation_matches_closed_form_for_a_single_stage(generated):
    plan = next(p for p in feasible_sample(generated, 40, seed=3) if p.num_stages == 1)
    closed = float(evaluate_plans(generated, [plan]).step_time_s[0])
    assert abs(simulated_step_time(generated, plan) / closed - 1) < 1e-9


def test_trace_modulates_the_simulated_step():
    """With a trace, WAN boundaries follow its bandwidth factors; a step starting in a slow
    interval is slower than one at base bandwidth only if the factor is below one."""
    instance = generate_instance(6, "13b", seed=5, topology="cn-hubs", trace=True)
    plan = next(p for p in feasible_sample(instance, 60, seed=2)
                if len({s.domain for s in p.stages}) > 1)
    spec = pipeline_spec(instance, plan, use_trace=True)
    assert spec.bandwidth_factor.shape == (instance.trace.length, plan.num_stages - 1)
    base = simulated_step_time(instance, plan)
    factors = spec.bandwidth_factor.min(axis=1)
    slow = int(np.argmin(factors))
    at_slow = simulated_step_time(instance, plan, start_time_s=slow * instance.trace.interval_s,
                                  use_trace=True)
    assert factors[slow] < 1 and at_slow > base


def test_step_times_simulate_a_still_stretch_once_and_a_change_as_it_comes(monkeypatch):
    """A training run's steps: where the plan's WAN links hold still over a step, the step
    is simulated once with those factors held (the same up to rounding as on the trace,
    wherever it starts); a step across a change is simulated on the trace, exactly."""
    import formulation.reference as reference
    from formulation.trace import Trace

    base = generate_instance(6, "13b", seed=5, topology="cn-hubs")
    plan = next(p for p in feasible_sample(base, 60, seed=2)
                if len({s.domain for s in p.stages}) > 1)
    k, length, dt = base.num_domains, 400, 10.0
    bandwidth, latency = np.ones((length, k, k)), np.ones((length, k, k))
    bandwidth[200:] = 0.5  # every link halves at 2,000 s
    instance = base.replace(trace=Trace(dt, bandwidth, latency, np.ones((length, k))))
    calls = []
    real = reference.simulate_pipeline
    monkeypatch.setattr(reference, "simulate_pipeline",
                        lambda spec, *a: calls.append(spec) or real(spec, *a))
    times = reference.StepTimes(instance)
    step = times.at(plan, 0.0)
    assert len(calls) == 1 and step > 0
    still = [3.7, 101.0, 2000.0 - 1.01 * step]  # each step ends before the change
    for start in still:
        simulated = len(calls)
        assert times.at(plan, start) == step
        assert len(calls) == simulated  # not simulated again
        assert abs(simulated_step_time(instance, plan, start, use_trace=True) / step - 1) \
            < 1e-12
    across = 2000.0 - 0.5 * step
    calls.clear()
    assert times.at(plan, across) == simulated_step_time(instance, plan, across,
                                                         use_trace=True)
    assert calls[0].bandwidth_factor.shape[0] == length  # simulated on the trace
    assert times.at(plan, across) > step  # half of it at half the bandwidth
    assert times.serves(instance) and not times.serves(base.replace(trace=Trace(
        dt, np.ones((length, k, k)), latency, np.ones((length, k)))))
    slow = times.at(plan, 3000.0)
    assert times.at(plan, 3100.0) == slow and slow > step
