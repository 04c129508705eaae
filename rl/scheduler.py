"""The Hi-PPO scheduler: decisions for an instance state, a preference and budgets, and
fronts by budget sweeps (the API behind ``python -m rl.decide``, :mod:`rl.decide`).

A decision is hierarchical: the policy (upper level) ranks the (dp, micro-batch) pairs
and can build a plan itself; the lower level (:mod:`rl.lower`) places the stages of the
best-ranked pairs by the exact engine's DP, within a time or counted-work allowance
(:class:`rl.decision_settings.DecisionSettings` says how a decision searches; the CLI's
docstring, :mod:`rl.decide`, each option). :meth:`Scheduler.plans` gives a decision's
candidate plans, :meth:`Scheduler.decide` the best one timed and explained
(:mod:`rl.explain`), :meth:`Scheduler.front` a front by budget sweeps
(:func:`rl.sweep.sweep_front`), which it keeps, so that later requests on the state are
read off it (:mod:`rl.front_book`). A scheduler remembers its answers, the lower level's
plans on each instance (:mod:`rl.warm_starts`) and what its DP runs proved, until
:meth:`Scheduler.forget`.
"""

from __future__ import annotations

import gc
import hashlib
import time
from pathlib import Path

import numpy as np
import torch

from formulation.evaluator import evaluate_plans
from formulation.instance import Instance
from formulation.plan import Plan
from formulation.reward import preference
from formulation.schema import InputError
from instances.generate import warm_up_instance
from rl.decision_settings import HIERARCHICAL, DecisionSettings, StateKind
from rl.env import (
    PAIR,
    InstanceCache,
    InstanceStatics,
    Multipliers,
    NoFeasiblePlan,
    NoPlanWithinBudget,
    PlanEnv,
    describe_budgets,
    effective_budgets,
    links_key,
)
from rl.explain import PlanDecision
from rl.front_book import FrontBook
from rl.lower import Allowance, forget, search
from rl.masks import NO_BUDGETS, Budgets
from rl.networks import OBS_KEYS, CachedEncoder, HiPPOPolicy, as_tensors
from rl.sweep import COST_STEPS, SWEEP_PREFERENCES, sweep_front
from rl.train import load_checkpoint
from rl.warm_starts import LatestPlans, StatesDecided
from solvers.front import Front, versions
from solvers.local_search import local_search

DEFAULT_CHECKPOINT = Path(__file__).resolve().parent / "checkpoints" / "hi_ppo.pt"
MAX_ANSWERS = 4096  # decisions a scheduler remembers (about 1 kB each)
_WARMED_UP: list[bool] = []  # whether this process made its warm-up decision
_FROZEN: list[bool] = []  # whether a scheduler froze this process's objects (freeze_gc)


class NoPlanInTime(NoPlanWithinBudget):
    """The masks offer no pair for the request and the lower level's DP found no plan of
    the others within its time or work limit: nothing is proven (a budget sweep ends there
    too)."""


def _state_digest(instance: Instance) -> bytes:
    """A digest of what makes a state of its instance: the free GPUs and the links."""
    free = np.asarray(instance.free_gpus, dtype=np.int64).tobytes()
    return hashlib.blake2b(free + links_key(instance), digest_size=16).digest()


class Scheduler:
    """The trained policy behind a one-call decision API (loaded once, CPU, one thread)."""

    def __init__(self, checkpoint: str | Path = DEFAULT_CHECKPOINT, freeze_gc: bool = True):
        """``freeze_gc``: after the warm-up decision (:meth:`_warm_up`), once per process,
        collect the garbage and freeze what the process then holds out of the garbage
        collector (``gc.freeze()``): the modules torch and numba bring, and whatever
        else is alive. A full collection otherwise walks all of it, inside whichever
        decision it falls (142 ms at the longest in a run of scripts/bench_hippo.py, 8-10
        ms frozen; README). What is frozen is never collected: a cycle among those
        objects that later becomes garbage stays. Pass False in a process whose other
        threads hold work of their own at that moment (a threaded Dask worker); the
        evaluation's workers are processes."""
        payload = load_checkpoint(checkpoint)  # checked: config, weights, multipliers
        self.policy: HiPPOPolicy = payload["policy"]
        self.policy.eval()
        # decisions only: the same graph within a segment is encoded once
        self.policy.encoder = CachedEncoder(self.policy.encoder)
        self.multipliers = Multipliers(payload["multipliers"])
        self.checkpoint = str(checkpoint)
        self.env = PlanEnv()
        self.envs = [self.env]  # one per episode run in lockstep (:meth:`_episodes`)
        # the candidates of each request answered, by instance state and request: the same
        # request is answered the same, also where the lower level ran out of time
        self.answers: dict[tuple, list[tuple[Plan, float]]] = {}
        # the requests answered whose lower level ran out of its time or work: the ones a
        # front resumes (:meth:`resume`)
        self.cut_short: set[tuple] = set()
        self._lower_ran_out = False  # whether the last decision's lower level ran out
        # the lower level's plans, which start its search on the instance's next states
        self.latest = LatestPlans()
        # the fronts built (:meth:`front`): a later request on their state is a lookup
        self.fronts = FrontBook()
        # the states decided on (:meth:`state_kind`), by instance
        self.states_decided = StatesDecided()
        torch.set_num_threads(1)
        self._warm_up()
        if freeze_gc and not _FROZEN:
            gc.collect()  # the garbage first: frozen, it would stay
            gc.freeze()
            _FROZEN.append(True)

    def _warm_up(self) -> None:
        """One decision, without a time limit, on a small generated instance, then forgotten:
        the first decision otherwise pays within its deadline for what a process does once
        (numba compiling or loading the lower level's kernels: seconds on a fresh install,
        where the first decision's plan was twice as slow as later ones', a fifth of a
        second from numba's cache; the policy's first forward pass)."""
        if _WARMED_UP:  # once per process: what it loads is the process's
            return
        self.plans(warm_up_instance(), (1.0, 0.0, 0.0), NO_BUDGETS,
                   DecisionSettings(lower_time=None))
        self.answers.clear()
        self.cut_short.clear()
        self.latest.clear()
        self.states_decided.clear()
        self.env.caches.clear()
        _WARMED_UP.append(True)

    def forget(self) -> None:
        """Drop what earlier decisions found (the answers, the lower level's memory and
        its latest plans): the next decision on any state is made cold (the evaluation
        scores each front so)."""
        self.answers.clear()
        self.cut_short.clear()
        self.latest.clear()
        self.fronts.clear()
        self.states_decided.clear()
        forget()

    def _episodes(self, instance: Instance, weights: np.ndarray, budgets: Budgets,
                  samples: int, generator: torch.Generator,
                  starts: bool = False) -> tuple[list[tuple[Plan, float]], list[int]]:
        """The greedy episode (with ``starts``, one greedy episode from each (dp,
        micro-batch) pair within the budgets, as POMO's multiple starts) and ``samples``
        sampled ones, run in lockstep: one batched forward pass per step for all the
        episodes still building (a small network costs about the same for one observation
        as for several). Also the pairs within the budgets (indices), best first by the
        upper level's PAIR decision: what the lower level (:mod:`rl.lower`) is given."""
        options = self._options(instance, weights, budgets)
        first = self.env.reset(options=options)[0]  # raises when no plan is possible
        pairs = [None]
        if starts:
            cache = self.env.cache
            pairs = [cache.pair_codes[i] for i in cache.pairs_within(self.env.budgets)]
        greedy = len(pairs)
        while len(self.envs) < greedy + samples:  # the envs share one cache of rules
            self.envs.append(PlanEnv(caches=self.env.caches))
        envs = self.envs[:greedy + samples]
        observations = [first] + [env.reset(options=options)[0] for env in envs[1:]]
        results: list[tuple[Plan, float] | None] = [None] * len(envs)
        active = list(range(len(envs)))
        ranking: list[int] | None = None
        while active:
            batch = {key: np.stack([observations[i][key] for i in active])
                     for key in OBS_KEYS}
            with torch.no_grad():
                logits, _ = self.policy(as_tensors(batch), value=False)
                if ranking is None:  # the first step: every episode at the same PAIR phase
                    ranking = self._ranking(logits[0])
                actions = logits.argmax(dim=-1)
                sampled = [row for row, i in enumerate(active) if i >= greedy]
                if sampled:
                    probs = torch.softmax(logits[sampled], dim=-1)
                    actions[sampled] = torch.multinomial(probs, 1, generator=generator)[:, 0]
            still = []
            for i, action in zip(active, actions.tolist(), strict=True):
                if i < greedy and pairs[i] is not None and envs[i].phase == PAIR:
                    action = pairs[i]  # this start's pair
                observations[i], value, terminated, _, info = envs[i].step(int(action))
                if info.get("invalid_action"):  # cannot happen with the masks; fail loudly
                    raise RuntimeError("the policy left the action mask")
                if terminated:
                    results[i] = (info["plan"], value)
                else:
                    still.append(i)
            active = still
        return results, ranking

    def _options(self, instance: Instance, weights, budgets: Budgets) -> dict:
        """What an episode is reset with (a reset raises when no plan is possible)."""
        return {"instance": instance, "weights": np.asarray(weights, dtype=float),
                "budgets": budgets, "multipliers": self.multipliers}

    def _ranking(self, pair_logits: torch.Tensor) -> list[int]:
        """The pairs within the budgets, best first by the PAIR phase's logits; pairs
        beyond the agent's action codes last."""
        cache = self.env.cache
        within = cache.pairs_within(self.env.budgets)
        code_pair = {cache.pair_codes[i]: i for i in within}
        order = torch.argsort(pair_logits, descending=True, stable=True).tolist()
        return [code_pair[code] for code in order if code in code_pair] \
            + [i for i in within if cache.pair_codes[i] is None]

    def _state_ready(self, instance: Instance) -> bool:
        """Whether the environment was reset to ``instance``'s state with its rules and
        reward scale (False: the model fits nowhere, not even one stage)."""
        env = self.env
        task, cache = getattr(env, "task", None), getattr(env, "cache", None)
        return task is not None and task.instance is instance and cache is not None \
            and cache is env.caches.get(InstanceCache.key(instance))

    def ranked_pairs(self, instance: Instance, weights, budgets: Budgets = NO_BUDGETS
                     ) -> list[int]:
        """The pairs within the budgets (indices into ``self.env.cache.rules.pairs``), best
        first by the upper level's PAIR decision: one forward pass, no episode."""
        first = self.env.reset(options=self._options(instance, weights, budgets))[0]
        with torch.no_grad():
            logits, _ = self.policy(as_tensors(first), value=False)  # a batch of one
        return self._ranking(logits[0])

    def plans(self, instance: Instance, weights, budgets: Budgets = NO_BUDGETS,
              settings: DecisionSettings = HIERARCHICAL) -> list[tuple[Plan, float]]:
        """The candidate plans of one decision within ``budgets``, each with its value
        (reward less soft-constraint penalties): the greedy episode's plan (with
        ``settings.starts``, one per pair) and ``settings.samples`` sampled ones, their
        local-search optima (``settings.polish``), and the lower level's plans of the
        ``settings.pairs`` pairs the upper level ranks first. None where the instance
        admits no plan at all. Raises :class:`NoPlanWithinBudget` where plans exist but
        none within the budgets. On a state whose front this scheduler built and kept
        with the same settings (:meth:`front`), the front's plans within the budgets
        instead, where it has any (:mod:`rl.front_book`: no episode, no DP run)."""
        request = self._request(instance, weights, budgets, settings)
        if request in self.answers:
            return list(self.answers[request])
        looked_up = self.fronts.answer(self._front_key(instance, settings),
                                       preference(weights), budgets, self.multipliers)
        if looked_up is not None:
            return looked_up
        return self._decided(instance, weights, budgets, settings, request)

    def _decided(self, instance: Instance, weights, budgets: Budgets,
                 settings: DecisionSettings, request: tuple, deadlines: bool = True
                 ) -> list[tuple[Plan, float]]:
        """The decision proper (:meth:`_plans`) within a new allowance (with ``deadlines``,
        the settings' deadline of the state's kind where they have them), remembered as
        the answer to ``request`` (and as cut short where its lower level ran out)."""
        self._lower_ran_out = False
        lower_time = settings.lower_time
        if deadlines and settings.deadlines is not None:
            deadline = settings.deadlines.of(self.state_kind(instance))
            lower_time = deadline if lower_time is None else min(lower_time, deadline)
        allowance = Allowance.of(lower_time, settings.lower_work)
        try:
            out = self._plans(instance, preference(weights), budgets, settings, allowance)
        finally:  # raising too: what the state's decision made (caches, memory) is kept
            self.states_decided.add(InstanceStatics.key(instance), _state_digest(instance))
        if len(self.answers) >= MAX_ANSWERS:
            self.answers.clear()
            self.cut_short.clear()
        self.answers[request] = out
        if self._lower_ran_out:
            self.cut_short.add(request)
        return list(out)

    def state_kind(self, instance: Instance) -> StateKind:
        """What this scheduler knows of ``instance``'s state: whether it decided on it, or
        on other states of the instance only, or on none (since :meth:`forget`), and
        still holds what those decisions made: the instance's statics and the state's
        rules (its environment drops its caches past a size, :meth:`PlanEnv.cache_of`)."""
        instance_key, caches = InstanceStatics.key(instance), self.env.caches
        if not self.states_decided.knows(instance_key) \
                or ("statics", *instance_key) not in caches:
            return StateKind.NEW_INSTANCE
        known = self.states_decided.knows(instance_key, _state_digest(instance)) \
            and InstanceCache.key(instance) in caches
        return StateKind.KNOWN_STATE if known else StateKind.NEW_STATE

    @staticmethod
    def _state_key(instance: Instance) -> tuple:
        """What identifies an instance state: the free GPUs and the links' state."""
        return InstanceCache.key(instance), links_key(instance)

    @staticmethod
    def _request(instance: Instance, weights, budgets: Budgets, settings: DecisionSettings
                 ) -> tuple:
        """What identifies a request: the instance state, preference, budgets, settings."""
        return (*Scheduler._state_key(instance),
                tuple(float(w) for w in preference(weights)), budgets, settings)

    @staticmethod
    def _front_key(instance: Instance, settings: DecisionSettings) -> tuple:
        """What identifies a front in :attr:`fronts`: the instance state and the settings."""
        return *Scheduler._state_key(instance), settings

    def resume(self, instance: Instance, weights, budgets: Budgets = NO_BUDGETS,
               settings: DecisionSettings = HIERARCHICAL) -> list[tuple[Plan, float]] | None:
        """A request answered before whose lower level ran out of its time or work, decided
        again with a new allowance, the settings' ``lower_time`` and ``lower_work`` without
        their ``deadlines`` (the request's deadline has passed: resuming is what a caller
        does with the time it has after answering): its search goes on from what the
        first decision found
        (the lower level's plans and floors on the state, and the feasibility runs the
        allowance stopped, which it bisects above). None where the request was not cut
        short, or was resumed already (nothing to resume): once per request, until
        :meth:`forget`. Where the new decision raises, the first answer stays. A budget
        sweep resumes its decisions so, after the sweep (:func:`rl.sweep.sweep_front`)."""
        request = self._request(instance, weights, budgets, settings)
        if request not in self.cut_short:
            return None
        self.cut_short.discard(request)
        first = self.answers.pop(request)
        try:  # decided, not read off a front: the new allowance is the point
            out = self._decided(instance, weights, budgets, settings, request,
                                deadlines=False)
        except NoPlanWithinBudget:
            self.answers[request] = first
            raise
        self.cut_short.discard(request)  # resumed once: not again
        return out

    def _plans(self, instance: Instance, weights: np.ndarray, budgets: Budgets,
               settings: DecisionSettings, allowance: Allowance | None
               ) -> list[tuple[Plan, float]]:
        generator = torch.Generator().manual_seed(settings.seed)
        polish = settings.polish
        episodes = settings.pairs == 0 or settings.policy_plan or settings.samples > 0 \
            or settings.starts or polish > 0
        failure: NoFeasiblePlan | None = None  # the masks offer no pair within the budgets
        try:  # the first reset raises, before any sampling
            if episodes:
                out, ranking = self._episodes(instance, weights, budgets, settings.samples,
                                              generator, settings.starts)
            else:
                out, ranking = [], self.ranked_pairs(instance, weights, budgets)
        except NoFeasiblePlan as err:  # NoPlanWithinBudget included
            if not settings.pairs or not self._state_ready(instance):
                if isinstance(err, NoPlanWithinBudget):
                    raise
                return []
            failure, out, ranking = err, [], []  # the lower level's DP may still find one
        env = self.env
        if polish > 0:
            scale, limits = env.cache.scale, env.budgets.limits()
            out += [local_search(instance, plan, weights, scale, rounds=polish,
                                 limits=limits) for plan, _ in out]
        hints = {}  # the best episode plan of each pair starts that pair's period search
        for plan, value in out:
            key = (plan.dp, plan.micro_batch)
            if key not in hints or value > hints[key][1]:
                hints[key] = (plan, value)
        out += self._placed(instance, ranking if settings.pairs else [], env.budgets,
                            allowance, settings.pairs, settings.exhaust,
                            {key: plan for key, (plan, _) in hints.items()})
        ranked_found = bool(out)
        if settings.pairs and not out:
            # the masks' completion test is sufficient, not necessary: in a tight state the
            # only plans may mix options (the test offers no pair) or the offered pairs may
            # have none within the budgets; the DP places every other pair before "none"
            out = self._placed(instance, env.cache.pairs_beyond(env.budgets), env.budgets,
                               allowance)
        # the lower level itself ran out (not the episodes around it): :meth:`resume`
        self._lower_ran_out = bool(settings.pairs) and allowance is not None \
            and allowance.stopped
        if failure is not None and not out:
            self._no_plan(instance, budgets, settings, failure, allowance)
            return []
        if failure is not None:
            return out
        if not episodes and (not ranked_found or settings.fallback
                             and allowance is not None and allowance.stopped):
            # the lower level found nothing, or ran out of time: the policy's own plan too
            out += self._episodes(instance, weights, budgets, 0, generator)[0]
        return out

    def _placed(self, instance: Instance, pairs: list[int], budgets: Budgets,
                allowance: Allowance | None, first: int = 0, exhaust: bool = True,
                hints: dict | None = None) -> list[tuple[Plan, float]]:
        """The lower level's plans of candidate ``pairs`` in that order
        (:func:`rl.lower.search`: the ``first`` ones, then with ``exhaust`` every one a
        DP run cannot prove slower than the best so far), each with its value in the
        episode reset last. A pair's search starts from ``hints`` (a plan per (dp,
        micro-batch)) and from its latest plans on any state of the instance
        (:mod:`rl.warm_starts`)."""
        env = self.env
        # in the current link state, made as the search reaches them
        tables = (env.cache.tables_at(instance, index) for index in pairs)
        key = InstanceStatics.key(instance)
        starts = self.latest.starts(key, budgets, instance.free_gpus)
        for pair, plan in (hints or {}).items():
            starts[pair] = [plan] + starts.get(pair, [])
        out = []
        for placed in search(tables, budgets, first, exhaust, starts, allowance):
            if placed.plan is not None:
                self.latest.add(key, placed.plan, placed.step_time_s)
                out.append((placed.plan, env.score(placed.plan)[0]))
        return out

    def _no_plan(self, instance: Instance, budgets: Budgets, settings: DecisionSettings,
                 failure: NoFeasiblePlan, allowance: Allowance | None) -> None:
        """Where neither the masks nor the lower level's DP over every pair found a plan:
        raises :class:`NoPlanInTime` if the DP ran out of time, :class:`NoPlanWithinBudget`
        if a plan exists without the request's GPU and cost budgets; returns where none
        exists at all."""
        def late() -> bool:
            return allowance is not None and allowance.stopped

        def out_of_time() -> NoPlanInTime:  # the limit that ran out: work, or else time
            worked_out = allowance.work is not None and allowance.work <= 0
            limit = f"{settings.lower_work} units of DP work" if worked_out \
                else f"{settings.lower_time:g} s"
            return NoPlanInTime(f"{instance.name}: no plan found within the lower level's "
                                f"limit ({limit}; a longer one may find one)")

        if late():
            raise out_of_time()
        if isinstance(failure, NoPlanWithinBudget):
            raise failure
        if budgets.gpus is None and budgets.cost is None:
            return
        # the masks offer no pair at all: is there a plan without the request's budgets?
        loose = effective_budgets(instance, NO_BUDGETS)
        if self._placed(instance, list(range(len(self.env.cache.rules.candidates))), loose,
                        allowance):
            raise NoPlanWithinBudget(f"{instance.name}: no plan within budget "
                                     f"({describe_budgets(self.env.budgets)})")
        if late():
            raise out_of_time()

    def decide(self, instance: Instance, weights, budgets: Budgets = NO_BUDGETS,
               settings: DecisionSettings = HIERARCHICAL) -> PlanDecision:
        """The best of the decision's candidate plans (:meth:`plans`), timed and
        explained."""
        start = time.perf_counter()
        try:
            candidates = self.plans(instance, weights, budgets, settings)
        except NoPlanWithinBudget as err:
            raise InputError(str(err)) from None
        if not candidates:
            raise InputError(f"instance {instance.name!r}: no feasible plan exists (the "
                             "model fits in no combination of the free GPUs)")
        plan, _ = max(candidates, key=lambda item: item[1])
        latency = time.perf_counter() - start
        # the scale of the instance's state: the env may hold another request's
        return PlanDecision.explained(instance, plan, preference(weights), budgets,
                                      effective_budgets(instance, budgets), latency,
                                      self.env.cache_of(instance).scale)

    def front(self, instance: Instance, preferences=SWEEP_PREFERENCES,
              settings: DecisionSettings = HIERARCHICAL,
              cost_steps: int = COST_STEPS, resume: bool = True) -> Front:
        """A front by budget sweeps (:func:`sweep_front`): for each preference, the GPU
        budget steps down below each decision's plan, and at each GPU level up to
        ``cost_steps`` cost budgets below its plan's cost; with ``resume``, then each
        decision that ran out of time or work once more (:meth:`resume`).

        A front of the default sweep (preferences and cost steps) none of whose decisions
        ran out of time or work is kept (:attr:`fronts`, its provenance says
        ``answers_later_requests``): later requests on the state with these settings read
        it. Where a decision ran out, a later decision may find a better plan than the
        front holds, and is made. A front asked again is swept again (its requests
        answered before are answered the same)."""
        start = time.perf_counter()
        key = self._front_key(instance, settings)
        self.fronts.drop(key)
        # plans kept from earlier states start the sweep's first placements (README): a
        # front made so is not a cold one, and says so
        kept = sorted(self.latest.pairs(InstanceStatics.key(instance)))
        ran_out = []  # per decision of the sweep, whether its lower level ran out

        def decide(weights, budgets: Budgets) -> list[tuple[Plan, float]]:
            request = self._request(instance, weights, budgets, settings)
            answered = request in self.answers  # before the sweep: cut short or not
            try:
                out = self.plans(instance, weights, budgets, settings)
            except NoPlanInTime:
                ran_out.append(True)
                raise
            ran_out.append(request in self.cut_short if answered else self._lower_ran_out)
            return out

        def resumed(weights, budgets: Budgets) -> list[tuple[Plan, float]] | None:
            try:
                out = self.resume(instance, weights, budgets, settings)
            except NoPlanInTime:
                ran_out.append(True)
                raise
            if out is not None:
                ran_out.append(self._lower_ran_out)
            return out

        plans, decisions = sweep_front(
            decide, lambda plan: float(evaluate_plans(instance, [plan]).comm_cost[0]),
            preferences, cost_steps, resumed if resume else None)
        front = Front.from_plans(instance, plans, "heuristic")
        front.provenance = {"command": "rl.scheduler.Scheduler.front()", "method": "hippo",
                            "versions": {**versions(), "torch": torch.__version__},
                            "parameters": {"checkpoint": self.checkpoint,
                                           **settings.to_dict(),
                                           "cost_steps": cost_steps, "resume": resume,
                                           "preferences": [list(w) for w in preferences]},
                            "wall_time_s": round(time.perf_counter() - start, 4),
                            "decisions": decisions,
                            "kept_plans_of_pairs": [list(pair) for pair in kept]}
        answers = bool(front.points) and not any(ran_out) and cost_steps == COST_STEPS \
            and [tuple(w) for w in preferences] == [tuple(w) for w in SWEEP_PREFERENCES]
        front.provenance["answers_later_requests"] = answers
        if answers:
            self.fronts.add(key, instance, [point.plan for point in front.points],
                            self.env.cache_of(instance).scale)
        return front
