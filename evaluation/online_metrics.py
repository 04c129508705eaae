"""The online KPIs of a training run (seeds/003 topics 3 and 4), read from its record.

Each figure is a function of a :class:`~formulation.run_record.RunRecord` (and, for the
comparisons, of the oracle's and the static policy's runs on the same scenario):

* **goodput**: tokens trained per hour that no rollback took back (the run's last partial
  step counts pro rata); against the oracle (``oracle_loss``: the share it loses) and the
  static policy of the same planner (``static_gain``).
* **stability**: share of time training progresses (steps that were kept), outside the
  recovery from failures (from the end of the last step the restored checkpoint holds until
  the progress the failure took is regained: failures have their own KPIs). The seeds'
  KPI: >= 99 % under +-20 % load. ``progress_share`` is the same over the whole run,
  failures included.
* **adjustments** (planned switches): the throughput drop over ``ADJUSTMENT_WINDOW_S``
  from the triggering event or notice (or until the new plan runs, if later), against the
  lower of the rates before and after (a load that takes GPUs lowers both plans' rates; the
  drop is what the adjustment itself costs): the tokens short of ``rate x window``, over
  it, work discarded by a cut step counting as none (seeds: <= 10 %). Where the new plan
  is interrupted inside the window (a later change takes its GPUs), the shortfall is read
  up to the interruption: what comes after is not the adjustment's cost (stability and
  goodput count it). And the time to recover,
  training stopped for the cut-over (<= 20 s); the 95th percentile over the run.
* **failures**: from a failure to training resumed (``switch``, <= 5 min) and to the lost
  progress regained, the part of the step then in progress included (``interruption``,
  <= 10 min); the largest over the run.
* **WAN idle share**: share of step time the GPUs wait for the WAN (each step's time less
  the same plan's closed-form step time with a free WAN, or its share for a part of a step
  that a checkpoint or a cut inside it divides); ``idle_reduction`` is how much
  less than the static policy (seeds, under +-30 % bandwidth: >= 40 %; not defined where
  the static plan waits less than ``MIN_IDLE_SHARE``).
* **share error**: while a plan runs, the largest difference between a domain's share of
  the running plan's GPUs and its share in the plan last decided (a decided switch not yet
  made), time-weighted (seeds: <= 5 %).
* **decision latency**: measured wall time per decision (p50, p99, max) and how many
  decisions took longer than the bound the run was charged; ``coordination_s``, the time
  from an event to a plan across both levels of a decision, is its p99.
"""

from __future__ import annotations

import math

import numpy as np

from formulation.evaluator import evaluate_plans
from formulation.instance import Instance
from formulation.run_record import RunRecord

PROGRESS = ("step", "partial")
SEEN = PROGRESS + ("lost",)  # segments that trained, kept or not: throughput as seen then
WAN_FREE_FACTOR = 1e6  # bandwidth x this and no latency: a WAN that costs nothing
MIN_IDLE_SHARE = 0.01  # a static plan that hardly waits for the WAN leaves nothing to cut
ADJUSTMENT_WINDOW_S = 300.0
"""An adjustment's throughput is read over this window from its trigger (or until the new
plan runs, if later): a monitor's 5-minute rate, the sponsor scenario's tick."""


def goodput(record: RunRecord) -> float:
    """Tokens per hour that were kept."""
    kept = sum(s.tokens for s in record.segments if s.kind in PROGRESS and not s.rolled_back)
    return kept / record.horizon_s * 3600.0


def _overlap(a: float, b: float, windows: list[tuple[float, float]]) -> float:
    return sum(max(0.0, min(b, end) - max(a, start)) for start, end in windows)


def stability(record: RunRecord) -> tuple[float, float]:
    """(progressing share outside failure recoveries, progressing share overall)."""
    windows = [(i["rolled_back_from_s"],
                record.horizon_s if i["regained_s"] is None else i["regained_s"])
               for i in record.interruptions if i["cause"] == "failure"]
    progressing = [(s.start_s, s.end_s) for s in record.segments
                   if s.kind in PROGRESS and not s.rolled_back]
    merged = _merge(windows)
    total = sum(end - start for start, end in progressing)
    excluded = sum(end - start for start, end in merged)
    outside = total - sum(_overlap(a, b, merged) for a, b in progressing)
    span = record.horizon_s - excluded
    return (outside / span if span > 0 else math.nan), total / record.horizon_s


def _merge(windows: list[tuple[float, float]]) -> list[tuple[float, float]]:
    merged: list[list[float]] = []
    for start, end in sorted(windows):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [(a, b) for a, b in merged]


def tokens_between(record: RunRecord, a: float, b: float) -> float:
    """Tokens trained in [a, b) at each segment's own rate (kept or not, the step an
    interruption cut included: throughput as it was seen then)."""
    out = 0.0
    for s in record.segments:
        if s.kind in SEEN and s.end_s > s.start_s:
            out += s.tokens * _overlap(a, b, [(s.start_s, s.end_s)]) / (s.end_s - s.start_s)
    return out


def throughput(record: RunRecord, bin_s: float) -> np.ndarray:
    """Tokens per second in each ``bin_s`` bin of the run, at each segment's own rate (as
    :func:`tokens_between` reads them), in one pass over the segments."""
    bins = max(1, math.ceil(record.horizon_s / bin_s))
    out = np.zeros(bins)
    for s in record.segments:
        if s.kind not in SEEN or s.end_s <= s.start_s:
            continue
        rate = s.tokens / (s.end_s - s.start_s)
        for i in range(int(s.start_s // bin_s), min(bins, math.ceil(s.end_s / bin_s))):
            out[i] += rate * max(0.0, min(s.end_s, (i + 1) * bin_s) - max(s.start_s, i * bin_s))
    return out / bin_s


def adjustments(record: RunRecord) -> tuple[list[float], list[float]]:
    """(drop, recovery seconds) of every planned switch (module doc)."""
    drops, recoveries = [], []
    for switch in record.switches:
        start = switch["event_s"]
        end = min(record.horizon_s, max(switch["resume_s"], start + ADJUSTMENT_WINDOW_S))
        # the shortfall is the adjustment's up to an interruption of the new plan
        read = min([end] + [i["time_s"] for i in record.interruptions
                            if switch["resume_s"] <= i["time_s"] < end])
        after = next((s for s in record.segments if s.kind in PROGRESS
                      and s.start_s >= switch["resume_s"] and s.end_s > s.start_s), None)
        rate = switch["rate_before"] if after is None else \
            min(switch["rate_before"], after.tokens / (after.end_s - after.start_s))
        expected = rate * (end - start)
        short = rate * (read - start) - tokens_between(record, start, read)
        drops.append(max(0.0, short / expected) if expected > 0 else 0.0)
        recoveries.append(switch["resume_s"] - switch["stop_s"])
    return drops, recoveries


def failures(record: RunRecord) -> tuple[list[float], list[float]]:
    """(seconds to resumed training, seconds to progress regained) of every failure that
    stopped the plan (the horizon where it never happened)."""
    switch, interruption = [], []
    for i in record.interruptions:
        if i["cause"] != "failure":
            continue
        resumed = record.horizon_s if i["resumed_s"] is None else i["resumed_s"]
        regained = record.horizon_s if i["regained_s"] is None else i["regained_s"]
        switch.append(resumed - i["time_s"])
        interruption.append(regained - i["time_s"])
    return switch, interruption


def wan_idle_share(instance: Instance, record: RunRecord) -> float:
    """Share of step time spent waiting for the WAN (module doc)."""
    links = instance.links
    free_wan = instance.with_link_state(bandwidth_gbps=links.bandwidth_gbps * WAN_FREE_FACTOR,
                                        latency_ms=links.latency_ms * 0.0)
    if not record.plans:
        return math.nan
    unbound = evaluate_plans(free_wan, record.plans).step_time_s
    waiting = total = 0.0
    for s in record.segments:
        if s.kind in PROGRESS:  # a part of a step (a checkpoint or a cut inside it): its share
            length = s.end_s - s.start_s
            share = s.tokens / record.tokens_per_step
            waiting += max(0.0, length - share * float(unbound[s.plan]))
            total += length
    return waiting / total if total > 0 else math.nan


def share_error(instance: Instance, record: RunRecord) -> float:
    """Time-weighted largest gap between running and decided GPU shares (module doc)."""
    k = instance.num_domains

    def shares(plan) -> np.ndarray:
        used = plan.gpus_by_domain(k).astype(float)
        return used / used.sum()

    weighted = total = 0.0
    for s in record.segments:
        if s.kind not in PROGRESS or s.plan is None or s.end_s <= s.start_s:
            continue
        running = shares(record.plans[s.plan])
        # a switch decided before this segment ended and made after it
        pending = next((sw for sw in record.switches
                        if sw["event_s"] < s.end_s <= sw["stop_s"]), None)
        gap = 0.0 if pending is None else \
            float(np.abs(shares(record.plans[pending["plan"]]) - running).max())
        weighted += gap * (s.end_s - s.start_s)
        total += s.end_s - s.start_s
    return weighted / total if total > 0 else math.nan


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else math.nan


def run_kpis(instance: Instance, record: RunRecord) -> dict:
    """The KPIs of one run on its own (the comparisons: :func:`compare`)."""
    drops, recoveries = adjustments(record)
    to_resume, to_regain = failures(record)
    latencies = [d["latency_s"] for d in record.decisions]
    stable, progressing = stability(record)
    return {
        "goodput_tokens_per_h": goodput(record), "stability": stable,
        "progress_share": progressing, "decisions": len(record.decisions),
        "switches": len(record.switches),
        "interruptions": len(record.interruptions),
        "failures": len(to_resume),
        "adjustment_drop_p95": percentile(drops, 95),
        "adjustment_drop_mean": float(np.mean(drops)) if drops else math.nan,
        "recovery_s_p95": percentile(recoveries, 95),
        "failure_switch_s_max": max(to_resume, default=math.nan),
        "failure_interruption_s_max": max(to_regain, default=math.nan),
        "wan_idle_share": wan_idle_share(instance, record),
        "share_error": share_error(instance, record),
        "migrated_gb": sum(s["bytes"] for s in record.switches) / 1e9,
        "latency_s_p50": percentile(latencies, 50),
        "latency_s_p99": percentile(latencies, 99),
        "latency_s_max": max(latencies, default=math.nan),
        "over_bound": sum(d["latency_s"] > d["charged_s"] for d in record.decisions
                          if d["charged_s"] > 0),
        "coordination_s": percentile(latencies, 99),
    }


def compare(row: dict, oracle: dict | None, static: dict | None) -> dict:
    """The comparisons of a run's KPIs with the oracle's and the static policy's."""
    out = {"oracle_loss": math.nan, "static_gain": math.nan, "idle_reduction": math.nan}
    if row is oracle:
        return out
    if oracle and oracle["goodput_tokens_per_h"] > 0:
        out["oracle_loss"] = 1.0 - row["goodput_tokens_per_h"] / oracle["goodput_tokens_per_h"]
    if static is row:
        return out
    if static and static["goodput_tokens_per_h"] > 0:
        out["static_gain"] = row["goodput_tokens_per_h"] / static["goodput_tokens_per_h"] - 1
    if static and static["wan_idle_share"] >= MIN_IDLE_SHARE:
        out["idle_reduction"] = 1.0 - row["wan_idle_share"] / static["wan_idle_share"]
    return out
