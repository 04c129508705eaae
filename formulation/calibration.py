"""Calibration of the cost model against published training runs, per GPU generation.

    python -m formulation.calibration [--set NAME ...] [--table CSV ...] [--fit]

Each calibration set is a CSV under ``formulation/data/calibration/`` whose header comments
name its source; every row is one published run on one cluster: the model's shape, the GPU,
the parallel layout (TP, PP, interleaving, GPUs, global and micro-batch), recompute, the
training configuration (attention kernel, ZeRO stage, communication overlap) and the one
figure the source publishes: achieved TFLOP/s per GPU counting the recompute (``tflops``, as
Megatron-LM SC'21 counts), or seconds per step (``step_time_s``). The run becomes a
one-domain instance (the cluster's GPUs, its network at the GPU's NIC rate) and a plan
(``pp`` stages of balanced layers), scored by the evaluator; the error is the predicted
throughput over the published one, minus 1. The sets:

- ``megatron_sc21_table1``: Narayanan et al. SC'21, Table 1 (A100, eager attention, full
  recompute, 2021 kernels);
- ``korthikanti2022``: Korthikanti et al. 2022, Table 5 (A100, full and selective recompute
  with sequence parallelism, interleaving);
- ``dgxc_h100_bf16``: NVIDIA's DGX Cloud benchmarking recipes (H100, BF16, Megatron-Core
  with FlashAttention, the distributed optimizer, interleaving and overlapped communication).

The efficiency constants of :class:`~formulation.costmodel.Efficiency` are fitted per GPU
generation on its sets (``--fit`` re-runs the grid search); the README states the errors
and ``tests/test_calibration.py`` holds every set to them.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import io
import itertools
import statistics
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from formulation.costmodel import CostModel, Efficiency, efficiency_for
from formulation.evaluator import evaluate_plans
from formulation.instance import (
    ATTENTION_KERNELS,
    MAX_DOMAIN_GPUS,
    MAX_GLOBAL_BATCH,
    MAX_LAYERS,
    MAX_STAGES,
    RECOMPUTE_MODES,
    Domain,
    Instance,
    Links,
    ModelSpec,
    SearchSpace,
    Training,
)
from formulation.plan import MAX_TP, MAX_VIRTUAL_STAGES, Plan, Stage
from formulation.presets import GPUS
from formulation.schema import (
    CliParser,
    InputError,
    check_integer,
    check_number,
    read_text,
    run_cli,
)

DATA = Path(__file__).resolve().parent / "data" / "calibration"
SETS = ("megatron_sc21_table1", "korthikanti2022", "dgxc_h100_bf16")
MICRO_BATCH_CANDIDATES = (1, 2, 4, 8, 16)  # micro_batch 0: the fastest of these
METRICS = ("tflops", "step_time_s")
MAX_ROWS = 10_000

# column -> (kind, low, high); kinds: int, float, bool, str (choices in STRING_CHOICES)
COLUMNS: dict[str, tuple[str, float, float]] = {
    "label": ("str", 0, 0), "gpu": ("str", 0, 0),
    "layers": ("int", 1, MAX_LAYERS), "hidden": ("int", 1, 1_000_000),
    "heads": ("int", 1, 100_000), "kv_heads": ("int", 1, 100_000),
    "ffn": ("int", 1, 10_000_000), "vocab": ("int", 1, 10_000_000),
    "seq_len": ("int", 1, 10_000_000), "gated_mlp": ("bool", 0, 0),
    "tied_embeddings": ("bool", 0, 0), "tp": ("int", 1, MAX_TP), "pp": ("int", 1, MAX_STAGES),
    "vp": ("int", 1, MAX_VIRTUAL_STAGES), "gpus": ("int", 1, MAX_DOMAIN_GPUS),
    "global_batch": ("int", 1, MAX_GLOBAL_BATCH), "micro_batch": ("int", 0, 100_000),
    "recompute": ("str", 0, 0), "attention": ("str", 0, 0), "zero_stage": ("int", 0, 3),
    "tp_overlap": ("float", 0, 1), "dp_overlap": ("float", 0, 1),
    "metric": ("str", 0, 0), "published": ("float", 0, 1e7),
}
MODEL_COLUMNS = ("layers", "hidden", "heads", "kv_heads", "ffn", "vocab", "seq_len",
                 "gated_mlp", "tied_embeddings")
STRING_CHOICES = {"gpu": tuple(GPUS), "recompute": RECOMPUTE_MODES,
                  "attention": ATTENTION_KERNELS, "metric": METRICS}


@dataclass(frozen=True)
class PublishedRun:
    """One row of a calibration set (the columns of :data:`COLUMNS`)."""

    source: str
    label: str
    gpu: str
    model: ModelSpec  # from the columns of MODEL_COLUMNS, named by the label
    tp: int
    pp: int
    vp: int
    gpus: int
    global_batch: int
    micro_batch: int  # 0: not published, the fastest of MICRO_BATCH_CANDIDATES
    recompute: str
    attention: str
    zero_stage: int
    tp_overlap: float
    dp_overlap: float
    metric: str
    published: float

    @property
    def dp(self) -> int:
        return self.gpus // (self.tp * self.pp)


@dataclass(frozen=True)
class CalibrationResult:
    row: PublishedRun
    micro_batch: int
    feasible: bool
    predicted: float  # in the row's metric
    model_tflops: tuple[float, float]  # (published, predicted) model TFLOP/s per GPU
    mfu: tuple[float, float]  # (published, predicted)

    @property
    def relative_error(self) -> float:
        """Predicted over published throughput, minus 1."""
        ratio = self.predicted / self.row.published
        return ratio - 1 if self.row.metric == "tflops" else 1 / ratio - 1


def _value(text: str | None, column: str, at: str) -> object:
    kind, low, high = COLUMNS[column]
    text = (text or "").strip()
    if kind == "str":
        choices = STRING_CHOICES.get(column)
        if not text or (choices is not None and text not in choices):
            wanted = f"one of {list(choices)}" if choices else "a non-empty text"
            raise InputError(f"{at}: {column} must be {wanted}, got {text!r}")
        return text
    if kind == "bool":
        if text not in ("true", "false"):
            raise InputError(f"{at}: {column} must be true or false, got {text!r}")
        return text == "true"
    try:
        number = int(text) if kind == "int" else float(text)
    except ValueError:
        article = "an integer" if kind == "int" else "a number"
        raise InputError(f"{at}: {column} must be {article}, got {text!r}") from None
    if kind == "int":
        return check_integer(number, f"{at}: {column}", low=int(low), high=int(high))
    return check_number(number, f"{at}: {column}", low=low, high=high,
                        low_open=column == "published")


def read_table(path: str | Path) -> list[PublishedRun]:
    """A calibration set's rows, every value checked: a bad file or value is one
    :class:`InputError` naming the file, row and column."""
    text = read_text(path, "calibration table")
    lines = [line for line in io.StringIO(text, newline=None) if not line.startswith("#")]
    reader = csv.DictReader(lines)
    where = f"calibration table {str(path)!r}"
    missing = [column for column in COLUMNS if column not in (reader.fieldnames or ())]
    if missing:
        raise InputError(f"{where} has no column {missing[0]!r}")
    unknown = [column for column in reader.fieldnames if column not in COLUMNS]
    if unknown:
        raise InputError(f"{where}: column {unknown[0]!r} is not a known field")
    rows = []
    for number, record in enumerate(reader, start=1):
        if number > MAX_ROWS:
            raise InputError(f"{where} has more than {MAX_ROWS:,} rows")
        at = f"{where} row {number}"
        if None in record:  # DictReader's key for cells beyond the header's
            raise InputError(f"{at} has more cells than the header's "
                             f"{len(reader.fieldnames)}")
        values = {c: _value(record.get(c), c, at) for c in COLUMNS}
        model = ModelSpec(name=values["label"], **{c: values.pop(c) for c in MODEL_COLUMNS})
        row = PublishedRun(source=Path(path).stem, model=model, **values)
        _check_layout(row, at)
        rows.append(row)
    if not rows:
        raise InputError(f"{where} has no rows")
    return rows


def _check_layout(row: PublishedRun, at: str) -> None:
    if row.gpus % (row.tp * row.pp):
        raise InputError(f"{at}: gpus {row.gpus} is not a multiple of tp x pp = "
                         f"{row.tp * row.pp}")
    sizes = [row.micro_batch] if row.micro_batch else list(MICRO_BATCH_CANDIDATES)
    if all(row.global_batch % (row.dp * b) for b in sizes):
        raise InputError(f"{at}: global_batch {row.global_batch} is not a multiple of dp "
                         f"{row.dp} x micro_batch {sizes if len(sizes) > 1 else sizes[0]}")
    model = row.model
    if row.pp * row.vp > model.layers:
        raise InputError(f"{at}: pp x vp = {row.pp * row.vp} model chunks exceed layers "
                         f"{model.layers}")
    if model.hidden % model.heads or model.heads % model.kv_heads:
        raise InputError(f"{at}: heads must divide hidden and kv_heads must divide heads")


def read_set(name: str) -> list[PublishedRun]:
    if name not in SETS:
        raise InputError(f"unknown calibration set {name!r}; known: {', '.join(SETS)}")
    return read_table(DATA / f"{name}.csv")


def run_instance(row: PublishedRun) -> Instance:
    """The published run's cluster as a one-domain instance; its network runs at the GPU's
    NIC rate (a DGX's one NIC per GPU)."""
    gpu = GPUS[row.gpu]
    domain = Domain(name="cluster", gpus=row.gpus, free_gpus=row.gpus,
                    intra_bandwidth_gbps=gpu.nic_gbps, intra_latency_ms=0.005)
    sizes = (row.micro_batch,) if row.micro_batch else MICRO_BATCH_CANDIDATES
    return Instance(
        name=f"{row.source}-{row.label}".replace(" ", "-"), gpu=gpu, domains=(domain,),
        links=Links.none(), model=row.model,
        training=Training(global_batch=row.global_batch, zero_stage=row.zero_stage,
                          attention=row.attention, tp_overlap=row.tp_overlap,
                          dp_overlap=row.dp_overlap),
        search=SearchSpace(dp=(row.dp,), tp=(row.tp,), micro_batch=sizes,
                           recompute=(row.recompute,), max_stages=row.pp,
                           virtual_stages=tuple(sorted({1, row.vp}))))


def run_plan(row: PublishedRun, micro_batch: int) -> Plan:
    per_stage, extra = divmod(row.model.layers, row.pp)
    stages = tuple(Stage(domain=0, layers=per_stage + (1 if j < extra else 0), tp=row.tp,
                         recompute=row.recompute) for j in range(row.pp))
    return Plan(dp=row.dp, micro_batch=micro_batch, stages=stages, virtual_stages=row.vp)


def calibrate_row(row: PublishedRun, efficiency: Efficiency | None = None) -> CalibrationResult:
    """The row's prediction (the fastest published-or-candidate micro-batch)."""
    instance = run_instance(row)
    sizes = [b for b in instance.search.micro_batch if row.global_batch % (row.dp * b) == 0]
    plans = [run_plan(row, b) for b in sizes]
    model = CostModel(instance, efficiency or efficiency_for(row.gpu))
    result = evaluate_plans(instance, plans, model)
    best = int(np.argmax(np.where(result.feasible, -result.step_time_s, -np.inf)))
    step = float(result.step_time_s[best])
    peak = instance.gpu.peak_tflops
    model_tflops = model.model_flops_per_step() / (row.gpus * step) / 1e12
    if row.metric == "tflops":
        predicted = float(result.achieved_tflops_per_gpu[best])
        published_model = model_tflops * row.published / predicted
    else:
        predicted = step
        published_model = model.model_flops_per_step() / (row.gpus * row.published) / 1e12
    return CalibrationResult(row=row, micro_batch=sizes[best],
                             feasible=bool(result.feasible[best]), predicted=predicted,
                             model_tflops=(published_model, model_tflops),
                             mfu=(published_model / peak, model_tflops / peak))


# -- fitting the efficiency constants of one GPU generation ------------------------------------
GRID = {"matmul_eta_max": (0.55, 0.60, 0.65, 0.70, 0.74, 0.78),
        "matmul_half_dim": (32.0, 56.0, 96.0, 160.0),
        "collective_efficiency": (0.55, 0.65, 0.75),
        "hbm_efficiency": (0.7, 0.8, 0.9)}  # the A100's and H100's fitted values among them


def fit(rows: list[PublishedRun], top: int = 5) -> list[tuple[float, float, dict]]:
    """(max |error|, median |error|, constants) of the best grid points for these rows,
    by the largest error first, then the median."""
    base = efficiency_for(rows[0].gpu)
    scored = []
    for values in itertools.product(*GRID.values()):
        efficiency = dataclasses.replace(base, **dict(zip(GRID, values, strict=True)))
        errors = [abs(calibrate_row(row, efficiency).relative_error) for row in rows]
        scored.append((max(errors), statistics.median(errors),
                       dict(zip(GRID, values, strict=True))))
    scored.sort(key=lambda entry: entry[:2])
    return scored[:top]


# -- the command -------------------------------------------------------------------------------
def report(rows: Iterable[PublishedRun], out=sys.stdout) -> dict[str, list[float]]:
    """Print each row's published and predicted figures; return |errors| per set."""
    errors: dict[str, list[float]] = {}
    current = None
    for row in rows:
        if row.source != current:
            current = row.source
            print(f"\n{current} ({row.gpu})", file=out)
            print(f"  {'run':<22} {'tp':>3} {'pp':>3} {'vp':>3} {'gpus':>5} {'b':>3} "
                  f"{'published':>10} {'predicted':>10} {'TFLOP/s pub':>11} {'pred':>6} "
                  f"{'MFU pub':>7} {'pred':>6} {'error':>7}", file=out)
        result = calibrate_row(row)
        errors.setdefault(row.source, []).append(abs(result.relative_error))
        unit = "s" if row.metric == "step_time_s" else ""
        print(f"  {row.label:<22} {row.tp:>3} {row.pp:>3} {row.vp:>3} {row.gpus:>5} "
              f"{result.micro_batch:>3} {row.published:>9.4g}{unit or ' '} "
              f"{result.predicted:>9.4g}{unit or ' '} {result.model_tflops[0]:>11.1f} "
              f"{result.model_tflops[1]:>6.1f} {result.mfu[0]:>7.1%} {result.mfu[1]:>6.1%} "
              f"{result.relative_error:>+7.1%}" + ("" if result.feasible else "  INFEASIBLE"),
              file=out)
    print(file=out)
    for source, values in errors.items():
        print(f"{source}: {len(values)} rows, max |error| {max(values):.1%}, median "
              f"{statistics.median(values):.1%}", file=out)
    return errors


def main(argv: list[str] | None = None) -> int:
    parser = CliParser(prog="python -m formulation.calibration",
                       description="Published vs predicted throughput of the calibration "
                                   "sets, row by row.")
    parser.add_argument("--set", dest="sets", nargs="+", metavar="NAME", choices=SETS,
                        default=None, help=f"calibration sets (default: all of {list(SETS)})")
    parser.add_argument("--table", nargs="+", type=Path, default=[], metavar="CSV",
                        help="further calibration tables of the same columns")
    parser.add_argument("--fit", action="store_true",
                        help="re-run the grid search of each GPU generation's efficiency "
                             "constants on its rows and print the best")
    args = parser.parse_args(argv)
    return run_cli(lambda: _calibrate(args))


def _calibrate(args: argparse.Namespace) -> None:
    names = args.sets if args.sets is not None else ([] if args.table else list(SETS))
    rows = [row for name in names for row in read_set(name)]
    rows += [row for path in args.table for row in read_table(path)]
    if not args.fit:
        report(rows)
        return
    for gpu in dict.fromkeys(row.gpu for row in rows):
        mine = [row for row in rows if row.gpu == gpu]
        print(f"{gpu} ({len(mine)} rows):")
        for worst, median, values in fit(mine):
            print(f"  max |error| {worst:.1%}, median {median:.1%}: {values}")


if __name__ == "__main__":
    sys.exit(main())
