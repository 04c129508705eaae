"""The evaluation entry point on a tiny suite: outputs, determinism, bad input."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from clitools import run_module

from evaluation import methods
from evaluation.methods import METHODS, MISSING, default_options
from evaluation.pareto_coverage import main
from evaluation.summary import KPIS

FAST = ["--seeds", "2", "--repeats", "1", "--generations", "4", "--population", "10",
        "--descent", "5", "--workers", "1", "--quiet"]
TIMING_COLUMNS = ["latency_median_s", "intra_latency_median_s", "time_to_target_s"]


@pytest.fixture(scope="module")
def evaluated(tiny_suite: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("results")
    assert main(["--suite", str(tiny_suite), "--out", str(out), *FAST]) == 0
    return out


def test_writes_tables_report_and_plots(evaluated: Path, tiny_suite: Path):
    for name in ("units", "methods", "preferences", "kpis", "points"):
        csv = pd.read_csv(evaluated / f"{name}.csv")
        parquet = pd.read_parquet(evaluated / f"{name}.parquet")
        assert len(csv) == len(parquet) > 0
    units = pd.read_csv(evaluated / "units.csv")
    instances = sorted(p.stem for p in tiny_suite.glob("*.json")
                       if not p.name.endswith(".front.json"))
    assert sorted(units["instance"].unique()) == instances
    # seeded methods run each seed, the others once per instance
    options = default_options()
    for method, group in units.groupby("method"):
        seeded = METHODS[method].is_seeded(options[method])
        assert len(group) == len(instances) * (2 if seeded else 1)
    methods = pd.read_csv(evaluated / "methods.csv").set_index("method")
    empty = units.groupby(["method", "instance"])["points"].max().eq(0).groupby("method").sum()
    assert methods["no_plan"].to_dict() == empty.to_dict()
    report = (evaluated / "report.md").read_text()
    for method in METHODS:
        assert (f"| {method}" in report) == (method not in MISSING), method
    for kpi in KPIS:
        assert kpi.name in report
    # what every instance was scored against: its front's status and largest gap
    assert "### Reference fronts" in report
    for instance, group in units.groupby("instance"):
        assert f"| {instance} | {group['reference_status'].iloc[0]} |" in report
        assert group["reference_gap"].nunique(dropna=False) == 1
    plots = sorted((evaluated / "plots").glob("*.png"))
    assert len(plots) == len(instances) + 2
    for plot in plots:
        assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert f"plots/{plot.name}" in report
    assert not list(evaluated.glob(".*"))  # no temporary files left behind


def test_reference_scores_itself_perfectly_and_methods_never_beat_it(evaluated: Path):
    units = pd.read_csv(evaluated / "units.csv")
    exact = units[units["method"] == "exact"]
    assert (exact[["coverage_0", "hv_ratio", "c_method_exact"]] == 1.0).all().all()
    assert (exact["median_gap"] == 0).all()
    pipeline = units[~units["changes_optimizer"] & (units["points"] > 0)]
    # a pipeline plan never dominates an exact point: C(E, M) = 1, gaps >= 0
    assert (pipeline["c_exact_method"] == 1.0).all()
    assert (pipeline["median_gap"] >= -1e-9).all()
    assert (pipeline["hv_ratio"] <= 1 + 1e-9).all()


def test_kpis_have_a_row_per_method_and_consistent_verdicts(evaluated: Path):
    kpis = pd.read_csv(evaluated / "kpis.csv")
    methods = pd.read_csv(evaluated / "methods.csv")
    assert len(kpis) == len(KPIS) * len(methods)
    coverage = kpis[kpis["kpi"] == "coverage"].set_index("method")
    for _, row in methods.iterrows():
        value = coverage.loc[row["method"], "value"]
        assert value == pytest.approx(row["coverage_0.02"])
        assert bool(coverage.loc[row["method"], "pass"]) == (value >= 0.85)
    single = kpis[(kpis["method"] == "single-domain") & (kpis["kpi"] == "training_time")]
    assert single["value"].iloc[0] == pytest.approx(0.0, abs=1e-9)


def test_same_seed_gives_the_same_numbers(evaluated: Path, tiny_suite: Path, tmp_path: Path):
    assert main(["--suite", str(tiny_suite), "--out", str(tmp_path), *FAST]) == 0
    first = pd.read_csv(evaluated / "units.csv").drop(columns=TIMING_COLUMNS)
    again = pd.read_csv(tmp_path / "units.csv").drop(columns=TIMING_COLUMNS)
    pd.testing.assert_frame_equal(first, again)
    points = [pd.read_csv(d / "points.csv") for d in (evaluated, tmp_path)]
    pd.testing.assert_frame_equal(*points)


def test_records_hold_everything_with_provenance(evaluated: Path):
    document = json.loads((evaluated / "records.json").read_text())
    provenance = document["provenance"]
    assert provenance["missing"] == list(MISSING)
    assert provenance["versions"]["numpy"] == np.__version__
    record = document["records"][0]
    assert len(record["latency_s"]) == 1 or record["method"] == "exact"
    assert len(record["preference_gaps"]) == len(provenance["settings"]["preferences"])


def test_missing_reference_front_is_a_clear_error(tiny_suite: Path, tmp_path: Path):
    suite = tmp_path / "suite"
    shutil.copytree(tiny_suite, suite)
    victim = next(suite.glob("*.front.json"))
    victim.unlink()
    out = tmp_path / "out"
    done = run_module("evaluation.pareto_coverage", "--suite", suite, "--out", out, *FAST)
    assert done.returncode == 2, done.stderr
    message = done.stderr.strip().splitlines()
    assert len(message) == 1 and "no reference front" in message[0]
    assert victim.name in message[0] and "solvers.exact" in message[0]
    assert not out.exists()


@pytest.mark.parametrize(("args", "needle"), [
    (["--methods", "nsga3"], "unknown method 'nsga3'"),
    (["--methods", "hippo"], "hippo is not available"),
    (["--suite", "nowhere"], "is neither one of"),
    (["--workers", "0"], "--workers"),
    (["--hippo-polish", "-1"], "--hippo-polish"),
    (["--match", "no-such-instance"], "--match"),
    (["--methods", "exact", "greedy", "--hippo-samples", "2"],
     "--hippo-samples: an option of hippo, which this run does not use"),
    (["--methods", "exact", "--no-hippo-exhaust"], "--no-hippo-exhaust: an option of hippo"),
])
def test_bad_arguments_give_one_line_and_exit_2(args: list[str], needle: str, tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str],
                                                monkeypatch: pytest.MonkeyPatch):
    # an installation without a checkpoint, whether or not this one ships it
    monkeypatch.setattr(methods, "HIPPO_CHECKPOINT", tmp_path / "no_checkpoint.pt")
    out = tmp_path / "out"
    try:
        status = main([*args, "--out", str(out), "--quiet"])
    except SystemExit as done:  # a flag's bounded type: argparse's own exit
        status = done.code
    assert status == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert needle in lines[-1]
    assert not out.exists()
