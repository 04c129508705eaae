"""Brute-force enumeration: the ground truth the exact MILP front is tested against (SPEC 7).

The enumeration must be complete (every plan of the search space, each once) and the front
must be exactly the non-dominated set of all feasible plans, scored by the evaluator.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from formulation.batch import RECOMPUTE_CODE, PlanBatch
from formulation.evaluator import VIOLATIONS, evaluate_batch
from formulation.instance import RECOMPUTE_MODES, Instance
from formulation.plan import Plan, Stage
from formulation.result import evaluate
from formulation.schema import InputError
from instances.tiny import tiny_instance
from solvers.bruteforce import (
    brute_force_front,
    count_plans,
    enumerate_plans,
    main,
    stage_options,
)
from solvers.front import Front, nondominated_mask

FIELDS = ("dp", "micro_batch", "num_stages", "domain", "layers", "tp", "recompute",
          "virtual_stages")


def _all(instance: Instance, chunk: int = 50_000) -> PlanBatch:
    batches = list(enumerate_plans(instance, chunk))
    return PlanBatch(**{f: np.concatenate([getattr(b, f) for b in batches]) for f in FIELDS})


def _rows(batch: PlanBatch) -> np.ndarray:
    """One integer row per plan holding every field (padding included)."""
    return np.column_stack([batch.dp, batch.micro_batch, batch.num_stages, batch.domain,
                            batch.layers, batch.tp, batch.recompute, batch.virtual_stages])


@pytest.fixture(scope="module")
def tiny() -> Instance:
    return tiny_instance(0)


@pytest.fixture(scope="module")
def scarce() -> Instance:
    """One free GPU per domain: plans with more GPUs must cross the WAN (58k plans)."""
    return tiny_instance(3, domains=4, layers=12, free_gpus=(1, 1, 1, 1))


@pytest.fixture(scope="module")
def interleaved() -> Instance:
    """A tiny instance whose search space lists interleaving with 2 chunks a stage."""
    instance = tiny_instance(3)
    return instance.replace(search=dataclasses.replace(instance.search, virtual_stages=(1, 2)))


@pytest.fixture(scope="module")
def everything(tiny: Instance) -> PlanBatch:
    return _all(tiny)


@pytest.fixture(scope="module")
def front(tiny: Instance) -> Front:
    return brute_force_front(tiny)


def test_tiny_instance_is_deterministic_and_validated() -> None:
    a, b = tiny_instance(4), tiny_instance(4)
    assert a.name == "tiny-k3-l6-s4" and a.num_domains == 3 and a.model.layers == 6
    assert a.to_dict() == b.to_dict()
    assert a.to_dict() != tiny_instance(5).to_dict()
    assert a.training.global_batch == 16 and a.search.max_stages == 3
    assert tiny_instance(4, domains=5, layers=8).links.bandwidth_gbps.shape == (5, 5)
    for bad in ({"domains": 2}, {"domains": 6}, {"layers": 0}, {"free_gpus": (1, 1)}):
        with pytest.raises(InputError):
            tiny_instance(4, **bad)


@pytest.mark.parametrize("which", ["tiny", "scarce", "interleaved"])
def test_count_matches_enumeration(which: str, request: pytest.FixtureRequest) -> None:
    instance = request.getfixturevalue(which)
    batch = _all(instance)
    assert count_plans(instance) == len(batch)
    # Chunking changes neither the rows nor their order.
    assert np.array_equal(_rows(_all(instance, chunk=7_777)), _rows(batch))


def test_plans_are_distinct_and_in_the_search_space(tiny: Instance,
                                                    everything: PlanBatch) -> None:
    rows = _rows(everything)
    assert len(np.unique(rows, axis=0)) == len(rows)
    search = tiny.search
    real = np.arange(everything.layers.shape[1])[None, :] < everything.num_stages[:, None]
    assert np.all((everything.layers >= 1) == real)
    assert np.all(everything.layers.sum(axis=1) == tiny.model.layers)
    assert np.all((everything.num_stages >= 1) & (everything.num_stages <= search.max_stages))
    assert np.all(tiny.training.global_batch % (everything.dp * everything.micro_batch) == 0)
    assert set(np.unique(everything.dp)) == set(search.dp)
    assert set(np.unique(everything.micro_batch)) == set(search.micro_batch)
    assert set(np.unique(everything.tp[real])) == set(search.tp)
    assert set(np.unique(everything.recompute[real])) == {RECOMPUTE_CODE[r]
                                                           for r in search.recompute}
    assert set(np.unique(everything.domain[real])) == set(range(tiny.num_domains))
    result = evaluate_batch(tiny, everything)
    structural = [VIOLATIONS.index(v) for v in ("layers", "tp")]
    assert not result.violation[:, structural].any() and not result.outside_search.any()
    assert result.feasible.sum() > len(everything) // 2  # many feasible plans


def _naive_plans(instance: Instance) -> list[Plan]:
    """Every plan by plain loops, with brute force's filter of stage options that are
    infeasible for sure, in each schedule of the search space."""
    plans = []
    for dp, b in itertools.product(instance.search.dp, instance.search.micro_batch):
        if instance.training.global_batch % (dp * b):
            continue
        options = [tuple(o) for o in stage_options(instance, dp).tolist()]
        for count in range(1, instance.search.max_stages + 1):
            for chain in itertools.product(options, repeat=count):
                for cuts in itertools.combinations(range(1, instance.model.layers), count - 1):
                    sizes = np.diff([0, *cuts, instance.model.layers])
                    stages = tuple(Stage(k, int(n), t, RECOMPUTE_MODES[rc])
                                   for (k, t, rc), n in zip(chain, sizes, strict=True))
                    plans += [Plan(dp, b, stages, v) for v in instance.search.virtual_stages]
    return plans


def test_enumeration_equals_a_naive_one() -> None:
    """Plan objects built by plain loops (same sure-infeasible filter) give the same set."""
    instance = tiny_instance(2, layers=3, free_gpus=(2, 4, 1))
    expected = set(_naive_plans(instance))
    found = _all(instance).to_plans()
    assert set(found) == expected and len(found) == len(expected) == count_plans(instance)


def test_front_points_are_nondominated_feasible_and_reevaluate(tiny: Instance,
                                                                front: Front) -> None:
    assert front.status == "exact" and len(front.points) >= 3
    objectives = front.objectives
    assert nondominated_mask(objectives).all()
    assert [p.objectives for p in front.points] == sorted(p.objectives for p in front.points)
    for point in front.points:
        result = evaluate(tiny, point.plan)
        assert result.feasible, result.violations
        assert np.allclose(result.objectives, point.objectives, rtol=1e-9, atol=0)
    provenance = front.provenance
    assert provenance["plans_evaluated"] == count_plans(tiny)
    assert 0 < provenance["feasible_plans"] <= provenance["plans_evaluated"]
    assert provenance["parameters"] == {"limit": 5_000_000}


@pytest.mark.parametrize("which", ["tiny", "scarce", "interleaved"])
def test_front_is_the_nondominated_set_of_all_feasible_plans(
        which: str, request: pytest.FixtureRequest) -> None:
    instance = request.getfixturevalue(which)
    everything, front = _all(instance), brute_force_front(instance)
    result = evaluate_batch(instance, everything)
    feasible = result.objectives[result.feasible]
    points = front.objectives
    # No feasible plan dominates a front point ...
    below = np.all(feasible[:, None, :] <= points[None, :, :], axis=2)
    strictly = np.any(feasible[:, None, :] < points[None, :, :], axis=2)
    assert not np.any(below & strictly)
    # ... and every feasible plan is weakly dominated by one (the front is complete).
    assert np.all(np.any(np.all(points[None, :, :] <= feasible[:, None, :], axis=2), axis=1))
    one_pass = np.unique(feasible[nondominated_mask(feasible)], axis=0)
    assert np.array_equal(one_pass, np.unique(points, axis=0))
    if which == "interleaved":  # the wider space pays: some points interleave
        assert any(p.plan.virtual_stages > 1 for p in front.points)


def test_interleaved_enumeration_drops_only_schedules_megatron_cannot_run() -> None:
    """With v in {1, 2, 3}, the enumeration is a naive one's plans less exactly those the
    evaluator finds a ``schedule`` violation in (one stage, m not a multiple of S, fewer
    than v layers in a stage)."""
    base = tiny_instance(2, layers=6, free_gpus=(2, 4, 1))
    instance = base.replace(search=dataclasses.replace(
        base.search, tp=(1,), recompute=("none",), virtual_stages=(1, 2, 3)))
    naive = _naive_plans(instance)
    found = set(_all(instance).to_plans())
    assert len(found) == count_plans(instance) and found <= set(naive)
    dropped = [p for p in naive if p not in found]
    assert dropped and any(p.virtual_stages > 1 for p in found)
    schedule = evaluate_batch(instance, PlanBatch.from_plans(naive)).violation[
        :, VIOLATIONS.index("schedule")]
    assert {p for p, bad in zip(naive, schedule, strict=True) if bad} == set(dropped)


def test_cross_domain_points_when_gpus_are_scarce(scarce: Instance) -> None:
    front = brute_force_front(scarce)
    crossing = [p for p in front.points if len(p.plan.domains_used()) > 1]
    assert len(crossing) >= 2 and all(p.objectives[2] > 0 for p in crossing)
    assert len({p.objectives[2] for p in crossing}) >= 2  # WAN cost is traded too
    for point in crossing:
        assert np.allclose(evaluate(scarce, point.plan).objectives, point.objectives,
                           rtol=1e-9, atol=0)


def test_ties_keep_one_plan_and_chunking_does_not_matter(tiny: Instance, front: Front) -> None:
    assert len({p.objectives for p in front.points}) == len(front.points)
    other = brute_force_front(tiny, chunk=3_001)
    assert [(p.objectives, p.plan) for p in other.points] == [(p.objectives, p.plan)
                                                              for p in front.points]


def test_ties_keep_the_first_enumerated_plan(tiny: Instance, everything: PlanBatch,
                                            front: Front) -> None:
    """Plans with equal objective vectors (e.g. one-stage dp=1 plans in different domains)
    are common; the front keeps one of them, the first in enumeration order."""
    result = evaluate_batch(tiny, everything)
    feasible = np.flatnonzero(result.feasible)
    tied = 0
    for point in front.points:
        same = feasible[np.all(result.objectives[feasible] == point.objectives, axis=1)]
        tied += len(same) > 1
        assert everything.plan(int(same[0])) == point.plan
    assert tied > 0


def test_determinism(tiny: Instance, front: Front) -> None:
    again = brute_force_front(tiny_instance(0)).to_dict(tiny)
    first = front.to_dict(tiny)
    for document in (first, again):
        document.pop("provenance")
    assert first == again


def test_json_round_trip(tiny: Instance, front: Front, tmp_path: Path) -> None:
    path = tmp_path / "front.json"
    front.save(path, tiny)
    loaded = Front.load(path, tiny)
    assert loaded.status == "exact" and loaded.instance == tiny.name
    assert [(p.objectives, p.plan) for p in loaded.points] == [(p.objectives, p.plan)
                                                               for p in front.points]
    assert loaded.provenance == front.provenance


def test_limit_refuses_with_count(tiny: Instance) -> None:
    with pytest.raises(InputError, match=r"72,048 plans.*limit of 1,000"):
        brute_force_front(tiny, limit=1_000)


def test_cli_writes_front(tiny: Instance, tmp_path: Path) -> None:
    source, out = tmp_path / "tiny.json", tmp_path / "out" / "front.json"
    tiny.save(source)
    out.parent.mkdir()  # an output's directory must exist (nothing is created silently)
    done = subprocess.run([sys.executable, "-m", "solvers.bruteforce", str(source),
                           "--out", str(out)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert len(done.stdout.strip().splitlines()) == 1 and "72,048 plans" in done.stdout
    loaded = Front.load(out, tiny)
    assert loaded.provenance["command"].startswith("python -m solvers.bruteforce")
    assert len(loaded.points) == len(brute_force_front(tiny).points)


def _exit_status(argv: list[str]) -> int:
    """``main``'s status; argparse's usage errors leave through SystemExit."""
    try:
        return main(argv)
    except SystemExit as stop:
        return int(stop.code or 0)


@pytest.mark.parametrize("case", ["missing", "directory", "not_json", "invalid", "too_many",
                                  "bad_flag"])
def test_cli_bad_input(case: str, tiny: Instance, tmp_path: Path,
                       capsys: pytest.CaptureFixture[str]) -> None:
    source, out = tmp_path / "in.json", tmp_path / "front.json"
    extra: list[str] = []
    if case == "directory":
        source = tmp_path
    elif case == "not_json":
        source.write_text("{not json", encoding="utf-8")
    elif case == "invalid":
        document = tiny.to_dict()
        document["domains"][0]["free_gpus"] = -1
        source.write_text(json.dumps(document), encoding="utf-8")
    elif case in ("too_many", "bad_flag"):
        tiny.save(source)
        extra = ["--limit", "10" if case == "too_many" else "ten"]
    status = _exit_status([str(source), "--out", str(out), *extra])
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2 and len(err) == 1 and err[0].startswith("error:"), err
    assert not out.exists()
    if case == "too_many":
        assert "72,048" in err[0] and "limit of 10" in err[0]
