"""Print the Megatron-LM SC'21 Table 1 calibration: published vs evaluated TFLOP/s per GPU.

    python scripts/calibration.py [--table CSV] [--fit]

``--fit`` re-runs the grid search that chose the constants of ``formulation.costmodel
.Efficiency`` (minimising the largest relative error over the rows) and prints the best ones.
"""

import argparse
import dataclasses
import itertools
import sys
from pathlib import Path

from formulation.calibration import calibrate_row, read_table
from formulation.costmodel import EFFICIENCY
from formulation.schema import CliParser, run_cli

DEFAULT = Path(__file__).resolve().parent.parent / "tests" / "data" / "megatron_sc21_table1.csv"
GRID = {"matmul_eta_max": (0.74, 0.77, 0.80), "matmul_half_dim": (32.0, 56.0, 72.0),
        "collective_efficiency": (0.55, 0.6, 0.65), "elementwise_bytes_per_hidden": (15.0, 20.0,
                                                                                    25.0)}
def fit(rows) -> None:
    scored = []
    for values in itertools.product(*GRID.values()):
        efficiency = dataclasses.replace(EFFICIENCY, **dict(zip(GRID, values, strict=True)))
        worst = max(abs(calibrate_row(row, efficiency).relative_error) for row in rows)
        scored.append((worst, values))
    scored.sort()
    for worst, values in scored[:5]:
        print(f"max |error| {worst:.1%}: {dict(zip(GRID, values, strict=True))}")


def main(argv: list[str] | None = None) -> int:
    parser = CliParser(prog="python scripts/calibration.py",
                       description=__doc__.splitlines()[0])
    parser.add_argument("--table", type=Path, default=DEFAULT,
                        help="CSV of Table 1's rows (default: tests/data/"
                             "megatron_sc21_table1.csv)")
    parser.add_argument("--fit", action="store_true",
                        help="re-run the grid search of the efficiency constants")
    args = parser.parse_args(argv)
    return run_cli(lambda: _calibrate(args))


def _calibrate(args: argparse.Namespace) -> None:
    rows = read_table(args.table)
    if args.fit:
        fit(rows)
        return
    print(f"{'model':>8} {'tp':>3} {'pp':>3} {'gpus':>5} {'b':>3} "
          f"{'published':>9} {'evaluated':>9} {'error':>7}")
    errors = []
    for row in rows:
        result = calibrate_row(row)
        errors.append(abs(result.relative_error))
        print(f"{row.params_b:>7g}B {row.tp:>3} {row.pp:>3} {row.gpus:>5} "
              f"{result.micro_batch:>3} {row.published_tflops:>9.0f} "
              f"{result.evaluated_tflops:>9.1f} {result.relative_error:>+7.1%}"
              + ("" if result.feasible else "  INFEASIBLE"))
    print(f"max |error| {max(errors):.1%}, mean |error| {sum(errors) / len(errors):.1%}")


if __name__ == "__main__":
    sys.exit(main())
