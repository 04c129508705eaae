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
import io
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from formulation.costmodel import EFFICIENCY, CostModel, Efficiency
from formulation.evaluator import evaluate_plans
from formulation.instance import Domain, Instance, Links, ModelSpec, SearchSpace, Training
from formulation.plan import Plan, Stage
from formulation.presets import GPUS
from formulation.schema import InputError, check_integer, check_number, read_text

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


# the table's columns (a CalibrationRow's fields, in order) and the bounds of their values
INTEGER_COLUMNS = {"heads": 100_000, "hidden": 1_000_000, "layers": 100_000, "tp": 1_000,
                   "pp": 10_000, "gpus": 1_000_000, "global_batch": 100_000_000}
COLUMNS = ("params_b", *INTEGER_COLUMNS, "achieved_tflops_per_gpu")
MAX_ROWS = 10_000


def read_table(path: str | Path) -> list[CalibrationRow]:
    """The table's rows, every value checked: a bad file or value is one
    :class:`InputError` naming the file, row and column."""
    text = read_text(path, "calibration table")
    lines = [line for line in io.StringIO(text, newline=None) if not line.startswith("#")]
    reader = csv.DictReader(lines)
    where = f"calibration table {str(path)!r}"
    missing = [column for column in COLUMNS if column not in (reader.fieldnames or ())]
    if missing:
        raise InputError(f"{where} has no column {missing[0]!r}")
    rows = []
    for number, record in enumerate(reader, start=1):
        if number > MAX_ROWS:
            raise InputError(f"{where} has more than {MAX_ROWS:,} rows")
        at = f"{where} row {number}"
        values = {}
        for column in COLUMNS:
            text = record.get(column)
            try:
                value = float(text.strip()) if column not in INTEGER_COLUMNS \
                    else int(text.strip())
            except (AttributeError, ValueError):
                kind = "an integer" if column in INTEGER_COLUMNS else "a number"
                raise InputError(f"{at}: {column} must be {kind}, got {text!r}") from None
            if column in INTEGER_COLUMNS:
                values[column] = check_integer(value, f"{at}: {column}", low=1,
                                               high=INTEGER_COLUMNS[column])
            else:
                values[column] = check_number(value, f"{at}: {column}", low=0, high=1e6,
                                              low_open=True)
        tp, pp, gpus = values["tp"], values["pp"], values["gpus"]
        if gpus % (tp * pp):
            raise InputError(f"{at}: gpus {gpus} is not a multiple of tp x pp = {tp * pp}")
        if values["global_batch"] % (gpus // (tp * pp)):
            raise InputError(f"{at}: global_batch {values['global_batch']} is not a multiple "
                             f"of the data-parallel degree {gpus // (tp * pp)}")
        if pp > values["layers"]:
            raise InputError(f"{at}: pp {pp} exceeds layers {values['layers']}")
        rows.append(CalibrationRow(*values.values()))
    if not rows:
        raise InputError(f"{where} has no rows")
    return rows


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
