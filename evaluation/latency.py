"""The latency protocol: decisions timed one at a time after a warm-up.

A decision is one call of a method on one instance state (batch size 1: no batching of
several instances into one call). Each work unit first makes one untimed warm-up decision
(imports, caches, JIT-like first-call costs), then ``repeats`` timed decisions with
``time.perf_counter``; the timed runs must return the same front as the warm-up.

Two kinds of decision, after the sponsor's KPI (<= 1 s inter-domain, <= 100 ms
intra-domain):

* inter-domain: the method on the whole instance;
* intra-domain: the method on :func:`one_domain_view`, the instance reduced to its domain
  with the most free GPUs, where all that is left to decide is what a lower level decides
  inside a domain (tp, recompute, stages, dp and micro-batch).

Time-to-target: the first time at which a method's hypervolume ratio to the exact front
reaches ``1 - target_gap``: from the per-generation log of an anytime method, or its
decision latency for a one-shot method whose front reaches the target.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

import numpy as np

from formulation.instance import Instance, Links

T = TypeVar("T")


def one_domain_view(instance: Instance) -> Instance:
    """The instance reduced to its domain with the most free GPUs (first on ties)."""
    k = int(np.argmax(instance.free_gpus))
    return instance.replace(name=f"{instance.name}/one-domain", domains=(instance.domains[k],),
                            links=Links.none(instance.links.eps), trace=None)


def timed_decisions(decide: Callable[[], T], repeats: int) -> tuple[list[T], list[float]]:
    """The results of the warm-up and of ``repeats`` timed decisions, and the timed
    decisions' wall times."""
    results = [decide()]
    latencies = []
    for _ in range(repeats):
        start = time.perf_counter()
        results.append(decide())
        latencies.append(time.perf_counter() - start)
    return results, latencies


def percentiles(latencies: list[float]) -> dict[str, float]:
    if not latencies:
        return {"p50": float("nan"), "p95": float("nan"), "p99": float("nan")}
    values = np.asarray(latencies, dtype=float)
    return {f"p{q}": float(np.percentile(values, q)) for q in (50, 95, 99)}


def time_to_target(anytime: list[tuple[float, float]], reference_hypervolume: float,
                   final_ratio: float, latency_s: float, target_gap: float) -> float:
    """Seconds until the hypervolume ratio first reaches ``1 - target_gap``; inf if never."""
    goal = (1 - target_gap) * reference_hypervolume
    for elapsed, hypervolume in anytime:
        if hypervolume >= goal * (1 - 1e-12):
            return float(elapsed)
    if not anytime and final_ratio >= 1 - target_gap - 1e-12:
        return float(latency_s)
    return float("inf")
