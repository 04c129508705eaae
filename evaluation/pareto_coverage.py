"""Score every method against the exact Pareto fronts: the project's main job.

    python -m evaluation.pareto_coverage [--suite quick|bench|full|DIR] [--methods NAME ...]
        [--out DIR] [--workers N] [--scheduler ADDRESS] [--seeds N] [--repeats N]
        [--generations N] [--population N] [--descent N] [--target-gap G] [--match TEXT]
        [--quiet]

A suite is ``quick``, ``bench`` or ``full`` (committed instances and reference fronts) or a
directory of instance JSON files, each with its reference front beside it
(``NAME.front.json``) or in ``fronts/``. Each (instance, method, seed) is one work unit
(:mod:`evaluation.units`); units run in a local process pool (``--workers``, default: one
per CPU) or on a Dask cluster (``--scheduler``). Written into ``--out`` (default
``results/``): ``units``, ``methods``, ``preferences``, ``kpis`` and ``points`` as CSV and
Parquet, ``records.json`` (everything, including latencies and anytime logs), ``report.md``
and PNG plots in ``plots/``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd

from evaluation import plots
from evaluation.methods import (
    ALL_METHODS,
    METHODS,
    REFERENCE,
    add_method_arguments,
    check_method_flags,
    check_methods,
    options_from_args,
    unavailable_methods,
)
from evaluation.report import (
    Table,
    kpi_table,
    markdown,
    preference_table,
    print_tables,
    quality_table,
    reference_table,
    time_table,
    write_frame,
)
from evaluation.runner import add_where_arguments, run_units
from evaluation.summary import kpi_frame, method_frame, preference_frame, units_frame
from evaluation.units import EvaluationSettings, WorkUnit
from formulation.instance import Instance
from formulation.outputs import (
    ResultsDirectory,
    output_directory,
    strict,
    write_atomic,
    write_json,
)
from formulation.schema import (
    CliParser,
    InputError,
    integer_arg,
    number_arg,
    read_json,
    run_cli,
)
from instances.suites import (
    SUITES,
    SUITES_DIR,
    reference_front_path,
    suite_paths,
    suite_preferences,
)
from solvers.front import Front, command_line, versions

DEFAULT_METHODS = ALL_METHODS
TABLES = ("units", "methods", "preferences", "kpis", "points")
RESULTS_NAMES = ({f"{table}.{kind}" for table in TABLES for kind in ("csv", "parquet")}
                 | {"records.json", "report.md", "plots"})
"""Everything the evaluation writes into ``--out``: an existing ``--out`` holding anything
else is not replaced."""


def suite_files(suite: str) -> tuple[list[tuple[Path, Path]], Path]:
    """(instance, reference front) pairs of a suite, and the directory of its manifest."""
    if suite in SUITES:
        return ([(path, reference_front_path(path)) for path in suite_paths(suite)],
                SUITES_DIR / suite)
    directory = Path(suite)
    if not directory.is_dir():
        raise InputError(f"--suite: {suite!r} is neither one of {list(SUITES)} nor a directory")
    instances = sorted(p for p in directory.glob("*.json")
                       if p.name != "manifest.json" and not p.name.endswith(".front.json"))
    if not instances:
        raise InputError(f"--suite: no instance JSON files in {str(directory)!r}")
    pairs = []
    for path in instances:
        candidates = [directory / f"{path.stem}.front.json",
                      directory / "fronts" / f"{path.stem}.front.json"]
        front = next((c for c in candidates if c.exists()), None)
        if front is None:
            raise InputError(f"{path}: no reference front (looked for {candidates[0]} and "
                             f"{candidates[1]}); make one with python -m solvers.exact {path} "
                             f"--out {candidates[0]}")
        pairs.append((path, front))
    return pairs, directory


def _parser() -> argparse.ArgumentParser:
    parser = CliParser(prog="python -m evaluation.pareto_coverage",
                       description="Score every method against the exact Pareto fronts.")
    parser.add_argument("--suite", default="quick", help="quick, bench, full or a directory")
    parser.add_argument("--methods", nargs="+", default=None, metavar="NAME",
                        help=f"methods to score (default: all of {', '.join(ALL_METHODS)})")
    add_where_arguments(parser, "results")
    parser.add_argument("--seeds", type=integer_arg(1, 1000), default=3,
                        help="a count: each seeded method runs with seeds 0..N-1 (default 3)")
    parser.add_argument("--repeats", type=integer_arg(1, 10_000), default=3,
                        help="timed decisions per unit after one warm-up (default 3)")
    add_method_arguments(parser)
    parser.add_argument("--target-gap", type=number_arg(0, 0.999), default=0.05,
                        help="time-to-target: hypervolume ratio >= 1 - this")
    parser.add_argument("--match", action="append", default=[],
                        help="only instances whose name contains this (repeatable)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar or tables")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    return run_cli(lambda: evaluate_suite(args))


def _check(args: argparse.Namespace, not_available: dict[str, str]) -> list[str]:
    names = [n for item in (args.methods or DEFAULT_METHODS) for n in item.split(",") if n]
    if not names:
        raise InputError(f"--methods: no method named; choose from {', '.join(ALL_METHODS)}")
    try:
        check_methods(names)
    except ValueError as err:
        raise InputError(str(err)) from None
    if args.methods is not None:
        asked_missing = [n for n in names if n in not_available]
        if asked_missing:
            name = asked_missing[0]
            raise InputError(f"--methods: {name} is not available: {not_available[name]}")
    check_method_flags(args, names)
    return names


def evaluate_suite(args: argparse.Namespace) -> int:
    started = time.perf_counter()
    options = options_from_args(args)
    not_available = unavailable_methods(options)
    names = _check(args, not_available)
    missing = {n: not_available[n] for n in names if n in not_available}  # name: why
    methods = [n for n in names if n not in not_available]
    option_inputs = [path for o in options.values() for path in o.inputs()]
    asked = Path(args.suite)  # a directory given by path: checked before it is read
    output_directory(args.out, inputs=[asked if asked.is_dir() else None, *option_inputs])
    pairs, suite_dir = suite_files(args.suite)
    out = output_directory(args.out, inputs=[suite_dir, *option_inputs])
    pairs = [p for p in pairs if not args.match or any(m in p[0].stem for m in args.match)]
    if not pairs:
        raise InputError(f"--match: no instance of {args.suite!r} matches {args.match}")
    documents = []
    names: dict[str, Path] = {}
    for instance_path, front_path in pairs:  # bad input fails here, before any work
        instance = Instance.load(instance_path)
        if instance.name in names:  # every table and plot is keyed by the name
            raise InputError(f"instances {str(names[instance.name])!r} and "
                             f"{str(instance_path)!r} are both named {instance.name!r}")
        names[instance.name] = instance_path
        if not Front.load(front_path, instance).points:
            raise InputError(f"front {str(front_path)!r}: a reference front needs at least "
                             "one point")
        documents.append((read_json(instance_path, "instance"), read_json(front_path, "front")))
    for name, why in missing.items():
        print(f"note: {name} not scored: {why}", file=sys.stderr)

    settings = EvaluationSettings(preferences=tuple(suite_preferences(suite_dir)),
                                  repeats=args.repeats, target_gap=args.target_gap,
                                  options=options)

    def seeds(method: str) -> int:
        return args.seeds if METHODS[method].is_seeded(options[method]) else 1

    units = [WorkUnit(instance, front, method, seed, settings)
             for method in methods for instance, front in documents
             for seed in range(seeds(method))]
    # the results appear whole or not at all; a second run into --out meanwhile is refused
    with ResultsDirectory(out, RESULTS_NAMES) as staging:
        _evaluate(units, args, settings, methods, missing, started, staging)
    print(f"{len(units)} units in {round(time.perf_counter() - started, 1)} s -> "
          f"{out}/report.md", file=sys.stderr)
    return 0


def _evaluate(units: list[WorkUnit], args: argparse.Namespace, settings: EvaluationSettings,
              methods: list[str], missing: dict[str, str], started: float,
              out: Path) -> None:
    """Run the units and write every table, plot and the report into ``out``."""
    try:
        records = _run(units, args)
    except ConnectionError as err:
        raise InputError(str(err)) from None

    units_table = units_frame(records)
    methods_table = method_frame(records, units_table)
    gaps = preference_frame(records, list(settings.preferences))
    kpis = kpi_frame(methods_table, units_table)
    tables = [quality_table(methods_table, "", "(step time, GPUs, cost)"),
              quality_table(methods_table, "mfu_", "(step time, 1/MFU, cost)"),
              time_table(methods_table, settings.target_gap), preference_table(gaps),
              kpi_table(kpis), reference_table(units_table)]
    if not args.quiet:
        print_tables(tables)

    provenance = {"command": command_line("evaluation.pareto_coverage"),
                  "versions": versions(), "suite": args.suite,
                  "settings": asdict(settings), "methods": methods, "missing": list(missing),
                  "workers": args.workers, "scheduler": args.scheduler,
                  "units": len(units), "finished": datetime.now(UTC).isoformat(timespec="seconds"),
                  "wall_time_s": round(time.perf_counter() - started, 1)}
    frames = {"units": units_table, "methods": methods_table,
              "preferences": gaps.reset_index(), "kpis": kpis, "points": _points_frame(records)}
    for table in TABLES:
        write_frame(frames[table], out, table)
    write_json(out / "records.json", strict({"provenance": provenance, "records": records}))
    figures = [*plots.front_plots(records, out / "plots"),
               plots.coverage_plot(records, out / "plots"),
               plots.latency_plot(records, out / "plots")]
    report = _report(tables, kpis, provenance, missing, figures, out)
    write_atomic(out / "report.md", lambda p: p.write_text(report))


def _run(units: list[WorkUnit], args: argparse.Namespace) -> list[dict]:
    if args.quiet:
        return run_units(units, args.workers, args.scheduler)
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    columns = ("[progress.description]{task.description}", BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn())
    with Progress(*columns, transient=False) as progress:
        task = progress.add_task("work units", total=len(units))
        return run_units(units, args.workers, args.scheduler,
                         lambda unit: progress.update(
                             task, advance=1, description=f"{unit.method} done"))


def _points_frame(records: list[dict]) -> pd.DataFrame:
    rows = [{"instance": r["instance"], "method": r["method"], "seed": r["seed"],
             "step_time_s": p[0], "gpus": p[1], "comm_cost": p[2]}
            for r in records for p in r["points"]]
    seen = set()
    for r in records:
        if r["instance"] not in seen:
            seen.add(r["instance"])
            rows += [{"instance": r["instance"], "method": REFERENCE, "seed": 0,
                      "step_time_s": p[0], "gpus": p[1], "comm_cost": p[2]}
                     for p in r["reference"]]
    return pd.DataFrame(rows)


def _report(tables: list[Table], kpis: pd.DataFrame, provenance: dict, missing: dict[str, str],
            figures: list[Path], out: Path) -> str:
    failing = kpis[kpis["pass"] == False]  # noqa: E712 (None means: does not apply)
    lines = ["# Methods against the exact Pareto fronts", "",
             f"`{provenance['command']}`: suite `{provenance['suite']}`, "
             f"{provenance['units']} work units, {provenance['wall_time_s']} s, "
             f"finished {provenance['finished']}.", ""]
    lines += [f"- `{name}`: {METHODS[name].description}" for name in provenance["methods"]]
    lines += [""]
    if missing:
        lines += [f"Not scored: {', '.join(missing)} ({'; '.join(missing.values())}).", ""]
    lines += [markdown(table) for table in tables]
    lines += ["### KPIs missed", ""]
    lines += [f"- {row['method']}: {row['name']} = {row['value']:.4g} (target "
              f"{row['target']})" for _, row in failing.iterrows()] or ["- none"]
    lines += ["", "### Plots", ""]
    lines += [f"![{path.stem}]({path.relative_to(out).as_posix()})" for path in figures]
    lines += ["", "### Provenance", "", "```json",
              json.dumps({k: v for k, v in provenance.items() if k != "settings"}, indent=1),
              "```", "", "Settings: `" + json.dumps(provenance["settings"]) + "`", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
