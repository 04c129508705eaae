"""Tables of the evaluation, rendered once for the terminal (rich) and once as Markdown.

A :class:`Table` is a title, a header and rows of already formatted strings; both
renderings read the same object, so the terminal and the report never disagree.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from evaluation.metrics import INDICATORS
from evaluation.summary import KPIS
from formulation.outputs import write_atomic


@dataclass(frozen=True)
class Table:
    title: str
    header: list[str]
    rows: list[list[str]]
    note: str = ""


def percent(value: float) -> str:
    return "inf" if value == math.inf else "-" if not math.isfinite(value) else \
        f"{100 * value:.1f} %"


def number(value: float, digits: int = 3) -> str:
    return "inf" if value == math.inf else "-" if not math.isfinite(value) else \
        f"{value:.{digits}f}"


def millis(value: float) -> str:
    return "-" if not math.isfinite(value) else f"{1000 * value:.1f} ms" if value < 1 \
        else f"{value:.2f} s"


def quality_table(methods: pd.DataFrame, prefix: str, space: str) -> Table:
    columns: list[tuple[str, str, Callable[[float], str]]] = [
        (indicator.label, indicator.name, percent if indicator.share else number)
        for indicator in INDICATORS]
    rows = []
    for _, row in methods.iterrows():
        name = row["method"] + (" †" if row["changes_optimizer"] else "")
        cells = [name, str(row["instances"]), str(row["no_plan"])]
        cells += [fmt(row[prefix + key]) for _, key, fmt in columns]
        if not prefix:
            cells += [percent(row["median_gap"]), percent(row["feasibility"])]
        rows.append(cells)
    header = ["method", "inst", "no plan", *(label for label, _, _ in columns)]
    if not prefix:
        header += ["gap med", "feasible"]
    return Table(f"Quality against the exact fronts in {space}", header, rows,
                 "Means over instances (seeds averaged first); a method with no feasible plan "
                 "on an instance (\"no plan\") scores coverage 0 and infinite distances "
                 "there. † changes the optimiser (DiLoCo): outside the exact front's plan "
                 "space, so it can beat it.")


def time_table(methods: pd.DataFrame, target_gap: float) -> Table:
    rows = [[row["method"], millis(row["latency_p50_s"]), millis(row["latency_p95_s"]),
             millis(row["latency_p99_s"]), millis(row["intra_latency_p99_s"]),
             f"{row['front_decisions']:.0f}", millis(row["front_wall_median_s"]),
             millis(row["time_to_target_median_s"]), percent(row["target_reached"])]
            for _, row in methods.iterrows()]
    return Table("Decision latency and time-to-target",
                 ["method", "p50", "p95", "p99", "intra p99", "decisions per front",
                  "per front (median)", "to target (median)", "target reached"], rows,
                 f"One decision = one call on one instance state (batch size 1), after a "
                 f"warm-up: a front for NSGA-II and the baselines, one plan under one "
                 f"preference and one set of budgets for Hi-PPO (its front is a budget "
                 f"sweep: decisions per front, mean over instances). Intra: the instance "
                 f"reduced to its largest domain. Target: hypervolume ratio >= "
                 f"{1 - target_gap:.2f}.")


def preference_table(gaps: pd.DataFrame) -> Table:
    rows = [[method, *(percent(v) for v in values)] for method, values in gaps.iterrows()]
    return Table("Scalarised optimality gap per preference (w1/w2/w3), median over instances",
                 ["method", *map(str, gaps.columns)], rows,
                 "J = w1 T/T_base + w2 (1 - MFU) + w3 C/C_base; gap = J(best plan) / J* - 1.")


def kpi_table(kpis: pd.DataFrame) -> Table:
    methods = list(dict.fromkeys(kpis["method"]))
    rows = []
    for kpi in KPIS:
        cells = [kpi.name, kpi.target]
        for method in methods:
            hit = kpis[(kpis["kpi"] == kpi.key) & (kpis["method"] == method)].iloc[0]
            value = (millis(hit["value"]) if kpi.key.startswith("latency")
                     else percent(hit["value"]))
            verdict = "n/a" if hit["pass"] is None else "pass" if hit["pass"] else "FAIL"
            cells.append(value if hit["pass"] is None else f"{value} {verdict}")
        rows.append(cells)
    notes = "\n".join(f"- {kpi.name}: {kpi.how}" for kpi in KPIS)
    return Table("Sponsor KPIs", ["KPI", "target", *methods], rows, notes)


def reference_table(units: pd.DataFrame) -> Table:
    """Per instance, what the methods were scored against: the committed front's status, its
    points, its largest per-point gap (a best-known front's points are bounded, not proven)
    and the solver's wall time."""
    rows = []
    for instance, group in units.groupby("instance", sort=False):
        row = group.iloc[0]
        rows.append([instance, row["reference_status"], str(int(row["reference_points"])),
                     percent(row["reference_gap"]), number(row["reference_wall_s"], 1)])
    return Table("Reference fronts", ["instance", "status", "points", "largest gap",
                                      "solver s"], rows,
                 "exact: every point proven optimal; best_known: the sweep did not finish, "
                 "each point carries its certified bound, and a method's coverage is measured "
                 "against points that may still be improved by up to the largest gap.")


def print_tables(tables: list[Table]) -> None:
    from rich.console import Console
    from rich.table import Table as RichTable

    console = Console(width=None if sys.stdout.isatty() else 200)
    for table in tables:
        rich_table = RichTable(title=table.title, title_justify="left")
        for i, name in enumerate(table.header):
            rich_table.add_column(name, justify="left" if i == 0 else "right")
        for row in table.rows:
            rich_table.add_row(*row)
        console.print(rich_table)


def markdown(table: Table) -> str:
    lines = [f"### {table.title}", "", "| " + " | ".join(table.header) + " |",
             "|" + "|".join("---" for _ in table.header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in table.rows]
    if table.note:
        lines += ["", table.note]
    return "\n".join(lines) + "\n"


def write_frame(frame: pd.DataFrame, directory: Path, name: str) -> None:
    """``name.csv`` and ``name.parquet``."""
    write_atomic(directory / f"{name}.csv", lambda p: frame.to_csv(p, index=False))
    write_atomic(directory / f"{name}.parquet", lambda p: frame.to_parquet(p, index=False))
