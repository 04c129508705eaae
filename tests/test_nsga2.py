"""NSGA-II: the plan encoding, its repair, determinism, and fronts that respect the exact ones."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from clitools import assert_usage_error, run_module
from hypothesis import given, settings
from hypothesis import strategies as st

from formulation.evaluator import evaluate_batch, evaluate_plans
from formulation.instance import Instance
from instances.sample import feasible_sample
from instances.suites import reference_front_path, suite_paths
from solvers.encoding import PlanEncoding, split_by_shares
from solvers.front import Front, dominated_by, normalised_hypervolume
from solvers.nsga2 import Nsga2Settings, nsga2_front

MODULE = "solvers.nsga2"
QUICK = suite_paths("quick")
SMALL = Nsga2Settings(population=40, generations=25, seed=1)


@pytest.fixture(scope="module")
def instance() -> Instance:
    return Instance.load(QUICK[1])


@given(total=st.integers(1, 96), shares=st.lists(st.floats(0, 1), min_size=1, max_size=8))
@settings(max_examples=200, deadline=None)
def test_split_by_shares_places_every_layer(total, shares):
    shares = np.array(shares[:total])
    layers = split_by_shares(total, shares[None, :], np.ones((1, len(shares)), bool))[0]
    assert layers.sum() == total and layers.min() >= 1
    if shares.sum() > 0:  # within one layer of the proportional split
        ideal = 1 + (total - len(shares)) * shares / shares.sum()
        assert np.all(np.abs(layers - ideal) < 1 + 1e-9)


def test_encode_then_decode_gives_the_plan_back(instance):
    encoding = PlanEncoding(instance)
    plans = feasible_sample(instance, 50, seed=2)
    genes = np.array([encoding.encode(p) for p in plans])
    assert np.all((genes >= 0) & (genes < 1))
    assert encoding.decode(genes).to_plans() == plans


def test_repair_makes_random_genomes_feasible_far_more_often(instance):
    encoding = PlanEncoding(instance)
    genes = np.random.default_rng(0).random((400, encoding.num_genes))
    raw = encoding.decode(genes).to_plans()
    repaired = [encoding.repair(p) for p in raw]
    before = evaluate_plans(instance, raw).feasible.mean()
    after = evaluate_plans(instance, repaired).feasible.mean()
    assert after > 2 * before and after > 0.5
    # Repair only changes plans that need it, and its result decodes from its encoding.
    feasible = evaluate_plans(instance, raw).feasible
    assert all(r == p for r, p, ok in zip(repaired, raw, feasible, strict=True) if ok)
    again = encoding.decode(np.array([encoding.encode(p) for p in repaired])).to_plans()
    assert again == repaired


def test_same_seed_same_front(instance):
    a, b = nsga2_front(instance, SMALL), nsga2_front(instance, SMALL)
    assert a.to_dict(instance)["points"] == b.to_dict(instance)["points"]
    assert (a.provenance["hypervolume_per_generation"]
            == b.provenance["hypervolume_per_generation"])
    other = nsga2_front(instance, Nsga2Settings(population=40, generations=25, seed=2))
    assert other.provenance["parameters"]["seed"] == 2


@pytest.mark.parametrize("path", QUICK, ids=lambda p: p.stem)
def test_front_is_feasible_logged_and_never_beats_the_exact_front(path):
    instance = Instance.load(path)
    reference = Front.load(reference_front_path(path), instance)
    front = nsga2_front(instance, SMALL, reference.normalisation)
    assert front.status == "heuristic" and front.points
    result = evaluate_plans(instance, [p.plan for p in front.points])
    assert result.feasible.all()
    assert np.allclose(result.objectives, front.objectives, rtol=1e-12)
    assert not dominated_by(reference.objectives, front.objectives).any()
    log = front.provenance["hypervolume_per_generation"]
    assert len(log) == SMALL.generations
    assert all(b >= a - 1e-12 for a, b in zip(log, log[1:], strict=False))  # archive HV
    assert log[-1] == pytest.approx(normalised_hypervolume(front.objectives,
                                                           reference.normalisation), abs=1e-6)
    assert log[-1] <= normalised_hypervolume(reference.objectives, reference.normalisation)


def test_constraint_value_is_zero_exactly_for_feasible_plans(instance):
    from solvers.nsga2 import PlanProblem

    encoding = PlanEncoding(instance)
    problem = PlanProblem(encoding)
    genes = np.random.default_rng(5).random((200, encoding.num_genes))
    out: dict = {}
    problem._evaluate(genes, out)
    feasible = evaluate_batch(instance, encoding.decode(genes)).feasible
    assert np.array_equal(out["G"][:, 0] <= 0, feasible)


def test_cli_writes_a_front_with_provenance(tmp_path: Path):
    out = tmp_path / "nsga2.json"
    done = run_module(MODULE, QUICK[0], "--out", out, "--generations", 10, "--population", 20,
                      "--seed", 3)
    assert done.returncode == 0, done.stderr
    document = json.loads(out.read_text())
    assert document["status"] == "heuristic"
    provenance = document["provenance"]
    assert provenance["parameters"]["seed"] == 3
    assert provenance["hypervolume_normalisation"] == "reference front"
    assert len(provenance["hypervolume_per_generation"]) == 10


@pytest.mark.parametrize("args", [["missing.json"], [str(QUICK[0]), "--generations", "0"],
                                  [str(QUICK[0]), "--seed", "x"]])
def test_cli_bad_input_is_one_line_and_exit_2(tmp_path: Path, args: list[str]):
    out = tmp_path / "x.json"
    assert_usage_error(run_module(MODULE, *args, "--out", out), out)
