"""Demonstrations and behaviour cloning: Hi-PPO's warm start before PPO.

PPO from random weights settles on small single-domain plans: a random multi-domain chain
over slow WAN links is so much slower than one domain that the speed term punishes
exploring it, and the entropy collapses before the policy finds the good chains. So the
trainer first clones demonstrations (as DQfD and DAPG do), then improves on them with PPO.

Demonstrations come from the cheap planners of :mod:`solvers.baselines` (``experts``; the
Sailor-like DP alone proposes several hundred plans per instance in about 0.1 s). For each
base instance of the training pool, ``states`` bandwidth draws (the tasks' +-30 % swing);
for each state the experts' plans are pooled and evaluated once, and for every preference
vector (the suites' seven fixed ones and ``random_preferences`` Dirichlet draws) the
``polish`` best of them are improved by local search (:mod:`solvers.local_search`, on the
same reward), and the best plan that the masks can build becomes a demonstration: the
observations :class:`rl.env.PlanEnv` shows while :func:`rl.env.plan_actions` builds it.
Budgeted demonstrations teach the budget sweep of :meth:`rl.scheduler.Scheduler.front`: for
``budget_levels`` GPU counts of the pooled plans' front, the fastest plan within that GPU
budget (preference (1, 0, 0): the epsilon-constraint step), and for ``cost_levels`` of its
points the fastest plan within its GPUs and a cost budget (its cost, or 0), each polished
within the budgets.
On the bench suite's held-out instances with K = 5..10 the polish takes the median
scalarised gap of the chosen plan to the exact optimum from 5.1 % to 1.7 %
(``python scripts/expert_gaps.py``). The choice is by the reward the agent is trained on,
so cloning it is a start, not a cap.

:func:`clone` fits the policy to the demonstrations' actions (cross-entropy over the masked
logits) and both value heads to their discounted rewards, holding out ``holdout`` of the
episodes to report how often the greedy policy picks the expert's action.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

import numpy as np
import torch

from formulation.evaluator import evaluate_plans
from formulation.instance import Instance
from formulation.plan import Plan
from formulation.reward import reward
from formulation.schema import InputError, check_ranges
from instances.suites import PREFERENCES
from rl.env import PHASES, PlanEnv, plan_actions
from rl.features import CONTEXT
from rl.masks import NO_BUDGETS, Budgets
from rl.networks import OBS_KEYS, HiPPOPolicy, as_tensors
from rl.tasks import perturb
from solvers.baselines import METHODS as BASELINES
from solvers.front import nondominated_mask
from solvers.local_search import local_search
from solvers.parallel import worker_pool

EPISODE_KEYS = ("edge_features", "adjacency")  # the same on every step of an episode
STEP_KEYS = tuple(key for key in OBS_KEYS if key not in EPISODE_KEYS)
CANDIDATES = 32  # best-rewarded expert plans tried, in order, until one is buildable


IMITATION_RANGES = {"states": (1, 1000), "random_preferences": (0, 10_000),
                    "polish": (0, 1000), "epochs": (1, 10_000),
                    "learning_rate": (1e-12, 1.0), "minibatch_size": (1, 10_000_000),
                    "holdout": (0.0, 0.5), "budget_levels": (0, 1000),
                    "cost_levels": (0, 1000), "workers": (1, 1024)}
"""Bounds of :class:`ImitationSettings`' fields."""


@dataclass(frozen=True)
class ImitationSettings:
    """Where the demonstrations come from and how they are cloned."""

    experts: tuple[str, ...] = ("sailor", "greedy", "single-domain")
    """Planners of solvers.baselines whose pooled plans the demonstrations choose from."""
    states: int = 2
    """Bandwidth draws per base instance of the training pool."""
    random_preferences: int = 9
    """Dirichlet(1, 1, 1) preference vectors per state, besides the seven fixed ones."""
    polish: int = 8
    """Best expert plans per preference that local search improves (0: none)."""
    epochs: int = 10
    """Passes over the demonstrations."""
    learning_rate: float = 1e-3
    """Adam step size of cloning."""
    minibatch_size: int = 256
    """Decisions per minibatch."""
    holdout: float = 0.05
    """Share of the demonstration episodes kept out of cloning to measure it."""
    budget_levels: int = 6
    """GPU budgets per state demonstrated (front GPU counts of the pooled plans)."""
    cost_levels: int = 2
    """Cost budgets per state demonstrated (at front points of the pooled plans)."""
    workers: int = 2
    """Processes that replay demonstrations (1: in this process)."""

    def __post_init__(self):
        check_ranges(self, IMITATION_RANGES, "imitation.")
        if not self.experts:
            raise InputError("imitation.experts must name at least one planner")
        unknown = [name for name in self.experts if name not in BASELINES]
        if unknown:
            raise ValueError(f"imitation.experts: unknown planner {unknown[0]!r}; choose "
                             f"from {', '.join(BASELINES)}")


@dataclass
class Demonstrations:
    """Decisions of the demonstration episodes; the per-episode observation parts are
    stored once per episode and gathered by ``episode``."""

    steps: dict[str, np.ndarray]  # STEP_KEYS -> (N, ...)
    episode_parts: dict[str, np.ndarray]  # EPISODE_KEYS -> (E, ...)
    episode: np.ndarray  # (N,) episode of each decision
    actions: np.ndarray  # (N,)
    returns: np.ndarray  # (N,) the episode's reward discounted to the decision
    rewards: np.ndarray  # (E,) each episode's reward

    def __len__(self) -> int:
        return len(self.actions)

    def observations(self, index: np.ndarray) -> dict[str, torch.Tensor]:
        parts = {key: self.steps[key][index] for key in STEP_KEYS}
        parts.update({key: self.episode_parts[key][self.episode[index]]
                      for key in EPISODE_KEYS})
        return as_tensors(parts)

    @staticmethod
    def concatenate(parts: list[Demonstrations]) -> Demonstrations:
        offsets = np.cumsum([0] + [len(p.rewards) for p in parts[:-1]])
        return Demonstrations(
            {key: np.concatenate([p.steps[key] for p in parts]) for key in STEP_KEYS},
            {key: np.concatenate([p.episode_parts[key] for p in parts])
             for key in EPISODE_KEYS},
            np.concatenate([p.episode + offset for p, offset in zip(parts, offsets,
                                                                     strict=True)]),
            np.concatenate([p.actions for p in parts]),
            np.concatenate([p.returns for p in parts]),
            np.concatenate([p.rewards for p in parts]))


def expert_plans(instance: Instance, experts: tuple[str, ...]) -> list[Plan]:
    """The experts' plans for one instance state, without repeats."""
    plans: dict[Plan, None] = {}
    for name in experts:
        plans.update(dict.fromkeys(BASELINES[name](instance).plans))
    return list(plans)


def demonstrate(base: Instance, settings: ImitationSettings, swing: float, gamma: float,
                seed: int) -> Demonstrations | None:
    """The demonstrations of one base instance (module doc); None if it yields none."""
    rng = np.random.default_rng(seed)
    env = PlanEnv()
    steps = {key: [] for key in STEP_KEYS}
    parts = {key: [] for key in EPISODE_KEYS}
    episode, actions, returns, rewards = [], [], [], []
    for _ in range(settings.states):
        instance = perturb(base, rng, swing)
        preferences = [np.array(w, dtype=float) for w in PREFERENCES]
        preferences += list(rng.dirichlet(np.ones(3), size=settings.random_preferences))
        plans = expert_plans(instance, settings.experts)
        if not plans:
            continue
        result = evaluate_plans(instance, plans)
        env.reset(options={"instance": instance})
        scale = env.cache.scale
        replays: dict[tuple, tuple | None] = {}  # a plan chosen for several tasks
        tasks = [(w, NO_BUDGETS) for w in preferences]
        tasks += budget_tasks(result, settings, rng)
        for weights, budgets in tasks:
            candidates, value = choices(instance, plans, result, weights, scale,
                                        settings.polish, budgets.limits())
            chosen = best_buildable(env, instance, candidates, value, budgets, replays)
            if chosen is None:
                continue
            observations, plan_actions_ = replays[candidates[chosen], budgets]
            count, earned = len(plan_actions_), float(value[chosen])
            for observation in observations:
                for key in STEP_KEYS:
                    item = observation[key]
                    if key == "context":  # the replay ran with neutral weights
                        item = item.copy()
                        item[CONTEXT["weights"]] = weights
                    steps[key].append(np.asarray(item))
            for key in EPISODE_KEYS:
                parts[key].append(observations[0][key])
            episode += [len(rewards)] * count
            actions += plan_actions_
            returns += [earned * gamma ** (count - 1 - t) for t in range(count)]
            rewards.append(earned)
    if not rewards:
        return None
    return Demonstrations({key: np.stack(v) for key, v in steps.items()},
                          {key: np.stack(v) for key, v in parts.items()},
                          np.array(episode), np.array(actions), np.array(returns),
                          np.array(rewards))


def budget_tasks(result, settings: ImitationSettings,
                 rng: np.random.Generator) -> list[tuple[np.ndarray, Budgets]]:
    """Budgeted tasks of one state (module doc): GPU budgets at front GPU counts of the
    pooled plans, cost budgets at front points, all with preference (1, 0, 0)."""
    feasible = np.flatnonzero(result.admissible)
    if not len(feasible):
        return []
    objectives = result.objectives[feasible]
    front = objectives[nondominated_mask(objectives)]
    speed = np.array([1.0, 0.0, 0.0])
    levels = np.unique(front[:, 1]).astype(int)
    chosen = rng.choice(levels, size=min(settings.budget_levels, len(levels)), replace=False)
    tasks = [(speed, Budgets(gpus=int(n))) for n in sorted(chosen)]
    priced = front[front[:, 2] > 0]
    for _ in range(settings.cost_levels if len(priced) else 0):
        point = priced[int(rng.integers(len(priced)))]
        cost = 0.0 if rng.random() < 0.5 else float(point[2])
        tasks.append((speed, Budgets(gpus=int(point[1]), cost=cost)))
    return tasks


def choices(instance: Instance, plans: list[Plan], result, weights: np.ndarray, scale,
            polish: int, limits: np.ndarray | None = None) -> tuple[list[Plan], np.ndarray]:
    """The candidate plans for one preference and their rewards (-inf: infeasible, which
    includes exceeding a soft constraint, or beyond ``limits``): the experts' plans, and the
    local optima reached from the ``polish`` best of them."""
    limits = np.full(3, np.inf) if limits is None else limits
    within = result.admissible & np.all(result.objectives <= limits * (1 + 1e-12), axis=1)
    value = np.where(within, reward(result.objectives, weights, scale), -np.inf)
    polished = [local_search(instance, plans[i], weights, scale, limits=limits)
                for i in np.argsort(-value, kind="stable")[:polish] if np.isfinite(value[i])]
    return ([*plans, *(plan for plan, _ in polished)],
            np.concatenate([value, [r for _, r in polished]]))


def best_buildable(env: PlanEnv, instance: Instance, candidates: list[Plan],
                   value: np.ndarray, budgets: Budgets, replays: dict) -> int | None:
    """Index of the best-rewarded feasible candidate the masks can build under ``budgets``
    (among the ``CANDIDATES`` best), replayed into ``replays``; None if there is none."""
    for index in np.argsort(-value, kind="stable")[:CANDIDATES]:
        if not np.isfinite(value[index]):
            return None
        key = (candidates[index], budgets)
        if key not in replays:
            replays[key] = replay(env, instance, candidates[index], budgets)
        if replays[key] is not None:
            return int(index)
    return None


def replay(env: PlanEnv, instance: Instance, plan: Plan,
           budgets: Budgets = NO_BUDGETS) -> tuple[list, list[int]] | None:
    """The observations met while building ``plan`` under ``budgets``, and the actions;
    None where the masks cannot build it."""
    observation, _ = env.reset(options={"instance": instance, "budgets": budgets})
    actions = plan_actions(env.cache, plan, env.budgets)
    if actions is None:
        return None
    observations = []
    for action in actions:
        observations.append(observation)
        observation, _, terminated, _, info = env.step(action)
        if info.get("invalid_action"):  # plan_actions checked every segment: a bug
            raise RuntimeError(f"{instance.name}: a demonstration left the action mask")
    if not terminated or info["plan"] != plan:
        raise RuntimeError(f"{instance.name}: a demonstration did not rebuild its plan")
    return observations, actions


def demonstrations(instances: list[Instance], settings: ImitationSettings, swing: float,
                   gamma: float, seed: int, progress: bool = False) -> Demonstrations:
    """Demonstrations of every base instance; instance ``i`` draws its states and
    preferences from seed ``(seed, i)``, so the result does not depend on ``workers``."""
    jobs = [(base, settings, swing, gamma, [seed, i]) for i, base in enumerate(instances)]
    if settings.workers > 1 and len(jobs) > 1:
        with worker_pool(settings.workers) as pool:
            parts = list(_bar(pool.map(demonstrate, *zip(*jobs, strict=True), chunksize=2),
                              len(jobs), progress))
    else:
        parts = [demonstrate(*job) for job in _bar(jobs, len(jobs), progress)]
    parts = [p for p in parts if p is not None]
    if not parts:
        raise InputError("imitation: no demonstrations (the experts found no plan the "
                         "masks can rebuild on any training instance)")
    return Demonstrations.concatenate(parts)


def _bar(items, total: int, enabled: bool):
    if not enabled:
        return items
    from tqdm import tqdm

    return tqdm(items, total=total, unit="instance", desc="demonstrations", file=sys.stderr)


def clone(policy: HiPPOPolicy, demos: Demonstrations, settings: ImitationSettings,
          vf_coef: float, max_grad_norm: float, seed: int, progress=None) -> dict:
    """Behaviour cloning (module doc); returns the held-out action accuracy per phase and
    the last epoch's losses."""
    generator = torch.Generator().manual_seed(seed)
    episodes = len(demos.rewards)
    held = torch.randperm(episodes, generator=generator)[:int(settings.holdout * episodes)]
    held_out = np.isin(demos.episode, held.numpy())
    train_index = torch.as_tensor(np.flatnonzero(~held_out))
    actions = torch.as_tensor(demos.actions)
    returns = torch.as_tensor(demos.returns, dtype=torch.float32)
    optimizer = torch.optim.Adam(policy.parameters(), lr=settings.learning_rate, eps=1e-5)
    stats: dict[str, float] = {}
    for epoch in range(settings.epochs):
        order = train_index[torch.randperm(len(train_index), generator=generator)]
        total, value_total, batches = 0.0, 0.0, 0
        for start in range(0, len(order), settings.minibatch_size):
            batch = order[start:start + settings.minibatch_size].numpy()
            log_prob, _, value = policy.evaluate_actions(demos.observations(batch),
                                                         actions[batch])
            policy_loss = -log_prob.mean()
            value_loss = 0.5 * (value - returns[batch]).pow(2).mean()
            optimizer.zero_grad()
            (policy_loss + vf_coef * value_loss).backward()
            torch.nn.utils.clip_grad_norm_(policy.parameters(), max_grad_norm)
            optimizer.step()
            total, value_total, batches = (total + policy_loss.item(),
                                           value_total + value_loss.item(), batches + 1)
        stats = {"epoch": epoch + 1, "clone_loss": total / batches,
                 "clone_value_loss": value_total / batches}
        if progress is not None:
            progress(stats)
    stats.update(accuracy(policy, demos, np.flatnonzero(held_out)))
    stats.update(decisions=len(demos), episodes=episodes,
                 held_out_episodes=int(len(held)))
    return stats


def accuracy(policy: HiPPOPolicy, demos: Demonstrations, index: np.ndarray) -> dict:
    """Share of the decisions ``index`` where the greedy policy takes the expert's action,
    overall and per phase."""
    if not len(index):
        return {}
    hits = []
    with torch.no_grad():
        for start in range(0, len(index), 1024):
            batch = index[start:start + 1024]
            logits, _ = policy(demos.observations(batch), value=False)
            hits.append(logits.argmax(-1).numpy() == demos.actions[batch])
    hit = np.concatenate(hits)
    phase = demos.steps["phase"][index]
    out = {"held_out_accuracy": float(hit.mean())}
    for number, name in enumerate(PHASES):
        if (phase == number).any():
            out[f"held_out_accuracy_{name}"] = float(hit[phase == number].mean())
    return out
