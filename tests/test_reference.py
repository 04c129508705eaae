"""The reference execution: closed form vs event-level simulation, with and without a trace."""

from __future__ import annotations

import numpy as np

from formulation.evaluator import evaluate_plans
from formulation.reference import pipeline_spec, simulated_step_time
from instances.generate import generate_instance
from instances.sample import feasible_sample
from instances.suites import suite_paths
from instances.validation import compare_suite


def test_closed_form_within_bounds_of_simulation_on_bench_suite():
    """Issue 2: median |error| <= 5 %, max <= 15 % over the benchmark suite."""
    rows = compare_suite(suite_paths("bench"), random_plans=4, chains=2, seed=0)
    errors = np.abs([r.relative_error for r in rows])
    assert len(rows) >= 100
    assert np.median(errors) <= 0.05
    assert errors.max() <= 0.15


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
