"""Exact action masks of the plan-building episode: every finished plan is feasible.

A plan is built *back to front* in segments. A segment is one visit of the chain to a domain:
the domain, its layer count, one (tp, recompute) option and a split into ``n`` consecutive
stages (the layers spread evenly, the extra layers on the back stages). Building from the
back means every stage's position counted from the end of the pipeline, and with it the
number of micro-batches whose activations it holds, is known when the stage is placed, so
the memory caps of :class:`solvers.tables.PairTables` (the exact models' own caps) apply
exactly; the segment that uses up the layers holds the first stage, with the embedding.

Hard constraints checked per segment: GPUs left in the domain, the stage limit, memory per
stage, at least one layer per stage, the layers summing to the model's. tp <= node size,
heads divisible by tp and the search space are built into the options and pairs.

No dead ends: a segment is admitted only if the layers left after it can still be placed.
The test (:meth:`PlanRules.completions`) asks whether some *uniform* completion exists:
``n'`` more stages of one option, packed into the domains' remaining GPUs, holding between
``n'`` and their summed caps. Placing the first stage of such a completion leaves a uniform
completion of the rest, so every admitted state admits an action, by induction. The test is
sufficient, not necessary: a state whose only completions mix options is masked too.

Budgets (:class:`Budgets`) are enforced here, exactly, since both are additive once the
pair is chosen: a plan's GPUs are the sum of its stages' ``dp * tp`` and its traffic cost
the sum of its boundaries' costs (``PairTables.cost[front domain, back domain]``, 0 inside
a domain). A segment must fit the GPUs and the cost left (the boundary into the domain
behind is paid when the segment is placed), and the uniform completion of the rest must
fit what is left then. Under a cost budget the completions are of two kinds, each closed
under placing its first stage (so the induction above still holds): any packing of ``n``
stages whose every boundary could be the dearest (``n`` times the dearest boundary within
the budget left), or a packing into the domain behind and at most one more domain whose
boundary into it is affordable. The step-time cap is not additive; it is the
environment's soft constraint (a Lagrange penalty), never a mask.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from itertools import groupby

import numpy as np

from formulation.instance import Instance
from formulation.plan import Plan, Stage
from solvers.tables import PairTables, all_pair_tables


def even_split(layers: int, stages: int) -> list[int]:
    """Layers per stage, back to front: as even as possible, the extra ones at the back
    (the back stages hold fewer micro-batches in flight, so they have more room)."""
    base, extra = divmod(layers, stages)
    return [base + (1 if i < extra else 0) for i in range(stages)]


UNLIMITED = 1 << 40  # GPUs left without a GPU budget
COST_TOLERANCE = 5e-13  # relative: half the evaluator's, so a masked plan is never over


@dataclass(frozen=True)
class Budgets:
    """Limits one decision must meet: a plan's GPUs and cross-domain traffic cost per step
    (exact, through the masks) and its step time (soft: the environment's penalty). None:
    no limit."""

    gpus: int | None = None
    cost: float | None = None
    step_time: float | None = None

    def __post_init__(self):
        if self.gpus is not None and not (isinstance(self.gpus, int | np.integer)
                                          and self.gpus >= 1):
            raise ValueError(f"budgets.gpus must be an integer >= 1, got {self.gpus!r}")
        for name in ("cost", "step_time"):
            value = getattr(self, name)
            if value is not None and not (np.isfinite(value) and value >= 0
                                          and (name == "cost" or value > 0)):
                raise ValueError(f"budgets.{name} must be a finite number "
                                 f"{'>= 0' if name == 'cost' else '> 0'}, got {value!r}")

    @property
    def any(self) -> bool:
        return self.gpus is not None or self.cost is not None or self.step_time is not None

    def to_dict(self) -> dict:
        return {"gpus": self.gpus, "cost": self.cost, "step_time": self.step_time}

    def limits(self) -> np.ndarray:
        """(step time, GPUs, cost) a plan may reach within the budgets (inf: no limit)."""
        return np.array([np.inf if self.step_time is None else self.step_time,
                         np.inf if self.gpus is None else self.gpus,
                         np.inf if self.cost is None else self.cost], dtype=float)


NO_BUDGETS = Budgets()


@dataclass(frozen=True)
class Segment:
    domain: int
    layers: int
    option: int
    stages: int


@dataclass
class BuildState:
    """A partly built plan: segments placed so far, back to front, and what is left of the
    free GPUs and the budgets (``gpus_left``, ``cost_left``: the GPU and cost budgets
    minus what the segments use; a large number and ``inf`` without a budget)."""

    pair: int
    segments: list[Segment] = field(default_factory=list)
    positions_used: int = 0
    layers_left: int = 0
    free: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    gpus_left: int = 0
    cost_left: float = float("inf")
    cost_slack: float = 0.0  # rounding allowance of the cost budget
    table: np.ndarray | None = field(default=None, repr=False, compare=False)
    """The admissible segments (:meth:`PlanRules.segments`), once computed."""

    @property
    def behind(self) -> int | None:
        """Domain of the segment placed last (the chain's neighbour of the next one)."""
        return self.segments[-1].domain if self.segments else None


@dataclass(frozen=True, eq=False)
class PairLimits:
    """Per pair, what a segment and a uniform completion can hold, by position ``p``,
    option ``o`` and stage count ``n`` (index ``n``; index 0 and positions past the last
    are 0 / empty):

    * ``reach[p, o, n]``: the layer counts some ``n' <= n`` stages of option ``o`` from
      ``p`` can hold, the front one with the embedding (a uniform completion), as
      bitsets over 0..L (``WORD``-bit words);
    * ``most[p, o, n]``, ``most_first[p, o, n]``: the most layers an even split over ``n``
      stages from ``p`` fits (0: none), the second with the embedding on its front stage.

    ``most`` and ``most_first`` are made on first use: the PAIR mask (which pairs can
    start) needs ``reach`` only, and a cold start makes every pair's limits."""

    reach: np.ndarray  # (S + 1, O, S + 1, W) uint64
    layer_cap: np.ndarray  # the pair's memory caps (PairTables), what ``most`` is made of
    layer_cap_first: np.ndarray
    layers: int

    @cached_property
    def _most(self) -> tuple[np.ndarray, np.ndarray]:
        (S, O), L = self.layer_cap.shape, self.layers
        most = np.zeros((S + 1, O, S + 1), np.int64)
        most_first = np.zeros_like(most)
        for n in range(1, min(S, L) + 1):  # every window of n positions at once
            caps = np.lib.stride_tricks.sliding_window_view(self.layer_cap, n, axis=0)
            most[:S - n + 1, :, n] = even_split_most(caps, L)  # caps: (p, O, n)
            caps = caps.copy()
            caps[..., -1] = self.layer_cap_first[n - 1:]
            most_first[:S - n + 1, :, n] = even_split_most(caps, L)
        return most, most_first

    @property
    def most(self) -> np.ndarray:  # (S + 1, O, S + 1) int
        return self._most[0]

    @property
    def most_first(self) -> np.ndarray:
        return self._most[1]

    @staticmethod
    def of(tables: PairTables) -> PairLimits:
        S, O, L = tables.positions, tables.num_options, tables.layers
        # a uniform completion of n stages from p holds [n, top] layers where every stage
        # but the front one holds one and the front one, with the embedding, one too
        p, n = np.meshgrid(np.arange(S), np.arange(1, S + 1), indexing="ij")
        inside = p + n <= S
        front = np.minimum(p + n - 1, S - 1)
        cumulative = np.concatenate([np.zeros((1, O), np.int64),
                                     np.cumsum(tables.layer_cap, axis=0)])
        held = cumulative[np.minimum(p + n - 1, S)] - cumulative[p]  # (p, n, O) back stages
        positive = np.concatenate([np.zeros((1, O), np.int64),
                                   np.cumsum(tables.layer_cap < 1, axis=0)])
        empty = positive[np.minimum(p + n - 1, S)] - positive[p]  # back stages holding none
        first = tables.layer_cap_first[front]
        top = np.minimum(held + first, L)
        ok = inside[..., None] & (empty == 0) & (first >= 1) & (top >= n[..., None])
        layers = np.arange(L + 1)
        span = ok[..., None] & (layers >= n[..., None, None]) & (layers <= top[..., None])
        reach = np.zeros((S + 1, O, S + 1, L + 1), dtype=bool)
        reach[:S, :, 1:] = np.logical_or.accumulate(span, axis=1).transpose(0, 2, 1, 3)
        reach[..., 0] = True
        return PairLimits(pack(reach), tables.layer_cap, tables.layer_cap_first, L)


WORD = 64


def pack(flags: np.ndarray) -> np.ndarray:
    """Boolean arrays over the last axis as little-endian 64-bit words."""
    words = -(-flags.shape[-1] // WORD)
    padded = np.zeros((*flags.shape[:-1], words * WORD), dtype=bool)
    padded[..., :flags.shape[-1]] = flags
    return np.packbits(padded, axis=-1, bitorder="little").view("<u8")


def unpack(bits: np.ndarray, length: int) -> np.ndarray:
    """The inverse of :func:`pack`: the first ``length`` flags."""
    flat = np.ascontiguousarray(bits).view(np.uint8)
    return np.unpackbits(flat, axis=-1, bitorder="little")[..., :length].astype(bool)


def even_split_most(caps: np.ndarray, layers: int) -> np.ndarray:
    """Most layers (at most ``layers``) an even split fits over stages with ``caps``
    (rows; stages back to front, the extra layers on the back ones): with ``m`` the least
    cap, ``n m`` layers fit, plus one per stage in front of the first stage of cap ``m``
    (counting from the back); 0 where a stage holds no layer."""
    count = caps.shape[-1]
    least = caps.min(axis=-1)
    first = np.argmax(caps == least[..., None], axis=-1)
    out = np.minimum(count * least + first, layers)
    return np.where((least >= 1) & (count <= layers), out, 0)


class PlanRules:
    """Which segments are admissible for one instance state (module doc). ``tables``: the
    pairs' tables if already built (:func:`solvers.tables.with_free_gpus` of the ones at
    full capacity: their options that fit no domain are never admitted); ``limits``: a
    dict of :class:`PairLimits` by (dp, micro-batch) to share between load states of one
    instance (they depend on the memory caps only).

    ``pairs``: the pairs offered (a plan of them can be built by these rules);
    ``candidates``: ``pairs`` followed by the ones the completion test cannot start, whose
    plans, if any, mix options (the test is sufficient, not necessary)."""

    def __init__(self, instance: Instance, tables: list[PairTables] | None = None,
                 limits: dict | None = None):
        self.instance = instance
        self.free = instance.free_gpus
        self.layers = instance.model.layers
        self._limits: dict[tuple[int, int], PairLimits] = {} if limits is None else limits
        candidates = all_pair_tables(instance) if tables is None else tables
        self.pairs: list[PairTables] = candidates
        # per pair: the dearest boundary (a plan has at most one per stage)
        self._dearest = [float(t.cost.max(initial=0.0)) for t in candidates]
        # a pair is offered only if a plan of it can be completed from scratch
        offered = [i for i in range(len(candidates)) if self.startable(i, NO_BUDGETS)]
        self.pairs = [candidates[i] for i in offered]
        self._dearest = [self._dearest[i] for i in offered]
        # the pairs the test cannot complete may still have plans that mix options: they
        # follow the offered ones, for a search that does not build plans by these rules
        # (the lower level's DP, :mod:`rl.lower`)
        kept = set(offered)
        self.candidates = self.pairs + [t for i, t in enumerate(candidates) if i not in kept]

    def limits(self, pair: int) -> PairLimits:
        tables = self.pairs[pair]
        key = (tables.dp, tables.micro_batch)
        out = self._limits.get(key)
        if out is None:
            out = self._limits[key] = PairLimits.of(tables)
        return out

    # -- the completion test -----------------------------------------------------------
    def completions(self, pair: int, position, free: np.ndarray, behind, own_free,
                    gpus_left, cost_left, slack: float) -> np.ndarray:
        """Bitsets (..., W) of the layer counts a uniform completion can hold within the
        free GPUs and the budgets left (module doc), for states given as broadcastable
        arrays (...): ``position``, ``behind`` (the domain of the last segment; None: no
        segment yet), ``own_free`` (the free GPUs left in ``behind``; the other domains
        have ``free``, (K,)), ``gpus_left`` and ``cost_left``."""
        tables, limits = self.pairs[pair], self.limits(pair)
        gpus = tables.gpus.astype(np.int64)  # (O,)
        slots = free[:, None] // gpus  # (K, O)
        position = np.asarray(position)
        gpus_left = np.asarray(gpus_left)[..., None] // gpus
        room = (tables.positions - position)[..., None]
        cost_left = np.asarray(cost_left, dtype=float)
        priced = np.isfinite(cost_left)
        if behind is None:
            count = np.minimum(np.minimum(slots.sum(axis=0), gpus_left), room)
            if np.any(priced):  # a start domain a and at most one more domain d
                allowance = cost_left + slack
                entry = (allowance[..., None, None] >= tables.cost.T) \
                    & ~np.eye(len(free), dtype=bool)  # [..., a, d]
                two = np.where(entry[..., None], slots[:, None, :] + slots[None, :, :],
                               0).max(axis=(-3, -2))
                two = np.maximum(two, slots.max(axis=0))
                count = self._priced(pair, count, two, gpus_left, room, allowance, priced)
        else:
            behind = np.asarray(behind)
            own = np.asarray(own_free)[..., None] // gpus  # (..., O)
            count = np.minimum(np.minimum(slots.sum(axis=0) - slots[behind] + own,
                                          gpus_left), room)
            if np.any(priced):  # the domain behind and at most one more, affordable
                allowance = cost_left + slack
                others = np.arange(len(free)).reshape((-1,) + (1,) * behind.ndim) != behind
                into = (tables.cost[:, behind] <= allowance) & others  # [k, ...]
                # most stages of each option one affordable domain holds, per behind
                reachable = np.where(into[..., None], slots[(...,) + (None,) * behind.ndim
                                                            + (slice(None),)],
                                     0).max(axis=0)
                count = self._priced(pair, count, own + reachable, gpus_left, room,
                                     allowance, priced)
        count = np.clip(count, 0, tables.positions)
        position = np.broadcast_to(position, count.shape[:-1])[..., None]
        bits = limits.reach[np.minimum(position, tables.positions), np.arange(len(gpus)),
                            count]
        return np.bitwise_or.reduce(bits, axis=-2)

    def _priced(self, pair: int, count, two, gpus_left, room, allowance, priced):
        """Stage counts under a cost budget: any packing whose every boundary is the
        dearest within the budget, or a packing into two domains (module doc)."""
        dearest = self._dearest[pair]
        allowance = np.where(priced, allowance, 0.0)[..., None]
        any_packing = count if dearest <= 0 else np.minimum(
            count, np.floor(allowance / dearest).clip(0, 1 << 20).astype(np.int64))
        one_more = np.minimum(np.minimum(two, gpus_left), room)
        return np.where(priced[..., None], np.maximum(any_packing, one_more), count)

    # -- segments ----------------------------------------------------------------------
    def segments(self, state: BuildState) -> np.ndarray:
        """(K, O, S, L + 1) bool: whether a segment in domain ``d`` of option ``o``, with
        ``n + 1`` stages and ``c`` layers is admissible in ``state`` (computed once per
        state, for every segment at once)."""
        if state.table is not None:
            return state.table
        tables, limits = self.pairs[state.pair], self.limits(state.pair)
        K, O, S, L = len(self.free), tables.num_options, tables.positions, self.layers
        gpus = tables.gpus.astype(np.int64)
        stages = np.arange(1, S + 1)
        need = gpus[:, None] * stages[None, :]  # (O, S)
        position, left = state.positions_used, state.layers_left
        behind = state.behind
        entry = np.zeros(K) if behind is None else tables.cost[:, behind]  # (K,)
        room = stages <= min(S - position, left)
        valid = ((need[None] <= state.free[:, None, None]) & (need <= state.gpus_left)[None]
                 & room[None, None, :]
                 & (entry <= state.cost_left + state.cost_slack)[:, None, None])
        out = np.zeros((K, O, S, L + 1), dtype=bool)
        at = np.minimum(position, S)
        finishing = left <= limits.most_first[at, :, 1:]  # (O, S)
        out[..., left] = valid & finishing[None]
        most = np.minimum(left - 1, limits.most[at, :, 1:])  # (O, S)
        if np.any(valid & (most >= stages)[None]):
            domain = np.arange(K)
            bits = self.completions(
                state.pair, position + stages[None, None, :], state.free,
                np.broadcast_to(domain[:, None, None], (K, O, S)),
                np.maximum(state.free[:, None, None] - need[None], 0),
                state.gpus_left - need[None], (state.cost_left - entry)[:, None, None]
                + np.zeros((1, O, S)), state.cost_slack)
            rest = unpack(bits, L + 1)  # (K, O, S, L + 1) by layers left after
            count = np.arange(L + 1)
            inside = (count >= stages[:, None]) & (count[None, None, :] <= most[..., None])
            after = np.zeros((K, O, S, L + 1), dtype=bool)
            after[..., :left + 1] = rest[..., left::-1]  # c layers leave left - c
            out |= valid[..., None] & inside[None] & after
        state.table = out
        return out

    def entry_cost(self, state: BuildState, domain: int) -> float:
        """Cost of the boundary a segment in ``domain`` makes with the one behind it."""
        behind = state.behind
        return 0.0 if behind is None else float(self.pairs[state.pair].cost[domain, behind])

    def admissible(self, state: BuildState, segment: Segment) -> bool:
        table = self.segments(state)  # [domain, option, stages - 1, layers]
        if not (0 <= segment.domain < table.shape[0] and 0 <= segment.option < table.shape[1]
                and 1 <= segment.stages <= table.shape[2]
                and 1 <= segment.layers <= self.layers):
            return False
        return bool(table[segment.domain, segment.option, segment.stages - 1, segment.layers])

    def start(self, pair: int, budgets: Budgets = NO_BUDGETS) -> BuildState:
        cost = float("inf") if budgets.cost is None else float(budgets.cost)
        return BuildState(pair=pair, layers_left=self.layers, free=self.free.copy(),
                          gpus_left=UNLIMITED if budgets.gpus is None else int(budgets.gpus),
                          cost_left=cost,
                          cost_slack=0.0 if budgets.cost is None else COST_TOLERANCE * cost)

    def startable(self, pair: int, budgets: Budgets) -> bool:
        """Whether a plan of ``pair`` within ``budgets`` can be built (the PAIR mask): a
        uniform completion of every layer from an empty state."""
        state = self.start(pair, budgets)
        return bool(unpack(self.completions(pair, 0, self.free, None, None, state.gpus_left,
                                            state.cost_left, state.cost_slack),
                           self.layers + 1)[self.layers])

    def place(self, state: BuildState, segment: Segment) -> BuildState:
        """The state after an admissible segment."""
        tables = self.pairs[state.pair]
        need = int(tables.gpus[segment.option]) * segment.stages
        free = state.free.copy()
        free[segment.domain] -= need
        return BuildState(pair=state.pair, segments=[*state.segments, segment],
                          positions_used=state.positions_used + segment.stages,
                          layers_left=state.layers_left - segment.layers, free=free,
                          gpus_left=state.gpus_left - need,
                          cost_left=state.cost_left - self.entry_cost(state, segment.domain),
                          cost_slack=state.cost_slack)

    def pair_of(self, plan: Plan) -> int | None:
        """Index of ``plan``'s (dp, micro-batch) pair among the offered ones, or None."""
        return next((i for i, t in enumerate(self.pairs)
                     if (t.dp, t.micro_batch) == (plan.dp, plan.micro_batch)), None)

    def build(self, plan: Plan, budgets: Budgets = NO_BUDGETS) -> BuildState | None:
        """The state reached by placing ``plan`` back to front under ``budgets``, or None
        where the masks forbid a step (or the pair is not offered). A run of stages in one
        domain with one option and an even split (extra layers at the back) is placed as
        one segment; any other stage as a segment of its own. The state's segments are
        what a demonstration replays."""
        pair = self.pair_of(plan)
        if pair is None or not self.startable(pair, budgets):
            return None
        tables, state = self.pairs[pair], self.start(pair, budgets)
        runs = groupby(plan.stages[::-1], key=lambda s: (s.domain, s.tp, s.recompute))
        for (domain, tp, recompute), run in runs:
            if (tp, recompute) not in tables.options:
                return None
            option = tables.options.index((tp, recompute))
            layers = [s.layers for s in run]
            merged = Segment(domain, sum(layers), option, len(layers))
            if len(layers) > 1 and layers == even_split(sum(layers), len(layers)) \
                    and self.admissible(state, merged):
                state = self.place(state, merged)
                continue
            for count in layers:
                segment = Segment(domain, count, option, 1)
                if not self.admissible(state, segment):
                    return None
                state = self.place(state, segment)
        return state

    def plan(self, state: BuildState) -> Plan:
        """The finished plan, front to back."""
        tables = self.pairs[state.pair]
        stages = []
        for segment in state.segments:  # back to front
            tp, recompute = tables.options[segment.option]
            stages += [Stage(segment.domain, n, int(tp), recompute)
                       for n in even_split(segment.layers, segment.stages)]
        return Plan(dp=tables.dp, micro_batch=tables.micro_batch, stages=tuple(stages[::-1]))
