"""From work-unit records to the tables of the report: per method, per preference, KPIs.

Averaging: a seeded method's values are first averaged over its seeds per instance, then
over instances, so every instance weighs alike. Latency percentiles pool every timed
decision of a method. The sponsor's KPIs (seeds/001 and seeds/003 topic 3) are listed in
:data:`KPIS` with their targets and how each is measured here.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from evaluation.latency import percentiles
from evaluation.metrics import INDICATORS

# Columns of one record that hold one number per unit.
QUALITY = [indicator.name for indicator in INDICATORS]
SCALARS = (QUALITY + [f"mfu_{name}" for name in QUALITY]
           + ["median_gap", "feasibility", "time_reduction", "utilisation_gain",
              "cost_reduction", "bandwidth_loss_worst", "bandwidth_loss_mean",
              "load_stability_min", "load_stability_mean"])


def units_frame(records: list[dict]) -> pd.DataFrame:
    """One row per unit: its identity, its scalar metrics and its latency figures."""
    rows = []
    for r in records:
        row = {key: r[key] for key in ("instance", "domains", "model", "method", "seed",
                                        "reference_status", "reference_points")}
        row["points"] = len(r["points"])
        row.update({key: r[key] for key in SCALARS})
        row.update({"decisions": r["decisions"], "feasible": r["feasible"],
                    "repeatable": r["repeatable"], "changes_optimizer": r["changes_optimizer"],
                    "latency_median_s": float(np.median(r["latency_s"]))
                    if r["latency_s"] else math.nan,
                    "intra_latency_median_s": float(np.median(r["intra_latency_s"]))
                    if r["intra_latency_s"] else math.nan,
                    "time_to_target_s": r["time_to_target_s"],
                    "reference_wall_s": r["reference_wall_s"],
                    "reference_gap": r["reference_gap"]})
        rows.append(row)
    return pd.DataFrame(rows)


def per_instance(units: pd.DataFrame) -> pd.DataFrame:
    """Seeded units averaged per (method, instance)."""
    numeric = [c for c in units.columns if c not in ("instance", "method", "model",
                                                     "reference_status", "seed")]
    return units.groupby(["method", "instance"], sort=False)[numeric].mean().reset_index()


def method_frame(records: list[dict], units: pd.DataFrame) -> pd.DataFrame:
    """One row per method: mean metrics over instances, pooled latency percentiles."""
    instances = per_instance(units)
    rows = []
    for method, group in instances.groupby("method", sort=False):
        own = [r for r in records if r["method"] == method]
        row = {"method": method, "instances": len(group),
               # instances where every seed of the method found no feasible plan
               "no_plan": int((group["points"] == 0).sum()),
               **{key: float(group[key].mean()) for key in SCALARS}}
        row["feasibility"] = (sum(r["feasible"] for r in own)
                              / max(1, sum(r["decisions"] for r in own)))
        row.update({f"latency_{k}_s": v for k, v in
                    percentiles([t for r in own for t in r["latency_s"]]).items()})
        row.update({f"intra_latency_{k}_s": v for k, v in
                    percentiles([t for r in own for t in r["intra_latency_s"]]).items()})
        row["front_decisions"] = float(np.mean([r.get("front_decisions", 1) for r in own]))
        row["front_wall_median_s"] = float(np.median([t for r in own
                                                      for t in r["front_wall_s"]]))
        reached = np.array([r["time_to_target_s"] for r in own])
        row["target_reached"] = float(np.isfinite(reached).mean())
        row["time_to_target_median_s"] = float(np.median(reached))
        row["changes_optimizer"] = bool(group["changes_optimizer"].any())
        rows.append(row)
    return pd.DataFrame(rows)


def preference_frame(records: list[dict], preferences: list[tuple]) -> pd.DataFrame:
    """Median over instances of the scalarised gap, per method and preference."""
    rows = []
    for r in records:
        for w, gap in zip(preferences, r["preference_gaps"], strict=True):
            rows.append({"method": r["method"], "instance": r["instance"], "seed": r["seed"],
                         "preference": "/".join(f"{x:.2g}" for x in w), "gap": gap})
    frame = pd.DataFrame(rows)
    per = frame.groupby(["method", "preference", "instance"], sort=False)["gap"].mean()
    return per.groupby(["method", "preference"], sort=False).median().unstack(sort=False)


@dataclass(frozen=True)
class Kpi:
    key: str
    name: str
    target: str
    how: str  # how it is measured here
    value: Callable[[pd.Series], float]  # from a row of the method frame
    passes: Callable[[float], bool]


KPIS = (
    Kpi("training_time", "training time vs single-domain", ">= 25 % shorter",
        "1 - T(fastest plan) / T(fastest single-domain plan), mean over instances where "
        "the model fits one domain", lambda row: row["time_reduction"],
        lambda v: v >= 0.25),
    Kpi("utilisation", "cross-domain utilisation vs single-domain", ">= 35 % higher",
        "cluster utilisation (useful FLOP/s over all free GPUs) of the fastest plan over the "
        "single-domain one, minus 1; mean over the same instances",
        lambda row: row["utilisation_gain"], lambda v: v >= 0.35),
    Kpi("comm_cost", "communication cost vs network-oblivious plan", ">= 30 % lower",
        "1 - C / C(oblivious plan), C = least cost among plans at least as fast as the "
        "oblivious plan (0 where there is none); mean over instances",
        lambda row: row["cost_reduction"], lambda v: v >= 0.30),
    Kpi("latency_inter", "decision latency, inter-domain", "p99 <= 1 s",
        "p99 over timed decisions on the whole instance, after a warm-up",
        lambda row: row["latency_p99_s"], lambda v: v <= 1.0),
    Kpi("latency_intra", "decision latency, intra-domain", "p99 <= 100 ms",
        "p99 over timed decisions on the instance reduced to its largest domain",
        lambda row: row["intra_latency_p99_s"], lambda v: v <= 0.1),
    Kpi("coverage", "Pareto coverage", ">= 85 %",
        "share of exact points matched within 2 % in every objective, mean over instances",
        lambda row: row["coverage_0.02"], lambda v: v >= 0.85),
    Kpi("robustness", "throughput loss, bandwidth +-30 %", "< 10 %",
        "1F1B simulation over seeded bandwidth traces, worst deployed plan, worst instance",
        lambda row: row["bandwidth_loss_worst_max"], lambda v: v < 0.10),
    Kpi("stability", "stability under +-20 % load", ">= 99 %",
        "share of trace intervals in which the deployed plans keep their GPUs, mean",
        lambda row: row["load_stability_mean"], lambda v: v >= 0.99),
)


def kpi_frame(methods: pd.DataFrame, units: pd.DataFrame) -> pd.DataFrame:
    """One row per (KPI, method): value, target, pass."""
    worst = per_instance(units).groupby("method", sort=False)["bandwidth_loss_worst"].max()
    rows = []
    for _, row in methods.iterrows():
        row = row.copy()
        row["bandwidth_loss_worst_max"] = worst[row["method"]]
        for kpi in KPIS:
            value = float(kpi.value(row))
            rows.append({"kpi": kpi.key, "name": kpi.name, "method": row["method"],
                         "value": value, "target": kpi.target,
                         # a value that does not apply (intra-domain latency of a front
                         # read from disk) is neither a pass nor a failure
                         "pass": bool(kpi.passes(value)) if np.isfinite(value) else None,
                         "how": kpi.how})
    return pd.DataFrame(rows)
