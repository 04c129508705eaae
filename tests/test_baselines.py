"""The papers' baselines: their rules, their honesty about infeasible plans, and that none
beats an exact reference front."""

from __future__ import annotations

import importlib
import itertools
import json
from pathlib import Path

import numpy as np
import pytest
from clitools import assert_usage_error, run_module

from formulation.diloco import DilocoPlan
from formulation.families import evaluate_any
from formulation.instance import Instance
from formulation.plan import Plan
from instances.suites import reference_front_path, suite_paths
from solvers.baselines import METHODS, baseline_front
from solvers.baselines.common import Slot, min_max_layers, stage_time
from solvers.baselines.dtfm import GaSettings, open_loop_order
from solvers.baselines.oblivious import flat_network
from solvers.baselines.sailor import (
    SPEEDUP_FOR_MORE_TP,
    mode_options,
    ranked_chains,
    tp_candidates,
)
from solvers.baselines.single_domain import uniform_plans, uniform_splits
from solvers.front import Front, dominated_by
from solvers.tables import all_pair_tables

MODULE = "solvers.baselines"
# the module: the package binds the name ``sailor`` to its planner function
sailor_module = importlib.import_module("solvers.baselines.sailor")
QUICK = suite_paths("quick")


@pytest.fixture(scope="module", params=QUICK, ids=lambda p: p.stem)
def quick(request) -> tuple[Instance, Front, dict[str, Front]]:
    instance = Instance.load(request.param)
    reference = Front.load(reference_front_path(request.param), instance)
    return instance, reference, {m: baseline_front(instance, m) for m in METHODS}


def test_every_decision_is_feasible_or_reported_with_its_violations(quick):
    instance, _, fronts = quick
    for method, front in fronts.items():
        provenance = front.provenance
        for point in front.points:
            assert evaluate_any(instance, point.plan).admissible, method
        for entry in provenance["infeasible_decisions"]:
            assert entry["violations"] or entry["search_mismatches"], method
        feasible_decisions = provenance["decisions"] - len(provenance["infeasible_decisions"])
        assert (feasible_decisions == 0) == (not front.points), method


def test_no_pipeline_baseline_dominates_the_exact_front(quick):
    """DiLoCo is left out: it changes the optimiser, so its plans lie outside the plan space
    the exact front covers (and do beat it on these objectives)."""
    _, reference, fronts = quick
    for method, front in fronts.items():
        if method != "diloco" and front.points:
            assert not dominated_by(reference.objectives, front.objectives).any(), method


def test_single_domain_uses_one_domain_and_no_wan(quick):
    instance, _, fronts = quick
    front = fronts["single-domain"]
    for point in front.points:
        assert len(point.plan.domains_used()) == 1 and point.objectives[2] == 0
    if not front.points:  # 70B on one 8-GPU domain: reported, not dropped
        (entry,) = front.provenance["infeasible_decisions"]
        assert any(v["kind"] == "memory" for v in entry["violations"])


def test_oblivious_chains_domains_in_index_order_with_one_tp(quick):
    instance, _, fronts = quick
    front = fronts["oblivious"]
    assert "believed_fastest" in front.provenance["parameters"]
    for point in front.points:
        domains = [s.domain for s in point.plan.stages]
        assert domains == sorted(set(domains))
        assert len({(s.tp, s.recompute) for s in point.plan.stages}) == 1


def test_the_flat_view_only_speeds_wan_links_up(quick):
    instance = quick[0]
    flat = flat_network(instance)
    off = ~np.eye(instance.num_domains, dtype=bool)
    assert np.all(flat.links.bandwidth_gbps[off] >= instance.links.bandwidth_gbps[off])
    assert np.all(flat.links.latency_ms[off] <= instance.links.latency_ms[off])


def test_diloco_is_flagged_and_reports_h(quick):
    instance, _, fronts = quick
    provenance = fronts["diloco"].provenance
    assert provenance["parameters"]["changes_optimizer"] is True
    assert provenance["parameters"]["sync_every"] == 500
    for point in fronts["diloco"].points:
        assert isinstance(point.plan, DilocoPlan) and point.plan.sync_every == 500


def test_sailor_plans_follow_its_tp_rules(quick):
    """Each domain's stages share a tp, which is the minimum-memory tp or the largest that
    fits the domain and is >= 1.5x faster; one recompute mode per pipeline."""
    instance, _, fronts = quick
    tables = {(t.dp, t.micro_batch): t for t in all_pair_tables(instance)}
    for point in fronts["sailor"].points:
        plan = point.plan
        t = tables[(plan.dp, plan.micro_batch)]
        assert len({s.recompute for s in plan.stages}) == 1
        options = mode_options(t)[plan.stages[0].recompute]
        for domain in plan.domains_used():
            stages = [s for s in plan.stages if s.domain == domain]
            allowed = {t.options[o][0] for o in tp_candidates(t, options, domain, len(stages))}
            assert {s.tp for s in stages} <= allowed and len({s.tp for s in stages}) == 1


def _tables():
    return all_pair_tables(Instance.load(QUICK[1]))


def test_min_max_layers_matches_enumeration():
    for tables in _tables():
        for options in itertools.product(range(tables.num_options), repeat=3):
            slots = [Slot(0, o) for o in options]
            split = min_max_layers(tables, slots)
            best = None
            for cuts in itertools.combinations(range(1, tables.layers), 2):
                layers = np.diff([0, *cuts, tables.layers])
                caps = [(tables.layer_cap_first if j == 0 else tables.layer_cap)[2 - j, o]
                        for j, o in enumerate(options)]
                if any(n > c for n, c in zip(layers, caps, strict=True)):
                    continue
                times = [stage_time(tables, o, n, j == 0, j == 2)
                         for j, (o, n) in enumerate(zip(options, layers, strict=True))]
                key = (max(times), sum(times))
                if best is None or key < best:
                    best = key
            if best is None:
                assert split is None
                continue
            times = [stage_time(tables, o, n, j == 0, j == 2)
                     for j, (o, n) in enumerate(zip(options, split, strict=True))]
            assert max(times) == pytest.approx(best[0], rel=1e-12)
            assert sum(times) == pytest.approx(best[1], rel=1e-9)


def _slowest(tables, option: int, layers) -> float:
    count = len(layers)
    return max(stage_time(tables, option, n, j == 0, j == count - 1)
               for j, n in enumerate(layers))


def test_uniform_splits_minimise_the_slowest_stage_and_then_the_fullest():
    """The vectorised single-domain splits against the min-max DP and enumeration: the same
    slowest stage, the layers summing to the model, within every cap, and among min-max
    splits the fewest layers on the fullest stage."""
    for tables in _tables():
        splits = uniform_splits([tables])[0]
        for option in range(tables.num_options):
            for count in range(1, tables.positions + 1):
                split = splits[option, count - 1, :count]
                reference = min_max_layers(tables, [Slot(0, option)] * count)
                if reference is None:
                    assert not split.any()
                    continue

                assert split.sum() == tables.layers
                assert _slowest(tables, option, split) == pytest.approx(
                    _slowest(tables, option, reference), rel=1e-12)
                caps = [(tables.layer_cap_first if j == 0 else tables.layer_cap)[
                    count - 1 - j, option] for j in range(count)]
                assert all(1 <= n <= c for n, c in zip(split, caps, strict=True))
                assert split.max() <= max(reference)


def test_t_base_evaluated_lazily_equals_every_plan_evaluated(quick):
    """UniformPlans.fastest evaluates rows in lower-bound order and stops early; the plan
    it finds is the fastest of all single-domain plans (every row evaluated), and its
    plans survive a JSON round trip."""
    instance, _, fronts = quick
    free = np.array([d.free_gpus for d in instance.domains])
    for state in (free, np.maximum(free // 2, 1), np.array([d.gpus for d in instance.domains])):
        lazy = uniform_plans(instance)
        found = lazy.fastest(state)
        eager = uniform_plans(instance)
        usable = eager.usable(state).any(axis=1)
        if found is None:
            assert not usable.any()
            continue
        best = eager.step_time_s[usable].min()
        assert lazy.times[found[0]] == best
        plan = lazy.plan(*found)
        assert Plan.from_dict(json.loads(json.dumps(plan.to_dict(instance))), instance) == plan
    for point in fronts["single-domain"].points:
        assert Plan.from_dict(point.plan.to_dict(instance), instance) == point.plan


def test_sailor_tp_candidates_keep_min_memory_tp_and_only_big_speedups():
    for tables in _tables():
        for options in mode_options(tables).values():
            assert all(tables.layer_cap[0, o] >= 1 for o in options)
            for domain in range(tables.num_domains):
                for count in (1, 2):
                    kept = tp_candidates(tables, options, domain, count)
                    if not kept:
                        assert count * tables.gpus[options[0]] > tables.free_gpus[domain]
                        continue
                    assert kept[0] == options[0]
                    if len(kept) == 2:
                        assert (tables.layer_time[kept[0]]
                                >= SPEEDUP_FOR_MORE_TP * tables.layer_time[kept[1]])
                        assert count * tables.gpus[kept[1]] <= tables.free_gpus[domain]


def test_sailor_chains_are_ranked_by_bottleneck_bandwidth():
    tables = _tables()[0]
    bandwidth = tables.instance.links.bandwidth_gbps
    chains = ranked_chains(tables, 3, beam=6)
    assert len(chains) == 6 and all(len(set(c)) == 3 for c in chains)
    bottleneck = [min(bandwidth[a, z] for a, z in itertools.pairwise(c)) for c in chains]
    assert bottleneck == sorted(bottleneck, reverse=True)


def test_open_loop_order_is_the_shortest_path():
    rng = np.random.default_rng(3)
    distance = rng.uniform(1, 10, (6, 6))
    distance = distance + distance.T
    for stages in [(0, 1, 2, 3), (5, 2, 2, 4, 1), (3, 0, 4)]:
        order = open_loop_order(stages, distance)
        assert sorted(order) == sorted(stages)
        length = sum(distance[a, z] for a, z in itertools.pairwise(order))
        best = min(sum(distance[a, z] for a, z in itertools.pairwise(p))
                   for p in itertools.permutations(stages))
        assert length == pytest.approx(best)


def test_dtfm_is_deterministic_for_a_seed():
    instance = Instance.load(QUICK[0])
    a = baseline_front(instance, "dtfm", settings=GaSettings(seed=4))
    b = baseline_front(instance, "dtfm", settings=GaSettings(seed=4))
    assert a.to_dict(instance)["points"] == b.to_dict(instance)["points"]


def test_cli_writes_a_front(tmp_path: Path):
    out = tmp_path / "greedy.json"
    done = run_module(MODULE, str(QUICK[1]), "--method", "greedy", "--out", str(out))
    assert done.returncode == 0, done.stderr
    document = json.loads(out.read_text())
    assert document["status"] == "heuristic" and document["provenance"]["method"] == "greedy"
    instance = Instance.load(QUICK[1])
    assert all(isinstance(p.plan, Plan) for p in Front.load(out, instance).points)


@pytest.mark.parametrize("args", [["missing.json", "--method", "greedy"],
                                  [str(QUICK[0]), "--method", "annealing"],
                                  [str(QUICK[0]), "--method", "diloco", "--sync-every", "0"]])
def test_cli_bad_input_is_one_line_and_exit_2(tmp_path: Path, args: list[str]):
    out = tmp_path / "x.json"
    assert_usage_error(run_module(MODULE, *args, "--out", out), out)


def test_single_domain_fallback_takes_a_pair_of_whole_micro_batches():
    """With no one-domain plan within the free GPUs, the baseline reports an attempt; its dp
    and micro-batch divide the global batch even where the smallest dp does not."""
    import dataclasses

    from solvers.baselines.single_domain import one_domain_attempt

    instance = Instance.load(QUICK[0])
    batch = instance.training.global_batch
    odd = next(d for d in range(3, 64) if batch % d)
    space = dataclasses.replace(instance.search, dp=(odd, *instance.search.dp))
    plan = one_domain_attempt(instance.replace(search=space), 0)
    assert batch % (plan.dp * plan.micro_batch) == 0 and plan.dp != odd


def test_sailor_shares_its_split_work_over_the_pairs(monkeypatch: pytest.MonkeyPatch):
    """A budget of split work (stage-layers) bounds the search however many layouts the
    search space has, and each pair may spend what is left over the pairs still to come:
    a small budget still yields plans of every pair, and no more work than the budget plus
    one split a pair."""
    instance = Instance.load(QUICK[0])
    pairs = all_pair_tables(instance)
    full = sailor_module.sailor_candidates(instance)
    calls = []
    real = sailor_module.min_max_layers
    monkeypatch.setattr(sailor_module, "min_max_layers",
                        lambda tables, slots: calls.append(len(slots) * tables.layers)
                        or real(tables, slots))
    budget = 40 * len(pairs) * max(t.layers for t in pairs)
    monkeypatch.setattr(sailor_module, "MAX_SPLIT_WORK", budget)
    cut = sailor_module.sailor_candidates(instance)
    largest = max(t.positions * t.layers for t in pairs)
    assert sum(calls) <= budget + len(pairs) * largest
    assert len(cut) < len(full)
    assert {(p.dp, p.micro_batch) for p in cut} == {(p.dp, p.micro_batch) for p in full}
