"""``python -m formulation.evaluate`` and ``python -m instances.sample`` as a user runs them."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from formulation.instance import Instance
from formulation.plan import Plan

ROOT = Path(__file__).resolve().parents[1]
KEYS = {"step_time_s", "gpus", "comm_cost", "mfu", "tokens_per_s", "wan_gb_per_step",
        "stages", "feasible", "violations"}


def run(module: str, *args: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", module, *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory, generated: Instance,
          sample_plans: list[Plan]) -> tuple[Path, Path]:
    """An instance file and a feasible plan file (domains written by name)."""
    folder = tmp_path_factory.mktemp("cli")
    generated.save(folder / "instance.json")
    sample_plans[0].save(folder / "plan.json", generated)
    return folder / "instance.json", folder / "plan.json"


def evaluate_ok(*args: Any) -> dict[str, Any]:
    result = run("formulation.evaluate", *args)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_evaluate_prints_the_objectives(files: tuple[Path, Path], generated: Instance,
                                        sample_plans: list[Plan]) -> None:
    output = evaluate_ok(*files)
    assert output.keys() >= KEYS
    assert output["feasible"] is True and output["violations"] == []
    assert output["gpus"] == sample_plans[0].gpus()
    assert output["step_time_s"] > 0 and 0 < output["mfu"] < 1
    assert len(output["stages"]) == sample_plans[0].num_stages
    usable = generated.gpu.hbm_gb * (1 - generated.training.memory_margin)
    assert all(0 < stage["memory_gb"] <= usable for stage in output["stages"])


def test_robust_is_never_faster(files: tuple[Path, Path]) -> None:
    base, robust = evaluate_ok(*files), evaluate_ok(*files, "--robust")
    assert robust["step_time_s"] >= base["step_time_s"]
    assert robust["gpus"] == base["gpus"]


def _instance_doc(files: tuple[Path, Path]) -> dict[str, Any]:
    return json.loads(files[0].read_text())


def _missing_field(doc: dict[str, Any]) -> dict[str, Any]:
    del doc["model"]["hidden"]
    return doc


def _wrong_type(doc: dict[str, Any]) -> dict[str, Any]:
    doc["model"]["layers"] = "thirty-two"
    return doc


def _negative_bandwidth(doc: dict[str, Any]) -> dict[str, Any]:
    doc["links"]["bandwidth_gbps"][0][1] = -3.0
    return doc


BAD_INSTANCES: dict[str, Callable[[dict[str, Any]], Any]] = {
    "not-json": lambda doc: "{ this is not json",
    "missing-field": _missing_field,
    "wrong-type": _wrong_type,
    "negative-bandwidth": _negative_bandwidth,
}
EXPECTED = {"not-json": "is not valid JSON", "missing-field": "model.hidden is missing",
            "wrong-type": "model.layers must be an integer",
            "negative-bandwidth": "links.bandwidth_gbps[0][1] must be > 0"}


def assert_one_line_error(result: subprocess.CompletedProcess[str], fragment: str) -> None:
    assert result.returncode == 2
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error:") and fragment in lines[0]
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("case", list(BAD_INSTANCES))
def test_malformed_instance(files: tuple[Path, Path], write_json: Callable[[str, Any], Path],
                            case: str) -> None:
    path = write_json("instance.json", BAD_INSTANCES[case](_instance_doc(files)))
    assert_one_line_error(run("formulation.evaluate", path, files[1]), EXPECTED[case])


def test_plan_naming_an_unknown_domain(files: tuple[Path, Path],
                                       write_json: Callable[[str, Any], Path]) -> None:
    plan = json.loads(files[1].read_text())
    plan["stages"][-1]["domain"] = "atlantis"
    path = write_json("plan.json", plan)
    assert_one_line_error(run("formulation.evaluate", files[0], path),
                          "domain 'atlantis' is not a domain of the instance")


def test_a_fraction_of_a_micro_batch_is_refused(files: tuple[Path, Path], generated: Instance,
                                                write_json: Callable[[str, Any], Path]) -> None:
    plan = json.loads(files[1].read_text())
    batch = generated.training.global_batch
    plan["dp"] = next(r for r in range(2, batch + 2) if batch % r)  # 16.5 micro-batches
    plan["micro_batch"] = 1
    path = write_json("plan.json", plan)
    assert_one_line_error(run("formulation.evaluate", files[0], path),
                          "micro-batches a step; a step holds whole micro-batches")


def test_a_plan_outside_the_search_space_is_scored_with_a_warning(
        files: tuple[Path, Path], write_json: Callable[[str, Any], Path]) -> None:
    document = _instance_doc(files)
    plan = json.loads(files[1].read_text())
    document["search"]["max_stages"] = 1
    document["search"]["dp"] = [d for d in document["search"]["dp"] if d != plan["dp"]]
    path = write_json("narrow.json", document)
    result = run("formulation.evaluate", path, files[1])
    assert result.returncode == 0, result.stderr
    output = json.loads(result.stdout)
    assert output["feasible"] is True and output["within_search_space"] is False
    assert {m["field"] for m in output["search_mismatches"]} >= {"dp"}
    warnings = result.stderr.splitlines()
    assert len(warnings) == len(output["search_mismatches"])
    assert all(line.startswith("warning: outside the instance's search space: ")
               for line in warnings)
    assert output["step_time_s"] == evaluate_ok(*files)["step_time_s"]


@pytest.mark.parametrize("which", [0, 1], ids=["instance", "plan"])
def test_missing_file(files: tuple[Path, Path], tmp_path: Path, which: int) -> None:
    args = list(files)
    args[which] = tmp_path / "absent.json"
    assert_one_line_error(run("formulation.evaluate", *args), "absent.json")


def test_sample_writes_a_feasible_plan(files: tuple[Path, Path], tmp_path: Path) -> None:
    out = tmp_path / "sampled.json"
    result = run("instances.sample", files[0], "--out", out, "--seed", 3)
    assert result.returncode == 0, result.stderr
    assert evaluate_ok(files[0], out)["feasible"] is True


def test_the_readme_example_of_a_published_run() -> None:
    """``examples/``: Megatron-LM SC'21's 145.6B row as a one-domain instance with presets by
    name; outside the default search space (one warning), feasible, and within the 6.5 %
    the README claims for that table (published 148 TFLOP/s per GPU)."""
    result = run("formulation.evaluate", "examples/gpt-146b-selene.instance.json",
                 "examples/gpt-146b-selene.plan.json")
    assert result.returncode == 0, result.stderr
    output = json.loads(result.stdout)
    assert output["feasible"] is True and output["within_search_space"] is False
    assert [m["field"] for m in output["search_mismatches"]] == ["dp"]
    assert len(result.stderr.splitlines()) == 1
    assert output["gpus"] == 1536
    assert abs(output["achieved_tflops_per_gpu"] / 148 - 1) <= 0.065
