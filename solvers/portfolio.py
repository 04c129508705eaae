"""Both exact engines on one (dp, micro-batch) model, raced in turns of doubling length.

Measured on the quick suite: CP-SAT proves most min-step solves in well under a second, about
15x faster than HiGHS overall, but a few of its solves run for many minutes; HiGHS is slower
on average and far more even. On a bench K = 20 instance CP-SAT needed 4-6 s where HiGHS
took 16-42 s, so CP-SAT's first turn is 20 s, not the 5 s the quick suite suggested. On the
K = 10 full-space instance of issue 13 the roles swap from one solve to the next: at no GPU
cap HiGHS proved in 120 s what CP-SAT had not in 20 s, while at <= 367 GPUs CP-SAT proves in
23-59 s a solve that HiGHS left open for over 10 minutes. So the engines take turns, CP-SAT
first, each turn twice as long as the last pair of turns, each warm-started with the best
incumbent so far: a solve costs at most about three times what the faster engine alone
needs (the doubling's geometric sum, both engines), never an unbounded stall of the slower.
The result names the engine that proved it; where neither proves it in the time allowed,
it keeps the best incumbent and the highest bound of all turns.

An engine whose dual bound trails sits out. On that K = 10 instance, dp = 8, HiGHS's bound
after a turn stays 27-52 % below the incumbent where CP-SAT's is within 0.1-1 % (its LP
relaxation of the period's max terms is weak), and its turns were a quarter of the sweep's
time; CP-SAT's restarts (a turn starts its search afresh) were another sixth. So after a
round in which both engines gave a bound, one whose gap to the best incumbent is more than
``TRAILING_RATIO`` times the other's (and above ``TRAILING_GAP``) sits out the rest of the
solve and the pair's later solves, and the other runs alone in one long turn (at least
``LONE_TURN_FACTOR`` first turns, no restarts). A lone turn that ends unproven brings the
trailing engine back: the race resumes, so no solve can stall on one engine's weakness.
"""

from __future__ import annotations

import dataclasses
import functools
import time

from solvers.cpsat import CpSatEngine
from solvers.engine import EngineStatistics, Solve, SolveRequest, SolveStatus
from solvers.highs import HighsEngine
from solvers.tables import PairTables

FIRST_TURN_S = 20.0  # each engine's first turn; later turns double it
TRAILING_RATIO = 10.0  # a gap this many times the other engine's benches an engine
TRAILING_GAP = 1e-3  # ... unless its gap is this small anyway (relative)
LONE_TURN_FACTOR = 8.0  # a lone turn lasts at least this many first turns


class PortfolioEngine:
    name = "portfolio"

    def __init__(self, tables: PairTables, threads: int = 2, first_turn_s: float = FIRST_TURN_S):
        self.tables = tables
        self.threads = threads
        self.cpsat = CpSatEngine(tables, threads=threads)
        self.first_turn_s = first_turn_s
        self.trailing: str | None = None  # the member sitting out, for the pair's solves
        self.statistics = EngineStatistics()

    @functools.cached_property
    def highs(self) -> HighsEngine:
        """Built on its first turn: its Pyomo model takes about 0.8 s a pair at K = 10 on
        the full space, and most pairs' solves end within CP-SAT's first turn."""
        return HighsEngine(self.tables, threads=self.threads)

    def solve(self, request: SolveRequest) -> Solve:
        start = time.perf_counter()
        limit = request.time_limit
        turn, best, bounds = self.first_turn_s, None, []
        while True:
            members = [name for name in ("cpsat", "highs") if name != self.trailing]
            lone = len(members) == 1
            if lone:
                turn = max(turn, LONE_TURN_FACTOR * self.first_turn_s)
            gaps: dict[str, float] = {}
            cut = False  # a turn shortened by the request's own limit
            for name in members:
                engine = getattr(self, name)
                left = None if limit is None else limit - (time.perf_counter() - start)
                if left is not None and left <= 0:
                    return self._unproven(best, bounds, start)
                cut = cut or (left is not None and left < turn)
                hint = best.plan if best is not None and best.plan is not None else request.hint
                solve = engine.solve(dataclasses.replace(
                    request, hint=hint, time_limit=turn if left is None else min(turn, left)))
                if solve.status.proven:
                    return self.statistics.record(dataclasses.replace(
                        solve, wall_time_s=time.perf_counter() - start))
                self.statistics.handed_over += engine is self.cpsat
                if solve.values is not None and (best is None or solve.objective < best.objective):
                    best = solve
                if solve.bound is not None:
                    bounds.append(solve.bound)
                    gaps[name] = solve.bound
            if lone and not cut:
                self.trailing = None  # the lone engine did not prove it: race again
            elif best is not None and len(gaps) == 2:
                self.trailing = self._trailing(best.objective, gaps)
            turn *= 2

    @staticmethod
    def _trailing(incumbent: float, bounds: dict[str, float]) -> str | None:
        """The member whose relative gap to ``incumbent`` trails the other's by more than
        ``TRAILING_RATIO`` (and exceeds ``TRAILING_GAP``), or None."""
        scale = max(abs(incumbent), 1e-12)
        gap = {name: max(incumbent - bound, 0.0) / scale for name, bound in bounds.items()}
        for name, other in (("highs", "cpsat"), ("cpsat", "highs")):
            if gap[name] > max(TRAILING_RATIO * gap[other], TRAILING_GAP):
                return name
        return None

    def _unproven(self, best: Solve | None, bounds: list[float], start: float) -> Solve:
        """Neither engine proved it: the best incumbent, with the highest bound."""
        wall = time.perf_counter() - start
        bound = max(bounds) if bounds else None
        if best is None:
            return self.statistics.record(Solve(SolveStatus.LIMIT, None, None, None, bound,
                                                wall, self.name))
        return self.statistics.record(dataclasses.replace(
            best, status=SolveStatus.LIMIT, bound=bound, wall_time_s=wall))
