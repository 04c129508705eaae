"""Audit every exact engine against brute force on random tiny instances of many variants.

    python scripts/audit_exact.py [--count 100] [--seed S] [--engines highs,cpsat,portfolio,labels]
                                  [--threads 2] [--seed-plans baselines] [--asymmetric]

Draws ``--count`` instances from :func:`instances.tiny.audit_instance` with a generator
seeded by ``--seed`` (default: a fresh one, printed so the run can be repeated), computes
brute force's front and each engine's, and prints one row per instance and a summary: how
many fronts each engine labelled exact, how many of those differ from brute force (must
be 0), how many agree, and how many brute-force fronts hold cross-domain and interleaved
points. Exits 1 if any front labelled exact is wrong.
"""

import argparse
import secrets
import sys
import time

import numpy as np

from formulation.schema import SEED, CliParser, InputError, integer_arg, run_cli
from instances.tiny import audit_instance
from solvers.audit import ENGINES as DEFAULT_ENGINES
from solvers.audit import audit
from solvers.engine import ENGINES
from solvers.exact import SEED_KINDS

MAX_COUNT = 1_000_000


def main(argv: list[str] | None = None) -> int:
    parser = CliParser(prog="python scripts/audit_exact.py",
                       description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=integer_arg(1, MAX_COUNT), default=100,
                        help=f"instances drawn (1..{MAX_COUNT:,})")
    parser.add_argument("--seed", type=SEED, default=None,
                        help="one seed: of the generator the instances are drawn from "
                             "(default: a fresh one, printed)")
    parser.add_argument("--engines", default=",".join(DEFAULT_ENGINES),
                        help=f"comma-separated engines, of {', '.join(sorted(ENGINES))}")
    parser.add_argument("--threads", type=integer_arg(1, 256), default=2,
                        help="HiGHS threads and CP-SAT workers per engine")
    parser.add_argument("--seed-plans", dest="seeds", choices=SEED_KINDS, default="baselines",
                        help="the sweeps' seed plans")
    parser.add_argument("--asymmetric", action="store_true",
                        help="only instances whose WAN links differ by direction")
    args = parser.parse_args(argv)
    return run_cli(lambda: _audit(args))


def _engines(text: str) -> tuple[str, ...]:
    engines = tuple(text.split(","))
    for name in engines:
        if name not in ENGINES:
            raise InputError(f"--engines: unknown engine {name!r}; known: "
                             f"{', '.join(sorted(ENGINES))}")
    if len(set(engines)) != len(engines):
        raise InputError(f"--engines names an engine twice: {text!r}")
    return engines


def _audit(args: argparse.Namespace) -> int:
    engines = _engines(args.engines)
    seed = secrets.randbits(32) if args.seed is None else args.seed
    print(f"audit seed {seed}: {args.count} instances, engines {', '.join(engines)}")
    rng = np.random.default_rng(seed)
    totals = {e: {"exact": 0, "wrong": 0, "agree": 0, "seconds": 0.0} for e in engines}
    cross = interleaved = 0
    start = time.perf_counter()
    for i in range(args.count):
        instance = audit_instance(rng)
        while args.asymmetric and not (instance.links.bandwidth_gbps
                                       != instance.links.bandwidth_gbps.T).any():
            instance = audit_instance(rng)
        row = audit(instance, engines, args.threads, args.seeds)
        cross += row.cross_domain_points > 0
        interleaved += row.interleaved_points > 0
        cells = []
        for result in row.engines:
            t = totals[result.engine]
            t["exact"] += result.status == "exact"
            t["wrong"] += result.wrong_exact
            t["agree"] += result.agrees
            t["seconds"] += result.seconds
            mark = "WRONG" if result.wrong_exact else ("ok" if result.agrees else "differs")
            cells.append(f"{result.engine} {result.status[:5]} {result.points:2} {mark:7} "
                         f"{result.seconds:5.1f}s")
        print(f"{i + 1:3} {row.variant:62} brute {row.brute_points:2} pts "
              f"({row.cross_domain_points} cross, {row.interleaved_points} interleaved) | "
              + " | ".join(cells), flush=True)
    print(f"\n{args.count} instances in {time.perf_counter() - start:.0f} s; "
          f"{cross} brute-force fronts hold cross-domain points, {interleaved} interleaved "
          f"ones")
    for engine, t in totals.items():
        print(f"{engine:10} exact {t['exact']:3}/{args.count}, wrong exact {t['wrong']}, "
              f"agree with brute force {t['agree']:3}/{args.count}, {t['seconds']:.0f} s")
    return 1 if any(t["wrong"] for t in totals.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
