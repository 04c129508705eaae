"""Re-planning policies through dynamic scenarios: the online evaluation (issue 17).

    python -m evaluation.online [--suite quick|bench|full|DIR] [--hours H | --scenario FILE]
        [--policies KIND[:PLANNER] ...] [--planners NAME ...] [--seed S] [--costs FILE]
        [--out DIR] [--workers N] [--scheduler ADDRESS] [--match TEXT] [--quiet]
        [method flags: --checkpoint, --generations, ...]

For every instance of the suite, a scenario of the sponsor's dynamics over ``--hours``
(:func:`instances.scenarios.generate_scenario`, ``--seed``; or ``--scenario FILE``, a
recorded one, for a one-instance suite) is run by every policy (:mod:`evaluation.replanning`:
each kind of ``--policies`` with each planner of ``--planners``, or ``KIND:PLANNER``
items) and by the oracle, through the run simulator (:mod:`formulation.training_run`), at
the default costs of a change or a cluster's own (``--costs FILE``: some of the fields of
:class:`formulation.run_costs.RunCosts` as a JSON object).
One instance is one work unit, run in a local process pool (``--workers``) or on a Dask
cluster (``--scheduler``): the same numbers either way (the measured decision latencies
aside). Written into ``--out`` (default ``results-online/``): ``runs`` (instance x policy)
and ``policies`` (over the suite) as CSV and Parquet, ``records.json`` (with every run's
decisions, switches and interruptions), ``report.md`` with the KPI table, and a timeline
plot per instance in ``plots/``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd

from evaluation import plots
from evaluation.methods import (
    METHODS,
    REFERENCE,
    MethodOptions,
    Nsga2Options,
    add_method_arguments,
    check_method_flags,
    check_replan_flags,
    options_from_args,
    unavailable_methods,
)
from evaluation.online_metrics import compare, run_kpis, throughput
from evaluation.replanning import (
    KINDS,
    ORACLE,
    Oracle,
    Planner,
    PolicySettings,
    ReplanningPolicy,
)
from evaluation.report import Table, markdown, millis, number, percent, print_tables, write_frame
from evaluation.runner import add_where_arguments
from formulation.instance import Instance
from formulation.outputs import ResultsDirectory, output_directory, strict, write_atomic, write_json
from formulation.run_costs import DEFAULT_COSTS, RunCosts
from formulation.scenario import Scenario
from formulation.schema import (
    SEED,
    CliParser,
    InputError,
    number_arg,
    read_json,
    run_cli,
)
from formulation.training_run import scenario_step_times, simulate_run
from instances.scenarios import MAX_HOURS, ScenarioSettings, generate_scenario
from instances.suites import SUITES, SUITES_DIR, suite_paths
from solvers.front import command_line, versions
from solvers.parallel import map_tasks

DEFAULT_PLANNERS = ("hippo", "sailor", "greedy", "exact", "nsga2")
ONLINE_NSGA2 = Nsga2Options(generations=10, population=24, descent=0)
"""NSGA-II's options online unless flags say otherwise: one decision within its bound."""
TABLES = ("runs", "policies")
RESULTS_NAMES = ({f"{t}.{kind}" for t in TABLES for kind in ("csv", "parquet")}
                 | {"records.json", "report.md", "plots"})
TIMELINE_BIN_S = 60.0

# name, column, target (a bound), at most (True) or at least, formatter
KPIS = [
    ("stability under load", "stability", 0.99, False, percent),
    ("goodput lost to the oracle", "oracle_loss", 0.10, True, percent),
    ("adjustment drop (p95)", "adjustment_drop_p95", 0.10, True, percent),
    ("recovery after adjustment (p95)", "recovery_s_p95", 20.0, True, millis),
    ("failure to resumed (max)", "failure_switch_s_max", 300.0, True, millis),
    ("failure interruption (max)", "failure_interruption_s_max", 600.0, True, millis),
    ("WAN idle vs static", "idle_reduction", 0.40, False, percent),
    ("GPU share error", "share_error", 0.05, True, percent),
    ("decision latency (p99)", "latency_s_p99", 1.0, True, millis),
    ("coordination (p99)", "coordination_s", 2.0, True, millis),
]
WORST = {"recovery_s_p95", "failure_switch_s_max", "failure_interruption_s_max",
         "latency_s_p99", "coordination_s"}
"""Over the suite: the worst instance's figure (per-event bounds); the others: the mean."""


@dataclass(frozen=True)
class OnlineUnit:
    """One instance, its scenario and every policy to run on it (plain, picklable data)."""

    instance: dict
    scenario: dict
    policies: tuple[tuple[str, str], ...]  # (kind, planner)
    options: dict[str, MethodOptions]
    settings: PolicySettings
    costs: RunCosts


def run_online_unit(unit: OnlineUnit) -> dict:
    """Every policy's run and KPIs on one instance, and the timelines for the plots."""
    instance = Instance.from_dict(unit.instance)
    scenario = Scenario.from_dict(unit.scenario, instance)
    steps = scenario_step_times(instance, scenario, unit.costs)  # shared by every run
    runs = {ORACLE: simulate_run(instance, scenario, Oracle(unit.options.get("exact")),
                                 unit.costs, steps)}
    for kind, planner in unit.policies:
        policy = ReplanningPolicy(kind, Planner(planner, unit.options[planner]),
                                  unit.settings, unit.costs)
        runs[policy.name] = simulate_run(instance, scenario, policy, unit.costs, steps)
    kpis = {name: run_kpis(instance, record) for name, record in runs.items()}
    rows = []
    for name in runs:
        kind, _, planner = name.partition(":")
        static = kpis.get(f"static:{planner}") if planner else None
        row = {"instance": instance.name, "policy": name, "kind": kind,
               "planner": planner or ORACLE, **kpis[name],
               **compare(kpis[name], kpis[ORACLE], static)}
        rows.append(row)
    timelines = {name: throughput(record, TIMELINE_BIN_S).tolist()
                 for name, record in runs.items()}
    failures = sorted({e.time_s for e in scenario.events
                       if e.kind.value in ("node_failure", "domain_failure")})
    logs = {name: {"decisions": r.decisions, "switches": r.switches,
                   "interruptions": r.interruptions} for name, r in runs.items()}
    return {"instance": instance.name, "rows": rows, "timelines": timelines,
            "bin_s": TIMELINE_BIN_S, "failures": failures, "events": len(scenario.events),
            "logs": logs}


DEFAULT_HOURS = 6.0  # simulated hours of a drawn scenario


def _parser() -> argparse.ArgumentParser:
    parser = CliParser(prog="python -m evaluation.online",
                       description="Score re-planning policies through dynamic scenarios.")
    parser.add_argument("--suite", default="quick", help="quick, bench, full or a directory "
                        "of instance JSON files")
    parser.add_argument("--hours", type=number_arg(1e-3, MAX_HOURS), default=None,
                        help=f"simulated hours of training (default {DEFAULT_HOURS:g}; with "
                        "--scenario, its horizon)")
    parser.add_argument("--policies", nargs="+", default=list(KINDS), metavar="KIND[:PLANNER]",
                        help=f"policy kinds ({', '.join(KINDS)}), each with every planner, or "
                             "KIND:PLANNER items (default: every kind); the oracle always runs")
    parser.add_argument("--planners", nargs="+", default=list(DEFAULT_PLANNERS),
                        metavar="NAME", help="planners of the kinds named alone (default: "
                        f"{' '.join(DEFAULT_PLANNERS)})")
    parser.add_argument("--scenario", type=Path, default=None,
                        help="replay this scenario file (JSON or CSV) instead of drawing one "
                             "(a one-instance suite: use --match)")
    parser.add_argument("--seed", type=SEED, default=0,
                        help="one seed of the drawn scenarios (default 0)")
    parser.add_argument("--costs", type=Path, default=None,
                        help="what changes cost on your cluster: a JSON object of some of "
                             "formulation.run_costs.RunCosts's fields, e.g. {\"storage_gbps\": "
                             "100, \"load_notice_s\": 30} (default: its defaults)")
    add_where_arguments(parser, "results-online")
    parser.add_argument("--match", action="append", default=[],
                        help="only instances whose name contains this (repeatable)")
    defaults = PolicySettings()
    for flag, field, low, high, text in (
            ("--headroom", "headroom", 0.0, 0.95, "share of each domain's free GPUs the "
             "re-planning kinds leave unused"),
            ("--threshold", "threshold", 0.0, 10.0, "event-triggered: the predicted slowdown "
             "or move of free GPUs that triggers a decision"),
            ("--period", "period_s", 1.0, 1e7, "periodic: seconds between decisions"),
            ("--payback", "payback_s", 0.0, 1e7, "seconds within which a migration must pay"),
            ("--max-stop", "max_stop_s", 0.0, 1e7, "seconds a switch may stop training "
             "(a plan that must go exceeds it only where no candidate is that quick)"),
            ("--checkpoint-interval", "checkpoint_interval_s", 1.0, 1e7,
             "seconds between checkpoints (at least; each waits until the last is "
             "durable)")):
        parser.add_argument(flag, dest=field, type=number_arg(low, high),
                            default=getattr(defaults, field),
                            help=f"{text} (default {getattr(defaults, field):g})")
    add_method_arguments(parser)
    parser.add_argument("--quiet", action="store_true", help="no progress bar or tables")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    return run_cli(lambda: evaluate_online(args))


def _policies(args: argparse.Namespace, missing: dict[str, str]) -> list[tuple[str, str]]:
    out = []
    for item in args.policies:
        kind, _, planner = item.partition(":")
        if kind not in KINDS:
            raise InputError(f"--policies: unknown kind {kind!r}; choose from "
                             f"{', '.join(KINDS)} (the oracle always runs)")
        for name in [planner] if planner else args.planners:
            method = METHODS.get(name)
            if method is None or not method.replans:
                able = [n for n, m in METHODS.items() if m.replans]
                raise InputError(f"--planners: {name!r} cannot re-plan; choose from "
                                 f"{', '.join(able)}")
            if name in missing:
                raise InputError(f"--planners: {name} is not available: {missing[name]}")
            if (kind, name) not in out:
                out.append((kind, name))
    return out


def _instances(args: argparse.Namespace) -> list[Path]:
    if args.suite in SUITES:
        paths = suite_paths(args.suite)
    else:
        directory = Path(args.suite)
        if not directory.is_dir():
            raise InputError(f"--suite: {args.suite!r} is neither one of {list(SUITES)} nor "
                             "a directory")
        paths = sorted(p for p in directory.glob("*.json") if p.name != "manifest.json"
                       and not p.name.endswith(".front.json"))
    paths = [p for p in paths if not args.match or any(m in p.stem for m in args.match)]
    if not paths:
        raise InputError(f"--suite {args.suite!r}: no instance"
                         + (f" matches {args.match}" if args.match else " JSON files"))
    return paths


def evaluate_online(args: argparse.Namespace) -> int:
    started = time.perf_counter()
    if args.scenario is not None and args.hours is not None:
        raise InputError("--hours: a replayed --scenario runs for its own horizon_s")
    if args.hours is None:
        args.hours = DEFAULT_HOURS
    options = options_from_args(args)
    if all(getattr(args, f) is None for f in ("generations", "population", "descent")):
        options["nsga2"] = ONLINE_NSGA2
    policies = _policies(args, unavailable_methods(options))
    check_method_flags(args, [REFERENCE, *(planner for _, planner in policies)])
    check_replan_flags(args, [planner for _, planner in policies])
    option_inputs = [path for o in options.values() for path in o.inputs()]
    asked = Path(args.suite)
    inputs = [asked if asked.is_dir() else SUITES_DIR / args.suite, args.scenario,
              args.costs, *option_inputs]
    costs = DEFAULT_COSTS if args.costs is None else RunCosts.load(args.costs)
    out = output_directory(args.out, inputs=inputs)
    paths = _instances(args)
    if args.scenario is not None and len(paths) != 1:
        raise InputError(f"--scenario replays the events of one instance; the suite has "
                         f"{len(paths)} (choose one with --match)")
    settings = PolicySettings(**{f.name: getattr(args, f.name)
                                 for f in dataclasses.fields(PolicySettings)})
    units, names = [], {}
    for path in paths:  # bad input fails here, before any work
        instance = Instance.load(path)
        if instance.name in names:
            raise InputError(f"instances {str(names[instance.name])!r} and {str(path)!r} are "
                             f"both named {instance.name!r}")
        names[instance.name] = path
        scenario = Scenario.load(args.scenario, instance) if args.scenario is not None \
            else generate_scenario(instance, args.seed, ScenarioSettings(hours=args.hours))
        try:  # the run samples the scenario every trace_interval_s
            scenario.samples(costs.trace_interval_s)
        except InputError as err:
            source = "" if args.costs is None else \
                f" (trace_interval_s of costs {str(args.costs)!r})"
            raise InputError(f"{args.scenario or instance.name}: {err}{source}") from None
        if args.scenario is not None:
            args.hours = scenario.horizon_s / 3600.0  # what the report says was run
        units.append(OnlineUnit(read_json(path, "instance"), scenario.to_dict(),
                                tuple(policies), options, settings, costs))
    with ResultsDirectory(out, RESULTS_NAMES) as staging:
        results = _run(units, args)
        _write(results, units, args, staging, started)
    print(f"{len(units)} instances x {len(policies) + 1} policies in "
          f"{round(time.perf_counter() - started, 1)} s -> {out}/report.md", file=sys.stderr)
    return 0


def _run(units: list[OnlineUnit], args: argparse.Namespace) -> list[dict]:
    try:
        if args.quiet:
            return map_tasks(run_online_unit, units, args.workers, args.scheduler)
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

        with Progress("[progress.description]{task.description}", BarColumn(),
                      MofNCompleteColumn(), TimeElapsedColumn()) as progress:
            task = progress.add_task("instances", total=len(units))
            return map_tasks(run_online_unit, units, args.workers, args.scheduler,
                             on_done=lambda i, r: progress.update(task, advance=1))
    except ConnectionError as err:
        raise InputError(str(err)) from None


def policy_frame(runs: pd.DataFrame) -> pd.DataFrame:
    """Each policy over the suite: the mean of each instance's figure, the worst for the
    per-event bounds (:data:`WORST`), and whether each KPI is met."""
    numeric = [c for c in runs.columns if c not in ("instance", "policy", "kind", "planner")]
    rows = []
    for policy, group in runs.groupby("policy", sort=False):
        row = {"policy": policy, "kind": group["kind"].iloc[0],
               "planner": group["planner"].iloc[0], "instances": len(group)}
        for column in numeric:
            values = group[column].dropna()
            row[column] = (values.max() if column in WORST else values.mean()) \
                if len(values) else math.nan
        for _, column, target, at_most, _ in KPIS:
            value = row[column]
            row[f"meets_{column}"] = None if not math.isfinite(value) else \
                bool(value <= target if at_most else value >= target)
        rows.append(row)
    return pd.DataFrame(rows)


def kpi_table(policies: pd.DataFrame) -> Table:
    header = ["policy", "goodput (Gtok/h)", *(name for name, *_ in KPIS)]
    rows = []
    for _, row in policies.iterrows():
        cells = [row["policy"], number(row["goodput_tokens_per_h"] / 1e9, 3)]
        for _, column, _, _, fmt in KPIS:
            met = row[f"meets_{column}"]
            cells.append(fmt(row[column]) + ("" if met is None else " ✓" if met else " ✗"))
        rows.append(cells)
    targets = "; ".join(f"{name} {'<=' if at_most else '>='} {fmt(target)}"
                        for name, _, target, at_most, fmt in KPIS)
    return Table("Online KPIs over the suite (✓ met, ✗ missed)", header, rows,
                 note=f"Targets: {targets}. Mean over instances; the worst instance for "
                      "recovery, failures, latency and coordination.")


def activity_table(policies: pd.DataFrame) -> Table:
    columns = [("decisions", "decisions", number), ("switches", "switches", number),
               ("interruptions", "interruptions", number), ("failures hit", "failures", number),
               ("migrated GB", "migrated_gb", number), ("WAN idle", "wan_idle_share", percent),
               ("progress (all)", "progress_share", percent),
               ("vs static", "static_gain", percent),
               ("latency p50", "latency_s_p50", millis),
               ("over bound", "over_bound", number)]
    rows = [[row["policy"], *(fmt(row[key]) if fmt is not number else number(row[key], 1)
                              for _, key, fmt in columns)] for _, row in policies.iterrows()]
    return Table("What each policy did (mean per instance)", ["policy",
                 *(label for label, _, _ in columns)], rows)


def _write(results: list[dict], units: list[OnlineUnit], args: argparse.Namespace,
           out: Path, started: float) -> None:
    runs = pd.DataFrame([row for result in results for row in result["rows"]])
    policies = policy_frame(runs)
    tables = [kpi_table(policies), activity_table(policies)]
    if not args.quiet:
        print_tables(tables)
    provenance = {"command": command_line("evaluation.online"), "versions": versions(),
                  "suite": args.suite, "hours": args.hours, "seed": args.seed,
                  "scenario": None if args.scenario is None else str(args.scenario),
                  "costs_file": None if args.costs is None else str(args.costs),
                  "policies": [f"{k}:{p}" for k, p in units[0].policies],
                  "settings": asdict(units[0].settings), "costs": asdict(units[0].costs),
                  "options": {name: asdict(o) for name, o in units[0].options.items()},
                  "workers": args.workers, "scheduler": args.scheduler,
                  "finished": datetime.now(UTC).isoformat(timespec="seconds"),
                  "wall_time_s": round(time.perf_counter() - started, 1)}
    write_frame(runs, out, "runs")
    write_frame(policies, out, "policies")
    write_json(out / "records.json", strict({"provenance": provenance, "results": results}))
    figures = [plots.timeline_plot(r, out / "plots") for r in results]
    lines = ["# Re-planning policies through dynamic scenarios", "",
             f"`{provenance['command']}`: suite `{args.suite}`, {len(results)} instances, "
             f"{args.hours:g} h each, {provenance['wall_time_s']} s, finished "
             f"{provenance['finished']}.", ""]
    lines += [markdown(table) for table in tables]
    lines += ["### Timelines", ""]
    lines += [f"![{path.stem}]({path.relative_to(out).as_posix()})" for path in figures]
    lines += ["", "### Provenance", "", "```json", json.dumps(provenance, indent=1), "```", ""]
    write_atomic(out / "report.md", lambda p: p.write_text("\n".join(lines)))


if __name__ == "__main__":
    sys.exit(main())
