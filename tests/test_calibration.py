"""Calibration (issue 16 item 5): every published set within the error the README claims,
per row and at the median, by ``python -m formulation.calibration``; its tables are read
strictly."""

from __future__ import annotations

import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from formulation.calibration import (
    COLUMNS,
    DATA,
    SETS,
    PublishedRun,
    calibrate_row,
    read_set,
    read_table,
)
from formulation.schema import InputError

ROOT = Path(__file__).resolve().parents[1]
ROW_TOLERANCE = 0.10  # the README: each set within 10 % per row
MEDIAN_TOLERANCE = 0.05  # and within 5 % at the median
ROWS = [row for name in SETS for row in read_set(name)]


def test_every_set_is_read() -> None:
    counts = {name: len(read_set(name)) for name in SETS}
    assert counts == {"megatron_sc21_table1": 10, "korthikanti2022": 8, "dgxc_h100_bf16": 18}
    assert {row.gpu for row in ROWS} == {"A100-80GB", "H100-80GB"}


@pytest.mark.parametrize("row", ROWS, ids=[f"{r.source}:{r.label}" for r in ROWS])
def test_row_within_tolerance(row: PublishedRun) -> None:
    result = calibrate_row(row)
    assert abs(result.relative_error) <= ROW_TOLERANCE, (
        f"{row.label}: predicted {result.predicted:.4g}, published {row.published:g} "
        f"({row.metric}), micro-batch {result.micro_batch}")


@pytest.mark.parametrize("name", SETS)
def test_set_median_within_tolerance(name: str) -> None:
    errors = [abs(calibrate_row(row).relative_error) for row in read_set(name)]
    assert statistics.median(errors) <= MEDIAN_TOLERANCE


def test_sc21_rows_count_the_recompute_and_fit_in_memory() -> None:
    for row in read_set("megatron_sc21_table1"):
        result = calibrate_row(row)
        assert result.feasible, row.label
        assert result.mfu[1] < result.predicted / 312  # MFU leaves the recompute out


def _table(tmp_path: Path, name: str, header: list[str], row: list[str] | None) -> Path:
    path = tmp_path / name
    lines = [",".join(header)] + ([",".join(row)] if row is not None else [])
    path.write_text("# a comment line\n" + "\n".join(lines) + "\n", encoding="utf-8")
    return path


FIRST = (DATA / "megatron_sc21_table1.csv").read_text(encoding="utf-8").splitlines()
HEADER = next(line for line in FIRST if line.startswith("label")).split(",")
GOOD = FIRST[FIRST.index(",".join(HEADER)) + 1].split(",")


def _with(column: str, value: str, **more: str) -> list[str]:
    row = list(GOOD)
    for name, text in {column: value, **more}.items():
        row[HEADER.index(name)] = text
    return row


@pytest.mark.parametrize(("header", "row", "message"), [
    (HEADER[1:], GOOD[1:], "has no column 'label'"),
    (HEADER + ["foo"], GOOD + ["1"], "column 'foo' is not a known field"),
    (HEADER, GOOD + ["1"], "row 1 has more cells than the header's"),
    (HEADER, _with("tp", "x"), "row 1: tp must be an integer, got 'x'"),
    (HEADER, _with("tp", "0"), "row 1: tp must be >= 1"),
    (HEADER, _with("gpus", "33", tp="2"), "row 1: gpus 33 is not a multiple of tp x pp = 2"),
    (HEADER, _with("global_batch", "33"), "row 1: global_batch 33 is not a multiple of dp 32"),
    (HEADER, _with("gpu", "TPU"), "row 1: gpu must be one of"),
    (HEADER, _with("metric", "mfu"), "row 1: metric must be one of ['tflops', 'step_time_s']"),
    (HEADER, _with("published", "0"), "row 1: published must be > 0"),
    (HEADER, _with("gated_mlp", "yes"), "row 1: gated_mlp must be true or false"),
    (HEADER, _with("vp", "30"), "model chunks exceed layers 24"),
    (HEADER, GOOD[:3], "row 1: hidden must be an integer, got ''"),
    (HEADER, None, "has no rows"),
])
def test_a_bad_table_names_its_row_and_column(tmp_path: Path, header: list[str],
                                              row: list[str] | None, message: str) -> None:
    with pytest.raises(InputError) as info:
        read_table(_table(tmp_path, "bad.csv", header, row))
    assert message in str(info.value)


def run(*args: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "formulation.calibration", *map(str, args)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_the_command_prints_every_row_and_each_sets_errors() -> None:
    done = run("--set", "korthikanti2022")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert sum("gpt-" in line for line in lines) == 8
    assert any(line.startswith("korthikanti2022: 8 rows, max |error|") for line in lines)


def test_the_command_fits_and_refuses_a_bad_table_in_one_line(tmp_path: Path) -> None:
    good = _table(tmp_path, "one.csv", HEADER, GOOD)
    done = run("--table", good, "--fit")
    assert done.returncode == 0, done.stderr
    assert "A100-80GB (1 rows):" in done.stdout and "'matmul_eta_max'" in done.stdout
    bad = _table(tmp_path, "bad.csv", HEADER, _with("tp", "x"))
    done = run("--table", bad)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and "row 1: tp must be an integer" in done.stderr
    assert len(COLUMNS) == len(HEADER)
