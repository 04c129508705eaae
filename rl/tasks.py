"""Training tasks for Hi-PPO: generated instance states and preference vectors.

Instances come from the benchmark's own generator with the bench suite's search space and
domain sizes, K = 5..20 domains (aws-10 up to its 10 regions), LLaMA-2 7B/13B/70B and all
three topologies, on seeds from ``SEED_OFFSET`` up, far from the committed suites' seeds
(100-200 and 1000-3400), which stay held out. A pool of ``pool`` base instances is drawn
once; every episode takes one of them and multiplies each WAN link's bandwidth by a factor
drawn uniformly within +-``bandwidth_swing`` (symmetric per link), so the agent sees the
network in many states. Preferences: half the episodes use one of the suites' fixed
vectors, the other half a Dirichlet(1, 1, 1) draw.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from formulation.instance import Instance
from instances.generate import generate_instance
from instances.suites import BENCH_SEARCH, PREFERENCES, SIZES
from rl.env import Task
from rl.masks import PlanRules

SEED_OFFSET = 1_000_000
TOPOLOGIES = ("random", "cn-hubs", "aws-10")
MODELS = ("7b", "13b", "70b")
AWS_REGIONS = 10


@dataclass(frozen=True)
class TaskSettings:
    """Where training instances come from."""

    min_domains: int = 5
    """Fewest domains of a generated instance."""
    max_domains: int = 20
    """Most domains (aws-10 instances stop at 10)."""
    pool: int = 64
    """Base instances drawn once; episodes perturb their bandwidth."""
    bandwidth_swing: float = 0.3
    """Each WAN link's bandwidth is scaled by a factor in [1 - swing, 1 + swing]."""
    instance: str | None = None
    """Train on this one instance file instead of a generated pool (bandwidth still swings)."""
    seed: int = 0
    """Seed of the pool; instance seeds start at SEED_OFFSET + 1000 * seed (a draw with no
    feasible plan is skipped)."""


def base_instances(settings: TaskSettings):
    """The pool of generated base instances (deterministic in the settings)."""
    if settings.instance is not None:
        return [Instance.load(settings.instance)]
    rng = np.random.default_rng(settings.seed)
    instances = []
    index = -1
    while len(instances) < settings.pool:
        index += 1
        topology = TOPOLOGIES[int(rng.integers(len(TOPOLOGIES)))]
        model = MODELS[int(rng.integers(len(MODELS)))]
        most = min(settings.max_domains, AWS_REGIONS) if topology == "aws-10" \
            else settings.max_domains
        domains = int(rng.integers(settings.min_domains, most + 1))
        gpu_range, free_share = SIZES.get((model, topology), SIZES[model, "random"])
        instance = generate_instance(
            domains, model, SEED_OFFSET + 1000 * settings.seed + index, topology,
            gpu_range=gpu_range, free_share_range=free_share, search=BENCH_SEARCH)
        if PlanRules(instance).pairs:  # some draws leave no room for the model at all
            instances.append(instance)
    return instances


class TaskSampler:
    """Callable ``rng -> Task`` for :class:`rl.env.PlanEnv`."""

    def __init__(self, settings: TaskSettings = TaskSettings()):
        self.settings = settings
        self.instances = base_instances(settings)

    def __call__(self, rng: np.random.Generator) -> Task:
        base = self.instances[int(rng.integers(len(self.instances)))]
        instance = perturb(base, rng, self.settings.bandwidth_swing)
        return Task(instance, draw_weights(rng))


def perturb(base: Instance, rng: np.random.Generator, swing: float) -> Instance:
    """``base`` with each WAN link's bandwidth scaled by a factor in [1 - swing, 1 + swing]
    (the same both ways)."""
    k = base.num_domains
    factor = np.triu(rng.uniform(1 - swing, 1 + swing, size=(k, k)), 1)
    factor = factor + factor.T + np.eye(k)
    return base.with_link_state(bandwidth_gbps=base.links.bandwidth_gbps * factor)


def draw_weights(rng: np.random.Generator) -> np.ndarray:
    """A preference vector: one of the suites' fixed ones or a Dirichlet(1, 1, 1) draw,
    with even odds."""
    if rng.random() < 0.5:
        return np.array(PREFERENCES[int(rng.integers(len(PREFERENCES)))])
    return rng.dirichlet(np.ones(3))
