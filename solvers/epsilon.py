"""Exact Pareto fronts in (step_time_s, gpus, comm_cost) by the epsilon-constraint method.

For a GPU cap ``n`` the inner sweep walks the (T, C) front of the plans with ``N <= n``:
minimise T under ``C <= c``, record the plan, set ``c`` just below its cost, repeat until
no plan is left. A 3-D non-dominated point z with ``N_z <= n`` is (T, C)-non-dominated among
those plans, so the sweep returns a plan with z's (T, C) and some ``N' >= N_z`` (ties in T
resolve on later iterations: a cheaper plan of equal T is found once ``c`` drops below the
dearer one). Hence no front point has N between the largest N found and ``n``, the next cap
is that largest N minus one, and a point found with too many GPUs is found again with its
own N at a later, lower cap. The outer loop stops when a sweep finds nothing; the candidates
are then filtered for 3-D non-dominance. No lexicographic re-solves are needed.

The outer loop is cut into independent pieces by GPU interval: a :class:`Sweep` over
``(low, high]`` starts at cap ``high`` and stops once the next cap is at most ``low``; the
union of the candidates of intervals that cover ``(0, inf)`` holds the whole front. A sweep's
position (:class:`SweepState`) is plain data, so a sweep cut short by its deadline resumes
where it stopped (``solvers.exact --resume``).

Each (dp, micro-batch) pair has its own model; one step's least step time "over the
instance" is the best over pairs, organised by :class:`PairPool` to skip pairs that cannot
win. Every claim that prunes a pair or closes a step passes :mod:`solvers.certify` first,
and only certified outcomes are remembered. A step is *proven* when every pair is either
certified optimal or certified unable to beat the best plan; each candidate carries that flag
and the step's lower bound, so a front that is not exact still states every point's gap.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from formulation.plan import Plan
from solvers.certify import TOLERANCE, Certifier, Proof
from solvers.engine import NO_CAP, ModelValues, OutOfTime, SolveRequest, SolveStatus

# Relative slack for ties in step time, and the step below a found cost for the next sweep;
# far below the evaluator agreement tolerance (1e-6), above the engines' tolerances (1e-9).
FIX_SLACK = 1e-9
COST_STEP = 1e-7


@dataclass
class SweepStats:
    solves: int = 0  # engine solves (certified ones; a confirmation counts with its claim)
    reused: int = 0  # pair outcomes known from earlier steps
    floored: int = 0  # pairs ruled out by their step-time floor, no solve needed
    solve_time_s: float = 0.0
    unproven: int = 0  # steps whose least step time is not proven (limits, failed claims)
    proofs: dict[str, int] = field(default_factory=dict)  # Proof -> count

    def merge(self, other: SweepStats) -> None:
        for name in ("solves", "reused", "floored", "solve_time_s", "unproven"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for key, value in other.proofs.items():
            self.proofs[key] = self.proofs.get(key, 0) + value

    def to_dict(self) -> dict:
        return {**dataclasses.asdict(self), "solve_time_s": round(self.solve_time_s, 3)}


@dataclass(frozen=True)
class Candidate:
    """A plan one step found, the step's caps, and what is proven about the step: the plan
    has the least step time under the caps (``proven``), or at least none is below
    ``bound``."""

    plan: Plan
    values: ModelValues
    gpu_cap: float
    cost_cap: float
    proven: bool
    bound: float

    @property
    def gap(self) -> float:
        return max(0.0, self.values.step_time_s - self.bound) / self.values.step_time_s

    def to_dict(self, instance=None) -> dict:
        return {"plan": self.plan.to_dict(instance), "values": dataclasses.asdict(self.values),
                "gpu_cap": self.gpu_cap, "cost_cap": self.cost_cap, "proven": self.proven,
                "bound": self.bound}

    @staticmethod
    def from_dict(document: dict, instance) -> Candidate:
        return Candidate(Plan.from_dict(document["plan"], instance),
                         ModelValues(**document["values"]), float(document["gpu_cap"]),
                         float(document["cost_cap"]), bool(document["proven"]),
                         float(document["bound"]))


@dataclass(frozen=True)
class Memo:
    """One certified min-step outcome of a pair: its caps, the step cap it was solved under,
    and its plan (None: no plan with step time <= ``step_cap`` exists under the caps)."""

    gpu_cap: float
    cost_cap: float
    step_cap: float
    plan: Plan | None
    values: ModelValues | None

    def covers(self, gpu_cap: float, cost_cap: float) -> bool:
        """The query's caps are at least as tight, so what held here still holds there."""
        return self.gpu_cap >= gpu_cap and self.cost_cap >= cost_cap


class PairPool:
    """All pairs' certifiers and what is certified about each pair's min-step problem.

    A solution that is optimal under caps (n1, c1) stays optimal under tighter caps it still
    satisfies, and its step time bounds the tighter problem from below; "nothing below s"
    also carries over to tighter caps. ``min_step`` visits pairs in order of these lower
    bounds (and of each pair's combinatorial floor), skips pairs that cannot beat (or tie)
    the best plan known, and solves the others with a step-time cap at that best, which lets
    the engine prune.

    With a ``gap`` a step stops short of proof: a pair is skipped once its bound is within
    ``gap`` of the best plan, and a pair solved is asked only for a plan below that level
    (``SolveRequest.bound_target``), so the step's bound ends within ``gap`` of its plan.
    """

    def __init__(self, certifiers: list[Certifier], deadline: float | None = None,
                 solve_limit: float | None = None, tolerance: float = TOLERANCE,
                 gap: float = 0.0):
        self.certifiers = certifiers
        self.deadline = deadline
        self.solve_limit = solve_limit
        self.tolerance = tolerance
        self.gap = gap
        self.steps: list[Candidate] = []  # what this pool's steps found (with a gap: reused)
        self.memo: dict[int, list[Memo]] = {i: [] for i in range(len(certifiers))}
        self.step_floors: dict[int, list[tuple[float, float, float]]] = \
            {i: [] for i in range(len(certifiers))}  # (gpu cap, cost cap, step floor)
        self.stats = SweepStats()

    def _limit(self) -> float | None:
        limits = [] if self.solve_limit is None else [self.solve_limit]
        if self.deadline is not None:
            remaining = self.deadline - time.perf_counter()
            if remaining <= 0:
                raise OutOfTime
            limits.append(remaining)
        return min(limits) if limits else None

    def _known(self, i: int, gpu_cap: float, cost_cap: float
               ) -> tuple[float, tuple[Plan, ModelValues] | None]:
        """(lower bound on the pair's least step time, its optimum if already certified),
        from what earlier steps certified and the floors computed at caps at least as
        loose; :meth:`_floor` adds the pair's own floor at these caps where that decides."""
        bound = max((f for n, c, f in self.step_floors[i] if n >= gpu_cap and c >= cost_cap),
                    default=0.0)
        for memo in self.memo[i]:
            if not memo.covers(gpu_cap, cost_cap):
                continue
            values = memo.values
            if values is None:
                bound = max(bound, memo.step_cap)
            elif values.gpus <= gpu_cap and values.comm_cost <= cost_cap:
                return values.step_time_s, (memo.plan, values)
            else:
                bound = max(bound, values.step_time_s)
        return bound, None

    def _floor(self, i: int, gpu_cap: float, cost_cap: float, cutoff: float) -> float:
        """The pair's combinatorial step-time floor under the caps, remembered: a floor holds
        under every tighter cap too, so a later step skips the DP (about 50 ms a pair at
        K = 10 on the full space) while the floor still exceeds what it must beat. The
        ``cutoff`` lets the chain relaxation prove the floor above it. No floor starts past
        the deadline."""
        if self.deadline is not None and time.perf_counter() >= self.deadline:
            raise OutOfTime
        bounds = self.certifiers[i].bounds
        bounds.deadline = self.deadline  # a floor's DP stops there too
        floor = bounds.step_floor(gpu_cap, cost_cap, cutoff)
        self.step_floors[i].append((gpu_cap, cost_cap, floor))
        return floor

    def _enough(self, best_time: float) -> float:
        """A pair whose least step time is above this cannot change the step: it cannot
        beat (or tie) the best plan, or with a ``gap``, it is within the gap of it."""
        if math.isinf(best_time):
            return NO_CAP
        if not self.gap:
            return best_time * (1 + FIX_SLACK)
        return best_time * (1 - self.gap * (1 - FIX_SLACK))  # rounding stays within the gap

    def incumbent(self, gpu_cap: float, cost_cap: float
                  ) -> tuple[Plan, ModelValues] | None:
        """The best known plan (least step time) of any pair meeting the caps, and its
        values: what a step stopped short has found."""
        request = SolveRequest(gpu_cap=gpu_cap, cost_cap=cost_cap)
        best = None
        for i, certifier in enumerate(self.certifiers):
            known = certifier.known.best(request)
            if known is not None and (best is None or known[1] < best[2]):
                best = (i, known[0], known[1])
        if best is None:
            return None
        i, plan, _ = best
        return plan, ModelValues(*self.certifiers[i].known.values_of(plan))

    def min_step(self, gpu_cap: float, cost_cap: float) -> Candidate | None:
        """The plan of least step time under the caps (None if no plan is found), with the
        step's proof and bound."""
        step = self._reuse(gpu_cap, cost_cap) if self.gap else None
        if step is None:
            step = self._min_step(gpu_cap, cost_cap)
            if step is not None:
                self.steps.append(step)
        return step

    def _reuse(self, gpu_cap: float, cost_cap: float) -> Candidate | None:
        """With a gap: an earlier step at looser caps whose plan meets these caps. Its bound
        holds here too (tighter caps never lower the least step time), so that plan, or a
        better known one, is within the gap here as well: no solve."""
        for earlier in self.steps:
            v = earlier.values
            if earlier.gpu_cap >= gpu_cap and earlier.cost_cap >= cost_cap \
                    and v.gpus <= gpu_cap and v.comm_cost <= cost_cap:
                self.stats.reused += 1
                plan, values = earlier.plan, earlier.values
                incumbent = self.incumbent(gpu_cap, cost_cap)
                if incumbent is not None and incumbent[1].step_time_s < values.step_time_s:
                    plan, values = incumbent
                return Candidate(plan, values, gpu_cap, cost_cap,
                                 earlier.proven and plan == earlier.plan,
                                 min(earlier.bound, values.step_time_s))
        return None

    def _min_step(self, gpu_cap: float, cost_cap: float) -> Candidate | None:
        known = {i: self._known(i, gpu_cap, cost_cap) for i in range(len(self.certifiers))}
        best = self.incumbent(gpu_cap, cost_cap)
        best_time = math.inf if best is None else best[1].step_time_s
        # The pairs' own floors, where what earlier steps left does not rule them out already
        # (the cutoff only falls during a step); they also order the solves.
        start_cutoff = self._enough(best_time)
        for i, (bound, optimum) in known.items():
            if optimum is None and bound <= start_cutoff:
                floor = self._floor(i, gpu_cap, cost_cap, start_cutoff)
                known[i] = (max(bound, floor), None)
        floors: list[float] = []  # per pair: a certified lower bound on its least step time
        for i in sorted(known, key=lambda j: known[j][0]):
            bound, optimum = known[i]
            cutoff = NO_CAP if best is None else best_time * (1 + FIX_SLACK)
            enough = self._enough(best_time)
            if bound > enough:
                self.stats.floored += 1
                floors.append(bound)
                continue
            if optimum is not None:
                self.stats.reused += 1
                plan, values = optimum
                floors.append(values.step_time_s)
            else:
                request = SolveRequest(gpu_cap=gpu_cap, cost_cap=cost_cap,
                                       step_cap=None if best is None else cutoff,
                                       time_limit=self._limit(),
                                       bound_target=enough if self.gap and best else None)
                certified = self.certifiers[i].solve(request, self.deadline)
                solve = certified.solve
                self.stats.solves += 1
                self.stats.solve_time_s += solve.wall_time_s
                self.stats.proofs[certified.proof.value] = \
                    self.stats.proofs.get(certified.proof.value, 0) + 1
                plan, values = solve.plan, solve.values
                if certified.optimum is not None:  # the least step time, above the cap
                    optimum = certified.optimum
                    self.memo[i].append(Memo(gpu_cap, cost_cap, NO_CAP, optimum.plan,
                                             optimum.values))
                    floors.append(optimum.values.step_time_s)
                elif certified.proven:
                    self.memo[i].append(Memo(gpu_cap, cost_cap, cutoff, plan, values))
                    floors.append(cutoff if solve.status == SolveStatus.INFEASIBLE
                                  else values.step_time_s)
                else:  # the engine's own bound, unless it contradicts its incumbent
                    believable = solve.bound is not None and (
                        solve.objective is None
                        or solve.bound <= solve.objective * (1 + self.tolerance))
                    floors.append(max(bound, solve.bound) if believable else bound)
                if certified.proof == Proof.NONE and solve.status == SolveStatus.LIMIT \
                        and self.deadline is not None and time.perf_counter() >= self.deadline:
                    raise OutOfTime
            if values is not None and values.step_time_s < best_time:
                best, best_time = (plan, values), values.step_time_s
        if best is None:
            if not all(math.isinf(f) or f >= NO_CAP for f in floors):
                self.stats.unproven += 1
            return None
        bound = min(floors, default=math.inf)
        proven = bound >= best_time * (1 - self.tolerance)
        if not proven:
            self.stats.unproven += 1
        return Candidate(best[0], best[1], gpu_cap, cost_cap, proven, min(bound, best_time))


@dataclass
class SweepState:
    """Where a sweep over the GPU interval ``(low, high]`` stands: plain data (JSON)."""

    low: float
    high: float
    gpu_cap: float
    cost_cap: float = NO_CAP
    level_gpus: int = 0  # most GPUs of the points found at this GPU cap so far (0: none)
    done: bool = False
    candidates: list[Candidate] = field(default_factory=list)

    @staticmethod
    def start(low: float = 0.0, high: float = NO_CAP) -> SweepState:
        return SweepState(low=low, high=high, gpu_cap=high)

    def to_dict(self, instance=None) -> dict:
        return {"low": self.low, "high": self.high, "gpu_cap": self.gpu_cap,
                "cost_cap": self.cost_cap, "level_gpus": self.level_gpus, "done": self.done,
                "candidates": [c.to_dict(instance) for c in self.candidates]}

    @staticmethod
    def from_dict(document: dict, instance) -> SweepState:
        return SweepState(float(document["low"]), float(document["high"]),
                          float(document["gpu_cap"]), float(document["cost_cap"]),
                          int(document["level_gpus"]), bool(document["done"]),
                          [Candidate.from_dict(c, instance) for c in document["candidates"]])


def sweep(pool: PairPool, state: SweepState,
          progress: Callable[[str], None] | None = None) -> SweepState:
    """Advance ``state`` until its interval is swept (``state.done``) or the pool's deadline
    passes (:class:`OutOfTime` propagates; ``state`` then says where to resume)."""
    start = time.perf_counter()
    while not state.done:
        point = pool.min_step(state.gpu_cap, state.cost_cap)
        if point is not None:
            state.candidates.append(point)
            state.level_gpus = max(state.level_gpus, point.values.gpus)
            if progress:
                v = point.values
                progress(f"N<={state.gpu_cap:g}: T={v.step_time_s:.4f} N={v.gpus} "
                         f"C={v.comm_cost:.4f} {'proven' if point.proven else 'unproven'} "
                         f"({pool.stats.solves} solves, {time.perf_counter() - start:.1f}s)")
            cost = point.values.comm_cost
            if cost > 0:
                state.cost_cap = cost - max(cost * COST_STEP, 1e-8)
                continue
        # This GPU level is swept: the next cap is below the most GPUs it found.
        if state.level_gpus == 0 or state.level_gpus - 1 <= state.low:
            state.done = True
        else:
            state.gpu_cap, state.cost_cap, state.level_gpus = state.level_gpus - 1, NO_CAP, 0
    return state
