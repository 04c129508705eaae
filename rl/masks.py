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
The test (:meth:`PlanRules.completable`) asks whether some *uniform* completion exists:
``n'`` more stages of one option, packed into the domains' remaining GPUs, holding between
``n'`` and their summed caps. Placing the first stage of such a completion leaves a uniform
completion of the rest, so every admitted state admits an action, by induction. The test is
sufficient, not necessary: a state whose only completions mix options is masked too.
"""

from __future__ import annotations

from dataclasses import dataclass, field
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


@dataclass(frozen=True)
class Segment:
    domain: int
    layers: int
    option: int
    stages: int


@dataclass
class BuildState:
    """A partly built plan: segments placed so far, back to front."""

    pair: int
    segments: list[Segment] = field(default_factory=list)
    positions_used: int = 0
    layers_left: int = 0
    free: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))


class PlanRules:
    """Which segments are admissible for one instance (module doc)."""

    def __init__(self, instance: Instance):
        self.instance = instance
        self.free = np.array([d.free_gpus for d in instance.domains], dtype=np.int64)
        self.layers = instance.model.layers
        self._completions: dict[tuple, np.ndarray] = {}
        self._max_layers: dict[tuple, int] = {}
        candidates = all_pair_tables(instance)
        # a pair is offered only if a plan of it can be completed from scratch
        self.pairs: list[PairTables] = [t for t in candidates
                                        if self._completable(t, 0, self.free)[self.layers]]

    # -- the completion test -----------------------------------------------------------
    def _completable(self, tables: PairTables, positions_used: int,
                     free: np.ndarray) -> np.ndarray:
        key = (tables.dp, tables.micro_batch, positions_used, free.tobytes())
        out = self._completions.get(key)
        if out is None:
            out = self._completions[key] = uniform_completions(tables, positions_used, free)
        return out

    def completable(self, state: BuildState, free: np.ndarray | None = None,
                    positions_used: int | None = None) -> np.ndarray:
        """Boolean array over 0..L: whether that many layers left can still be placed
        (index 0 is always True: nothing left to place)."""
        return self._completable(self.pairs[state.pair],
                                 state.positions_used if positions_used is None
                                 else positions_used,
                                 state.free if free is None else free)

    # -- segments ----------------------------------------------------------------------
    def max_layers(self, tables: PairTables, position: int, option: int, stages: int,
                   finishing: bool) -> int:
        """Most layers an even split over ``stages`` stages from ``position`` fits (0: none);
        with ``finishing`` the front stage also holds the embedding."""
        key = (tables.dp, tables.micro_batch, position, option, stages, finishing)
        out = self._max_layers.get(key)
        if out is None:
            out = self._max_layers[key] = even_split_capacity(tables, position, option,
                                                              stages, finishing)
        return out

    def layer_options(self, state: BuildState, domain: int) -> np.ndarray:
        """(L + 1,) bool: layer counts admissible for a segment in ``domain``."""
        out = np.zeros(self.layers + 1, dtype=bool)
        for option in range(self.pairs[state.pair].num_options):
            for stages in range(1, self.max_stages(state) + 1):
                out |= self.segment_layers(state, domain, option, stages)
        return out

    def max_stages(self, state: BuildState) -> int:
        return self.pairs[state.pair].positions - state.positions_used

    def segment_layers(self, state: BuildState, domain: int, option: int,
                       stages: int) -> np.ndarray:
        """(L + 1,) bool: layer counts admissible with this domain, option and split."""
        tables = self.pairs[state.pair]
        out = np.zeros(self.layers + 1, dtype=bool)
        need = int(tables.gpus[option]) * stages
        left = state.layers_left
        if need > state.free[domain] or stages > self.max_stages(state) or stages > left:
            return out
        position = state.positions_used
        # finishing: the segment takes every layer left and holds the first stage
        if left <= self.max_layers(tables, position, option, stages, finishing=True):
            out[left] = True
        most = min(left - 1, self.max_layers(tables, position, option, stages, False))
        if most >= stages:
            free = state.free.copy()
            free[domain] -= need
            rest = self._completable(tables, position + stages, free)
            counts = np.arange(stages, most + 1)
            out[counts] = rest[left - counts]
        return out

    def admissible(self, state: BuildState, segment: Segment) -> bool:
        if not (0 <= segment.option < self.pairs[state.pair].num_options
                and 0 <= segment.domain < len(self.free) and segment.stages >= 1
                and 1 <= segment.layers <= self.layers):
            return False
        return bool(self.segment_layers(state, segment.domain, segment.option,
                                         segment.stages)[segment.layers])

    def start(self, pair: int) -> BuildState:
        return BuildState(pair=pair, layers_left=self.layers, free=self.free.copy())

    def place(self, state: BuildState, segment: Segment) -> BuildState:
        """The state after an admissible segment."""
        tables = self.pairs[state.pair]
        free = state.free.copy()
        free[segment.domain] -= int(tables.gpus[segment.option]) * segment.stages
        return BuildState(pair=state.pair, segments=[*state.segments, segment],
                          positions_used=state.positions_used + segment.stages,
                          layers_left=state.layers_left - segment.layers, free=free)

    def pair_of(self, plan: Plan) -> int | None:
        """Index of ``plan``'s (dp, micro-batch) pair among the offered ones, or None."""
        return next((i for i, t in enumerate(self.pairs)
                     if (t.dp, t.micro_batch) == (plan.dp, plan.micro_batch)), None)

    def build(self, plan: Plan) -> BuildState | None:
        """The state reached by placing ``plan`` back to front, or None where the masks
        forbid a step (or the pair is not offered). A run of stages in one domain with one
        option and an even split (extra layers at the back) is placed as one segment; any
        other stage as a segment of its own. The state's segments are what a demonstration
        replays."""
        pair = self.pair_of(plan)
        if pair is None:
            return None
        tables, state = self.pairs[pair], self.start(pair)
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


def even_split_capacity(tables: PairTables, position: int, option: int, stages: int,
                        finishing: bool) -> int:
    """Most layers an even split over ``stages`` stages from ``position`` fits; 0: none."""
    if position + stages > tables.positions:
        return 0
    caps = tables.layer_cap[position:position + stages, option].copy()
    if finishing:
        caps[-1] = tables.layer_cap_first[position + stages - 1, option]
    best = 0
    for layers in range(stages, tables.layers + 1):  # fitting is monotone in the layer count
        if all(n <= cap for n, cap in zip(even_split(layers, stages), caps, strict=True)):
            best = layers
        else:
            break
    return best


def uniform_completions(tables: PairTables, positions_used: int,
                        free: np.ndarray) -> np.ndarray:
    """(L + 1,) bool: the layer counts that ``n'`` more stages of one option can hold, for
    some option and ``n'``, packed into the GPUs ``free`` and the positions left."""
    out = np.zeros(tables.layers + 1, dtype=bool)
    out[0] = True
    room = tables.positions - positions_used
    for option in range(tables.num_options):
        count = min(room, int((free // int(tables.gpus[option])).sum()))
        caps = tables.layer_cap[positions_used:positions_used + count, option]
        firsts = tables.layer_cap_first[positions_used:positions_used + count, option]
        before = np.concatenate([[0], np.cumsum(caps)])
        for n in range(1, count + 1):
            if (n > 1 and caps[:n - 1].min() < 1) or firsts[n - 1] < 1:
                continue
            most = min(int(before[n - 1] + firsts[n - 1]), tables.layers)
            if most >= n:
                out[n:most + 1] = True
    return out
