"""PNG plots of the evaluation (matplotlib, no screen needed).

* ``fronts-<instance>.png`` (the name made a safe file name, :func:`file_stem`): the
  exact front and every method's points (first seed) in the three 2-D projections of
  (step_time_s, gpus, comm_cost);
* ``coverage_vs_eps.png``: mean coverage over instances against the tolerance eps;
* ``latency_vs_quality.png``: mean hypervolume ratio against decision time per method,
  with the anytime curve of every anytime method and the exact solver at its wall time;
* ``timeline-<instance>.png`` (the online evaluation): throughput over time per policy.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from evaluation.methods import REFERENCE  # noqa: E402
from evaluation.units import EPS_CURVE  # noqa: E402
from formulation.outputs import write_figure  # noqa: E402

MARKERS = "os^vD<>pP*hX"
PROJECTIONS = ((0, 1), (0, 2), (1, 2))
LABELS = ("step time (s)", "GPUs", "cost per step (USD)")


def _save(figure, path: Path) -> None:
    path.parent.mkdir(exist_ok=True)  # the results directory's own plots/
    try:
        write_figure(path, figure, dpi=110)
    finally:
        plt.close(figure)


def file_stem(name: str) -> str:
    """A file name for an instance's name: letters (any script), digits, ``.``, ``-`` and
    ``_`` kept, the rest ``_``, at most 80 characters; a name that had to change gets a
    short hash of itself, so that two names never share a file."""
    stem = re.sub(r"[^\w.-]+", "_", name)[:80].lstrip(".") or "_"
    if stem != name:
        stem += "-" + hashlib.sha256(name.encode("utf-8")).hexdigest()[:8]
    return stem


def _methods(records: list[dict]) -> list[str]:
    return list(dict.fromkeys(r["method"] for r in records))


def front_plots(records: list[dict], directory: Path) -> list[Path]:
    paths = []
    methods = _methods(records)
    for instance in dict.fromkeys(r["instance"] for r in records):
        own = [r for r in records if r["instance"] == instance]
        reference = np.array(own[0]["reference"])
        figure, axes = plt.subplots(1, 3, figsize=(15, 4.6))
        for axis, (x, y) in zip(axes, PROJECTIONS, strict=True):
            axis.scatter(reference[:, x], reference[:, y], s=90, facecolors="none",
                         edgecolors="black", linewidths=1.5, label=REFERENCE, zorder=3)
            for index, method in enumerate(methods):
                if method == REFERENCE:  # drawn above as the reference
                    continue
                first = next((r for r in own if r["method"] == method), None)
                if first is None or not first["points"]:
                    continue
                points = np.array(first["points"])
                axis.scatter(points[:, x], points[:, y], s=22, alpha=0.75,
                             marker=MARKERS[index % len(MARKERS)], label=method)
            if x == 0:
                axis.set_xscale("log")
            axis.set_xlabel(LABELS[x] + (" (log)" if x == 0 else ""))
            axis.set_ylabel(LABELS[y])
            axis.grid(alpha=0.3)
        axes[0].legend(fontsize=7, loc="upper right")
        figure.suptitle(f"{instance}: exact front and methods (projections)")
        path = directory / f"fronts-{file_stem(instance)}.png"
        _save(figure, path)
        paths.append(path)
    return paths


def coverage_plot(records: list[dict], directory: Path) -> Path:
    figure, axis = plt.subplots(figsize=(7, 4.5))
    for index, method in enumerate(_methods(records)):
        curves = np.array([r["coverage_curve"] for r in records if r["method"] == method])
        axis.plot(100 * np.array(EPS_CURVE), 100 * curves.mean(axis=0),
                  marker=MARKERS[index % len(MARKERS)], markersize=4, label=method)
    axis.axhline(85, color="grey", linestyle="--", linewidth=1, label="KPI 85 %")
    axis.set_xlabel("tolerance eps (%)")
    axis.set_ylabel("Pareto coverage (%), mean over instances")
    axis.set_ylim(0, 102)
    axis.grid(alpha=0.3)
    axis.legend(fontsize=8)
    path = directory / "coverage_vs_eps.png"
    _save(figure, path)
    return path


def latency_plot(records: list[dict], directory: Path) -> Path:
    figure, axis = plt.subplots(figsize=(7, 4.5))
    for index, method in enumerate(_methods(records)):
        own = [r for r in records if r["method"] == method]
        latency = np.median([t for r in own for t in r["latency_s"]] or [np.nan])
        quality = np.mean([r["hv_ratio"] for r in own])
        if method == REFERENCE:  # drawn below at the solver's wall time
            continue
        marker = MARKERS[index % len(MARKERS)]
        dot = axis.scatter([latency], [quality], marker=marker, s=60, label=method, zorder=3)
        curves = [r["anytime"] for r in own if r["anytime"]]
        if curves:  # mean over runs, generation by generation
            length = min(len(c) for c in curves)
            elapsed = np.mean([[t for t, _ in c[:length]] for c in curves], axis=0)
            ratio = np.mean([[q for _, q in c[:length]] for c in curves], axis=0)
            axis.plot(elapsed, ratio, linewidth=1, alpha=0.7, color=dot.get_facecolor()[0])
    walls = [r["reference_wall_s"] for r in records if np.isfinite(r["reference_wall_s"])]
    if walls:
        axis.scatter([np.median(walls)], [1.0], marker="*", s=160, color="black",
                     label="exact (reference wall time)", zorder=4)
    axis.set_xscale("log")
    axis.set_xlabel("decision time (s, median; log)")
    axis.set_ylabel("hypervolume ratio, mean over instances")
    axis.grid(alpha=0.3, which="both")
    axis.legend(fontsize=8)
    path = directory / "latency_vs_quality.png"
    _save(figure, path)
    return path


def timeline_plot(result: dict, directory: Path) -> Path:
    """``timeline-<instance>.png``: throughput over time (tokens/s, mean per bin) of every
    policy, one panel per kind with the oracle dashed in each, failures marked."""
    timelines = result["timelines"]
    kinds = list(dict.fromkeys(name.split(":")[0] for name in timelines if ":" in name))
    figure, axes = plt.subplots(max(1, len(kinds)), 1, figsize=(9, 2.4 * max(1, len(kinds))),
                                sharex=True, squeeze=False)
    hours = (np.arange(len(next(iter(timelines.values())))) + 0.5) * result["bin_s"] / 3600
    for axis, kind in zip(axes[:, 0], kinds or [""], strict=True):
        if "oracle" in timelines:
            axis.plot(hours, timelines["oracle"], "k--", lw=0.8, label="oracle")
        for name, series in timelines.items():
            if name.split(":")[0] == kind:
                axis.plot(hours, series, lw=0.9, label=name.split(":", 1)[1])
        for failure in result["failures"]:
            axis.axvline(failure / 3600, color="red", lw=0.6, alpha=0.6)
        axis.set_ylabel(f"{kind}\ntokens/s")
        axis.legend(fontsize=6, loc="lower left", ncol=3)
    axes[-1, 0].set_xlabel("hours (red: failures)")
    figure.suptitle(result["instance"], fontsize=9)
    path = directory / f"timeline-{file_stem(result['instance'])}.png"
    _save(figure, path)
    return path
