"""An evaluation's figures split by instance size: K = 5-10, K = 12-20 and K = 20 apart.

    python scripts/results_by_domains.py RESULTS_DIR [--method hippo]

Reads ``records.json`` of ``python -m evaluation.pareto_coverage --out RESULTS_DIR`` and
prints, per group of instances and method: coverage at 2 % and 5 %, hypervolume ratio,
median gap and feasibility (means over instances, as the report's tables), the decision
latency p50 / p99 over every timed decision, and the wall time of one front (median, max)
with the decisions it took (mean): the README's per-K rows.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np

from evaluation.methods import REFERENCE
from formulation.schema import CliParser, InputError, read_json, run_cli

GROUPS = (("K = 5-10", 5, 10), ("K = 12-20", 12, 20), ("K = 20", 20, 20))
# the figures a record gives per instance (a number, or null: not defined)
FIGURES = ("coverage_0.02", "coverage_0.05", "hv_ratio", "median_gap", "feasibility",
           "front_decisions")
TIMES = ("latency_s", "front_wall_s")  # seconds: a number or a list of numbers


def main(argv: list[str] | None = None) -> int:
    parser = CliParser(prog="python scripts/results_by_domains.py",
                       description=__doc__.splitlines()[0])
    parser.add_argument("results", type=Path, metavar="RESULTS_DIR",
                        help="the --out directory of evaluation.pareto_coverage")
    parser.add_argument("--method", action="append", default=None,
                        help="only this method (repeatable; default: every one but exact)")
    args = parser.parse_args(argv)
    return run_cli(lambda: _split(args))


def _number(value) -> bool:
    return not isinstance(value, bool) and isinstance(value, int | float) \
        and math.isfinite(value)


def read_records(path: Path) -> list[dict]:
    """The records of an evaluation's ``records.json``, each checked for the fields this
    script reads; a bad one is one :class:`InputError` naming the file and the record."""
    document = read_json(path, "records")
    where = f"records file {str(path)!r}"
    if not isinstance(document, dict) or not isinstance(document.get("records"), list):
        raise InputError(f"{where} is not an evaluation's records (no list 'records')")
    records = document["records"]
    for i, record in enumerate(records):
        at = f"{where}: records[{i}]"
        if not isinstance(record, dict):
            raise InputError(f"{at} must be an object")
        for key in ("method", "instance"):
            if not isinstance(record.get(key), str):
                raise InputError(f"{at}.{key} must be a string")
        domains = record.get("domains")
        if isinstance(domains, bool) or not isinstance(domains, int):
            raise InputError(f"{at}.domains must be an integer")
        for key in FIGURES:
            if key not in record:
                raise InputError(f"{at}.{key} is missing")
            if record[key] is not None and not _number(record[key]):
                raise InputError(f"{at}.{key} must be a finite number or null")
        for key in TIMES:
            value = record.get(key)
            values = value if isinstance(value, list) else [value]
            if not all(_number(x) for x in values):
                raise InputError(f"{at}.{key} must be a number or a list of numbers")
    return records


def _two(values: np.ndarray, first, second, form: str) -> tuple[str, str]:
    """Two figures of ``values`` (each ``form``-formatted), '-' where there is no value
    (a method whose runs timed no decision)."""
    if not len(values):
        return "-", "-"
    return f"{first(values):{form}}", f"{second(values):{form}}"


def _split(args: argparse.Namespace) -> None:
    if not args.results.is_dir():
        raise InputError(f"RESULTS_DIR {str(args.results)!r}: no such directory")
    records = read_records(args.results / "records.json")
    present = sorted({r["method"] for r in records})
    unknown = [m for m in args.method or () if m not in present]
    if unknown:
        raise InputError(f"--method: no record of method {unknown[0]!r} in "
                         f"{str(args.results / 'records.json')!r} (methods: "
                         f"{', '.join(present)})")
    methods = args.method or sorted(set(present) - {REFERENCE})
    for method in methods:
        for name, least, most in GROUPS:
            group = [r for r in records
                     if r["method"] == method and least <= r["domains"] <= most]
            if not group:
                continue

            instances = sorted({r["instance"] for r in group})

            def per_instance(key: str, group: list = group,
                             instances: list = instances) -> list[float]:
                """The key's value per instance, its seeds averaged first."""
                return [float(np.mean([np.nan if r[key] is None else r[key]  # null: NaN
                                       for r in group if r["instance"] == name]))
                        for name in instances]

            def mean(key: str, per_instance=per_instance) -> float:
                return float(np.mean(per_instance(key)))

            latency = 1e3 * np.concatenate([np.atleast_1d(r["latency_s"]) for r in group])
            fronts = np.concatenate([np.atleast_1d(r["front_wall_s"]) for r in group])
            p50, p99 = _two(latency, lambda v: np.percentile(v, 50),
                            lambda v: np.percentile(v, 99), ".0f")
            median, largest = _two(fronts, np.median, np.max, ".2f")
            print(f"{method} {name} ({len(instances)} instances): "
                  f"coverage 2 % {100 * mean('coverage_0.02'):.1f} %, 5 % "
                  f"{100 * mean('coverage_0.05'):.1f} %, HV ratio {mean('hv_ratio'):.3f}, "
                  f"median gap {100 * float(np.median(per_instance('median_gap'))):.2f} %,"
                  f" feasible {100 * mean('feasibility'):.1f} %; decision p50 "
                  f"{p50} ms, p99 {p99} "
                  f"ms; front median {median} s, max {largest} s, "
                  f"{mean('front_decisions'):.0f} decisions")


if __name__ == "__main__":
    sys.exit(main())
