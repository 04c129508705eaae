"""The plan-building episode as a Gymnasium environment (Hi-PPO's world).

One episode builds one plan for one instance state (the instance with its current link
bandwidth and latency and its free GPUs) and one preference vector ``w``. Every step has a
phase, named in the observation; all phases share one ``Discrete(ACTIONS)`` space with an
``action_mask`` (:mod:`rl.masks`: every finished plan is feasible, no state is a dead end):

========  =======  ==========================================================  ==========
phase     level    decision                                                   action
========  =======  ==========================================================  ==========
PAIR      upper    data-parallel degree and micro-batch                       pair code
DOMAIN    upper    the next domain of the chain, building back to front       domain
LAYERS    upper    the layers that domain takes (its share of the model)      layers - 1
OPTION    lower    tensor parallelism and recompute inside that domain        option code
SPLIT     lower    how many pipeline stages the domain's layers form          stages - 1
========  =======  ==========================================================  ==========

Pairs and options have fixed codes, the same on every instance whatever its search space:
``(dp - 1) * MAX_MICRO_BATCH + micro_batch - 1`` and ``(tp - 1) * 3 + recompute mode``
(none, selective, full), so an action means one (dp, micro-batch) or (tp, recompute)
everywhere. The agent offers dp up to ``MAX_DP`` and micro-batches up to
``MAX_MICRO_BATCH``; a search space's larger values are not offered.

After SPLIT the segment is placed; the chain stops by itself when no layers are left (the
masks make "stop" implicit, so it is never premature). The reward comes at the end: the
seeds' ``R = w1 R_eff + w2 R_util - w3 R_cost`` (SPEC section 4) of the evaluator's
objectives, normalised by the single-domain and oblivious baselines, minus
``multipliers . constraint excess`` for the soft constraints (WAN share cap, cost budget),
whose multipliers the trainer raises by dual ascent. An action outside the mask (only a
caller that ignores the mask sends one) costs -1 and changes nothing; the ``INVALID_LIMIT``-th
such action of an episode truncates it, without a plan.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import gymnasium as gym
import numpy as np

from formulation.evaluator import evaluate_plans
from formulation.instance import RECOMPUTE_MODES, Instance
from formulation.plan import Plan
from formulation.reward import reward
from rl.masks import BuildState, PlanRules, Segment
from solvers.baselines import baseline_references

PAIR, DOMAIN, LAYERS, OPTION, SPLIT = range(5)
PHASES = ("pair", "domain", "layers", "option", "split")
MAX_DOMAINS = 20
ACTIONS = 128  # >= pair codes, domains, layers (LLaMA-3-405B has 126), option codes, stages
MAX_DP, MAX_MICRO_BATCH = 16, 8  # pair codes: MAX_DP * MAX_MICRO_BATCH <= ACTIONS
NODE_FEATURES, EDGE_FEATURES, CONTEXT_FEATURES = 12, 4, 24
SOFT_CONSTRAINTS = ("wan_cap", "cost_budget")
INVALID_LIMIT = 16
WEIGHTS = slice(5, 8)  # where the preference vector sits in the context features
FEATURE_BOUND = 1e3  # features are scaled to O(1); the bound only keeps the space finite


class NoFeasiblePlan(ValueError):
    """The instance admits no plan the agent can build (the model fits nowhere)."""


@dataclass
class Task:
    """What one episode plans for: an instance state and a preference vector."""

    instance: Instance
    weights: np.ndarray  # (3,) w1 efficiency, w2 utilisation, w3 cost


def pair_code(dp: int, micro_batch: int) -> int | None:
    """The PAIR action of a (dp, micro-batch) pair; None beyond the agent's range."""
    if not (1 <= dp <= MAX_DP and 1 <= micro_batch <= MAX_MICRO_BATCH):
        return None
    return (dp - 1) * MAX_MICRO_BATCH + micro_batch - 1


def option_code(tp: int, recompute: str) -> int:
    """The OPTION action of a (tp, recompute) option."""
    return (tp - 1) * len(RECOMPUTE_MODES) + RECOMPUTE_MODES.index(recompute)


class InstanceCache:
    """What depends only on an instance's domains, model and search space: the masks' rules
    and the reward scale (computed once; a bandwidth or latency change keeps them, since
    memory caps, GPUs, T_base and the oblivious plan's cost do not depend on the links)."""

    def __init__(self, instance: Instance):
        k = instance.num_domains
        if k > MAX_DOMAINS:
            raise ValueError(f"{instance.name}: {k} domains, the agent handles <= {MAX_DOMAINS}")
        self.rules = PlanRules(instance)
        # action codes of the offered pairs (None: out of the agent's range) and options
        self.pair_codes = [pair_code(t.dp, t.micro_batch) for t in self.rules.pairs]
        self.pair_of_code = {c: i for i, c in enumerate(self.pair_codes) if c is not None}
        self.option_codes = [[option_code(*o) for o in t.options] for t in self.rules.pairs]
        self.scale = baseline_references(instance).scale
        self.node_mask = np.zeros(MAX_DOMAINS, dtype=np.float32)
        self.node_mask[:k] = 1
        self.gpus = np.array([d.gpus for d in instance.domains], dtype=np.float32)
        self.intra = np.array([d.intra_bandwidth_gbps for d in instance.domains],
                              dtype=np.float32)

    @staticmethod
    def key(instance: Instance) -> tuple:
        return (instance.name, tuple(d.free_gpus for d in instance.domains),
                instance.model.name, instance.search, instance.constraints)


def link_features(instance: Instance) -> tuple[np.ndarray, np.ndarray]:
    """Edge features (bandwidth in log10 Gbit/s, latency / 100 ms, price x 10 USD/GB, 1) and
    the adjacency of the domain graph, padded to MAX_DOMAINS."""
    k, links = instance.num_domains, instance.links
    edges = np.zeros((MAX_DOMAINS, MAX_DOMAINS, EDGE_FEATURES), dtype=np.float32)
    real = ~np.eye(k, dtype=bool)
    edges[:k, :k, 0] = np.where(real, np.log10(np.maximum(links.bandwidth_gbps, 1e-3)), 0)
    edges[:k, :k, 1] = np.where(real, links.latency_ms / 100.0, 0)
    edges[:k, :k, 2] = np.where(real, links.price_per_gb * 10.0, 0)
    edges[:k, :k, 3] = real
    adjacency = np.zeros((MAX_DOMAINS, MAX_DOMAINS), dtype=np.float32)
    adjacency[:k, :k] = real
    return edges, adjacency


def observation_space() -> gym.spaces.Dict:
    def features(*shape: int) -> gym.spaces.Box:
        return gym.spaces.Box(-FEATURE_BOUND, FEATURE_BOUND, shape, np.float32)

    def flags(*shape: int) -> gym.spaces.Box:
        return gym.spaces.Box(0, 1, shape, np.float32)

    return gym.spaces.Dict({
        "node_features": features(MAX_DOMAINS, NODE_FEATURES),
        "node_mask": flags(MAX_DOMAINS),
        "edge_features": features(MAX_DOMAINS, MAX_DOMAINS, EDGE_FEATURES),
        "adjacency": flags(MAX_DOMAINS, MAX_DOMAINS),
        "context": features(CONTEXT_FEATURES),
        "phase": gym.spaces.Discrete(len(PHASES)),
        "current_domain": gym.spaces.Discrete(MAX_DOMAINS),
        "action_mask": gym.spaces.MultiBinary(ACTIONS),
    })


class PlanEnv(gym.Env):
    """Build one feasible plan per episode (module doc).

    ``tasks`` draws the next task from the environment's generator; ``reset(options=
    {"instance": ..., "weights": ...})`` plans for a given one instead. Environments that
    plan for the same instances can share ``caches`` (their per-instance rules)."""

    metadata = {"render_modes": []}

    def __init__(self, tasks: Callable[[np.random.Generator], Task] | None = None,
                 caches: dict | None = None):
        self.tasks = tasks
        self.observation_space = observation_space()
        self.action_space = gym.spaces.Discrete(ACTIONS)
        self.multipliers = np.zeros(len(SOFT_CONSTRAINTS))
        self.caches: dict[tuple, InstanceCache] = {} if caches is None else caches

    # -- episode ------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        options = options or {}
        if "instance" in options:
            weights = options.get("weights", (1 / 3, 1 / 3, 1 / 3))
            task = Task(options["instance"], np.asarray(weights, dtype=float))
        elif self.tasks is not None:
            task = self.tasks(self.np_random)
        else:
            raise ValueError("PlanEnv.reset: no task; give tasks= or options={'instance': ...}")
        self.task = task
        self.cache = self._cache(task.instance)
        self.edges, self.adjacency = link_features(task.instance)
        self.state: BuildState | None = None
        self.phase = PAIR
        self.partial: dict[str, int] = {}
        self.invalid_actions = 0
        if not self.cache.pair_of_code:
            raise NoFeasiblePlan(f"{task.instance.name}: no feasible plan for the agent "
                                 "to build")
        return self._observation(), {}

    def _cache(self, instance: Instance) -> InstanceCache:
        key = InstanceCache.key(instance)
        cache = self.caches.get(key)
        if cache is None:
            if len(self.caches) > 512:
                self.caches.clear()
            cache = self.caches[key] = InstanceCache(instance)
        return cache

    def step(self, action: int):
        action = int(action)
        if not self._mask[action]:  # the mask of the observation the caller acted on
            self.invalid_actions += 1
            return (self._observation(), -1.0, False,
                    self.invalid_actions >= INVALID_LIMIT, {"invalid_action": True})
        rules = self.cache.rules
        if self.phase == PAIR:
            self.state = rules.start(self.cache.pair_of_code[action])
            self.phase = DOMAIN
        elif self.phase == DOMAIN:
            self.partial = {"domain": action}
            self.phase = LAYERS
        elif self.phase == LAYERS:
            self.partial["layers"] = action + 1
            self.phase = OPTION
        elif self.phase == OPTION:
            self.partial["option"] = self.cache.option_codes[self.state.pair].index(action)
            self.phase = SPLIT
        else:
            self.state = rules.place(self.state, Segment(stages=action + 1, **self.partial))
            self.partial = {}
            self.phase = DOMAIN
            if self.state.layers_left == 0:
                plan = rules.plan(self.state)
                value, info = self._score(plan)
                return self._observation(), value, True, False, info
        return self._observation(), 0.0, False, False, {}

    def _score(self, plan: Plan) -> tuple[float, dict]:
        result = evaluate_plans(self.task.instance, [plan])
        objectives = result.objectives
        excess = constraint_excess(self.task.instance, result)
        value = float(reward(objectives, self.task.weights, self.cache.scale)[0])
        penalty = float(self.multipliers @ excess)
        return value - penalty, {"plan": plan, "objectives": objectives[0].tolist(),
                                 "reward_terms": value, "constraints": excess.tolist(),
                                 "feasible": bool(result.feasible[0])}

    # -- masks and observations ---------------------------------------------------------
    def action_masks(self) -> np.ndarray:
        mask = np.zeros(ACTIONS, dtype=bool)
        rules, state, partial = self.cache.rules, self.state, self.partial
        if self.phase == PAIR:
            mask[list(self.cache.pair_of_code)] = True
        elif self.phase == DOMAIN:
            for k in range(self.task.instance.num_domains):
                mask[k] = rules.layer_options(state, k).any()
        elif self.phase == LAYERS:
            mask[:rules.layers] = rules.layer_options(state, partial["domain"])[1:]
        elif self.phase == OPTION:
            for option, code in enumerate(self.cache.option_codes[state.pair]):
                mask[code] = any(self._fits(option, n)
                                 for n in range(1, rules.max_stages(state) + 1))
        else:
            for n in range(1, rules.max_stages(state) + 1):
                mask[n - 1] = self._fits(partial["option"], n)
        return mask

    def _fits(self, option: int, stages: int) -> bool:
        return bool(self.cache.rules.segment_layers(
            self.state, self.partial["domain"], option, stages)[self.partial["layers"]])

    def _observation(self) -> dict[str, np.ndarray]:
        self._mask = self.action_masks()  # once per step: step() checks the action against it
        instance, cache, state = self.task.instance, self.cache, self.state
        k = instance.num_domains
        free0 = cache.rules.free.astype(np.float32)
        free = state.free.astype(np.float32) if state is not None else free0
        nodes = np.zeros((MAX_DOMAINS, NODE_FEATURES), dtype=np.float32)
        nodes[:k, 0] = free / 64.0
        nodes[:k, 1] = free0 / np.maximum(cache.gpus, 1)
        nodes[:k, 2] = 1 - free0 / np.maximum(cache.gpus, 1)  # background utilisation
        nodes[:k, 3] = (free0 - free) / 64.0  # GPUs this plan takes there
        nodes[:k, 4] = instance.gpu.hbm_gb / 100.0
        nodes[:k, 5] = cache.intra / 400.0
        current = self.partial.get("domain", 0)
        if "domain" in self.partial:
            nodes[current, 6] = 1
        if state is not None and state.segments:
            behind = state.segments[-1].domain  # the chain's neighbour behind
            nodes[behind, 7] = 1
            # the WAN link each candidate would use to reach it: what a pointer over the
            # domains needs to see per node, not averaged away by the encoder
            others = np.arange(k) != behind
            nodes[:k, 8] = np.where(others, self.edges[:k, behind, 0], 0)
            nodes[:k, 9] = np.where(others, self.edges[:k, behind, 1], 0)
            nodes[:k, 10] = np.where(others, self.edges[:k, behind, 2], 0)
        if state is not None:  # how many stages of the smallest option each domain holds
            smallest = int(cache.rules.pairs[state.pair].gpus.min())
            nodes[:k, 11] = np.floor(free / smallest) / 8.0
        context = np.zeros(CONTEXT_FEATURES, dtype=np.float32)
        context[self.phase] = 1
        context[WEIGHTS] = self.task.weights
        model = instance.model
        context[8] = model.layers / ACTIONS
        context[9] = np.log10(model.total_params) / 12
        context[10] = k / MAX_DOMAINS
        context[11] = np.log2(instance.training.global_batch) / 12
        if state is not None:
            tables = cache.rules.pairs[state.pair]
            context[12] = state.layers_left / model.layers
            context[13] = state.positions_used / tables.positions
            context[14] = np.log2(tables.dp) / 3
            context[15] = np.log2(tables.micro_batch) / 3
            context[16] = np.log2(tables.micro_batches) / 10
            context[17] = len(state.segments) / tables.positions
            if "layers" in self.partial:
                context[18] = self.partial["layers"] / model.layers
            if "option" in self.partial:
                tp, recompute = tables.options[self.partial["option"]]
                context[19] = np.log2(tp) / 3
                context[20] = recompute != "none"
        return {"node_features": nodes, "node_mask": cache.node_mask.copy(),
                "edge_features": self.edges.copy(), "adjacency": self.adjacency.copy(),
                "context": context, "phase": self.phase, "current_domain": current,
                "action_mask": self._mask.astype(np.int8)}


def constraint_excess(instance: Instance, result, index: int = 0) -> np.ndarray:
    """How far evaluated plan ``index`` exceeds each soft constraint (0 when it holds): the
    busiest WAN link's share of the period over the cap, and the cost over the budget,
    both relative."""
    excess = np.zeros(len(SOFT_CONSTRAINTS))
    cap = instance.constraints.wan_share_cap
    if cap is not None and result.boundary_occupancy_s.size:
        share = result.boundary_occupancy_s[index].max(initial=0.0) / result.period_s[index]
        excess[0] = max(0.0, share / cap - 1)
    budget = instance.constraints.cost_budget
    if budget is not None:
        excess[1] = max(0.0, float(result.comm_cost[index]) / budget - 1)
    return excess


def plan_actions(cache: InstanceCache, plan: Plan) -> list[int] | None:
    """The actions that build ``plan`` (the segments of :meth:`PlanRules.build`), or None
    where the masks or the agent's range forbid it: what a demonstration replays."""
    state = cache.rules.build(plan)
    if state is None or cache.pair_codes[state.pair] is None:
        return None
    actions = [cache.pair_codes[state.pair]]
    for segment in state.segments:
        actions += [segment.domain, segment.layers - 1,
                    cache.option_codes[state.pair][segment.option], segment.stages - 1]
    return actions
