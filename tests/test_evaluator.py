"""The evaluator: the 1F1B closed form, batch/single agreement, named violations and
monotonicity properties of the physics."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from formulation.batch import PlanBatch
from formulation.evaluator import (
    VIOLATIONS,
    BatchEvaluation,
    cost_model,
    evaluate_batch,
    evaluate_plans,
    latency_bound,
    robust_instance,
)
from formulation.feasibility import Kind, Violation
from formulation.instance import RECOMPUTE_MODES, Constraints, Instance
from formulation.plan import Plan, Stage
from formulation.result import evaluate
from formulation.result import latency_bound as scalar_latency_bound
from formulation.schema import InputError
from instances.sample import random_plan

PROPERTY = settings(max_examples=50, deadline=None)

# Plans on the hand instance (domains alpha 32 free, beta 16 free, gamma 32 free; G = 64).
HAND_PLANS = {
    "one-stage": Plan(dp=2, micro_batch=2, stages=(Stage(0, 24, 8, "selective"),)),
    "two-domains": Plan(dp=2, micro_batch=1, stages=(Stage(0, 14, 4, "none"),
                                                     Stage(1, 10, 4, "full"))),
    "three-stages": Plan(dp=2, micro_batch=2, stages=(Stage(0, 10, 4, "selective"),
                                                      Stage(0, 8, 2, "none"),
                                                      Stage(1, 6, 4, "full"))),
    "wan-chain": Plan(dp=1, micro_batch=4, stages=(Stage(1, 8, 8, "full"),
                                                   Stage(0, 8, 8, "full"),
                                                   Stage(2, 8, 8, "full"))),
    "slow-first-link": Plan(dp=1, micro_batch=4, stages=(Stage(1, 8, 8, "full"),
                                                         Stage(0, 8, 8, "full"),
                                                         Stage(0, 8, 8, "full"))),
}


def kinds(violations: list[Violation]) -> set[str]:
    return {v.kind.value for v in violations}


def one(instance: Instance, plan: Plan) -> BatchEvaluation:
    return evaluate_plans(instance, [plan])


def closed_form_step_time(r: BatchEvaluation, m: float, stages: int) -> tuple[float, float]:
    """(P, T_step) of SPEC 3.1 rebuilt from a result's per-stage and per-link fields; the
    latency bound is taken over every window of consecutive positions, the SPEC's j-window
    from the last stage being the k = 0 case (see formulation/evaluator.py)."""
    c = r.stage_compute_s[0, :stages][::-1]  # from the end: c[0] is the last stage
    delta = r.boundary_delay_s[0, :stages - 1][::-1]  # delta[i] joins positions i+1 and i
    occupancy = r.boundary_occupancy_s[0, :stages - 1]
    windows = [(c[k:j + 1].sum() + 2 * delta[k:j].sum()) / (j - k + 1)
               for k in range(stages) for j in range(k, stages)]
    period = max(c.max(), occupancy.max(initial=0.0), max(windows))
    pipeline = (m - 1) * period + c.sum() + 2 * delta.sum()
    return period, pipeline + r.allreduce_s[0] + r.optimizer_s[0]


def spec_latency_bound(r: BatchEvaluation, stages: int) -> float:
    """The SPEC's own third term: windows that end at the last stage."""
    c = r.stage_compute_s[0, :stages][::-1]
    delta = r.boundary_delay_s[0, :stages - 1][::-1]
    return max((c[:j + 1].sum() + 2 * delta[:j].sum()) / (j + 1) for j in range(stages))


# -- closed form -----------------------------------------------------------------------------
@pytest.mark.parametrize("name", list(HAND_PLANS))
def test_closed_form_step_time(hand_instance: Instance, name: str) -> None:
    plan = HAND_PLANS[name]
    r = one(hand_instance, plan)
    assert r.feasible[0], evaluate(hand_instance, plan).violations
    m = hand_instance.training.global_batch / (plan.dp * plan.micro_batch)
    period, step = closed_form_step_time(r, m, plan.num_stages)
    assert r.period_s[0] == pytest.approx(period, rel=1e-12)
    assert r.step_time_s[0] == pytest.approx(step, rel=1e-12)
    assert r.period_s[0] >= spec_latency_bound(r, plan.num_stages) * (1 - 1e-12)


@pytest.mark.parametrize("name", list(HAND_PLANS))
def test_result_fields_come_from_the_cost_model(hand_instance: Instance, name: str) -> None:
    plan = HAND_PLANS[name]
    cm, r = cost_model(hand_instance), one(hand_instance, plan)
    b, dp, last = plan.micro_batch, plan.dp, plan.num_stages - 1
    allreduce, optimizer = [], []
    for j, stage in enumerate(plan.stages):
        c = (stage.layers * cm.layer_compute_time(b, stage.tp, stage.recompute)
             + cm.edge_compute_time(b, stage.tp, j == 0, j == last))
        assert r.stage_compute_s[0, j] == pytest.approx(c, rel=1e-12)
        params = stage.layers * cm.layer_params + cm.edge_params(j == 0, j == last)
        allreduce.append(float(cm.allreduce_time(stage.domain, params, stage.tp, dp)))
        optimizer.append(float(cm.optimizer_time(params, stage.tp, dp)))
    for j, (a, z) in enumerate(zip(plan.stages, plan.stages[1:], strict=False)):
        assert r.boundary_delay_s[0, j] == pytest.approx(
            float(cm.boundary_delay(a.domain, z.domain, b, dp)), rel=1e-12)
    assert r.allreduce_s[0] == pytest.approx(max(allreduce), rel=1e-12)
    assert r.optimizer_s[0] == pytest.approx(max(optimizer), rel=1e-12)


def test_one_stage_pipeline_is_serial(hand_instance: Instance) -> None:
    plan = HAND_PLANS["one-stage"]
    r = one(hand_instance, plan)
    c = r.stage_compute_s[0, 0]
    m = hand_instance.training.global_batch // (plan.dp * plan.micro_batch)
    assert r.period_s[0] == pytest.approx(c, rel=1e-12)
    assert r.pipeline_s[0] == pytest.approx(m * c, rel=1e-12)
    assert r.comm_cost[0] == 0.0


def test_round_trip_over_an_inner_slow_link_binds(hand_instance: Instance) -> None:
    """beta -> alpha -> alpha: the slow WAN link joins the first two stages, and the round
    trip of those two stages, (c_first + c_second + 2 delta) / 2, exceeds every window that
    ends at the last stage (the SPEC's term): the evaluator's generalisation is binding."""
    plan = HAND_PLANS["slow-first-link"]
    r = one(hand_instance, plan)
    c, delta = r.stage_compute_s[0], r.boundary_delay_s[0]
    inner = (c[0] + c[1] + 2 * delta[0]) / 2
    assert r.period_s[0] == pytest.approx(inner, rel=1e-12)
    assert r.period_s[0] > 1.1 * spec_latency_bound(r, plan.num_stages)


# -- single vs batch -------------------------------------------------------------------------
@pytest.fixture(scope="module")
def random_plans(generated: Instance) -> list[Plan]:
    """200 random plans of the search space, feasible or not, of 1 to 8 stages."""
    rng = np.random.default_rng(7)
    plans: list[Plan] = []
    while len(plans) < 200:
        plan = random_plan(generated, rng)
        if plan is not None:
            plans.append(plan)
    return plans


def assert_single_matches_batch(instance: Instance, plans: list[Plan]) -> None:
    """``evaluate`` (scalar path) against row i of ``evaluate_batch``: every reported number."""
    batch = evaluate_plans(instance, plans)
    close = {"rel": 1e-12, "abs": 1e-300}
    for i, plan in enumerate(plans):
        single, n = evaluate(instance, plan), plan.num_stages
        assert single.gpus == batch.gpus[i] == plan.gpus()
        assert single.feasible is bool(batch.feasible[i])
        assert single.admissible is bool(batch.admissible[i])
        assert (not single.mismatches) is (not batch.outside_search[i])
        assert kinds(single.violations) == {VIOLATIONS[v]
                                            for v in np.flatnonzero(batch.violation[i])}
        assert single.objectives == pytest.approx(
            (batch.step_time_s[i], batch.gpus[i], batch.comm_cost[i]), **close)
        for key in ("mfu", "tokens_per_s", "wan_gb_per_step", "cluster_utilisation",
                    "achieved_tflops_per_gpu"):
            assert single.derived[key] == pytest.approx(getattr(batch, key)[i], **close), key
        for key in ("period_s", "pipeline_s", "allreduce_s", "optimizer_s"):
            assert single.breakdown[key] == pytest.approx(getattr(batch, key)[i], **close), key
        stages = single.stages
        np.testing.assert_allclose([s["compute_s"] for s in stages],
                                   batch.stage_compute_s[i, :n], rtol=1e-12)
        np.testing.assert_allclose([s["memory_gb"] * 1e9 for s in stages],
                                   batch.stage_memory_bytes[i, :n], rtol=1e-12)
        assert [s["in_flight"] for s in stages] == batch.stage_in_flight[i, :n].tolist()


def test_evaluate_agrees_with_the_batch_on_a_feasible_sample(
        generated: Instance, sample_plans: list[Plan]) -> None:
    assert_single_matches_batch(generated, sample_plans)


def test_evaluate_agrees_with_the_batch_on_random_plans(generated: Instance,
                                                       random_plans: list[Plan]) -> None:
    assert_single_matches_batch(generated, random_plans)


def test_evaluate_agrees_with_the_batch_on_hand_plans(hand_instance: Instance) -> None:
    plans = [*HAND_PLANS.values(), FEASIBLE, *INFEASIBLE.values()]
    assert_single_matches_batch(hand_instance, plans)
    constrained = hand_instance.replace(constraints=Constraints(wan_share_cap=0.05,
                                                                cost_budget=1e-3))
    assert_single_matches_batch(constrained, plans)


def test_batch_of_200_equals_one_by_one(generated: Instance, random_plans: list[Plan]) -> None:
    batch = evaluate_batch(generated, PlanBatch.from_plans(random_plans))
    assert 0 < batch.feasible.sum() < 200  # a mix of feasible and infeasible plans
    assert len({p.num_stages for p in random_plans}) > 3  # and of padded widths
    for i, plan in enumerate(random_plans):
        single = one(generated, plan)
        n = plan.num_stages
        for field in dataclasses.fields(BatchEvaluation):
            got, want = getattr(batch, field.name)[i], getattr(single, field.name)[0]
            if field.name.startswith(("stage_", "boundary_")):
                width = n if field.name.startswith("stage_") else n - 1
                got, want = got[:width], want[:width]
            np.testing.assert_allclose(got, want, rtol=1e-12, err_msg=field.name)


# -- infeasible plans are scored, with named violations --------------------------------------
FEASIBLE = Plan(dp=2, micro_batch=1, stages=(Stage(0, 12, 4, "selective"),
                                             Stage(1, 12, 4, "selective")))

INFEASIBLE = {
    "gpus": Plan(dp=4, micro_batch=1, stages=(Stage(0, 12, 4, "selective"),  # beta: 32 > 16
                                              Stage(1, 12, 8, "selective"))),
    "memory": Plan(dp=1, micro_batch=4, stages=(Stage(0, 20, 1, "none"), Stage(0, 4, 1, "none"))),
    "tp": Plan(dp=1, micro_batch=1, stages=(Stage(0, 24, 16, "selective"),)),
    "layers": Plan(dp=2, micro_batch=1, stages=(Stage(0, 12, 4, "selective"),
                                                Stage(1, 11, 4, "selective"))),
}
EXPECTED_KINDS = {"gpus": {"gpus"}, "memory": {"memory"}, "tp": {"tp"}, "layers": {"layers"}}
# tp=16 is also outside the search space: a mismatch, reported apart
EXPECTED_MISMATCHES = {"gpus": set(), "memory": set(), "tp": {"tp"}, "layers": set()}


def test_reference_plan_is_feasible(hand_instance: Instance) -> None:
    result = evaluate(hand_instance, FEASIBLE)
    assert result.feasible and result.violations == []


@pytest.mark.parametrize("kind", list(INFEASIBLE))
def test_infeasible_plan_is_scored_with_named_violation(hand_instance: Instance,
                                                        kind: str) -> None:
    result = evaluate(hand_instance, INFEASIBLE[kind])
    assert not result.feasible
    assert kinds(result.violations) == EXPECTED_KINDS[kind]
    assert np.isfinite(result.step_time_s) and result.step_time_s > 0
    assert {m.field for m in result.mismatches} == EXPECTED_MISMATCHES[kind]
    row = one(hand_instance, INFEASIBLE[kind])
    assert {VIOLATIONS[i] for i in np.flatnonzero(row.violation[0])} == EXPECTED_KINDS[kind]
    assert bool(row.outside_search[0]) is bool(EXPECTED_MISMATCHES[kind])


def test_a_plan_outside_the_search_space_is_scored_physically(hand_instance: Instance) -> None:
    """Search-space mismatches are warnings: the plan is feasible, not admissible."""
    space = hand_instance.search
    narrow = hand_instance.replace(search=dataclasses.replace(
        space, dp=(1,), tp=(1, 2), recompute=("full",), max_stages=1))
    result = evaluate(narrow, FEASIBLE)
    assert result.feasible and not result.admissible
    assert [m.field for m in result.mismatches] == ["dp", "tp", "recompute", "tp",
                                                    "recompute", "max_stages"]
    assert str(result.mismatches[0]) == "search: dp=2 is not in the allowed [1]"
    assert result.objectives == evaluate(hand_instance, FEASIBLE).objectives
    row = one(narrow, FEASIBLE)
    assert row.feasible[0] and row.outside_search[0] and not row.admissible[0]
    document = result.to_dict()
    assert document["feasible"] is True and document["within_search_space"] is False
    assert document["search_mismatches"][0] == {"field": "dp",
                                                "message": "dp=2 is not in the allowed [1]"}


def test_a_fraction_of_a_micro_batch_is_refused(hand_instance: Instance) -> None:
    """dp x micro_batch must divide the global batch: such a plan is not scored at all."""
    plan = Plan(dp=3, micro_batch=1, stages=(Stage(0, 12, 4, "selective"),
                                             Stage(2, 12, 4, "selective")))
    with pytest.raises(InputError, match="does not divide training.global_batch"):
        evaluate(hand_instance, plan)
    with pytest.raises(ValueError, match="PlanBatch row 1: dp x micro_batch = 3"):
        evaluate_plans(hand_instance, [FEASIBLE, plan])
    with pytest.raises(InputError, match="micro-batches a step"):
        Plan.from_dict(plan.to_dict(), hand_instance)
    assert Plan.from_dict(plan.to_dict()) == plan  # without an instance nothing to check


def test_gpu_violation_names_the_domain(hand_instance: Instance) -> None:
    (violation,) = evaluate(hand_instance, INFEASIBLE["gpus"]).violations
    assert violation.kind is Kind.GPUS
    assert str(violation).startswith("gpus: domain 'beta' uses 32 GPUs > 16 free")


def test_memory_violation_names_the_stage(hand_instance: Instance) -> None:
    (violation,) = evaluate(hand_instance, INFEASIBLE["memory"]).violations
    assert str(violation).startswith("memory: stage 0 (domain 'alpha')")


@pytest.mark.parametrize(("constraints", "kind"), [
    (Constraints(wan_share_cap=1e-3), "wan_cap"),
    (Constraints(cost_budget=1e-6), "cost_budget"),
    (Constraints(wan_share_cap=1.0, cost_budget=1e6), None),
])
def test_optional_constraints(hand_instance: Instance, constraints: Constraints,
                              kind: str | None) -> None:
    instance = hand_instance.replace(constraints=constraints)
    result = evaluate(instance, FEASIBLE)
    assert result.feasible is (kind is None)
    assert kinds(result.violations) == ({kind} if kind else set())
    if kind == "wan_cap":
        assert str(result.violations[0]).startswith("wan_cap: link 'alpha'->'beta'")


# -- properties ------------------------------------------------------------------------------
def _scaled(instance: Instance, wan: list[float], intra: list[float]) -> Instance:
    k = instance.num_domains
    bandwidth = instance.links.bandwidth_gbps * np.array(wan).reshape(k, k)
    domains = tuple(dataclasses.replace(d, intra_bandwidth_gbps=d.intra_bandwidth_gbps * f)
                    for d, f in zip(instance.domains, intra, strict=True))
    return instance.with_link_state(bandwidth_gbps=bandwidth).replace(domains=domains)


FACTOR = st.one_of(st.just(1.0), st.floats(1.0, 16.0))


@PROPERTY
@given(data=st.data())
def test_more_bandwidth_never_slows_a_plan(generated: Instance, sample_plans: list[Plan],
                                           data: st.DataObject) -> None:
    k = generated.num_domains
    wan = data.draw(st.lists(FACTOR, min_size=k * k, max_size=k * k), label="wan")
    intra = data.draw(st.lists(FACTOR, min_size=k, max_size=k), label="intra")
    before = evaluate_plans(generated, sample_plans).step_time_s
    after = evaluate_plans(_scaled(generated, wan, intra), sample_plans).step_time_s
    assert np.all(after <= before * (1 + 1e-12))


@PROPERTY
@given(b1=st.integers(1, 16), extra=st.integers(0, 16), t=st.sampled_from([1, 2, 4, 8]),
       recompute=st.sampled_from(RECOMPUTE_MODES))
def test_larger_micro_batch_never_lowers_activation_memory(generated: Instance, b1: int,
                                                           extra: int, t: int,
                                                           recompute: str) -> None:
    cm = cost_model(generated)
    b2 = b1 + extra
    assert cm.layer_activation_bytes(b2, t, recompute) >= cm.layer_activation_bytes(
        b1, t, recompute)


def _stage_memory(instance: Instance, plan: Plan, j: int, b: int, in_flight: int) -> float:
    cm, stage = cost_model(instance), plan.stages[j]
    t, rc = stage.tp, stage.recompute
    return float(cm.stage_memory_bytes(
        stage.layers, in_flight, cm.state_bytes_per_param(t, plan.dp),
        cm.layer_activation_bytes(b, t, rc), cm.workspace_bytes(b, t, rc),
        cm.logits_bytes(b, t), j == 0, j == plan.num_stages - 1))


def test_stage_memory_helper_matches_the_evaluator(generated: Instance,
                                                   sample_plans: list[Plan]) -> None:
    r = evaluate_plans(generated, sample_plans)
    for i, plan in enumerate(sample_plans):
        for j in range(plan.num_stages):
            memory = _stage_memory(generated, plan, j, plan.micro_batch,
                                   int(r.stage_in_flight[i, j]))
            assert memory == pytest.approx(r.stage_memory_bytes[i, j], rel=1e-12)


@PROPERTY
@given(data=st.data(), extra=st.integers(1, 8), in_flight=st.integers(1, 12))
def test_larger_micro_batch_never_lowers_stage_memory(generated: Instance,
                                                      sample_plans: list[Plan],
                                                      data: st.DataObject, extra: int,
                                                      in_flight: int) -> None:
    plan = data.draw(st.sampled_from(sample_plans), label="plan")
    j = data.draw(st.integers(0, plan.num_stages - 1), label="stage")
    b = plan.micro_batch
    assert (_stage_memory(generated, plan, j, b + extra, in_flight)
            >= _stage_memory(generated, plan, j, b, in_flight))


def _split(plan: Plan, j: int, front: int) -> Plan:
    stage = plan.stages[j]
    pieces = (dataclasses.replace(stage, layers=front),
              dataclasses.replace(stage, layers=stage.layers - front))
    return dataclasses.replace(plan, stages=plan.stages[:j] + pieces + plan.stages[j + 1:])


@PROPERTY
@given(data=st.data())
def test_halving_a_stage_never_raises_per_gpu_memory(generated: Instance,
                                                     sample_plans: list[Plan],
                                                     data: st.DataObject) -> None:
    """Split stage j (n layers) into floor(n/2) then ceil(n/2) layers. The front half moves
    one position further from the end and holds one more micro-batch in flight, but with at
    most half the layers: floor(n/2) (p+2) <= n (p+1) for every position p >= 0."""
    plan = data.draw(st.sampled_from([p for p in sample_plans
                                      if any(s.layers >= 2 for s in p.stages)]), label="plan")
    j = data.draw(st.sampled_from([j for j, s in enumerate(plan.stages) if s.layers >= 2]),
                  label="stage")
    split = _split(plan, j, plan.stages[j].layers // 2)
    r = evaluate_plans(generated, [plan, split])
    original = r.stage_memory_bytes[0]
    pieces = r.stage_memory_bytes[1]
    assert pieces[j] <= original[j] * (1 + 1e-12)
    assert pieces[j + 1] <= original[j] * (1 + 1e-12)
    # Stages behind the split keep their position; those in front move one further back.
    np.testing.assert_allclose(pieces[j + 2:plan.num_stages + 1], original[j + 1:plan.num_stages],
                               rtol=1e-12)
    assert np.all(pieces[:j] >= original[:j] * (1 - 1e-12))


def test_an_uneven_split_of_the_last_stage_can_raise_memory(generated: Instance) -> None:
    """Why the property above halves the stage: splitting the last stage (n = 8 layers, one
    micro-batch in flight) into 7 + 1 leaves a front piece of 7 layers that holds two
    micro-batches, which outweighs dropping the LM head and the logits (eager attention,
    whose s x s activations make a layer's the largest part)."""
    plan = Plan(dp=1, micro_batch=2, stages=tuple(Stage(0, 8, 8, "none") for _ in range(4)))
    split = _split(plan, 3, 7)
    eager = generated.replace(training=dataclasses.replace(generated.training,
                                                           attention="eager"))
    r = evaluate_plans(eager, [plan, split])
    assert r.stage_in_flight[0, 3] == 1 and r.stage_in_flight[1, 3] == 2
    assert r.stage_memory_bytes[1, 3] > 1.3 * r.stage_memory_bytes[0, 3]


def test_robust_instance_is_never_faster(generated: Instance, sample_plans: list[Plan]) -> None:
    robust = robust_instance(generated)
    eps = generated.links.eps
    assert eps > 0
    np.testing.assert_allclose(robust.links.bandwidth_gbps,
                               generated.links.bandwidth_gbps * (1 - eps))
    base = evaluate_plans(generated, sample_plans)
    worst = evaluate_plans(robust, sample_plans)
    assert np.all(worst.step_time_s >= base.step_time_s)
    cross_domain = np.array([len(p.domains_used()) > 1 for p in sample_plans])
    assert cross_domain.any()
    assert np.all(worst.step_time_s[cross_domain] > base.step_time_s[cross_domain])


def test_batch_arrays_outside_the_instance_are_rejected(generated, sample_plans):
    import dataclasses

    from formulation.batch import PlanBatch
    from formulation.evaluator import evaluate_batch

    batch = PlanBatch.from_plans(sample_plans[:3])
    with pytest.raises(ValueError, match="domain indices"):
        evaluate_batch(generated, dataclasses.replace(batch, domain=batch.domain + 99))
    with pytest.raises(ValueError, match="tp must be >= 1"):
        evaluate_batch(generated, dataclasses.replace(batch, tp=batch.tp * 0))


@pytest.mark.parametrize("seed", range(4))
def test_the_scalar_latency_bound_is_every_windows_maximum(seed: int) -> None:
    """The single-plan evaluator's latency bound skips window starts that cannot beat the
    slowest stage: on random chains, fast and slow links, ties and zeros, it still equals
    the maximum over every window, and the batch evaluator's."""
    rng = np.random.default_rng(seed)
    for _ in range(300):
        count = int(rng.integers(1, 21))
        compute = list(rng.choice([0.0, 0.5, 1.0], count) if rng.random() < 0.2
                       else rng.random(count))
        delay = [0.0] + list(rng.random(count - 1) * rng.choice([0.0, 0.05, 1.0, 5.0])
                             * (rng.random(count - 1) < 0.6))
        every_window = max(
            (sum(compute[k:j + 1]) + 2 * sum(delay[k + 1:j + 1])) / (j - k + 1)
            for k in range(count) for j in range(k, count))
        assert scalar_latency_bound(compute, delay) == pytest.approx(every_window, rel=1e-12,
                                                                      abs=1e-300)
        batch = latency_bound(np.array([compute]), np.array([delay]), np.array([count]))
        assert scalar_latency_bound(compute, delay) == pytest.approx(float(batch[0]),
                                                                      rel=1e-12, abs=1e-300)
