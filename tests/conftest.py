"""Shared fixtures: one hand-built instance with round numbers, one generated instance and a
sample of feasible plans for it, and helpers to write JSON documents."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from formulation.costmodel import CostModel
from formulation.instance import Domain, Instance, Links, Training
from formulation.plan import Plan
from formulation.presets import GPUS, MODELS
from instances.generate import generate_instance
from instances.sample import feasible_sample
from instances.suites import SUITES_DIR, reference_front_path
from solvers.front import Front


@pytest.fixture(scope="session")
def hand_instance() -> Instance:
    """Three domains with hand-picked links, A100s and the SC'21 GPT-1.7B (a GPT shape, so the
    SPEC's closed-form FLOP and memory formulas apply exactly)."""
    domains = (
        Domain(name="alpha", gpus=64, free_gpus=32, intra_bandwidth_gbps=100.0,
               intra_latency_ms=0.2),
        Domain(name="beta", gpus=64, free_gpus=16, intra_bandwidth_gbps=400.0,
               intra_latency_ms=0.05),
        Domain(name="gamma", gpus=32, free_gpus=32, intra_bandwidth_gbps=200.0,
               intra_latency_ms=0.5),
    )
    links = Links(
        bandwidth_gbps=np.array([[0.0, 5.0, 2.0], [5.0, 0.0, 10.0], [2.0, 10.0, 0.0]]),
        latency_ms=np.array([[0.0, 30.0, 80.0], [30.0, 0.0, 50.0], [80.0, 50.0, 0.0]]),
        price_per_gb=np.array([[0.0, 0.02, 0.05], [0.02, 0.0, 0.08], [0.05, 0.08, 0.0]]),
    )
    return Instance(name="hand", gpu=GPUS["A100-80GB"], domains=domains, links=links,
                    model=MODELS["gpt-1.7b"],
                    training=Training(global_batch=64, zero_stage=1, attention="eager"))


@pytest.fixture(scope="session")
def cost(hand_instance: Instance) -> CostModel:
    return CostModel(hand_instance)


@pytest.fixture(scope="session")
def quick_front() -> tuple[Instance, Front]:
    """A committed quick-suite instance and its exact reference front."""
    path = SUITES_DIR / "quick" / "cn-hubs-k6-llama2-7b-s130.json"
    instance = Instance.load(path)
    return instance, Front.load(reference_front_path(path), instance)


@pytest.fixture(scope="session")
def generated() -> Instance:
    """A generated 6-domain LLaMA-2-7B scenario."""
    return generate_instance(6, "7b", 0)


@pytest.fixture(scope="session")
def sample_plans(generated: Instance) -> list[Plan]:
    plans = feasible_sample(generated, 24, seed=1, candidates=1500)
    assert len(plans) >= 10, "the generated instance should admit many feasible plans"
    return plans


@pytest.fixture
def write_json(tmp_path: Path) -> Callable[[str, Any], Path]:
    """Write a document (or raw text) to ``tmp_path / name`` and return the path."""
    def write(name: str, document: Any) -> Path:
        path = tmp_path / name
        path.write_text(document if isinstance(document, str) else json.dumps(document),
                        encoding="utf-8")
        return path

    return write


@pytest.fixture(scope="session")
def tiny_suite(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A suite directory of two tiny instances, each with its exact front beside it (HiGHS,
    about 2 s): cross-domain plans reach both fronts."""
    from instances.tiny import tiny_instance
    from solvers.exact import exact_front

    directory = tmp_path_factory.mktemp("tiny-suite")
    for instance in (tiny_instance(3, domains=4, layers=12, free_gpus=(1, 1, 1, 1)),
                     tiny_instance(1, domains=3, layers=6, free_gpus=(2, 2, 1))):
        instance.save(directory / f"{instance.name}.json")
        exact_front(instance).save(directory / f"{instance.name}.front.json", instance)
    return directory
