"""Calibration against Megatron-LM (Narayanan et al., SC'21, Table 1).

Each row of the table is a GPT model trained on A100-80GB with given tensor, pipeline and
data parallelism. We rebuild it as a one-domain instance (DGX A100 nodes: NVLink inside a
node, 8 x 200 Gbit/s HDR InfiniBand per node), evaluate the same plan with full activation
recompute (as in the paper) and compare the achieved TFLOP/s per GPU, which the paper counts
including the recompute FLOPs. The micro-batch size is not given in the table: we take the
best one the evaluator finds among powers of two, as the paper tuned it per configuration.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from formulation.costmodel import EFFICIENCY, CostModel, Efficiency
from formulation.evaluator import evaluate_plans
from formulation.instance import Domain, Instance, Links, ModelSpec, SearchSpace, Training
from formulation.plan import Plan, Stage
from formulation.presets import GPUS

MICRO_BATCH_CANDIDATES = (1, 2, 4, 8, 16)


@dataclass(frozen=True)
class CalibrationRow:
    params_b: float
    heads: int
    hidden: int
    layers: int
    tp: int
    pp: int
    gpus: int
    global_batch: int
    published_tflops: float


@dataclass(frozen=True)
class CalibrationResult:
    row: CalibrationRow
    micro_batch: int
    evaluated_tflops: float
    feasible: bool

    @property
    def relative_error(self) -> float:
        return self.evaluated_tflops / self.row.published_tflops - 1


def read_table(path: str | Path) -> list[CalibrationRow]:
    with open(path, encoding="utf-8") as handle:
        lines = [line for line in handle if not line.startswith("#")]
    return [CalibrationRow(float(r["params_b"]), int(r["heads"]), int(r["hidden"]),
                           int(r["layers"]), int(r["tp"]), int(r["pp"]), int(r["gpus"]),
                           int(r["global_batch"]), float(r["achieved_tflops_per_gpu"]))
            for r in csv.DictReader(lines)]


def row_instance(row: CalibrationRow) -> Instance:
    model = ModelSpec(name=f"gpt-{row.params_b:g}b", layers=row.layers, hidden=row.hidden,
                      heads=row.heads, kv_heads=row.heads, ffn=4 * row.hidden, vocab=51200,
                      seq_len=2048, gated_mlp=False, tied_embeddings=True)
    domain = Domain(name="selene", gpus=row.gpus, free_gpus=row.gpus,
                    intra_bandwidth_gbps=200.0, intra_latency_ms=0.005)
    zero = np.zeros((1, 1))
    return Instance(name=f"megatron-{row.params_b:g}b", gpu=GPUS["A100-80GB"],
                    domains=(domain,), links=Links(zero, zero, zero), model=model,
                    training=Training(global_batch=row.global_batch, zero_stage=0),
                    search=SearchSpace(dp=(row.gpus // (row.tp * row.pp),), tp=(row.tp,),
                                       micro_batch=MICRO_BATCH_CANDIDATES,
                                       recompute=("full",), max_stages=row.pp))


def row_plan(row: CalibrationRow, micro_batch: int) -> Plan:
    per_stage, extra = divmod(row.layers, row.pp)
    stages = tuple(Stage(domain=0, layers=per_stage + (1 if j < extra else 0), tp=row.tp,
                         recompute="full") for j in range(row.pp))
    return Plan(dp=row.gpus // (row.tp * row.pp), micro_batch=micro_batch, stages=stages)


def calibrate_row(row: CalibrationRow, efficiency: Efficiency = EFFICIENCY) -> CalibrationResult:
    instance = row_instance(row)
    dp = row.gpus // (row.tp * row.pp)
    sizes = [b for b in MICRO_BATCH_CANDIDATES if row.global_batch % (dp * b) == 0]
    plans = [row_plan(row, b) for b in sizes]
    result = evaluate_plans(instance, plans, CostModel(instance, efficiency))
    throughput = np.where(result.feasible, result.achieved_tflops_per_gpu, -np.inf)
    best = int(np.argmax(throughput))
    return CalibrationResult(row=row, micro_batch=sizes[best],
                             evaluated_tflops=float(result.achieved_tflops_per_gpu[best]),
                             feasible=bool(result.feasible[best]))
