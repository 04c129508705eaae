"""NSGA-II: the plan encoding, its repair, determinism, and fronts that respect the exact ones."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from clitools import assert_usage_error, run_module
from hypothesis import given, settings
from hypothesis import strategies as st
from pymoo.core.evaluator import Evaluator
from pymoo.core.population import Population

from formulation.batch import PlanBatch
from formulation.evaluator import evaluate_batch, evaluate_plans
from formulation.instance import Instance
from formulation.plan import Plan, Stage
from instances.sample import feasible_sample
from instances.suites import reference_front_path, suite_paths
from solvers.encoding import PlanEncoding, split_by_shares
from solvers.front import Front, dominated_by, nondominated_mask, normalised_hypervolume
from solvers.moves import (
    REMAP_LIMIT,
    descend,
    halved,
    polish_layers,
    random_move,
    remaps,
    structure_neighbours,
)
from solvers.nsga2 import (
    Nsga2Settings,
    PairNiching,
    PlanProblem,
    first_population,
    nsga2_front,
)

MODULE = "solvers.nsga2"
QUICK = suite_paths("quick")
SMALL = Nsga2Settings(population=40, generations=25, seed=1, descent=20)


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
    final = front.provenance["hypervolume_after_descent"]
    assert final >= log[-1] - 1e-12  # the descent starts from the archive
    assert final == pytest.approx(normalised_hypervolume(front.objectives,
                                                         reference.normalisation), abs=1e-6)
    # (the provenance rounds to 6 decimals; the search may reach the exact front itself)
    assert final <= normalised_hypervolume(reference.objectives, reference.normalisation) + 1e-6


def test_constraint_value_is_zero_exactly_for_feasible_plans(instance):
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
                      "--seed", 3, "--descent", 4)
    assert done.returncode == 0, done.stderr
    document = json.loads(out.read_text())
    assert document["status"] == "heuristic"
    provenance = document["provenance"]
    assert provenance["parameters"]["seed"] == 3
    assert provenance["hypervolume_normalisation"] == "reference front"
    assert len(provenance["hypervolume_per_generation"]) == 10
    assert provenance["parameters"]["descent"] == 4 and provenance["descent"]["expansions"] <= 4


@pytest.mark.parametrize("args", [["missing.json"], [str(QUICK[0]), "--generations", "0"],
                                  [str(QUICK[0]), "--seed", "x"],
                                  [str(QUICK[0]), "--descent", "-1"]])
def test_cli_bad_input_is_one_line_and_exit_2(tmp_path: Path, args: list[str]):
    out = tmp_path / "x.json"
    assert_usage_error(run_module(MODULE, *args, "--out", out), out)


# -- structure-aware search (solvers.moves) --------------------------------------------------
def test_the_layer_polish_keeps_gpus_and_cost_and_never_slows_a_plan(instance):
    plans = feasible_sample(instance, 60, seed=4)
    before = evaluate_plans(instance, plans)
    polished = polish_layers(instance, PlanBatch.from_plans(plans))
    after = evaluate_batch(instance, polished)
    assert after.feasible.all()
    assert np.array_equal(after.gpus, before.gpus)
    assert np.allclose(after.comm_cost, before.comm_cost, rtol=1e-12)
    assert np.all(after.step_time_s <= before.step_time_s * (1 + 1e-12))
    assert np.any(after.step_time_s < before.step_time_s * (1 - 1e-3))  # it does move layers
    assert np.all(polished.layers.sum(axis=1) == instance.model.layers)


def test_moves_stay_in_the_encoded_space(instance):
    encoding = PlanEncoding(instance)
    rng = np.random.default_rng(7)
    plans = feasible_sample(instance, 20, seed=8)
    moved = [random_move(encoding, p, rng) for p in plans for _ in range(20)]
    kinds = set()
    for plan in plans:
        for other in structure_neighbours(encoding, plan):
            assert encoding.covers(other) and other != plan
            assert sum(s.layers for s in other.stages) == instance.model.layers
            kinds.add(other.num_stages - plan.num_stages)
    assert kinds >= {0, 1}  # same-size moves, relay stages and halves
    for plan in moved:
        assert encoding.covers(plan)
        assert sum(s.layers for s in plan.stages) == instance.model.layers


def test_remaps_move_every_domain_of_a_plan_at_once(instance):
    encoding = PlanEncoding(instance)
    k = instance.num_domains
    for plan in feasible_sample(instance, 30, seed=10):
        used = list(dict.fromkeys(s.domain for s in plan.stages))
        found = remaps(encoding, plan)
        assert plan not in found and len(set(found)) == len(found)
        for other in found:  # only domains change, and stages of one domain stay together
            assert [(s.layers, s.tp, s.recompute) for s in other.stages] == \
                [(s.layers, s.tp, s.recompute) for s in plan.stages]
            image = {}
            for a, b in zip(plan.stages, other.stages, strict=True):
                assert image.setdefault(a.domain, b.domain) == b.domain
        if k ** len(used) <= REMAP_LIMIT:
            assert len(found) == k ** len(used) - 1  # every map of its domains


def test_the_neighbourhood_trades_options_and_splits_across_domains(instance):
    encoding = PlanEncoding(instance)
    layers, (low, high) = instance.model.layers, (min(encoding.tps), max(encoding.tps))
    plan = Plan(dp=1, micro_batch=1, stages=(Stage(0, layers - 10, high, "none"),
                                             Stage(1, 10, low, encoding.modes[-1])))
    found = set(structure_neighbours(encoding, plan))
    a, b = plan.stages[0], plan.stages[1]
    if (a.tp, a.recompute) != (b.tp, b.recompute):
        traded = (replace(a, tp=b.tp, recompute=b.recompute),
                  replace(b, tp=a.tp, recompute=a.recompute), *plan.stages[2:])
        assert replace(plan, stages=traded) in found
    j = next(j for j in range(plan.num_stages) if halved(encoding, plan, j))
    split = halved(encoding, plan, j)
    moved = replace(split.stages[j + 1],
                    domain=(split.stages[j].domain + 1) % instance.num_domains)
    assert replace(split, stages=(*split.stages[:j + 1], moved, *split.stages[j + 2:])) in found


def test_the_descent_only_improves_on_its_start(instance):
    encoding = PlanEncoding(instance)
    start = feasible_sample(instance, 30, seed=9)
    plans, objectives, stats = descend(encoding, start, expansions=15, near=0.05)
    assert 0 < stats.expansions <= 15
    result = evaluate_plans(instance, plans)
    assert result.feasible.all() and np.allclose(result.objectives, objectives, rtol=1e-12)
    assert nondominated_mask(objectives).all()
    begin = evaluate_plans(instance, start).objectives
    # every start point is matched or dominated by the result
    assert all(np.any(np.all(objectives <= row * (1 + 1e-12), axis=1)) for row in begin)


def test_pair_niching_keeps_every_pair_of_the_population(instance):
    encoding = PlanEncoding(instance)
    problem = PlanProblem(encoding)
    raw = encoding.decode(np.random.default_rng(6).random((600, encoding.num_genes)))
    plans = [encoding.repair(p) for p in raw.to_plans()]
    plans = [p for p, ok in zip(plans, evaluate_plans(instance, plans).feasible, strict=True)
             if ok]
    pairs = [encoding.pairs.index((p.dp, p.micro_batch)) for p in plans]
    crowded = max(set(pairs), key=pairs.count)
    # most of the population in one pair, three plans of each other
    chosen = [p for p, q in zip(plans, pairs, strict=True) if q == crowded][:60]
    for other in set(pairs) - {crowded}:
        chosen += [p for p, q in zip(plans, pairs, strict=True) if q == other][:3]
    population = Population.new(X=np.array([encoding.encode(p) for p in chosen]))
    Evaluator().eval(problem, population)
    survivors = PairNiching().do(problem, population, n_survive=30,
                                 random_state=np.random.default_rng(0))
    kept = [encoding.pairs.index((p.dp, p.micro_batch))
            for p in encoding.decode(survivors.get("X")).to_plans()]
    assert len(survivors) == 30 and len(set(pairs)) > 1
    assert set(kept) == set(pairs)  # no pair dies out
    assert kept.count(crowded) == 30 - 3 * (len(set(pairs)) - 1)


def test_islands_search_apart_and_descend_from_their_union(instance):
    two = Nsga2Settings(population=30, generations=10, seed=3, descent=10, islands=2)
    front = nsga2_front(instance, two)
    assert len(front.provenance["island_wall_time_s"]) == 2
    again = nsga2_front(instance, two)
    assert [p.objectives for p in front.points] == [p.objectives for p in again.points]
    # the union holds what each island found alone: the front matches or dominates both
    for seed in (3, 4):
        alone = nsga2_front(instance, Nsga2Settings(population=30, generations=10, seed=seed,
                                                    descent=0))
        assert all(np.any(np.all(front.objectives <= row * (1 + 1e-12), axis=1))
                   for row in alone.objectives)


def test_the_first_population_holds_the_baselines_plans(instance):
    from solvers.baselines import seed_plans

    encoding = PlanEncoding(instance)
    genes = first_population(encoding, SMALL)
    assert genes.shape == (SMALL.population, encoding.num_genes)
    decoded = encoding.decode(genes).to_plans()
    seeds = [p for p in seed_plans(instance) if encoding.covers(p)][:SMALL.population // 2]
    assert seeds and decoded[:len(seeds)] == seeds


def test_default_search_covers_a_quick_front_within_two_percent():
    """The README's claim for the quick suite, on one instance, at the default settings."""
    from evaluation.metrics import ReferenceSet, coverage

    path = QUICK[0]
    instance = Instance.load(path)
    reference = Front.load(reference_front_path(path), instance)
    front = nsga2_front(instance, Nsga2Settings(seed=0))
    assert coverage(front.objectives, ReferenceSet.of_front(reference), 0.02) >= 0.95
