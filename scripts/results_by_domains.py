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
import json
import sys
from pathlib import Path

import numpy as np

GROUPS = (("K = 5-10", 5, 10), ("K = 12-20", 12, 20), ("K = 20", 20, 20))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", type=Path)
    parser.add_argument("--method", action="append", default=None,
                        help="only this method (repeatable; default: every one but exact)")
    args = parser.parse_args()
    path = args.results / "records.json"
    try:
        records = json.loads(path.read_text())["records"]
    except (OSError, ValueError, KeyError, TypeError) as err:
        print(f"error: {path}: not an evaluation's records ({type(err).__name__})",
              file=sys.stderr)
        sys.exit(2)
    methods = args.method or sorted({r["method"] for r in records} - {"exact"})
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
            print(f"{method} {name} ({len(instances)} instances): "
                  f"coverage 2 % {100 * mean('coverage_0.02'):.1f} %, 5 % "
                  f"{100 * mean('coverage_0.05'):.1f} %, HV ratio {mean('hv_ratio'):.3f}, "
                  f"median gap {100 * float(np.median(per_instance('median_gap'))):.2f} %,"
                  f" feasible {100 * mean('feasibility'):.1f} %; decision p50 "
                  f"{np.percentile(latency, 50):.0f} ms, p99 {np.percentile(latency, 99):.0f} "
                  f"ms; front median {np.median(fronts):.2f} s, max {fronts.max():.2f} s, "
                  f"{mean('front_decisions'):.0f} decisions")


if __name__ == "__main__":
    main()
