"""What every exact engine returns for one solve (HiGHS via Pyomo, OR-Tools CP-SAT)."""

from __future__ import annotations

from dataclasses import dataclass

from formulation.plan import Plan

NO_CAP = 1e12  # caps at or above this are treated as absent


@dataclass(frozen=True)
class ModelValues:
    """A model's own objective values for its solution (epigraphs at their tight values);
    they must equal the evaluator's values of the extracted plan (relative 1e-6)."""

    step_time_s: float
    gpus: int
    comm_cost: float


@dataclass(frozen=True)
class Solve:
    """Outcome of one solve of one (dp, micro-batch) model."""

    status: str  # "optimal", "time_limit" (an incumbent may exist), "infeasible"
    plan: Plan | None
    values: ModelValues | None
    objective: float | None  # incumbent objective (as weighted in the solve)
    bound: float | None  # best proven bound on that objective
    wall_time_s: float

    @property
    def gap(self) -> float | None:
        if self.objective is None or self.bound is None:
            return None
        return abs(self.objective - self.bound) / max(abs(self.objective), 1e-12)
