"""Training tasks for Hi-PPO: generated instance states and preference vectors.

Instances come from the benchmark's own generator with the bench suite's search space and
domain sizes, K = 5..20 domains (aws-10 up to its 10 regions), LLaMA-2 7B/13B/70B and all
three topologies, on seeds from ``SEED_OFFSET`` up, far from the committed suites' seeds
(100-200 and 1000-3400), which stay held out. A pool of ``pool`` base instances is drawn
once; every episode takes one of them and multiplies each WAN link's bandwidth by a factor
drawn uniformly within +-``bandwidth_swing`` (symmetric per link), so the agent sees the
network in many states. Preferences: half the episodes use one of the suites' fixed
vectors, the other half a Dirichlet(1, 1, 1) draw. Budgets (:class:`rl.masks.Budgets`), each
drawn independently: a GPU budget in ``gpu_budget_share`` of the episodes, log-uniform
between the fewest GPUs any plan of the instance needs and its free GPUs; a cost budget in
``cost_budget_share``, 0 (no WAN traffic) a quarter of the time, else ``C_base`` times a
log-uniform factor in [0.01, 1.5]; a step-time cap in ``step_cap_share``, ``T_base`` times a
log-uniform factor in [0.5, 2]. A draw whose budgets no plan meets is drawn again.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from formulation.instance import Instance
from formulation.schema import InputError, check_ranges
from instances.generate import MAX_DOMAINS, MIN_DOMAINS, generate_instance
from instances.suites import BENCH_SEARCH, PREFERENCES, SIZES
from rl.env import InstanceCache, Task
from rl.masks import Budgets, PlanRules

SEED_OFFSET = 1_000_000
TOPOLOGIES = ("random", "cn-hubs", "aws-10")
MODELS = ("7b", "13b", "70b")
AWS_REGIONS = 10


TASK_RANGES = {"min_domains": (MIN_DOMAINS, MAX_DOMAINS),
               "max_domains": (MIN_DOMAINS, MAX_DOMAINS), "pool": (1, 100_000),
               "bandwidth_swing": (0.0, 0.99), "seed": (0, 4_000_000),
               "gpu_budget_share": (0.0, 1.0), "cost_budget_share": (0.0, 1.0),
               "step_cap_share": (0.0, 1.0)}
"""Bounds of :class:`TaskSettings`' fields: the generator's domain counts, a swing that
leaves every link some bandwidth, seeds whose instance seeds stay below 2^32."""


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
    gpu_budget_share: float = 0.5
    """Share of the episodes with a GPU budget."""
    cost_budget_share: float = 0.3
    """Share of the episodes with a traffic-cost budget."""
    step_cap_share: float = 0.1
    """Share of the episodes with a step-time cap."""

    def __post_init__(self):
        check_ranges(self, TASK_RANGES, "tasks.")
        if self.min_domains > self.max_domains:
            raise InputError(f"tasks.min_domains ({self.min_domains}) must be <= "
                             f"tasks.max_domains ({self.max_domains})")
        if self.instance is not None and not isinstance(self.instance, str):
            raise InputError("tasks.instance must be the path of an instance file")


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


@dataclass(frozen=True)
class BudgetRange:
    """What a base instance's budgets are drawn relative to."""

    least_gpus: int  # the fewest GPUs of any plan the masks admit
    free_gpus: int
    t_base: float
    c_base: float

    @staticmethod
    def of(instance: Instance) -> BudgetRange:
        cache = InstanceCache(instance)
        low, high = 1, int(cache.rules.free.sum())
        while low < high:  # bisection: a larger budget admits every plan a smaller one does
            middle = (low + high) // 2
            if cache.pairs_within(Budgets(gpus=middle)):
                high = middle
            else:
                low = middle + 1
        return BudgetRange(low, int(cache.rules.free.sum()), cache.scale.t_base,
                           cache.scale.c_base)


def draw_budgets(rng: np.random.Generator, settings: TaskSettings,
                 limits: BudgetRange) -> Budgets:
    """Budgets of one episode (module doc)."""
    gpus = cost = step_time = None
    if rng.random() < settings.gpu_budget_share and limits.free_gpus > limits.least_gpus:
        gpus = int(np.exp(rng.uniform(np.log(limits.least_gpus),
                                      np.log(limits.free_gpus + 1))))
    if rng.random() < settings.cost_budget_share:
        cost = 0.0 if rng.random() < 0.25 else \
            limits.c_base * float(np.exp(rng.uniform(np.log(0.01), np.log(1.5))))
    if rng.random() < settings.step_cap_share:
        step_time = limits.t_base * float(np.exp(rng.uniform(np.log(0.5), np.log(2.0))))
    return Budgets(gpus, cost, step_time)


class TaskSampler:
    """Callable ``rng -> Task`` for :class:`rl.env.PlanEnv` (which draws again a task whose
    budgets no plan meets)."""

    def __init__(self, settings: TaskSettings = TaskSettings()):
        self.settings = settings
        self.instances = base_instances(settings)
        self.limits = [BudgetRange.of(instance) for instance in self.instances]

    def __call__(self, rng: np.random.Generator) -> Task:
        index = int(rng.integers(len(self.instances)))
        instance = perturb(self.instances[index], rng, self.settings.bandwidth_swing)
        return Task(instance, draw_weights(rng),
                    draw_budgets(rng, self.settings, self.limits[index]))


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
