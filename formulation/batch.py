"""Plans as padded arrays, for evaluating many plans in one vectorised pass.

NSGA-II and the RL environment build :class:`PlanBatch` arrays directly; ``from_plans`` and
``to_plans`` convert to and from :class:`~formulation.plan.Plan`. Stages are stored from the
first pipeline stage to the last, padded after the last real stage with ``layers == 0``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from formulation.instance import RECOMPUTE_MODES
from formulation.plan import Plan, Stage

RECOMPUTE_CODE = {mode: code for code, mode in enumerate(RECOMPUTE_MODES)}


@dataclass(frozen=True, eq=False)
class PlanBatch:
    dp: np.ndarray  # (N,) data-parallel degree
    micro_batch: np.ndarray  # (N,)
    num_stages: np.ndarray  # (N,)
    domain: np.ndarray  # (N, S) domain index of each stage, front to back
    layers: np.ndarray  # (N, S) layers of each stage; 0 marks padding
    tp: np.ndarray  # (N, S)
    recompute: np.ndarray  # (N, S) codes 0 none, 1 selective, 2 full
    virtual_stages: np.ndarray | None = None  # (N,) model chunks per stage; None: all 1

    def __post_init__(self) -> None:
        if self.virtual_stages is None:
            object.__setattr__(self, "virtual_stages", np.ones(len(self.dp), dtype=np.int64))

    def __len__(self) -> int:
        return int(self.dp.shape[0])

    @staticmethod
    def from_arrays(dp, micro_batch, domain, layers, tp, recompute,
                    virtual_stages=None) -> PlanBatch:
        """Build a batch from (N,) and (N, S) arrays; padding stages have ``layers == 0`` and
        must come after the real ones. Padding entries of the other arrays are ignored."""
        layers = np.asarray(layers, dtype=np.int64)
        real = layers > 0
        num_stages = real.sum(axis=1)
        positions = np.arange(layers.shape[1])[None, :]
        if np.any(real != (positions < num_stages[:, None])):
            raise ValueError("PlanBatch: padding stages (layers == 0) must follow the real ones")
        return PlanBatch(
            dp=np.asarray(dp, dtype=np.int64), micro_batch=np.asarray(micro_batch, np.int64),
            num_stages=num_stages,
            domain=np.where(real, np.asarray(domain, dtype=np.int64), 0),
            layers=layers,
            tp=np.where(real, np.asarray(tp, dtype=np.int64), 1),
            recompute=np.where(real, np.asarray(recompute, dtype=np.int64), 0),
            virtual_stages=None if virtual_stages is None
            else np.asarray(virtual_stages, dtype=np.int64))

    @staticmethod
    def from_plans(plans: Sequence[Plan], width: int | None = None) -> PlanBatch:
        width = width or max(p.num_stages for p in plans)
        n = len(plans)
        domain = np.zeros((n, width), np.int64)
        layers = np.zeros((n, width), np.int64)
        tp = np.ones((n, width), np.int64)
        recompute = np.zeros((n, width), np.int64)
        for i, plan in enumerate(plans):
            for j, stage in enumerate(plan.stages):
                domain[i, j] = stage.domain
                layers[i, j] = stage.layers
                tp[i, j] = stage.tp
                recompute[i, j] = RECOMPUTE_CODE[stage.recompute]
        return PlanBatch(dp=np.array([p.dp for p in plans], np.int64),
                         micro_batch=np.array([p.micro_batch for p in plans], np.int64),
                         num_stages=np.array([p.num_stages for p in plans], np.int64),
                         domain=domain, layers=layers, tp=tp, recompute=recompute,
                         virtual_stages=np.array([p.virtual_stages for p in plans], np.int64))

    def plan(self, i: int) -> Plan:
        stages = tuple(Stage(domain=int(self.domain[i, j]), layers=int(self.layers[i, j]),
                             tp=int(self.tp[i, j]),
                             recompute=RECOMPUTE_MODES[int(self.recompute[i, j])])
                       for j in range(int(self.num_stages[i])))
        return Plan(dp=int(self.dp[i]), micro_batch=int(self.micro_batch[i]), stages=stages,
                    virtual_stages=int(self.virtual_stages[i]))

    def take(self, rows) -> PlanBatch:
        """The batch of the given rows (indices or a boolean mask), in that order."""
        return PlanBatch(**{name: getattr(self, name)[rows] for name in (
            "dp", "micro_batch", "num_stages", "domain", "layers", "tp", "recompute",
            "virtual_stages")})

    def to_plans(self) -> list[Plan]:
        return [self.plan(i) for i in range(len(self))]
