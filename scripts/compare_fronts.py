"""Compare two directories of fronts (e.g. HiGHS-only vs CP-SAT or portfolio) point for point.

    python scripts/compare_fronts.py DIR_A DIR_B [--suite quick]

For each instance present in both: points in each, status, wall time and whether the
objective vectors agree within 1e-6 relative.
"""

import argparse
from pathlib import Path

from formulation.instance import Instance
from instances.suites import SUITES_DIR
from solvers.front import Front, fronts_agree


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("a", type=Path)
    parser.add_argument("b", type=Path)
    parser.add_argument("--suite", default="quick")
    args = parser.parse_args()
    agree = total = 0
    for path_a in sorted(args.a.glob("*.front.json")):
        path_b = args.b / path_a.name
        if not path_b.exists():
            continue
        instance = Instance.load(SUITES_DIR / args.suite
                                 / path_a.name.replace(".front.json", ".json"))
        a, b = Front.load(path_a, instance), Front.load(path_b, instance)
        same = fronts_agree(a, b)
        agree += same
        total += 1
        print(f"{instance.name:30} {a.provenance['parameters']['engine']:>9} "
              f"{len(a.points):3} pts {a.status:>10} {a.provenance['wall_time_s']:7.1f}s | "
              f"{b.provenance['parameters']['engine']:>9} {len(b.points):3} pts "
              f"{b.status:>10} {b.provenance['wall_time_s']:7.1f}s | "
              f"{'agree' if same else 'DIFFER'}")
    print(f"{agree}/{total} fronts agree point for point")


if __name__ == "__main__":
    main()
