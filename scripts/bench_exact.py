"""Exact-solver speed: model size, build and solve times for K = 5..20, and front costs.

    python scripts/bench_exact.py [--time-limit 60] [--engines highs,cpsat]
    python scripts/bench_exact.py --fronts instances/fronts/quick

The first form takes the first bench instance of each K, builds the MILP of its largest
(or, with ``--pair smallest``, its smallest) (dp, micro-batch) pair and times one
min-step-time solve per engine (status, gap). The
second prints, for committed fronts, points, status, solves and time per front and per point.
Targets (issue 3): quick fronts <= 60 s; K = 10 bench fronts exact <= 15 min; K = 20 best
known within 1 h with gaps reported.
"""

import argparse
import json
import time
from pathlib import Path

import pyomo.environ as pyo

from formulation.instance import Instance
from instances.suites import suite_paths
from solvers.exact import make_engine
from solvers.tables import all_pair_tables


def solve_table(time_limit: float, engines: list[str], pair: str, ks: set[int] | None) -> None:
    seen = set()
    print(f"{'K':>3} {'instance':32} {'pair':>7} {'vars':>6} {'cons':>6} {'build':>6} "
          f"{'engine':>7} {'status':>10} {'solve s':>8} {'step s':>9} {'gap':>8}")
    for path in suite_paths("bench"):
        instance = Instance.load(path)
        if instance.num_domains in seen or (ks and instance.num_domains not in ks):
            continue
        seen.add(instance.num_domains)
        pairs = sorted(all_pair_tables(instance), key=lambda t: (t.dp, t.micro_batch))
        tables = pairs[-1] if pair == "largest" else pairs[0]
        for name in engines:
            start = time.perf_counter()
            engine = make_engine(name, tables, 1)
            build = time.perf_counter() - start
            size = ""
            if name == "highs":
                size = (f"{engine.model.nvariables():>6} "
                        f"{sum(1 for _ in engine.model.component_data_objects(pyo.Constraint)):>6}")
            else:
                size = f"{'':>6} {'':>6}"
            result = engine.solve(time_limit=time_limit)
            step = f"{result.values.step_time_s:9.2f}" if result.values else f"{'-':>9}"
            gap = f"{result.gap:8.2%}" if result.gap is not None else f"{'-':>8}"
            print(f"{instance.num_domains:>3} {instance.name:32} "
                  f"{tables.dp:>3}/{tables.micro_batch:<3} {size} {build:6.2f} {name:>7} "
                  f"{result.status:>10} {result.wall_time_s:8.1f} {step} {gap}", flush=True)


def front_table(directory: Path) -> None:
    """One row per committed front, ordered by K: size, status, solves, wall time, worst gap."""
    instances = {path.stem: path for suite in ("quick", "bench") for path in suite_paths(suite)}
    rows = []
    for path in directory.glob("*.front.json"):
        front = json.loads(path.read_text())
        instance = Instance.load(instances[front["instance"]])
        rows.append((instance.num_domains, front["instance"], front))
    print(f"{'K':>3} {'front':34} {'points':>6} {'status':>10} {'solves':>6} {'limited':>7} "
          f"{'wall s':>8} {'s/point':>8} {'max gap':>8}")
    for k, name, front in sorted(rows, key=lambda row: (row[0], row[1])):
        provenance, points = front["provenance"], len(front["points"])
        gaps = [p["mip_gap"] for p in front["points"] if p.get("mip_gap") is not None]
        gap = f"{max(gaps):8.2%}" if gaps else f"{'-':>8}"
        print(f"{k:>3} {name:34} {points:>6} {front['status']:>10} {provenance['solves']:>6} "
              f"{provenance['limited_solves']:>7} {provenance['wall_time_s']:8.1f} "
              f"{provenance['wall_time_s'] / max(1, points):8.1f} {gap}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--time-limit", type=float, default=60.0)
    parser.add_argument("--engines", default="highs,cpsat")
    parser.add_argument("--fronts", type=Path, help="print the cost of committed fronts")
    parser.add_argument("--pair", choices=["largest", "smallest"], default="largest",
                        help="which (dp, micro-batch) pair to time (smallest: dp 1, b 1)")
    parser.add_argument("--k", type=int, action="append", help="only these K (repeatable)")
    args = parser.parse_args()
    if args.fronts:
        front_table(args.fronts)
    else:
        solve_table(args.time_limit, args.engines.split(","), args.pair,
                    set(args.k) if args.k else None)


if __name__ == "__main__":
    main()
