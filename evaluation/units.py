"""One work unit of the evaluation: one method on one instance with one seed.

:func:`run_unit` is a plain function of a picklable :class:`WorkUnit` that returns a flat
record of plain values, so that a local process pool and a Dask cluster run the same code
and the records of both compare equal (apart from the measured times).

The record holds, for the method's front against the instance's exact front:

* the indicators of :mod:`evaluation.metrics` in (step_time_s, gpus, comm_cost) and, prefixed
  ``mfu_``, in (step_time_s, 1/MFU, comm_cost);
* the scalarised optimality gap per preference vector of the suite, and the point the method
  deploys for each preference (its least J);
* feasibility, decision latencies (:mod:`evaluation.latency`), time-to-target;
* the per-instance values behind the sponsor's KPIs (:mod:`evaluation.kpis`) and the
  robustness of the deployed plans (:mod:`evaluation.robustness`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from evaluation import metrics
from evaluation.latency import one_domain_view, time_to_target, timed_decisions
from evaluation.methods import METHODS, MethodOptions, MethodRun, default_options
from evaluation.robustness import RobustnessSettings, bandwidth_loss, load_stability
from formulation.diloco import DilocoPlan
from formulation.instance import Instance
from formulation.reward import mfu_space
from solvers.baselines import baseline_references
from solvers.front import Front, fronts_agree

# the measured times of a record
TIMED = ("latency_s", "intra_latency_s", "front_wall_s", "time_to_target_s")
EPS_CURVE = tuple(round(0.005 * i, 3) for i in range(21))  # 0 .. 10 % for the plot


@dataclass(frozen=True)
class EvaluationSettings:
    """What every work unit measures, and how."""

    preferences: tuple[tuple[float, float, float], ...]
    """Preference vectors (w1, w2, w3) of the seeds' reward; fixed per suite."""
    repeats: int = 3
    """Timed decisions per unit after one warm-up."""
    target_gap: float = 0.05
    """Time-to-target: time until the hypervolume ratio reaches 1 - target_gap."""
    options: dict[str, MethodOptions] = field(default_factory=default_options)
    """Each method's options (:class:`evaluation.methods.MethodOptions`), by method name; a
    method not named here runs with its defaults."""
    robustness: RobustnessSettings = RobustnessSettings()
    trace_seed: int = 0
    """Seed of the bandwidth and load traces: the same traces for every method and seed."""


@dataclass(frozen=True)
class WorkUnit:
    """One method on one instance with one seed. The unit carries the instance and its
    reference front as JSON documents, so a remote worker needs no shared file system."""

    instance: dict
    front: dict
    method: str
    seed: int
    settings: EvaluationSettings


def _indicators(points: np.ndarray, reference: metrics.ReferenceSet, prefix: str) -> dict:
    out = {prefix + indicator.name: indicator.do(points, reference)
           for indicator in metrics.INDICATORS}
    out[f"{prefix}coverage_curve"] = [metrics.coverage(points, reference, eps)
                                      for eps in EPS_CURVE]
    return out


def _kpi_values(points: np.ndarray, references) -> dict:
    """Per-instance values of the KPIs that compare with the baseline plans."""
    out = {"time_reduction": math.nan, "utilisation_gain": math.nan,
           "cost_reduction": math.nan}
    if not len(points):
        return out
    fastest = float(points[:, 0].min())
    if references.single_domain_feasible:
        single = references.single_domain_objectives[0]
        out["time_reduction"] = 1 - fastest / single
        # cluster utilisation = W / (T peak free_total): its gain is T_single / T - 1
        out["utilisation_gain"] = single / fastest - 1
    oblivious_step, _, oblivious_cost = references.oblivious_objectives
    if oblivious_cost > 0:
        as_fast = points[points[:, 0] <= oblivious_step * (1 + metrics.RTOL)]
        # no plan as fast as the oblivious one: no saving shown at equal speed
        out["cost_reduction"] = 1 - float(as_fast[:, 2].min()) / oblivious_cost \
            if len(as_fast) else 0.0
    return out


def run_unit(unit: WorkUnit) -> dict:
    """Run the unit's method and score it (module doc)."""
    settings = unit.settings
    method = METHODS[unit.method]
    instance = Instance.from_dict(unit.instance)
    reference_front = Front.from_dict(unit.front, instance)
    reference = metrics.ReferenceSet.of_front(reference_front)
    bases = baseline_references(instance)
    scale = bases.scale
    mfu_reference = metrics.ReferenceSet.in_mfu_space(reference_front, scale)
    options = settings.options.get(unit.method) or method.options_type()

    def decide(state: Instance):
        return lambda: method.run(state, unit.seed, reference.normalisation
                                  if state is instance else None, options,
                                  settings.preferences)

    if method.is_reference:  # the reference front itself: nothing to run or time here
        outcomes = [MethodRun(reference_front, len(reference_front.points),
                              len(reference_front.points))]
        latencies = [float(reference_front.provenance.get("wall_time_s", math.nan))]
        intra: list[MethodRun] = []
        intra_latencies: list[float] = []
    else:
        outcomes, latencies = timed_decisions(decide(instance), settings.repeats)
        intra, intra_latencies = timed_decisions(decide(one_domain_view(instance)),
                                                 settings.repeats)
    front_wall = latencies
    if outcomes[-1].decision_latencies is not None:  # a call makes several decisions
        latencies = [t for o in outcomes[1:] for t in o.decision_latencies]
        intra_latencies = [t for o in intra[1:] for t in o.decision_latencies]
    outcome = outcomes[-1]  # a timed run: its anytime log is not slowed by a cold start
    front = outcome.front
    points = front.objectives

    record: dict = {
        "instance": instance.name, "domains": instance.num_domains,
        "model": instance.model.name, "method": unit.method, "seed": unit.seed,
        "reference_status": reference_front.status,
        "reference_points": len(reference_front.points),
        "reference_gap": (math.nan if reference_front.largest_gap is None
                          else reference_front.largest_gap),
        "reference_wall_s": reference_front.provenance.get("wall_time_s", math.nan),
        "points": points.tolist(), "reference": reference.objectives.tolist(),
        "decisions": outcome.decisions, "feasible": outcome.feasible,
        "front_decisions": (1 if outcome.decision_latencies is None
                            else len(outcome.decision_latencies)),
        "feasibility": outcome.feasible / outcome.decisions if outcome.decisions else 0.0,
        "repeatable": all(fronts_agree(front, other.front) for other in outcomes),
        "latency_s": latencies, "intra_latency_s": intra_latencies,
        "front_wall_s": front_wall,
        "changes_optimizer": any(isinstance(p.plan, DilocoPlan) for p in front.points),
        "t_base": scale.t_base, "c_base": scale.c_base,
        "single_domain_feasible": bases.single_domain_feasible,
    }
    record.update(_indicators(points, reference, ""))
    record.update(_indicators(mfu_space(points, scale) if len(points) else points,
                              mfu_reference, "mfu_"))
    record["preference_gaps"] = [metrics.preference_gap(points, reference.objectives, w, scale)
                                 for w in settings.preferences]
    record["median_gap"] = float(np.median(record["preference_gaps"]))

    wall = float(np.median(front_wall)) if front_wall else math.nan
    anytime = [(t, hv / reference.hypervolume) for t, hv in outcome.anytime]
    record["anytime"] = anytime
    record["time_to_target_s"] = time_to_target(
        outcome.anytime, reference.hypervolume, record["hv_ratio"], wall, settings.target_gap)

    record.update(_kpi_values(points, bases))
    chosen = sorted({metrics.chosen_point(points, w, scale) for w in settings.preferences}) \
        if len(points) else []
    traces = settings.trace_seed, settings.robustness
    losses = [bandwidth_loss(instance, front.points[i].plan, *traces) for i in chosen]
    stability = [load_stability(instance, front.points[i].plan, *traces) for i in chosen]
    record["deployed_points"] = chosen
    record["bandwidth_loss_worst"] = max(losses, default=math.nan)
    record["bandwidth_loss_mean"] = float(np.mean(losses)) if losses else math.nan
    record["load_stability_min"] = min(stability, default=math.nan)
    record["load_stability_mean"] = float(np.mean(stability)) if stability else math.nan
    return record


def without_times(record: dict) -> dict:
    """A record less what depends on the machine's speed: the same seed gives the same."""
    out = {key: value for key, value in record.items() if key not in TIMED}
    out["anytime"] = [hypervolume for _, hypervolume in record["anytime"]]
    return out
