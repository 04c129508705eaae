"""The committed benchmark suites, rebuilt by one command:

    python -m instances.suites [--suite quick|bench|full|all] [--out instances/suites]

``quick``: 6 instances, K = 5-8, small search spaces, sized so an exact front takes seconds.
``bench``: 24 instances, K in {5, 8, 10, 12, 16, 20} x models {7B, 13B, 70B} x the three
topologies (aws-10 only up to its 10 regions).
``full``: 12 instances, K = 5-20, the three topologies and 7B-70B, on the generator's full
search space (dp 1-8, tp 1-8, micro-batch 1-4, every recompute mode, up to 8 stages): where
the exact sweep does not finish, its fronts are best known, each point with its gap.

Every instance must be one where cross-domain plans matter: no domain holds more than
``MAX_DOMAIN_SHARE`` of the free GPUs, and the best one-domain plan is at least
``MIN_SINGLE_DOMAIN_SLOWDOWN`` times slower than the best of a sample of cross-domain plans
(or infeasible). For each entry, seeds are tried in a fixed order until one passes; the seed
and the figures that admitted it are written to the suite's ``manifest.json``.
"""

from __future__ import annotations

import platform
import sys
import time
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path
from typing import TextIO

import numpy as np

from formulation.evaluator import evaluate_plans
from formulation.instance import Instance, SearchSpace
from formulation.outputs import ResultsDirectory, output_directory, report_stream, write_json
from formulation.schema import CliParser, InputError, run_cli
from instances.generate import generate_instance
from instances.sample import best_single_domain, chain_plans, feasible_sample

SUITES_DIR = Path(__file__).resolve().parent / "suites"
FRONTS_DIR = SUITES_DIR.parent / "fronts"
MAX_DOMAIN_SHARE = 0.4
MIN_SINGLE_DOMAIN_SLOWDOWN = 1.15
SEED_ATTEMPTS = 60
CROSS_DOMAIN_SAMPLE = 150
# Preference vectors (w1 efficiency, w2 utilisation, w3 cost) of the seeds' reward at which
# every suite is scored (optimality gap per preference, the plans a method deploys). Each
# has w1 or w2 > 0, so the scalarised optimum J* is positive and J / J* - 1 is defined.
MANIFEST_FIELDS = frozenset({"suite", "command", "versions", "admission", "preferences",
                             "wall_time_s", "instances"})  # what build_suite writes
MAX_PREFERENCES = 1000  # of a suite manifest: each is scored on every unit
PREFERENCES = ((1.0, 0.0, 0.0), (0.0, 1.0, 0.0), (0.5, 0.0, 0.5), (0.6, 0.2, 0.2),
               (0.2, 0.6, 0.2), (0.2, 0.2, 0.6), (1 / 3, 1 / 3, 1 / 3))


@dataclass(frozen=True)
class SuiteEntry:
    """One instance of a suite: the generator arguments except the seed."""

    domains: int
    model: str
    topology: str
    gpu_range: tuple[int, int]
    free_share_range: tuple[float, float]
    search: SearchSpace
    base_seed: int
    attention: str = "flash"  # the training's attention kernel (formulation.instance.Training)

    def generate(self, seed: int) -> Instance:
        return generate_instance(self.domains, self.model, seed, self.topology,
                                 gpu_range=self.gpu_range,
                                 free_share_range=self.free_share_range, search=self.search,
                                 attention=self.attention)


# Small enough that an exact front takes seconds to a couple of minutes on 2 cores.
QUICK_SEARCH = SearchSpace(dp=(1, 2, 4), tp=(2, 4, 8), micro_batch=(1,),
                           recompute=("none", "full"), max_stages=3)
# The bench space keeps all four dp degrees but drops what rarely pays for 7B-70B models over a
# WAN (tp 1, selective recompute, micro-batch 4) and caps pipelines at four stages: with 8
# stages and the full space a single min-step MILP of a K = 10 instance kept a 60 % gap after
# 20 s, while with this space K = 10 fronts are exact in under a minute
# (``scripts/bench_exact.py``, fronts under ``instances/fronts/bench``).
BENCH_SEARCH = SearchSpace(dp=(1, 2, 4, 8), tp=(2, 4, 8), micro_batch=(1, 2),
                           recompute=("none", "full"), max_stages=4)
# Installed GPUs and free share per domain, per (model, topology): small enough that no
# single domain holds the job comfortably, which is the situation cross-domain planning is
# for. On aws-10 (0.3-1.2 Gbit/s, DT-FM's measurements) a WAN pipeline only pays when no
# domain can hold the model at all, hence the tiny domains there.
SIZES = {("7b", "random"): ((16, 32), (0.1, 0.4)), ("7b", "cn-hubs"): ((16, 32), (0.1, 0.4)),
         ("13b", "random"): ((16, 64), (0.1, 0.3)), ("13b", "cn-hubs"): ((16, 64), (0.1, 0.3)),
         ("70b", "random"): ((32, 160), (0.1, 0.3)), ("70b", "cn-hubs"): ((32, 160), (0.1, 0.3)),
         ("70b", "aws-10"): ((16, 64), (0.1, 0.3))}


def _entry(domains: int, model: str, topology: str, search: SearchSpace, base: int,
           attention: str = "flash") -> SuiteEntry:
    gpu_range, free_share = SIZES[model, topology]
    return SuiteEntry(domains, model, topology, gpu_range, free_share, search, base, attention)


QUICK = [_entry(k, model, topology, QUICK_SEARCH, 100 + 10 * i) for i, (k, model, topology) in
         enumerate([(5, "13b", "cn-hubs"), (5, "70b", "aws-10"), (6, "13b", "random"),
                    (6, "7b", "cn-hubs"), (7, "13b", "cn-hubs"), (8, "7b", "random")])]
BENCH = [_entry(k, model, topology, BENCH_SEARCH, 1000 + 100 * i) for i, (k, model, topology) in
         enumerate([
             (5, "7b", "cn-hubs"), (5, "13b", "random"), (5, "70b", "aws-10"),
             (5, "70b", "cn-hubs"),
             (8, "13b", "cn-hubs"), (8, "70b", "random"), (8, "7b", "random"), (8, "70b", "aws-10"),
             (10, "70b", "aws-10"), (10, "7b", "cn-hubs"), (10, "13b", "random"),
             (10, "70b", "cn-hubs"),
             (12, "7b", "cn-hubs"), (12, "13b", "random"), (12, "70b", "random"),
             (12, "13b", "cn-hubs"),
             (16, "13b", "cn-hubs"), (16, "70b", "random"), (16, "7b", "random"),
             (16, "70b", "cn-hubs"),
             (20, "70b", "cn-hubs"), (20, "7b", "cn-hubs"), (20, "13b", "random"),
             (20, "70b", "random")])]
FULL = [_entry(k, model, topology, SearchSpace(), 5000 + 100 * i)
        for i, (k, model, topology) in
        enumerate([(5, "7b", "random"), (5, "70b", "aws-10"), (6, "13b", "cn-hubs"),
                   (8, "70b", "cn-hubs"), (8, "13b", "random"), (10, "70b", "aws-10"),
                   (10, "7b", "cn-hubs"), (12, "70b", "random"), (16, "7b", "random"),
                   (16, "70b", "cn-hubs"), (20, "13b", "random"), (20, "70b", "cn-hubs")])]
SUITES = {"quick": QUICK, "bench": BENCH, "full": FULL}


def admission(instance: Instance, seed: int) -> dict | None:
    """Figures showing that cross-domain plans matter, or None if they do not."""
    free = instance.free_gpus
    share = float(free.max() / free.sum())
    if share > MAX_DOMAIN_SHARE:
        return None
    sample = [p for p in feasible_sample(instance, CROSS_DOMAIN_SAMPLE, seed, candidates=1500)
              if len(p.domains_used()) > 1] + chain_plans(instance)
    result = evaluate_plans(instance, sample)
    if not result.admissible.any():
        return None
    cross = float(result.step_time_s[result.admissible].min())
    _, single = best_single_domain(instance)
    if single < MIN_SINGLE_DOMAIN_SLOWDOWN * cross:
        return None
    return {"largest_domain_share": round(share, 4),
            "best_single_domain_step_s": None if np.isinf(single) else round(single, 4),
            "best_sampled_cross_domain_step_s": round(cross, 4)}


def _suite_directory(target: Path) -> ResultsDirectory:
    """A suite's directory, checked: absent, or one of an earlier build's JSON files
    (:func:`build_suite`), in a directory that takes new files."""
    output_directory(target, flag="suite directory")
    earlier = {path.name for path in target.glob("*.json")} if target.is_dir() else set()
    directory = ResultsDirectory(target, earlier)
    directory.check_replaceable()
    return directory


def build_suite(name: str, out_dir: Path, report: TextIO | None = None) -> dict:
    """Generate a suite's instances into ``out_dir/name`` (``out_dir`` must exist) and
    return its manifest; a line per instance to ``report`` (default: standard output).
    The suite's directory appears whole or not at all: it is written beside and swapped in
    (:class:`~formulation.outputs.ResultsDirectory`), so an interrupted build leaves the
    earlier suite as it was; an existing one is replaced only if it holds nothing but JSON
    files (an earlier build's instances and manifest)."""
    with _suite_directory(out_dir / name) as staging:
        return _build_suite(name, staging, report)


def _build_suite(name: str, directory: Path, report: TextIO | None) -> dict:
    start = time.perf_counter()
    entries = []
    for entry in SUITES[name]:
        for seed in range(entry.base_seed, entry.base_seed + SEED_ATTEMPTS):
            instance = entry.generate(seed)
            figures = admission(instance, seed)
            if figures is not None:
                break
        else:
            raise RuntimeError(f"no admissible seed for {entry} in {SEED_ATTEMPTS} attempts")
        path = directory / f"{instance.name}.json"
        instance.save(path)
        entries.append({"file": path.name, "seed": seed, **figures,
                        "generator": {**asdict(entry), "seed": seed}})
        print(f"  {path.name}: seed {seed}, {figures}", file=report or sys.stdout)
    manifest = {
        "suite": name,
        "command": f"python -m instances.suites --suite {name}",
        "versions": {"python": platform.python_version(), "numpy": np.__version__,
                     "xdsched": metadata.version("xdsched")},
        "admission": {"max_domain_share": MAX_DOMAIN_SHARE,
                      "min_single_domain_slowdown": MIN_SINGLE_DOMAIN_SLOWDOWN},
        "preferences": [list(w) for w in PREFERENCES],
        "wall_time_s": round(time.perf_counter() - start, 1),
        "instances": entries,
    }
    write_json(directory / "manifest.json", manifest)
    return manifest


def suite_paths(name: str, root: Path = SUITES_DIR) -> list[Path]:
    """Instance files of a committed suite, in manifest order."""
    from formulation.schema import read_json

    manifest = read_json(root / name / "manifest.json", "suite manifest")
    return [root / name / entry["file"] for entry in manifest["instances"]]


def reference_front_path(instance_path: Path) -> Path:
    """Where the committed reference front of a suite instance file lies:
    ``instances/fronts/SUITE/NAME.front.json`` for ``instances/suites/SUITE/NAME.json``."""
    return FRONTS_DIR / instance_path.parent.name / f"{instance_path.stem}.front.json"


def suite_preferences(directory: Path) -> list[tuple[float, float, float]]:
    """The preference vectors of a suite directory: its manifest's, else ``PREFERENCES``."""
    from formulation.reward import preference
    from formulation.schema import check_number, read_json

    manifest = directory / "manifest.json"
    if not manifest.exists():
        return [tuple(w) for w in PREFERENCES]
    document = read_json(manifest, "suite manifest")
    where = f"suite manifest {str(manifest)!r}"
    if not isinstance(document, dict):
        raise InputError(f"{where} must be an object")
    unknown = sorted(set(document) - MANIFEST_FIELDS)
    if unknown:  # a misspelt "preferences" would be ignored silently
        raise InputError(f"{where}: {unknown[0]} is not a known field (known: "
                         f"{', '.join(sorted(MANIFEST_FIELDS))})")
    if "preferences" not in document:
        return [tuple(w) for w in PREFERENCES]
    preferences = document["preferences"]
    if not isinstance(preferences, list) or not preferences:
        raise InputError(f"{where}: preferences must be a non-empty list")
    if len(preferences) > MAX_PREFERENCES:
        raise InputError(f"{where}: preferences must have at most {MAX_PREFERENCES} entries")
    out = []
    for i, weights in enumerate(preferences):
        field = f"{where}: preferences[{i}]"
        if not isinstance(weights, list) or len(weights) != 3:
            raise InputError(f"{field} must be a list of 3 numbers")
        values = tuple(check_number(x, f"{field}[{j}]", low=0) for j, x in enumerate(weights))
        if not max(values) > 0:
            raise InputError(f"{field} must not be all 0")
        if abs(sum(values) - 1) > 1e-12:  # scaled to sum 1 (one that does is kept as is)
            values = tuple(float(x) for x in preference(values))
        out.append(values)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = CliParser(prog="python -m instances.suites",
                       description="Regenerate the committed benchmark suites.")
    parser.add_argument("--suite", choices=[*SUITES, "all"], default="all",
                        help="the suite to rebuild (default: all)")
    parser.add_argument("--out", type=Path, default=SUITES_DIR,
                        help="directory of the suites (default: the committed one)")
    parser.add_argument("--quiet", action="store_true", help="no report lines")
    args = parser.parse_args(argv)

    def build() -> None:
        out = output_directory(args.out)
        if not out.is_dir():  # the suites' directory is not created: a typo makes no tree
            raise InputError(f"--out {str(args.out)!r}: directory does not exist")
        names = list(SUITES) if args.suite == "all" else [args.suite]
        for name in names:  # every suite's directory checked before any is built
            _suite_directory(out / name)
        report = report_stream(None, args.quiet)
        for name in names:
            print(f"suite {name}:", file=report)
            build_suite(name, out, report)

    return run_cli(build)


if __name__ == "__main__":
    sys.exit(main())
