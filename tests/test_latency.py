"""The latency protocol: warm-up then timed decisions, the one-domain view, time-to-target."""

from __future__ import annotations

import math

import numpy as np
import pytest

from evaluation.latency import one_domain_view, percentiles, time_to_target, timed_decisions
from formulation.instance import Instance
from instances.suites import SUITES_DIR
from solvers.baselines import baseline_front


@pytest.fixture(scope="module")
def instance() -> Instance:
    return Instance.load(SUITES_DIR / "quick" / "random-k8-llama2-7b-s157.json")


def test_warm_up_is_not_timed():
    calls = []
    results, latencies = timed_decisions(lambda: calls.append(len(calls)) or len(calls), 3)
    assert results == [1, 2, 3, 4] and len(latencies) == 3
    assert all(t >= 0 for t in latencies)
    assert timed_decisions(lambda: "once", 0) == (["once"], [])


def test_percentiles():
    values = list(np.arange(1, 101) / 100)
    figures = percentiles(values)
    assert figures["p50"] == pytest.approx(0.505)
    assert figures["p99"] == pytest.approx(np.percentile(values, 99))
    assert all(math.isnan(v) for v in percentiles([]).values())


def test_one_domain_view_keeps_the_roomiest_domain(instance: Instance):
    view = one_domain_view(instance)
    free = [d.free_gpus for d in instance.domains]
    assert view.num_domains == 1
    assert view.domains[0] == instance.domains[int(np.argmax(free))]
    assert view.model == instance.model and view.training == instance.training
    # every baseline can decide on it, and no plan there crosses the WAN
    front = baseline_front(view, "sailor")
    assert front.points and all(p.objectives[2] == 0 for p in front.points)


def test_time_to_target():
    anytime = [(0.1, 0.5), (0.2, 0.9), (0.3, 0.97)]
    assert time_to_target(anytime, 1.0, 0.97, 0.4, target_gap=0.05) == 0.3
    assert time_to_target(anytime, 1.0, 0.97, 0.4, target_gap=0.10) == 0.2
    assert time_to_target(anytime, 1.0, 0.97, 0.4, target_gap=0.01) == math.inf
    # a one-shot method reaches the target at its decision latency, or never
    assert time_to_target([], 1.0, 0.96, 0.4, target_gap=0.05) == 0.4
    assert time_to_target([], 1.0, 0.90, 0.4, target_gap=0.05) == math.inf
    # the anytime hypervolume is absolute: the target scales with the reference's
    assert time_to_target(anytime, 0.5, 0.0, 0.4, target_gap=0.0) == 0.1
