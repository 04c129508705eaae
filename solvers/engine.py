"""The contract every exact engine keeps, and the registry that names them.

An *engine* solves one (dp, micro-batch) model (:class:`~solvers.tables.PairTables`) under
caps, in the style of Pyomo's ``contrib.solver`` ``SolverBase``: a declared interface, a
request object, a result whose termination is an enum, and statistics. The sweep
(:mod:`solvers.epsilon`) only ever talks to this contract, so an engine is added by writing
one class and one :func:`register_engine` line.

Statuses are *claims*: :mod:`solvers.certify` confirms them before they may end a sweep step.

- ``OPTIMAL``: the plan is optimal for the request (within the engine's gap); ``bound`` is the
  engine's proven bound on the objective.
- ``INFEASIBLE``: no plan meets the request's caps.
- ``LIMIT``: the engine stopped at its time limit; ``plan`` is its incumbent, if any, and
  ``bound`` its best proven bound, if any.
- ``UNKNOWN``: the engine cannot decide the request (its own figures contradict each other, a
  claim refuted by a known plan, or a request outside what it decides); nothing it said is
  used beyond its plan and a bound that does not contradict its plan.
"""

from __future__ import annotations

import importlib
import time
from collections import Counter
from dataclasses import dataclass, field
from enum import Enum
from typing import Protocol, runtime_checkable

from formulation.plan import Plan
from formulation.schema import InputError

NO_CAP = 1e12  # caps at or above this are treated as absent


class OutOfTime(Exception):
    """A deadline passed: a solve, a floor's DP or a sweep step stops where it is (what
    it leaves says where to resume)."""


class SolveStatus(Enum):
    OPTIMAL = "optimal"
    INFEASIBLE = "infeasible"
    LIMIT = "limit"
    UNKNOWN = "unknown"

    @property
    def proven(self) -> bool:
        """A proof claim (optimal or infeasible), as opposed to a run that stopped short."""
        return self in (SolveStatus.OPTIMAL, SolveStatus.INFEASIBLE)


@dataclass(frozen=True)
class ModelValues:
    """A model's own objective values for its solution (epigraphs at their tight values);
    they must equal the evaluator's values of the extracted plan (relative 1e-6)."""

    step_time_s: float
    gpus: int
    comm_cost: float

    def weighted(self, weights: tuple[float, float, float]) -> float:
        return weights[0] * self.step_time_s + weights[1] * self.gpus + weights[2] * self.comm_cost

    def within(self, request: SolveRequest, rtol: float = 0.0) -> bool:
        """Whether these values meet the request's caps (``rtol``: relative slack)."""
        caps = ((self.gpus, request.gpu_cap), (self.comm_cost, request.cost_cap),
                (self.step_time_s, request.step_cap))
        return all(cap is None or value <= cap + rtol * abs(cap) for value, cap in caps)


@dataclass(frozen=True)
class SolveRequest:
    """One solve: minimise ``weights . (step_time_s, gpus, comm_cost)`` under the caps.

    ``hint`` is a plan of the same pair that the engine may start from (a warm start); it
    need not meet the caps. ``period_floor`` and ``step_floor`` are valid lower bounds on the
    1F1B period and the step time of every plan under these caps (from
    :mod:`solvers.bounds`); an engine may add them as cuts. ``bound_target``: the solve may
    stop (``LIMIT``) once it proves a bound of at least this value, all a bound check asks.
    """

    weights: tuple[float, float, float] = (1.0, 0.0, 0.0)
    gpu_cap: float | None = None
    cost_cap: float | None = None
    step_cap: float | None = None
    time_limit: float | None = None
    hint: Plan | None = None
    period_floor: float | None = None
    step_floor: float | None = None
    bound_target: float | None = None

    def capped(self, value: float | None) -> float | None:
        """None for an absent cap (None or at least ``NO_CAP``)."""
        return None if value is None or value >= NO_CAP else float(value)


@dataclass(frozen=True)
class Solve:
    """Outcome of one solve of one (dp, micro-batch) model."""

    status: SolveStatus
    plan: Plan | None
    values: ModelValues | None
    objective: float | None  # incumbent objective (as weighted in the request)
    bound: float | None  # best proven bound on that objective
    wall_time_s: float
    engine: str = ""  # the engine that produced it (a portfolio names the member)

    @property
    def gap(self) -> float | None:
        if self.objective is None or self.bound is None:
            return None
        return max(0.0, self.objective - self.bound) / max(abs(self.objective), 1e-12)


@dataclass
class EngineStatistics:
    """What an engine has done: solves, time, outcomes and (portfolio) hand-overs."""

    solves: int = 0
    wall_time_s: float = 0.0
    statuses: Counter = field(default_factory=Counter)
    handed_over: int = 0  # solves passed from one member of a portfolio to the next

    def record(self, solve: Solve) -> Solve:
        self.solves += 1
        self.wall_time_s += solve.wall_time_s
        self.statuses[solve.status.value] += 1
        return solve

    def merge(self, other: EngineStatistics) -> None:
        self.solves += other.solves
        self.wall_time_s += other.wall_time_s
        self.statuses.update(other.statuses)
        self.handed_over += other.handed_over

    def to_dict(self) -> dict:
        return {"solves": self.solves, "wall_time_s": round(self.wall_time_s, 3),
                "statuses": dict(sorted(self.statuses.items())),
                "handed_over": self.handed_over}


@runtime_checkable
class Engine(Protocol):
    """An exact engine bound to one pair's tables."""

    name: str
    tables: object  # solvers.tables.PairTables (not imported: tables imports this module)
    statistics: EngineStatistics

    def solve(self, request: SolveRequest) -> Solve:
        """Solve the request; never raises for infeasible or unfinished solves."""
        ...


@dataclass(frozen=True)
class EngineSpec:
    """A registered engine: where its class lives (imported on first use, so that
    ``highspy`` and ``ortools`` load only when asked for), what it is, and which engine
    confirms the claims it makes (:mod:`solvers.certify`; None for a portfolio, whose
    solves name the member that made them)."""

    name: str
    target: str  # "module:Class"; the class takes (tables, threads=...) keywords
    description: str
    confirmer: str | None
    interleaving: bool = False  # whether its model states interleaved cells

    def factory(self):
        module, _, cls = self.target.partition(":")
        return getattr(importlib.import_module(module), cls)


ENGINES: dict[str, EngineSpec] = {}


def register_engine(name: str, target: str, description: str, confirmer: str | None,
                    interleaving: bool = False) -> None:
    ENGINES[name] = EngineSpec(name, target, description, confirmer, interleaving)


# Who confirms whose claims. Every wrong claim measured in issue 13 came from a presolve
# (HiGHS's forcing-row rule; CP-SAT's presolve on large integers): CP-SAT's claims are
# confirmed by CP-SAT with presolve off (on the bench instances 5-10x faster than HiGHS,
# which ran out of 5 s on a third of them), HiGHS's by CP-SAT, the other formulation.
register_engine("highs", "solvers.highs:HighsEngine",
                "Pyomo MILP (solvers.milp) on HiGHS", confirmer="cpsat", interleaving=True)
register_engine("highs-nopresolve", "solvers.highs:HighsNoPresolveEngine",
                "the same MILP on HiGHS with presolve off", confirmer="cpsat",
                interleaving=True)
register_engine("cpsat", "solvers.cpsat:CpSatEngine",
                "OR-Tools CP-SAT, integer-scaled, independent formulation",
                confirmer="cpsat-nopresolve", interleaving=True)
register_engine("cpsat-nopresolve", "solvers.cpsat:CpSatNoPresolveEngine",
                "the same CP-SAT model with presolve off", confirmer="highs",
                interleaving=True)
register_engine("labels", "solvers.labels:LabelEngine",
                "label-setting DP over the pipeline positions, branch and bound over the "
                "period and the all-reduce and optimizer times", confirmer="cpsat")
register_engine("portfolio", "solvers.portfolio:PortfolioEngine",
                "CP-SAT first, HiGHS where it stalls; the better incumbent is kept",
                confirmer=None, interleaving=True)


def make_engine(name: str, tables, threads: int = 2) -> Engine:
    """The registered engine ``name`` on ``tables``. An engine that does not state
    interleaving (the label DP) hands an interleaved cell to HiGHS, whose claims CP-SAT
    confirms there as everywhere."""
    if name not in ENGINES:
        raise InputError(f"--engine must be one of {sorted(ENGINES)}, got {name!r}")
    if getattr(tables, "interleaved", False) and not ENGINES[name].interleaving:
        name = "highs"
    return ENGINES[name].factory()(tables, threads=threads)


def timed(engine_name: str, start: float, status: SolveStatus, **fields) -> Solve:
    """A Solve stamped with its engine and the wall time since ``start``."""
    return Solve(status=status, wall_time_s=time.perf_counter() - start, engine=engine_name,
                 **{"plan": None, "values": None, "objective": None, "bound": None, **fields})
