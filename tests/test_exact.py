"""The exact MILP fronts: brute-force agreement, run-time checks, limits, golden optima, CLI."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from formulation.evaluator import evaluate_batch
from formulation.instance import Instance, SearchSpace
from formulation.result import evaluate
from formulation.schema import InputError
from instances.suites import suite_paths
from instances.tiny import tiny_instance
from solvers.baselines import baseline_front
from solvers.baselines.sailor import sailor_candidates
from solvers.bounds import PairBounds
from solvers.bruteforce import brute_force_front, enumerate_plans
from solvers.certify import ModelMismatch, check_values
from solvers.engine import NO_CAP, ModelValues, SolveRequest, SolveStatus
from solvers.epsilon import SweepState, SweepStats
from solvers.exact import ExactSettings, assemble, exact_front, seed_plans
from solvers.front import Front, dominated_by, fronts_agree
from solvers.highs import HighsEngine
from solvers.tables import all_pair_tables, pair_tables

FRONTS = Path(__file__).resolve().parent.parent / "instances" / "fronts"
TINY = [dict(domains=4, layers=12, free_gpus=(1, 1, 1, 1)),  # cross-domain points on the front
        dict(domains=3, layers=8, free_gpus=(2, 2, 2)),
        dict(domains=3, layers=6),  # larger fronts, single-domain
        dict(domains=5, layers=10, free_gpus=(1, 1, 2, 2, 1))]  # K = 5, some cross-domain


@pytest.fixture(scope="module", params=[(0, 0), (0, 3), (1, 1), (2, 2), (3, 2)],
                ids=lambda p: f"variant{p[0]}-seed{p[1]}")
def tiny_fronts(request):
    variant, seed = request.param
    instance = tiny_instance(seed, **TINY[variant])
    return instance, exact_front(instance), brute_force_front(instance)


def test_milp_front_equals_brute_force_point_for_point(tiny_fronts):
    _, exact, brute = tiny_fronts
    assert exact.status == "exact"
    assert len(exact.points) >= 2
    assert fronts_agree(exact, brute)


def test_no_enumerated_plan_dominates_a_milp_point(tiny_fronts):
    instance, exact, _ = tiny_fronts
    for batch in enumerate_plans(instance):
        result = evaluate_batch(instance, batch)
        assert not dominated_by(exact.objectives, result.objectives[result.feasible]).any()


def test_front_points_re_evaluate_to_their_objectives(tiny_fronts):
    instance, exact, _ = tiny_fronts
    for point in exact.points:
        evaluation = evaluate(instance, point.plan)
        assert evaluation.feasible
        assert np.allclose(evaluation.objectives, point.objectives, rtol=1e-9, atol=0)


def test_cross_domain_points_exist_on_the_scarce_variant():
    instance = tiny_instance(0, **TINY[0])
    front = exact_front(instance)
    assert any(p.objectives[2] > 0 for p in front.points)
    assert any(p.objectives[2] == 0 for p in front.points)


def test_run_time_check_rejects_a_model_that_disagrees_with_the_evaluator():
    tables = all_pair_tables(tiny_instance(0, **TINY[2]))[0]
    solve = HighsEngine(tables).solve(SolveRequest())
    check_values(tables, solve)  # the genuine solution passes
    wrong = dataclasses.replace(solve, values=ModelValues(
        solve.values.step_time_s * 1.001, solve.values.gpus, solve.values.comm_cost))
    with pytest.raises(ModelMismatch, match="step_time_s"):
        check_values(tables, wrong)


def test_a_time_limit_gives_a_best_known_front_never_exact():
    instance = Instance.load(suite_paths("quick")[0])
    front = exact_front(instance, time_limit=0.05)  # the whole front takes about 0.4 s
    assert front.status == "best_known"
    assert front.provenance["complete"] is False or front.provenance["unproven_steps"] > 0


# Golden optimal step times: (quick instance, caps) -> least step time, found by HiGHS and
# checked against the evaluator when they were recorded. A change in the cost model or the
# formulation that moves them must be deliberate.
GOLDEN_SPACE = SearchSpace(dp=(2,), tp=(2, 4), micro_batch=(1,), recompute=("none", "full"),
                           max_stages=3)
GOLDEN = [  # recorded on the FlashAttention quick suite (issue 16)
    (0, {}, 70.41937548346422, 16),
    (0, {"gpu_cap": 12}, 89.1250428265509, 12),
    (2, {"cost_cap": 1.0}, 111.59907070617486, 8),
]


@pytest.mark.parametrize(("index", "caps", "step", "gpus"), GOLDEN,
                         ids=[f"quick{i}-{c}" for i, c, _, _ in GOLDEN])
def test_golden_optimal_step_times(index, caps, step, gpus):
    instance = Instance.load(suite_paths("quick")[index]).replace(search=GOLDEN_SPACE)
    solve = HighsEngine(pair_tables(instance, 2, 1)).solve(SolveRequest(**caps))
    assert solve.status == SolveStatus.OPTIMAL
    assert solve.values.step_time_s == pytest.approx(step, rel=1e-6)
    assert solve.values.gpus == gpus
    assert evaluate(instance, solve.plan).step_time_s == pytest.approx(step, rel=1e-6)


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "solvers.exact", *args],
                          capture_output=True, text=True)


def test_cli_writes_a_front_and_exports_models(tmp_path):
    instance = tiny_instance(1, **TINY[1])
    path = tmp_path / "tiny.json"
    instance.save(path)
    done = _cli(str(path), "--out", str(tmp_path / "front.json"), "--export", "lp")
    assert done.returncode == 0, done.stderr
    front = Front.load(tmp_path / "front.json", instance)
    assert front.status == "exact" and front.points
    assert np.all(np.array(front.normalisation["hv_reference"])
                  >= np.array(front.normalisation["nadir"]))
    assert sorted(p.suffix for p in tmp_path.glob("front-dp*.lp"))
    quiet = _cli(str(path), "--out", str(tmp_path / "quiet.json"), "--quiet")
    assert quiet.returncode == 0 and quiet.stdout == "", quiet.stderr
    assert fronts_agree(Front.load(tmp_path / "quiet.json", instance), front)


def test_cli_suite_runs_fronts_in_parallel_processes(tmp_path):
    """``--suite --workers 2`` on two cheap quick instances reproduces their committed fronts."""
    done = _cli("--suite", "quick", "--out", str(tmp_path), "--engine", "portfolio",
                "--workers", "2", "--match", "aws-10", "--match", "k8")
    assert done.returncode == 0, done.stderr
    written = sorted(tmp_path.glob("*.front.json"))
    assert [p.name for p in written] == ["aws-10-k5-llama2-70b-s110.front.json",
                                         "random-k8-llama2-7b-s157.front.json"]
    for path in written:
        instance = Instance.load(next(p for p in suite_paths("quick")
                                      if p.stem == path.name.replace(".front.json", "")))
        committed = Front.load(FRONTS / "quick" / path.name, instance)
        front = Front.load(path, instance)
        assert fronts_agree(front, committed)
        assert "--workers 2" in front.provenance["command"]


@pytest.mark.parametrize("args", [["missing.json"], ["--engine", "gurobi"],
                                  ["--suite", "quick", "--workers", "0"]])
def test_cli_bad_input_is_one_line_and_exit_2(tmp_path, args):
    done = _cli(*args, "--out", str(tmp_path / "x.json"))
    assert done.returncode == 2
    assert "Traceback" not in done.stderr and done.stderr.count("\n") <= 2
    assert not (tmp_path / "x.json").exists()


@pytest.mark.parametrize("engine", ["highs", "cpsat"])
def test_a_domain_no_option_fits_is_left_out(engine):
    """With tp >= 2 a domain with one free GPU hosts nothing; both models must still build."""
    instance = tiny_instance(1, domains=3, layers=6, tp=(2,), free_gpus=(1, 4, 4))
    exact = exact_front(instance, engine)
    assert exact.status == "exact"
    assert fronts_agree(exact, brute_force_front(instance))


@pytest.mark.parametrize("constraints", [{"wan_share_cap": 0.3}, {"cost_budget": 0.05}],
                         ids=["wan-cap", "cost-budget"])
@pytest.mark.parametrize("engine", ["highs", "cpsat"])
def test_optional_constraints_match_brute_force(constraints, engine):
    """SPEC 5's optional WAN share cap and cost budget, binding on this instance."""
    from formulation.instance import Constraints

    instance = tiny_instance(4, **TINY[0]).replace(constraints=Constraints(**constraints))
    exact = exact_front(instance, engine)
    assert exact.status == "exact"
    assert fronts_agree(exact, brute_force_front(instance))


def test_the_milp_cannot_pad_a_stage_to_meet_the_wan_share_cap():
    """The audit's case (seed 1061896966, its 4th instance): the first stage's embedding
    compute was an epigraph, which HiGHS inflated on another stage to reach the period the
    WAN share cap needs; the plan, 1.3e-4 short of that period, was called optimal. The
    compute is exact now, and the front is brute force's."""
    from instances.tiny import audit_instance

    rng = np.random.default_rng(1061896966)
    instance = [audit_instance(rng) for _ in range(4)][-1]
    assert instance.constraints.wan_share_cap is not None
    settings = ExactSettings(engine="highs", threads=2, seeds="baselines")
    exact = exact_front(instance, settings=settings)
    assert exact.status == "exact"
    assert fronts_agree(exact, brute_force_front(instance))


SCARCE = {"domains": 4, "layers": 8, "free_gpus": (1, 1, 1, 1)}  # plans cross the WAN
PLAIN_STAGES = {"max_stages": 4, "tp": (1,), "recompute": ("none",)}
# (seed, instance options, search space, cost budget): the budget of the last case is
# below the interleaved point's cost (3 crossings of its boundary: v = 2 and the wrap) and
# above that of the same plan plain, so it leaves no interleaved point.
INTERLEAVED = [(3, {}, {"virtual_stages": (1, 2)}, None),
               (2, SCARCE, {**PLAIN_STAGES, "virtual_stages": (1, 2)}, None),
               (4, SCARCE, {**PLAIN_STAGES, "virtual_stages": (1, 2, 4)}, None),
               (2, SCARCE, {**PLAIN_STAGES, "virtual_stages": (1, 2)}, 0.1)]


@pytest.mark.parametrize(("case", "engine"), [(0, "labels"), (1, "cpsat"), (2, "cpsat"),
                                              (3, "highs")])
def test_interleaved_fronts_equal_brute_force_point_for_point(case, engine):
    """A search space with interleaving: the sweep's interleaved cells (one per dp,
    micro-batch, v and S) are priced by the schedule graph in the MILP and in CP-SAT, the
    label DP handing them to HiGHS; the front equals brute force's, interleaved points
    (across domains on the scarce variants) included, and under a cost budget that the
    wrap-around breaks."""
    from formulation.instance import Constraints

    seed, options, search, budget = INTERLEAVED[case]
    base = tiny_instance(seed, **options)
    instance = base.replace(search=dataclasses.replace(base.search, **search),
                            constraints=Constraints(cost_budget=budget))
    exact, brute = exact_front(instance, engine), brute_force_front(instance)
    assert exact.status == "exact"
    assert fronts_agree(exact, brute)
    assert any(p.plan.virtual_stages > 1 for p in exact.points) is (budget is None)
    assert exact.provenance["parameters"]["cells"]


def test_interleaving_under_a_wan_share_cap_is_refused():
    """The cap needs the term that sets the period; the schedule graph has no such term."""
    from formulation.instance import Constraints

    base = tiny_instance(3)
    instance = base.replace(search=dataclasses.replace(base.search, virtual_stages=(1, 2)),
                            constraints=Constraints(wan_share_cap=0.3))
    with pytest.raises(InputError, match="without a WAN share cap"):
        exact_front(instance)


@pytest.mark.parametrize("weights", [(1.0, 0.0, 0.0), (1.0, 0.5, 10.0), (0.2, 1.0, 50.0)])
def test_weighted_scalarisation_matches_brute_force(weights):
    from solvers.exact import best_plan

    instance = tiny_instance(3, **TINY[0])
    best = np.inf
    for batch in enumerate_plans(instance):
        result = evaluate_batch(instance, batch)
        values = result.objectives[result.feasible] @ np.array(weights)
        if len(values):
            best = min(best, values.min())
    solve = best_plan(instance, weights)
    v = solve.values
    assert weights[0] * v.step_time_s + weights[1] * v.gpus + weights[2] * v.comm_cost == (
        pytest.approx(best, rel=1e-6))


def test_a_per_solve_limit_is_applied_and_labels_the_front():
    instance = Instance.load(suite_paths("quick")[0])
    front = exact_front(instance, "cpsat", solve_limit=1e-3, threads=1)
    assert front.status == "best_known"
    assert front.provenance["parameters"]["solve_limit"] == 1e-3
    assert front.provenance["unproven_steps"] > 0
    for point in front.points:  # incumbents and heuristic plans: real feasible plans
        assert evaluate(instance, point.plan).feasible
        assert point.status in ("unproven", "heuristic", "optimal")
        # every point is bounded, a heuristic one at least by the pairs' floors
        assert point.bound is not None and point.bound <= point.objectives[0] * (1 + 1e-9)


def test_a_front_cut_before_any_step_holds_the_first_seeds():
    """The time limit covers the seeding too: past it, no further seeding method starts,
    no floor is computed, and the front holds the first (fastest) method's plans."""
    instance = Instance.load(suite_paths("quick")[0])
    front = exact_front(instance, "cpsat", time_limit=1e-6, threads=1)
    assert front.status == "best_known" and front.provenance["steps"] == 0
    assert front.points and all(p.status == "heuristic" for p in front.points)
    assert all(p.bound is None for p in front.points)
    single = {p.plan for p in baseline_front(instance, "single-domain").points}
    assert {p.plan for p in front.points} <= single


def test_heuristic_points_of_a_front_cut_short_are_bounded_by_the_floors():
    instance = Instance.load(suite_paths("quick")[0])
    floors = [PairBounds(t) for t in all_pair_tables(instance)]
    front = assemble(instance, [SweepState.start(0.0, NO_CAP)], seed_plans(instance, "fast"),
                     SweepStats(), lambda n, c: min(f.step_floor(n, c) for f in floors))
    assert front.status == "best_known"
    assert front.points and all(p.status == "heuristic" for p in front.points)
    for point in front.points:
        _, gpus, cost = point.objectives
        assert point.bound == pytest.approx(min(f.step_floor(gpus, cost) for f in floors))
        assert 0.0 <= point.gap < 1.0


def test_seeding_stops_at_its_deadline():
    instance = Instance.load(suite_paths("quick")[0])
    first = [p.plan for p in baseline_front(instance, "single-domain").points]
    assert seed_plans(instance, "baselines", deadline=time.perf_counter()) == first
    assert sailor_candidates(instance, deadline=time.perf_counter()) == []
    assert sailor_candidates(instance)


# -- scale-out and resuming ---------------------------------------------------------------
@pytest.fixture(scope="module")
def scaleout():
    """A tiny instance with a cross-domain front and its uninterrupted front."""
    instance = tiny_instance(0, **TINY[0])
    return instance, exact_front(instance)


def test_gpu_intervals_give_the_same_front_in_process_and_in_a_pool(scaleout):
    from solvers.exact import ExactSettings

    instance, whole = scaleout
    for units, workers in ((3, 1), (2, 2)):
        front = exact_front(instance, settings=ExactSettings(units=units), workers=workers)
        assert front.status == "exact"
        assert fronts_agree(front, whole)
        assert len(front.provenance["intervals"]) == units


def test_gpu_intervals_on_a_dask_cluster_give_the_same_front(scaleout):
    from distributed import LocalCluster

    from solvers.exact import ExactSettings

    instance, whole = scaleout
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                      dashboard_address=None) as cluster:
        front = exact_front(instance, settings=ExactSettings(units=2),
                            scheduler=cluster.scheduler_address)
    assert front.status == "exact" and fronts_agree(front, whole)
    assert front.provenance["parameters"]["scheduler"] == cluster.scheduler_address


def test_resume_continues_a_run_that_hit_its_time_limit(tmp_path, scaleout):
    instance, whole = scaleout
    path, out = tmp_path / "tiny.json", tmp_path / "front.json"
    instance.save(path)
    first = _cli(str(path), "--out", str(out), "--time-limit", "0.2", "--units", "2")
    assert first.returncode == 0, first.stderr
    state = out.with_name("front.json.state")
    assert Front.load(out, instance).status == "best_known" and state.exists()
    before = state.read_text()
    resumed = _cli(str(path), "--out", str(out), "--units", "2", "--resume")
    assert resumed.returncode == 0, resumed.stderr
    front = Front.load(out, instance)
    assert front.status == "exact" and fronts_agree(front, whole)
    assert front.provenance["runs"] == 2 and not state.exists()
    assert before  # the state of the first run was read, not rewritten in between


@pytest.mark.parametrize(("field", "value", "needle"), [
    ("wall_time_s", "x", "wall_time_s must be a number"),
    ("stats", {"proofs": [1]}, "stats.proofs must be an object"),
    ("engines", {"statuses": [1]}, "engines.statuses must be an object"),
    ("stats", {"zzz": 1}, "stats.zzz is not a known field"),
])
def test_a_resumed_state_with_a_malformed_field_is_one_line(scaleout, field, value, needle):
    """A state's checksum shows it unchanged since it was signed, not well formed (anyone
    can sign an edited one): each counter a resumed run carries on is checked."""
    from solvers.exact import ExactSettings
    from solvers.exact_state import checksum

    instance, _ = scaleout
    settings = ExactSettings(time_limit=1e-3, units=2)  # stops short: a state to resume
    state = exact_front(instance, settings=settings).provenance["state"]
    state.pop("checksum")
    state[field] = {**state[field], **value} if isinstance(value, dict) else value
    state["checksum"] = checksum(state)
    with pytest.raises(InputError, match=f"--resume: the state cannot be read .*{needle}"):
        exact_front(instance, settings=ExactSettings(units=2), resume=state)


@pytest.mark.parametrize("args", [["--resume"], ["--seed-plans", "all"], ["--units", "0"],
                                  ["--scheduler", "tcp://127.0.0.1:9"],
                                  ["--time-limit", "-1"], ["--seed-front", "missing.json"],
                                  ["--seed-front", str(FRONTS / "quick" /
                                                       "aws-10-k5-llama2-70b-s110.front.json")]])
def test_cli_bad_scaleout_options_are_one_line_and_exit_2(tmp_path, args):
    instance = tiny_instance(1, **TINY[1])
    path = tmp_path / "tiny.json"
    instance.save(path)
    done = _cli(str(path), "--out", str(tmp_path / "x.json"), *args)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and done.stderr.count("\n") <= 2
    assert not (tmp_path / "x.json").exists()


def test_an_earlier_fronts_plans_join_the_seeds():
    """``seed_front``: a run stopped before it proves anything still keeps every plan of the
    earlier front (a best-known front is the union of what the runs found)."""
    from solvers.exact import ExactSettings

    path = next(p for p in suite_paths("quick") if p.stem == "cn-hubs-k6-llama2-7b-s130")
    instance = Instance.load(path)
    earlier = FRONTS / "quick" / f"{path.stem}.front.json"
    front = exact_front(instance, settings=ExactSettings(seeds="none", seed_front=str(earlier),
                                                         time_limit=1e-3))
    assert front.status == "best_known"
    assert fronts_agree(front, Front.load(earlier, instance))


# -- a gap -------------------------------------------------------------------------------------
def _covered_within(front: Front, reference: np.ndarray, gap: float) -> np.ndarray:
    """Per reference point z: some point y of ``front`` has N_y <= N_z, C_y <= C_z and
    T_y <= T_z / (1 - gap) (what a sweep whose steps stop within ``gap`` guarantees)."""
    ours = front.objectives
    out = []
    for t, n, c in reference:
        out.append(bool(np.any((ours[:, 1] <= n) & (ours[:, 2] <= c * (1 + 1e-9) + 1e-12)
                               & (ours[:, 0] <= t / (1 - gap) * (1 + 1e-9)))))
    return np.array(out)


@pytest.mark.parametrize("gap", [0.02, 0.2])
def test_a_gap_front_is_within_its_gap_of_brute_force(tiny_fronts, gap):
    from solvers.exact import ExactSettings

    instance, _, brute = tiny_fronts
    front = exact_front(instance, settings=ExactSettings(gap=gap))
    assert front.provenance["parameters"]["gap"] == gap
    assert all(p.gap is not None and p.gap <= gap for p in front.points)
    assert _covered_within(front, brute.objectives, gap).all()
    for point in front.points:  # a bound is a bound: no plan under its caps is below it
        assert point.bound <= point.objectives[0] * (1 + 1e-9)
        under = brute.objectives[(brute.objectives[:, 1] <= point.objectives[1])
                                 & (brute.objectives[:, 2] <= point.objectives[2] + 1e-12)]
        assert under[:, 0].min() >= point.bound * (1 - 1e-9)


def test_a_gap_front_of_the_quick_suite_covers_the_committed_fronts():
    from solvers.exact import ExactSettings

    gap = 0.01
    for path in suite_paths("quick"):
        instance = Instance.load(path)
        front = exact_front(instance, settings=ExactSettings(gap=gap, seeds="fast"))
        committed = Front.load(FRONTS / "quick" / f"{path.stem}.front.json", instance)
        assert front.largest_gap <= gap, path.stem
        assert _covered_within(front, committed.objectives, gap).all(), path.stem


@pytest.mark.parametrize("value", ["-0.1", "1", "nan"])
def test_cli_bad_gap_is_one_line_and_exit_2(tmp_path, value):
    instance = tiny_instance(1, **TINY[1])
    path = tmp_path / "tiny.json"
    instance.save(path)
    done = _cli(str(path), "--out", str(tmp_path / "x.json"), "--gap", value)
    assert done.returncode == 2, done.stderr
    assert "--gap" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "x.json").exists()


def test_a_pair_no_stage_fits_is_infeasible_without_a_model():
    """An interleaved cell can have no stage room for a layer anywhere (too many
    micro-batches in flight): HiGHS's engine answers infeasible, where building the MILP
    stated a trivially false constraint (a Pyomo error, a traceback)."""
    import dataclasses

    from solvers.engine import SolveRequest, SolveStatus
    from solvers.highs import HighsEngine
    from solvers.milp import stage_cells
    from solvers.tables import all_pair_tables

    tables = all_pair_tables(Instance.load(suite_paths("quick")[0]))[0]
    empty = dataclasses.replace(tables, layer_cap=np.zeros_like(tables.layer_cap),
                                layer_cap_first=np.zeros_like(tables.layer_cap_first))
    assert stage_cells(tables) and not stage_cells(empty)
    assert HighsEngine(empty).solve(SolveRequest()).status is SolveStatus.INFEASIBLE


def test_points_closer_than_the_tolerance_are_not_a_seed_beating_the_front():
    """A GPU of 0.001 TFLOP/s makes plans whose step times differ by 5e-9 relative: the
    front keeps both (it compares at 1e-9), and a seed equal to one of them, which beats
    the other at the certification tolerance (1e-6), is no sign of a wrong optimum."""
    base = Instance.load(next(p for p in suite_paths("quick")
                              if p.stem == "cn-hubs-k5-llama2-13b-s100"))
    slow = dataclasses.replace(base.gpu, peak_tflops=0.001, hbm_gb=1e5, hbm_gbps=0.001,
                               nvlink_gbps=0.001, nic_gbps=0.001)
    front = exact_front(base.replace(gpu=slow, name="gpu-min"))
    assert front.status == "exact" and len(front.points) > 1
