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
masks make "stop" implicit, so it is never premature).

The contract, RL4CO style:

- **Task**: an instance state, a preference ``w`` and :class:`~rl.masks.Budgets` (a GPU
  budget, a traffic-cost budget, a step-time cap; the instance's own cost budget joins the
  task's). ``reset(options={"multipliers": ...})`` passes the trainer's Lagrange
  multipliers (:class:`Multipliers`); the environment never changes them.
- **Mask**: :mod:`rl.masks`: every finished plan is feasible and within the GPU and cost
  budgets, and no state is a dead end. A task whose budgets no plan meets raises
  :class:`NoPlanWithinBudget` at ``reset``.
- **Reward**, at the end: the seeds' ``R = w1 R_eff + w2 R_util - w3 R_cost`` (SPEC section
  4) of the evaluator's objectives, normalised by the single-domain and oblivious baselines,
  minus ``multiplier x excess`` for each soft constraint (the WAN share cap, the step-time
  cap), the multiplier being the one for the task's budget bucket (:func:`budget_bucket`).
- **Validity**: an action outside the mask (only a caller that ignores the mask sends one)
  costs -1 and changes nothing; the ``INVALID_LIMIT``-th such action of an episode
  truncates it, without a plan.
- **Observation**: the feature blocks of :mod:`rl.features`, read by name.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import gymnasium as gym
import numpy as np

from formulation.evaluator import evaluate_plans
from formulation.instance import RECOMPUTE_MODES, Instance
from formulation.plan import Plan
from formulation.reward import reward
from formulation.schema import InputError
from rl.features import CONTEXT, EDGE, NODE
from rl.masks import NO_BUDGETS, Budgets, BuildState, PlanRules, Segment
from solvers.baselines import baseline_references
from solvers.baselines.references import NoReferencePlan
from solvers.baselines.single_domain import UniformPlans, uniform_plans
from solvers.tables import (
    PairTables,
    all_pair_tables,
    full_capacity,
    with_free_gpus,
    with_links,
)

PAIR, DOMAIN, LAYERS, OPTION, SPLIT = range(5)
PHASES = ("pair", "domain", "layers", "option", "split")
MAX_DOMAINS = 20
ACTIONS = 128  # >= pair codes, domains, layers (LLaMA-3-405B has 126), option codes, stages
MAX_DP, MAX_MICRO_BATCH = 16, 8  # pair codes: MAX_DP * MAX_MICRO_BATCH <= ACTIONS
SOFT_CONSTRAINTS = ("wan_cap", "step_time")
STEP_CAP_EDGES = (0.5, 1.0, 2.0)  # buckets of a step-time cap over T_base
BUCKETS = len(STEP_CAP_EDGES) + 2  # bucket 0: no cap
INVALID_LIMIT = 16
LINK_STATES = 8  # WAN link states whose pair tables an InstanceCache keeps (tables_at)
REDRAWS = 8  # draws of a generated task before its budgets are dropped
MULTIPLIER_CAP = 5.0  # a penalty of 5 x the relative excess outweighs any reward
FEATURE_BOUND = 1e3  # features are scaled to O(1); the bound only keeps the space finite


class NoFeasiblePlan(ValueError):
    """The instance admits no plan the agent can build (the model fits nowhere)."""


class NoPlanWithinBudget(NoFeasiblePlan):
    """Plans exist, but none within the task's GPU and cost budgets."""


@dataclass
class Task:
    """What one episode plans for: an instance state, a preference vector and budgets."""

    instance: Instance
    weights: np.ndarray  # (3,) w1 efficiency, w2 utilisation, w3 cost
    budgets: Budgets = field(default_factory=Budgets)


def budget_bucket(budgets: Budgets, t_base: float) -> int:
    """Which multiplier a task's step-time cap uses: 0 without a cap, else 1 + the bucket
    of ``cap / T_base`` among ``STEP_CAP_EDGES`` (a tight cap needs a larger penalty)."""
    if budgets.step_time is None:
        return 0
    return 1 + int(np.searchsorted(STEP_CAP_EDGES, budgets.step_time / t_base))


@dataclass
class Multipliers:
    """Lagrange multipliers of the soft constraints, one per budget bucket: owned and
    raised by the trainer (dual ascent), read by the environment."""

    values: np.ndarray = field(default_factory=lambda: np.zeros((len(SOFT_CONSTRAINTS),
                                                                 BUCKETS)))

    def of(self, bucket: int) -> np.ndarray:
        return self.values[:, bucket]

    def ascend(self, episodes: list[dict], step: float) -> None:
        """Raise each multiplier by ``step`` times the mean excess of its bucket's finished
        episodes (never below 0, never above ``MULTIPLIER_CAP``: a cap no plan can meet
        would otherwise raise its multiplier without end)."""
        for bucket in range(BUCKETS):
            excess = [e["constraints"] for e in episodes if e.get("bucket") == bucket]
            if excess:
                self.values[:, bucket] = np.clip(
                    self.values[:, bucket] + step * np.mean(excess, axis=0), 0.0,
                    MULTIPLIER_CAP)


def pair_code(dp: int, micro_batch: int) -> int | None:
    """The PAIR action of a (dp, micro-batch) pair; None beyond the agent's range."""
    if not (1 <= dp <= MAX_DP and 1 <= micro_batch <= MAX_MICRO_BATCH):
        return None
    return (dp - 1) * MAX_MICRO_BATCH + micro_batch - 1


def option_code(tp: int, recompute: str) -> int:
    """The OPTION action of a (tp, recompute) option."""
    return (tp - 1) * len(RECOMPUTE_MODES) + RECOMPUTE_MODES.index(recompute)


@dataclass(frozen=True)
class InstanceStatics:
    """What depends neither on the load nor on the links' state: the pairs' tables at full
    capacity, the single-domain plans (:mod:`solvers.baselines.single_domain`) and the
    masks' per-pair limits."""

    tables: list[PairTables]
    uniform: UniformPlans
    limits: dict = field(default_factory=dict)  # rl.masks.PairLimits by pair, built on use

    @staticmethod
    def of(instance: Instance) -> InstanceStatics:
        tables = all_pair_tables(full_capacity(instance))
        return InstanceStatics(tables, uniform_plans(instance, tables))

    @staticmethod
    def key(instance: Instance) -> tuple:
        """All of the instance but its load (free GPUs) and its links' bandwidth and
        latency: the GPU and model specs too, so that two instances of one name differ."""
        return (instance.name, instance.gpu, instance.model,
                tuple((d.name, d.gpus, d.intra_bandwidth_gbps, d.intra_latency_ms)
                      for d in instance.domains),
                instance.search, instance.constraints, instance.training,
                instance.links.price_per_gb.tobytes(), instance.links.eps)


class InstanceCache:
    """What depends only on an instance's domains, load, model and search space: the masks'
    rules and the reward scale. A bandwidth or latency change keeps them (memory caps,
    GPUs, prices, T_base and the oblivious plan's cost do not depend on the links); a load
    change builds them from the :class:`InstanceStatics` in a few milliseconds."""

    def __init__(self, instance: Instance, statics: InstanceStatics | None = None):
        k = instance.num_domains
        if k > MAX_DOMAINS:
            raise InputError(f"instance {instance.name!r}: {k} domains, the agent handles "
                             f"<= {MAX_DOMAINS}")
        if instance.model.layers > ACTIONS:  # a LAYERS action counts a segment's layers
            raise InputError(f"instance {instance.name!r}: model.layers "
                             f"{instance.model.layers}, the agent handles <= {ACTIONS}")
        statics = InstanceStatics.of(instance) if statics is None else statics
        free = instance.free_gpus
        self.rules = PlanRules(instance, [with_free_gpus(t, free) for t in statics.tables],
                               statics.limits)
        # action codes of the offered pairs (None: out of the agent's range) and options
        self.pair_codes = [pair_code(t.dp, t.micro_batch) for t in self.rules.pairs]
        self.pair_of_code = {c: i for i, c in enumerate(self.pair_codes) if c is not None}
        self.option_codes = [[option_code(*o) for o in t.options] for t in self.rules.pairs]
        try:
            self.scale = baseline_references(instance, statics.tables, statics.uniform).scale
        except NoReferencePlan as err:  # nowhere to place even one stage
            raise NoFeasiblePlan(str(err)) from None
        self.node_mask = np.zeros(MAX_DOMAINS, dtype=np.float32)
        self.node_mask[:k] = 1
        self.gpus = np.array([d.gpus for d in instance.domains], dtype=np.float32)
        self.intra = np.array([d.intra_bandwidth_gbps for d in instance.domains],
                              dtype=np.float32)
        self.smallest = [int(t.gpus.min()) for t in self.rules.pairs]
        self._pairs: dict[Budgets, list[int]] = {}
        # the pairs' tables per WAN link state, made on use (:meth:`tables_at`); the rules'
        # own tables are of the link state the statics were made in
        self._links: dict[bytes, dict[int, PairTables]] = {}
        self._rules_links = links_key(statics.tables[0].instance) if statics.tables else None

    def tables_at(self, instance: Instance, pair: int) -> PairTables:
        """The tables of candidate pair ``pair`` (an index into ``rules.candidates``, whose
        first ones are the offered pairs) in ``instance``'s WAN link state. The rules'
        tables keep the delays of the state the statics were made in (the masks need no
        others), but the lower level's DP places stages by the current ones. One object per
        pair and link state, for the ``LINK_STATES`` latest states: what the lower level
        learns about a pair is kept per table object."""
        key = links_key(instance)
        if key == self._rules_links:
            return self.rules.candidates[pair]
        tables = self._links.pop(key, None)
        if tables is None:
            tables = {}
            while len(self._links) >= LINK_STATES:
                self._links.pop(next(iter(self._links)))  # the least recently used
        self._links[key] = tables
        out = tables.get(pair)
        if out is None:
            out = tables[pair] = with_links(self.rules.candidates[pair], instance)
        return out

    def pairs_beyond(self, budgets: Budgets) -> list[int]:
        """The candidate pairs (indices into ``rules.candidates``) the masks do not offer
        within ``budgets``: those the completion test cannot start, those it cannot start
        within the budgets, and those beyond the agent's action codes. Their plans, if any,
        only the lower level's DP finds (:meth:`rl.scheduler.Scheduler.plans`)."""
        within = set(self.pairs_within(budgets))
        return [i for i in range(len(self.rules.candidates)) if i not in within]

    def pairs_within(self, budgets: Budgets) -> list[int]:
        """The offered pairs (indices) whose plans can meet ``budgets``."""
        out = self._pairs.get(budgets)
        if out is None:
            if len(self._pairs) > 4096:
                self._pairs.clear()
            out = self._pairs[budgets] = [i for i in self.pair_of_code.values()
                                          if self.rules.startable(i, budgets)]
        return out

    @staticmethod
    def key(instance: Instance) -> tuple:
        return (*InstanceStatics.key(instance), tuple(d.free_gpus for d in instance.domains))


def links_key(instance: Instance) -> bytes:
    """The WAN links' state of ``instance`` (bandwidth, latency, prices) as a key."""
    links = instance.links
    return b"".join(a.tobytes() for a in (links.bandwidth_gbps, links.latency_ms,
                                          links.price_per_gb))


def effective_budgets(instance: Instance, budgets: Budgets) -> Budgets:
    """The task's budgets joined with the instance's own cost budget (the tighter one)."""
    own = instance.constraints.cost_budget
    if own is None or (budgets.cost is not None and budgets.cost <= own):
        return budgets
    return Budgets(budgets.gpus, float(own), budgets.step_time)


def link_features(instance: Instance) -> tuple[np.ndarray, np.ndarray]:
    """Edge features (:data:`rl.features.EDGE`) and the adjacency of the domain graph,
    padded to MAX_DOMAINS."""
    k, links = instance.num_domains, instance.links
    edges = np.zeros((MAX_DOMAINS, MAX_DOMAINS, EDGE.size), dtype=np.float32)
    real = ~np.eye(k, dtype=bool)
    view = edges[:k, :k]
    EDGE.put(view, "bandwidth",
             np.where(real, np.log10(np.maximum(links.bandwidth_gbps, 1e-3)), 0))
    EDGE.put(view, "latency", np.where(real, links.latency_ms, 0))
    EDGE.put(view, "price", np.where(real, links.price_per_gb, 0))
    EDGE.put(view, "real", real)
    adjacency = np.zeros((MAX_DOMAINS, MAX_DOMAINS), dtype=np.float32)
    adjacency[:k, :k] = real
    return edges, adjacency


def observation_space() -> gym.spaces.Dict:
    def features(*shape: int) -> gym.spaces.Box:
        return gym.spaces.Box(-FEATURE_BOUND, FEATURE_BOUND, shape, np.float32)

    def flags(*shape: int) -> gym.spaces.Box:
        return gym.spaces.Box(0, 1, shape, np.float32)

    return gym.spaces.Dict({
        "node_features": features(MAX_DOMAINS, NODE.size),
        "node_mask": flags(MAX_DOMAINS),
        "edge_features": features(MAX_DOMAINS, MAX_DOMAINS, EDGE.size),
        "adjacency": flags(MAX_DOMAINS, MAX_DOMAINS),
        "context": features(CONTEXT.size),
        "phase": gym.spaces.Discrete(len(PHASES)),
        "current_domain": gym.spaces.Discrete(MAX_DOMAINS),
        "action_mask": gym.spaces.MultiBinary(ACTIONS),
    })


class PlanEnv(gym.Env):
    """Build one feasible plan per episode (module doc).

    ``tasks`` draws the next task from the environment's generator; ``reset(options=
    {"instance": ..., "weights": ..., "budgets": ...})`` plans for a given one instead.
    ``options["multipliers"]`` (:class:`Multipliers`) sets the penalties from this episode
    on. Environments that plan for the same instances can share ``caches``."""

    metadata = {"render_modes": []}

    def __init__(self, tasks: Callable[[np.random.Generator], Task] | None = None,
                 caches: dict | None = None):
        self.tasks = tasks
        self.observation_space = observation_space()
        self.action_space = gym.spaces.Discrete(ACTIONS)
        self.multipliers = Multipliers()
        self.caches: dict[tuple, object] = {} if caches is None else caches

    # -- episode ------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        options = options or {}
        if "multipliers" in options:
            self.multipliers = options["multipliers"]
        if "instance" in options:
            weights = options.get("weights", (1 / 3, 1 / 3, 1 / 3))
            task = Task(options["instance"], np.asarray(weights, dtype=float),
                        options.get("budgets") or NO_BUDGETS)
        elif self.tasks is not None:
            task = self._draw()
        else:
            raise ValueError("PlanEnv.reset: no task; give tasks= or options={'instance': ...}")
        self.task = task
        self.cache = self.cache_of(task.instance)
        self.budgets = effective_budgets(task.instance, task.budgets)
        self.bucket = budget_bucket(self.budgets, self.cache.scale.t_base)
        self.edges, self.adjacency = link_features(task.instance)
        self.state: BuildState | None = None
        self.phase = PAIR
        self.partial: dict[str, int] = {}
        self.invalid_actions = 0
        if not self.cache.pair_of_code:
            raise NoFeasiblePlan(f"{task.instance.name}: no feasible plan for the agent "
                                 "to build")
        if not self.cache.pairs_within(self.budgets):
            raise NoPlanWithinBudget(f"{task.instance.name}: no plan within budget "
                                     f"({describe_budgets(self.budgets)})")
        return self._observation(), {}

    def _draw(self) -> Task:
        return self.draw(self.tasks, self.np_random)

    def draw(self, tasks: Callable[[np.random.Generator], Task],
             rng: np.random.Generator) -> Task:
        """A task from ``tasks``; one whose budgets no plan meets is drawn again, at most
        ``REDRAWS`` times, then planned without budgets."""
        for _ in range(REDRAWS):
            task = tasks(rng)
            budgets = effective_budgets(task.instance, task.budgets)
            if self.cache_of(task.instance).pairs_within(budgets):
                return task
        return Task(task.instance, task.weights)

    def cache_of(self, instance: Instance) -> InstanceCache:
        """The masks' rules and reward scale of ``instance``'s state, made on first use."""
        key = InstanceCache.key(instance)
        cache = self.caches.get(key)
        if cache is None:
            if len(self.caches) > 512:
                self.caches.clear()
            statics_key = ("statics", *InstanceStatics.key(instance))
            statics = self.caches.get(statics_key)
            if statics is None:
                statics = self.caches[statics_key] = InstanceStatics.of(instance)
            cache = self.caches[key] = InstanceCache(instance, statics)
        return cache

    def step(self, action: int):
        action = int(action)
        if not self._mask[action]:  # the mask of the observation the caller acted on
            self.invalid_actions += 1
            return (self._observation(), -1.0, False,
                    self.invalid_actions >= INVALID_LIMIT, {"invalid_action": True})
        rules = self.cache.rules
        if self.phase == PAIR:
            self.state = rules.start(self.cache.pair_of_code[action], self.budgets)
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
                value, info = self.score(plan)
                return self._observation(), value, True, False, info
        return self._observation(), 0.0, False, False, {}

    def score(self, plan: Plan) -> tuple[float, dict]:
        """A finished plan's value in this episode (reward less the soft constraints'
        penalties) and what the episode's last step reports about it."""
        result = evaluate_plans(self.task.instance, [plan])
        objectives = result.objectives
        excess = constraint_excess(self.task.instance, result, self.budgets)
        value = float(reward(objectives, self.task.weights, self.cache.scale)[0])
        penalty = float(self.multipliers.of(self.bucket) @ excess)
        return value - penalty, {"plan": plan, "objectives": objectives[0].tolist(),
                                 "reward_terms": value, "constraints": excess.tolist(),
                                 "bucket": self.bucket,
                                 "feasible": bool(result.admissible[0])}

    # -- masks and observations ---------------------------------------------------------
    def action_masks(self) -> np.ndarray:
        mask = np.zeros(ACTIONS, dtype=bool)
        if self.phase == PAIR:
            mask[[self.cache.pair_codes[i] for i in self.cache.pairs_within(self.budgets)]] \
                = True
            return mask
        # every admissible segment of the state, [domain, option, stages - 1, layers]
        segments = self.cache.rules.segments(self.state)
        partial = self.partial
        if self.phase == DOMAIN:
            mask[:len(segments)] = segments.any(axis=(1, 2, 3))
        elif self.phase == LAYERS:
            mask[:self.cache.rules.layers] = segments[partial["domain"]].any(axis=(0, 1))[1:]
        elif self.phase == OPTION:
            fits = segments[partial["domain"], :, :, partial["layers"]].any(axis=1)
            mask[self.cache.option_codes[self.state.pair]] = fits
        else:
            stages = segments[partial["domain"], partial["option"], :, partial["layers"]]
            mask[:len(stages)] = stages
        return mask

    def _observation(self) -> dict[str, np.ndarray]:
        self._mask = self.action_masks()  # once per step: step() checks the action against it
        return {"node_features": self._nodes(), "node_mask": self.cache.node_mask.copy(),
                "edge_features": self.edges.copy(), "adjacency": self.adjacency.copy(),
                "context": self._context(), "phase": self.phase,
                "current_domain": self.partial.get("domain", 0),
                "action_mask": self._mask.astype(np.int8)}

    def _nodes(self) -> np.ndarray:
        """Per-domain features, :data:`rl.features.NODE`."""
        instance, cache, state = self.task.instance, self.cache, self.state
        k = instance.num_domains
        free0 = cache.rules.free.astype(np.float32)
        free = state.free.astype(np.float32) if state is not None else free0
        nodes = np.zeros((MAX_DOMAINS, NODE.size), dtype=np.float32)
        view = nodes[:k]
        NODE.put(view, "free_gpus", free)
        NODE.put(view, "free_share", free0 / np.maximum(cache.gpus, 1))
        NODE.put(view, "background_load", 1 - free0 / np.maximum(cache.gpus, 1))
        NODE.put(view, "taken", free0 - free)
        NODE.put(view, "hbm", np.full(k, instance.gpu.hbm_gb))
        NODE.put(view, "intra_bandwidth", cache.intra)
        if "domain" in self.partial:
            nodes[self.partial["domain"], NODE["current"]] = 1
        behind = state.behind if state is not None else None
        if behind is not None:
            nodes[behind, NODE["behind"]] = 1
            # the WAN link each candidate would use to reach it: what a pointer over the
            # domains needs to see per node, not averaged away by the encoder
            others = (np.arange(k) != behind)[:, None]
            link = self.edges[:k, behind, :3]  # bandwidth, latency, price, already scaled
            nodes[:k, NODE["link_behind"]] = np.where(others, link, 0)
        if state is not None:
            smallest = cache.smallest[state.pair]
            NODE.put(view, "stage_room", np.floor(free / smallest))
            tables = cache.rules.pairs[state.pair]
            entry = tables.cost[:, behind] if behind is not None else np.zeros(k)
            if np.isfinite(state.cost_left):
                NODE.put(view, "entry_cost", np.minimum(entry / max(state.cost_left, 1e-12),
                                                        10.0))
            NODE.put(view, "within_budget",
                     (free >= smallest) & (smallest <= state.gpus_left)
                     & (entry <= state.cost_left + state.cost_slack))
        return nodes

    def _context(self) -> np.ndarray:
        """Per-decision features, :data:`rl.features.CONTEXT`."""
        instance, cache, state, budgets = self.task.instance, self.cache, self.state, \
            self.budgets
        model = instance.model
        context = np.zeros(CONTEXT.size, dtype=np.float32)
        context[CONTEXT["phase"].start + self.phase] = 1
        CONTEXT.put(context, "weights", self.task.weights)
        CONTEXT.put(context, "model_layers", model.layers)
        CONTEXT.put(context, "model_params", np.log10(model.total_params))
        CONTEXT.put(context, "domains", instance.num_domains)
        CONTEXT.put(context, "global_batch", np.log2(instance.training.global_batch))
        free_total = max(float(cache.rules.free.sum()), 1.0)
        gpus_left = budgets.gpus if budgets.gpus is not None else free_total
        cost_left = budgets.cost
        if state is not None:
            tables = cache.rules.pairs[state.pair]
            CONTEXT.put(context, "layers_left", state.layers_left / model.layers)
            CONTEXT.put(context, "positions_used", state.positions_used / tables.positions)
            CONTEXT.put(context, "dp", np.log2(tables.dp))
            CONTEXT.put(context, "micro_batch", np.log2(tables.micro_batch))
            CONTEXT.put(context, "micro_batches", np.log2(tables.micro_batches))
            CONTEXT.put(context, "segments", len(state.segments) / tables.positions)
            if "layers" in self.partial:
                CONTEXT.put(context, "segment_layers", self.partial["layers"] / model.layers)
            if "option" in self.partial:
                tp, recompute = tables.options[self.partial["option"]]
                CONTEXT.put(context, "segment_tp", np.log2(tp))
                CONTEXT.put(context, "segment_recompute", recompute != "none")
            if budgets.gpus is not None:
                gpus_left = state.gpus_left
            if budgets.cost is not None:
                cost_left = state.cost_left
        if budgets.gpus is not None:
            CONTEXT.put(context, "gpu_budget", [1.0, min(gpus_left / free_total, 1.0)])
        if budgets.cost is not None:
            CONTEXT.put(context, "cost_budget", [1.0, np.log10(
                max(cost_left, 0.0) / cache.scale.c_base + 1e-3) / 3])
        if budgets.step_time is not None:
            CONTEXT.put(context, "step_cap",
                        [1.0, min(budgets.step_time / cache.scale.t_base, 10.0)])
        CONTEXT.put(context, "multiplier", self.multipliers.of(self.bucket)[1])
        return context


def describe_budgets(budgets: Budgets) -> str:
    parts = []
    if budgets.gpus is not None:
        parts.append(f"GPU budget {budgets.gpus}")
    if budgets.cost is not None:
        parts.append(f"cost budget {budgets.cost:.6g} USD/step")
    if budgets.step_time is not None:
        parts.append(f"step-time cap {budgets.step_time:.6g} s")
    return ", ".join(parts) or "no budget"


def constraint_excess(instance: Instance, result, budgets: Budgets = NO_BUDGETS,
                      index: int = 0) -> np.ndarray:
    """How far evaluated plan ``index`` exceeds each soft constraint (0 when it holds): the
    busiest WAN link's share of the period over the cap, and the step time over the cap,
    both relative."""
    excess = np.zeros(len(SOFT_CONSTRAINTS))
    cap = instance.constraints.wan_share_cap
    if cap is not None and result.boundary_occupancy_s.size:
        share = result.boundary_occupancy_s[index].max(initial=0.0) / result.period_s[index]
        excess[0] = max(0.0, share / cap - 1)
    if budgets.step_time is not None:
        excess[1] = max(0.0, float(result.step_time_s[index]) / budgets.step_time - 1)
    return excess


def plan_actions(cache: InstanceCache, plan: Plan,
                 budgets: Budgets = NO_BUDGETS) -> list[int] | None:
    """The actions that build ``plan`` (the segments of :meth:`PlanRules.build`) under
    ``budgets``, or None where the masks or the agent's range forbid it: what a
    demonstration replays."""
    state = cache.rules.build(plan, budgets)
    if state is None or cache.pair_codes[state.pair] is None:
        return None
    actions = [cache.pair_codes[state.pair]]
    for segment in state.segments:
        actions += [segment.domain, segment.layers - 1,
                    cache.option_codes[state.pair][segment.option], segment.stages - 1]
    return actions
