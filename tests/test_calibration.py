"""Calibration record (SPEC 3): the evaluator reproduces Megatron-LM SC'21 Table 1 on A100s
within 15 % of the published achieved TFLOP/s per GPU, row by row."""

from __future__ import annotations

from pathlib import Path

import pytest

from formulation.calibration import CalibrationRow, calibrate_row, read_table

TABLE = Path(__file__).parent / "data" / "megatron_sc21_table1.csv"
ROWS = read_table(TABLE)
TOLERANCE = 0.15


def test_table_is_complete() -> None:
    assert len(ROWS) == 10
    assert [r.params_b for r in ROWS] == sorted(r.params_b for r in ROWS)
    for row in ROWS:
        assert row.gpus % (row.tp * row.pp) == 0
        assert row.published_tflops < 312  # below the A100 bf16 peak


@pytest.mark.parametrize("row", ROWS, ids=[f"gpt-{r.params_b:g}b" for r in ROWS])
def test_row_within_tolerance(row: CalibrationRow) -> None:
    result = calibrate_row(row)
    assert result.feasible, f"the published configuration must fit ({result})"
    assert abs(result.relative_error) <= TOLERANCE, (
        f"{row.params_b:g}B: evaluated {result.evaluated_tflops:.1f} TFLOP/s per GPU with "
        f"micro-batch {result.micro_batch}, published {row.published_tflops:g}")
