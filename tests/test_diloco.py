"""The DiLoCo plan family: its evaluation, JSON form and the dispatch of either family."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from formulation.costmodel import GB, GBIT
from formulation.diloco import DilocoPlan, evaluate_diloco, worker_instance
from formulation.families import evaluate_any, load_plan, plan_from_dict, score
from formulation.instance import Instance
from formulation.plan import Plan, Stage
from formulation.result import evaluate
from formulation.schema import InputError
from solvers.front import Front

ROOT = Path(__file__).resolve().parents[1]


def worker(domain: int, dp: int = 2, tp: int = 2, stages: int = 2, layers: int = 24) -> Plan:
    share = [layers // stages] * stages
    share[-1] += layers - sum(share)
    return Plan(dp=dp, micro_batch=1, stages=tuple(
        Stage(domain=domain, layers=n, tp=tp, recompute="none") for n in share))


@pytest.fixture(scope="module")
def two_workers() -> DilocoPlan:
    return DilocoPlan(sync_every=100, workers=(worker(0), worker(2)))


def test_step_is_the_slowest_worker_plus_the_amortised_ring(hand_instance: Instance,
                                                            two_workers: DilocoPlan):
    evaluation = evaluate_diloco(hand_instance, two_workers)
    assert evaluation.feasible, evaluation.violations
    inner = worker_instance(hand_instance, 2)
    assert inner.training.global_batch == hand_instance.training.global_batch // 2
    slowest = max(evaluate(inner, w).step_time_s for w in two_workers.workers)
    # Ring of two over the alpha-gamma link (2 Gbit/s, 80 ms): 2 steps of half the model.
    model_bytes = hand_instance.model.total_params * 2
    sync = 2 * (model_bytes / 2 / (2.0 * GBIT) + 0.080)
    assert evaluation.breakdown["sync_s"] == pytest.approx(sync, rel=1e-12)
    assert evaluation.step_time_s == pytest.approx(slowest + sync / 100, rel=1e-12)
    # Each direction carries 2 (R-1)/R = 1 model's bytes per sync at 0.05 USD/GB.
    assert evaluation.comm_cost == pytest.approx(2 * model_bytes / GB * 0.05 / 100, rel=1e-12)
    assert evaluation.gpus == 16  # two workers of dp 2 x tp 2 x 2 stages
    assert evaluation.changes_optimizer


def test_more_frequent_syncs_cost_more(hand_instance: Instance, two_workers: DilocoPlan):
    rare = evaluate_diloco(hand_instance, two_workers)
    often = evaluate_diloco(hand_instance, DilocoPlan(10, two_workers.workers))
    assert often.step_time_s > rare.step_time_s and often.comm_cost > rare.comm_cost
    assert often.comm_cost == pytest.approx(10 * rare.comm_cost)


@pytest.mark.parametrize(("plan", "kind"), [
    (DilocoPlan(10, (Plan(dp=1, micro_batch=1, stages=(Stage(0, 12, 2), Stage(1, 12, 2))),
                     worker(2))), "diloco: worker 0"),
    (DilocoPlan(10, (worker(0), worker(0))), "diloco: domain 'alpha' hosts 2"),
    (DilocoPlan(10, (worker(0), worker(1, dp=8, tp=2))), "gpus: worker 1"),
])
def test_violations_are_named(hand_instance: Instance, plan: DilocoPlan, kind: str):
    evaluation = evaluate_diloco(hand_instance, plan)
    assert not evaluation.feasible
    assert any(str(violation).startswith(kind) for violation in evaluation.violations), \
        evaluation.violations
    assert {v.kind.value for v in evaluation.violations} == {kind.split(":")[0]}


def test_workers_that_cannot_share_the_batch_are_refused(hand_instance: Instance):
    """G = 64 sequences do not split over 3 workers: no plan, not an infeasible one."""
    plan = DilocoPlan(10, (worker(0), worker(1), worker(2, dp=1)))
    with pytest.raises(InputError, match="not divisible by 3 DiLoCo workers"):
        evaluate_diloco(hand_instance, plan)
    with pytest.raises(InputError, match="not divisible by 3 DiLoCo workers"):
        plan_from_dict(plan.to_dict(hand_instance), hand_instance)


def test_json_round_trip_and_dispatch(hand_instance: Instance, two_workers: DilocoPlan,
                                      tmp_path: Path):
    document = two_workers.to_dict(hand_instance)
    assert document["workers"][0]["stages"][0]["domain"] == "alpha"
    assert plan_from_dict(document, hand_instance) == two_workers
    pipeline = two_workers.workers[0]
    assert plan_from_dict(pipeline.to_dict(hand_instance), hand_instance) == pipeline
    path = tmp_path / "diloco.json"
    path.write_text(json.dumps(document))
    assert load_plan(path, hand_instance) == two_workers
    bad = {**document, "workers": [{**document["workers"][0], "dp": 0}]}
    with pytest.raises(InputError, match=r"workers\[0\]\.dp"):
        plan_from_dict(bad, hand_instance)


def test_score_mixes_both_families(hand_instance: Instance, two_workers: DilocoPlan):
    pipeline = two_workers.workers[0]
    objectives, feasible = score(hand_instance, [pipeline, two_workers])
    assert np.allclose(objectives[0], evaluate(hand_instance, pipeline).objectives)
    assert np.allclose(objectives[1], evaluate_any(hand_instance, two_workers).objectives)
    assert feasible.tolist() == [True, True]


def test_front_with_diloco_points_saves_and_loads(hand_instance: Instance,
                                                  two_workers: DilocoPlan, tmp_path: Path):
    front = Front.from_plans(hand_instance, [two_workers, two_workers.workers[0]], "heuristic")
    front.save(tmp_path / "front.json", hand_instance)
    loaded = Front.load(tmp_path / "front.json", hand_instance)
    assert [p.plan for p in loaded.points] == [p.plan for p in front.points]
    assert any(isinstance(p.plan, DilocoPlan) for p in loaded.points)


def test_evaluate_cli_takes_a_diloco_plan(hand_instance: Instance, two_workers: DilocoPlan,
                                          tmp_path: Path):
    hand_instance.save(tmp_path / "instance.json")
    (tmp_path / "plan.json").write_text(json.dumps(two_workers.to_dict(hand_instance)))
    done = subprocess.run([sys.executable, "-m", "formulation.evaluate",
                           str(tmp_path / "instance.json"), str(tmp_path / "plan.json")],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    output = json.loads(done.stdout)
    assert output["changes_optimizer"] is True and len(output["workers"]) == 2
    assert output["step_time_s"] == pytest.approx(
        evaluate_diloco(hand_instance, two_workers).step_time_s)
