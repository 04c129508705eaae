"""The committed reference fronts: valid, non-dominated, reproducible (SPEC 7)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from formulation.evaluator import evaluate_plans
from formulation.instance import Instance
from formulation.result import evaluate
from formulation.schema import InputError
from instances.sample import chain_plans, feasible_sample
from instances.suites import SUITES_DIR, suite_paths
from solvers.exact import exact_front
from solvers.front import Front, dominated_by, fronts_agree, nondominated_mask

FRONTS_DIR = Path(__file__).resolve().parent.parent / "instances" / "fronts"
FRONTS = sorted(FRONTS_DIR.glob("*/*.front.json"))


def _load(path: Path) -> tuple[Instance, Front]:
    suite = path.parent.name
    instance = Instance.load(SUITES_DIR / suite / path.name.replace(".front.json", ".json"))
    return instance, Front.load(path, instance)


@pytest.mark.parametrize("suite", ["quick", "bench", "full"])
def test_every_suite_instance_has_a_front(suite):
    fronts = {p.name.replace(".front.json", "") for p in FRONTS if p.parent.name == suite}
    assert fronts == {p.stem for p in suite_paths(suite)}


@pytest.mark.parametrize("path", FRONTS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_the_status_label_is_honest(path):
    """``exact`` only if every GPU interval was swept, every step proven and every point
    certified optimal; a best-known front says why and bounds every point it can."""
    _, front = _load(path)
    provenance = front.provenance
    exact = provenance["complete"] and provenance["unproven_steps"] == 0
    assert front.status == ("exact" if exact else "best_known")
    if exact:
        assert all(p.status == "optimal" and p.gap is not None and p.gap <= 1e-6
                   for p in front.points)
    else:
        assert all(p.status in ("optimal", "unproven", "heuristic") for p in front.points)
    gaps = [p.gap for p in front.points if p.gap is not None]
    assert provenance["largest_gap"] == (max(gaps) if gaps else None)


@pytest.mark.parametrize("path", FRONTS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_stored_points_re_evaluate_and_are_non_dominated(path):
    instance, front = _load(path)
    assert front.status in ("exact", "best_known")
    assert front.points
    for key in ("command", "versions", "parameters", "wall_time_s", "sweep", "engines"):
        assert key in front.provenance
    stored = front.objectives
    assert nondominated_mask(stored).all()
    for point in front.points:
        evaluation = evaluate(instance, point.plan)
        assert evaluation.feasible, evaluation.violations
        assert np.allclose(evaluation.objectives, point.objectives, rtol=1e-6, atol=1e-9)
    norm = front.normalisation
    assert np.all(np.array(norm["ideal"]) <= np.array(norm["nadir"]))
    assert np.all(np.array(norm["nadir"]) <= np.array(norm["hv_reference"]))


EXACT = [p for p in FRONTS if json.loads(p.read_text())["status"] == "exact"]


@pytest.mark.parametrize("path", EXACT, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_no_sampled_plan_dominates_an_exact_point(path):
    instance, front = _load(path)
    plans = feasible_sample(instance, 200, seed=0, candidates=2000) + chain_plans(instance)
    result = evaluate_plans(instance, plans)
    assert not dominated_by(front.objectives, result.objectives[result.feasible]).any()


def _cheapest_quick(count: int) -> list[Path]:
    quick = [p for p in FRONTS if p.parent.name == "quick"]
    return sorted(quick, key=lambda p: json.loads(p.read_text())["provenance"]
                  ["wall_time_s"])[:count]


@pytest.mark.parametrize("path", [p for p in FRONTS if p.parent.name == "quick"],
                         ids=lambda p: p.name)
def test_quick_fronts_recompute_to_the_committed_ones(path):
    instance, committed = _load(path)
    engine = committed.provenance["parameters"]["engine"]
    assert fronts_agree(exact_front(instance, engine), committed)


def test_highs_and_cpsat_give_the_same_front_on_a_quick_instance():
    """The two engines are independent formulations; on the cheapest quick instance both
    enumerate the committed front on their own."""
    path = _cheapest_quick(1)[0]
    instance, committed = _load(path)
    highs = exact_front(instance, "highs")
    cpsat = exact_front(instance, "cpsat", threads=1)
    assert highs.status == cpsat.status == "exact"
    assert fronts_agree(highs, committed) and fronts_agree(cpsat, committed)


@pytest.mark.parametrize("path", FRONTS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_front_records_its_instance_content(path):
    instance, front = _load(path)
    assert front.instance_sha256 == instance.content_hash()


def test_the_content_hash_is_of_what_the_instance_states(tmp_path):
    path = suite_paths("quick")[0]
    instance = Instance.load(path)
    document = json.loads(path.read_text())
    relaid = tmp_path / "relaid.json"  # the same data, other layout and key order
    relaid.write_text(json.dumps(dict(reversed(list(document.items()))), indent=7))
    assert Instance.load(relaid).content_hash() == instance.content_hash()
    assert instance.replace(description="other words").content_hash() \
        == instance.content_hash()
    bandwidth = instance.links.bandwidth_gbps.copy()
    bandwidth[0, 1] *= 1.01
    assert instance.with_link_state(bandwidth).content_hash() != instance.content_hash()


def test_a_front_read_for_other_data_under_the_same_name_is_refused(tmp_path):
    path = suite_paths("quick")[0]
    instance = Instance.load(path)
    front = Front.load(FRONTS_DIR / "quick" / f"{path.stem}.front.json", instance)
    document = front.to_dict(instance)
    assert document["instance_sha256"] == instance.content_hash()
    other = instance.with_link_state(free_gpus=[d.free_gpus - 1 for d in instance.domains])
    with pytest.raises(InputError, match="instance_sha256 is not the content hash"):
        Front.from_dict(document, other)
    legacy = {**document, "schema": "xdsched.front/2"}  # before hashes: still readable
    del legacy["instance_sha256"]
    assert Front.from_dict(legacy, instance).instance_sha256 is None
    del document["instance_sha256"]
    with pytest.raises(InputError, match="instance_sha256 is missing"):
        Front.from_dict(document, instance)
