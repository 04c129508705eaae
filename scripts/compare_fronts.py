"""Compare two directories of fronts (e.g. HiGHS-only vs CP-SAT or portfolio) point for point.

    python scripts/compare_fronts.py DIR_A DIR_B [--suite quick]

For each instance present in both: points in each, status, wall time and whether the
objective vectors agree within 1e-6 relative.
"""

import argparse
import sys
from pathlib import Path

from formulation.instance import Instance
from formulation.schema import CliParser, InputError, run_cli
from instances.suites import SUITES, SUITES_DIR
from solvers.front import Front, fronts_agree


def main(argv: list[str] | None = None) -> int:
    parser = CliParser(prog="python scripts/compare_fronts.py",
                       description=__doc__.splitlines()[0])
    parser.add_argument("a", type=Path, metavar="DIR_A", help="a directory of *.front.json")
    parser.add_argument("b", type=Path, metavar="DIR_B", help="a directory of *.front.json")
    parser.add_argument("--suite", choices=sorted(SUITES), default="quick",
                        help="the committed suite the fronts are of")
    args = parser.parse_args(argv)
    return run_cli(lambda: _compare(args))


def _directory(path: Path, name: str) -> Path:
    if not path.is_dir():
        raise InputError(f"{name} {str(path)!r}: no such directory")
    return path


def _provenance(path: Path, front: Front, *keys: str, number: bool = False):
    """A field of the front's provenance (``keys``: its path), named by file and field when
    it is missing."""
    value = front.provenance
    for key in keys:
        if not isinstance(value, dict) or key not in value:
            raise InputError(f"front {str(path)!r}: provenance.{'.'.join(keys)} is missing")
        value = value[key]
    if number and (isinstance(value, bool) or not isinstance(value, int | float)):
        raise InputError(f"front {str(path)!r}: provenance.{'.'.join(keys)} must be a number")
    if not number and not isinstance(value, str):
        raise InputError(f"front {str(path)!r}: provenance.{'.'.join(keys)} must be a string")
    return value


def _compare(args: argparse.Namespace) -> None:
    _directory(args.a, "DIR_A")
    _directory(args.b, "DIR_B")
    fronts = sorted(args.a.glob("*.front.json"))
    if not fronts:
        raise InputError(f"DIR_A {str(args.a)!r} holds no *.front.json")
    agree = total = 0
    for path_a in fronts:
        path_b = args.b / path_a.name
        if not path_b.exists():
            continue
        instance = Instance.load(SUITES_DIR / args.suite
                                 / path_a.name.replace(".front.json", ".json"))
        a, b = Front.load(path_a, instance), Front.load(path_b, instance)
        cells = [(_provenance(path, front, "parameters", "engine"),
                  _provenance(path, front, "wall_time_s", number=True))
                 for path, front in ((path_a, a), (path_b, b))]
        same = fronts_agree(a, b)
        agree += same
        total += 1
        print(f"{instance.name:30} {cells[0][0]:>9} "
              f"{len(a.points):3} pts {a.status:>10} {cells[0][1]:7.1f}s | "
              f"{cells[1][0]:>9} {len(b.points):3} pts "
              f"{b.status:>10} {cells[1][1]:7.1f}s | "
              f"{'agree' if same else 'DIFFER'}")
    if not total:
        raise InputError(f"no front of DIR_A {str(args.a)!r} is also in DIR_B {str(args.b)!r}")
    print(f"{agree}/{total} fronts agree point for point")


if __name__ == "__main__":
    sys.exit(main())
