"""Interleaved 1F1B in the evaluators: traffic, memory, validity, the closed form against
the event simulation, and the single and batch evaluators agreeing."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from formulation.evaluator import VIOLATIONS, evaluate_plans
from formulation.instance import Constraints, Instance
from formulation.plan import Plan, Stage
from formulation.reference import simulated_step_time
from formulation.result import evaluate
from instances.sample import random_plan

INSIDE = Plan(dp=2, micro_batch=1, stages=tuple(Stage(0, 6, 2, "selective") for _ in range(4)))
ACROSS = Plan(dp=2, micro_batch=1, stages=(Stage(0, 12, 4, "selective"),
                                           Stage(1, 12, 4, "selective")))


def chunks(plan: Plan, v: int) -> Plan:
    return dataclasses.replace(plan, virtual_stages=v)


@pytest.mark.parametrize("v", [2, 3])
def test_a_boundary_is_crossed_v_times_and_the_wrap_v_minus_1(hand_instance: Instance,
                                                               v: int) -> None:
    """Alpha -> beta carries v rounds of activations and gradients; beta -> alpha (the
    wrap-around) v - 1: (2 v - 1) times the plain plan's WAN traffic and cost on a symmetric
    link."""
    plain, interleaved = evaluate(hand_instance, ACROSS), evaluate(hand_instance, chunks(ACROSS, v))
    assert interleaved.derived["wan_gb_per_step"] == pytest.approx(
        (2 * v - 1) * plain.derived["wan_gb_per_step"], rel=1e-12)
    assert interleaved.comm_cost == pytest.approx((2 * v - 1) * plain.comm_cost, rel=1e-12)
    assert interleaved.step_time_s > plain.step_time_s  # over this WAN it does not pay


@pytest.mark.parametrize("v", [2, 3, 4])
def test_activations_follow_megatrons_warm_up(hand_instance: Instance, v: int) -> None:
    """Korthikanti et al. 2022 (4.2.3): the first of S stages holds S (1 + (S - 1)/(S v))
    micro-batches' activations; stage q from the end (2 q + (v - 1) S + 1) / v."""
    stages = 4
    result = evaluate(hand_instance, chunks(INSIDE, v))
    assert result.stage_in_flight[0] == pytest.approx(stages * (1 + (stages - 1) / (stages * v)))
    assert result.stage_in_flight == pytest.approx(
        [(2 * q + (v - 1) * stages + 1) / v for q in (3, 2, 1, 0)])
    plain = evaluate(hand_instance, INSIDE)
    assert all(a > b for a, b in zip(result.stage_memory_gb, plain.stage_memory_gb, strict=True))


@pytest.mark.parametrize("v", [2, 3])
def test_closed_form_against_the_simulation_inside_one_domain(hand_instance: Instance,
                                                               v: int) -> None:
    """Inside a domain, where a crossing costs little next to a chunk, within 2 % of the
    event simulation (uniform stages without communication: exact, tests/test_simulator.py)
    and faster than plain 1F1B, as the smaller bubble promises."""
    plan = chunks(INSIDE, v)
    closed = evaluate(hand_instance, plan).step_time_s
    assert closed == pytest.approx(simulated_step_time(hand_instance, plan), rel=0.02)
    assert closed < evaluate(hand_instance, INSIDE).step_time_s


@pytest.mark.parametrize(("plan", "message"), [
    (Plan(dp=2, micro_batch=1, stages=(Stage(0, 24, 2),), virtual_stages=2),
     "interleaving 2 chunks needs at least 2 stages"),
    (Plan(dp=2, micro_batch=1, stages=(Stage(0, 22, 2), Stage(0, 2, 2)), virtual_stages=3),
     "needs at least 3 layers in every stage"),
    (Plan(dp=2, micro_batch=1, stages=tuple(Stage(0, 4, 1) for _ in range(6)),
          virtual_stages=2), "micro-batches a multiple of the 6 stages, got 32"),
])
def test_schedules_megatron_cannot_run_are_violations(hand_instance: Instance, plan: Plan,
                                                      message: str) -> None:
    result = evaluate(hand_instance, plan)
    assert [v.kind.value for v in result.violations] == ["schedule"]
    assert message in result.violations[0].message
    assert not evaluate_plans(hand_instance, [plan]).feasible[0]


def test_interleaving_outside_the_search_space_is_a_mismatch(hand_instance: Instance) -> None:
    result = evaluate(hand_instance, chunks(INSIDE, 2))
    assert result.feasible and not result.admissible
    assert [m.field for m in result.mismatches] == ["virtual_stages"]
    space = dataclasses.replace(hand_instance.search, virtual_stages=(1, 2))
    assert evaluate(hand_instance.replace(search=space), chunks(INSIDE, 2)).admissible


def test_single_and_batch_agree_on_interleaved_plans(generated: Instance) -> None:
    rng = np.random.default_rng(5)
    plans = []
    while len(plans) < 60:
        plan = random_plan(generated, rng)
        if plan.num_stages >= 2:
            plans.append(chunks(plan, int(rng.integers(2, 5))))
    batch = evaluate_plans(generated, plans)
    assert batch.feasible.any() and (~batch.feasible).any()
    # the same plans under a WAN-share cap and a cost budget that some of them break
    share = np.max(np.concatenate([batch.boundary_occupancy_s, batch.wrap_occupancy_s[:, None]],
                                  axis=1), axis=1) / batch.period_s
    constrained = generated.replace(constraints=Constraints(
        wan_share_cap=float(np.percentile(share, 25)),
        cost_budget=float(np.median(batch.comm_cost))))
    capped = evaluate_plans(constrained, plans)
    for kind in ("wan_cap", "cost_budget"):
        column = capped.violation[:, VIOLATIONS.index(kind)]
        assert column.any() and (~column).any(), kind
    for i, plan in enumerate(plans):
        single = evaluate(generated, plan)
        assert single.objectives == pytest.approx(tuple(batch.objectives[i]), rel=1e-12)
        assert single.feasible is bool(batch.feasible[i])
        assert {v.kind.value for v in evaluate(constrained, plan).violations} == {
            VIOLATIONS[k] for k in np.flatnonzero(capped.violation[i])}
        assert single.stage_in_flight == pytest.approx(
            list(batch.stage_in_flight[i, :plan.num_stages]), rel=1e-12)
        assert single.breakdown["period_s"] == pytest.approx(batch.period_s[i], rel=1e-12)
        assert single.derived["wan_gb_per_step"] == pytest.approx(batch.wan_gb_per_step[i],
                                                                  rel=1e-12)
