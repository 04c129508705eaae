"""Exhaustive enumeration of every plan of a tiny instance: the ground truth for the MILP.

SPEC section 7: on tiny instances the exact front must equal brute-force enumeration of all
plans, point for point. This module is that enumeration. It never reasons about the cost
model: every plan is scored by :func:`formulation.evaluator.evaluate_batch`, and only plans
that are infeasible for sure, whatever the cost model says, are left out (see
:func:`stage_options`), so no Pareto point can be lost.

Plans are built directly as :class:`~formulation.batch.PlanBatch` arrays, never as ``Plan``
objects (only the front's few points are materialised), so about 10^6 plans enumerate and
evaluate in seconds.

``python -m solvers.bruteforce INSTANCE.json --out FRONT.json [--limit N]``
"""

from __future__ import annotations

import argparse
import itertools
import math
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import moocore
import numpy as np

from formulation.batch import RECOMPUTE_CODE, PlanBatch
from formulation.evaluator import evaluate_batch
from formulation.feasibility import interleaving_runs
from formulation.instance import Instance
from formulation.outputs import output_path, report_stream
from formulation.schema import CliParser, InputError, integer_arg, run_cli
from solvers.front import Front, FrontPoint, command_line, nondominated_mask, versions

DEFAULT_LIMIT = 5_000_000
DEFAULT_CHUNK = 50_000
FIELDS = ("dp", "micro_batch", "num_stages", "domain", "layers", "tp", "recompute",
          "virtual_stages")  # PlanBatch


@dataclass(frozen=True, eq=False)
class _Block:
    """All plans of one (dp, micro-batch) pair, one stage count S and one schedule (v model
    chunks per stage; 1: plain 1F1B).

    Row ``i`` of the block is the ``i``-th element of
    ``itertools.product(options, ..., options, compositions)`` (S factors ``options``): the
    chain of stage options varies slowest, the layer composition fastest.
    """

    dp: int
    micro_batch: int
    stages: int
    options: np.ndarray  # (O, 3) rows (domain, tp, recompute code)
    compositions: np.ndarray  # (C, S) layer counts of the stages, each >= max(1, v)
    virtual_stages: int = 1

    def __len__(self) -> int:
        return len(self.options) ** self.stages * len(self.compositions)


def stage_options(instance: Instance, dp: int) -> np.ndarray:
    """The (domain, tp, recompute code) choices a stage may take with data-parallel degree dp.

    Every combination of the search space, except those no feasible plan can contain:
    ``tp > gpus_per_node`` or ``heads % tp != 0`` (violation ``tp``) and ``dp * tp`` above the
    free GPUs of the domain itself (violation ``gpus``: the stage alone already takes more
    than the domain has). Skipping them cannot drop a Pareto point, since fronts hold only
    feasible plans. Nothing else is pruned: not memory, not dominance.
    """
    search, gpu, model = instance.search, instance.gpu, instance.model
    rows = [(k, t, RECOMPUTE_CODE[rc])
            for k, domain in enumerate(instance.domains)
            for t in sorted(set(search.tp))
            for rc in dict.fromkeys(search.recompute)
            if t <= gpu.gpus_per_node and model.heads % t == 0 and dp * t <= domain.free_gpus]
    return np.array(rows, dtype=np.int64).reshape(-1, 3)


def compositions(layers: int, parts: int, least: int = 1) -> np.ndarray:
    """(C(layers - parts (least - 1) - 1, parts - 1), parts) table of the ways to cut
    ``layers`` into parts of at least ``least``, in lexicographic order of the cut points."""
    if least > 1:
        return compositions(layers - parts * (least - 1), parts) + (least - 1)
    cuts = np.array(list(itertools.combinations(range(1, layers), parts - 1)),
                    dtype=np.int64).reshape(math.comb(layers - 1, parts - 1), parts - 1)
    bounds = np.concatenate([np.zeros((len(cuts), 1), np.int64), cuts,
                             np.full((len(cuts), 1), layers, np.int64)], axis=1)
    return np.diff(bounds, axis=1)


def _schedules(instance: Instance, micro_batches: int, stages: int) -> list[int]:
    """The chunk counts v a plan of S stages may run: 1, and each interleaving of the search
    space that Megatron-LM can run (S >= 2, m a multiple of S, at least v layers a stage);
    the others are ``schedule`` violations for sure."""
    return [v for v in sorted(set(instance.search.virtual_stages))
            if v == 1 or interleaving_runs(instance.model.layers, micro_batches, stages, v)]


def _blocks(instance: Instance) -> Iterator[_Block]:
    """The search space as blocks, in a fixed order: dp, micro-batch, stage count, v."""
    search, layers = instance.search, instance.model.layers
    for dp in sorted(set(search.dp)):
        options = stage_options(instance, dp)
        for b in sorted(set(search.micro_batch)):
            if instance.training.global_batch % (dp * b) or not len(options):
                continue
            m = instance.training.global_batch // (dp * b)
            for stages in range(1, min(search.max_stages, layers) + 1):
                for v in _schedules(instance, m, stages):
                    yield _Block(dp, b, stages, options, compositions(layers, stages, v), v)


def count_plans(instance: Instance) -> int:
    """Exactly the number of plans :func:`enumerate_plans` yields (computed, not enumerated):
    the sum over valid (dp, micro-batch) pairs, stage counts S and schedules v of
    O^S * C(L - S (v - 1) - 1, S - 1)."""
    search, layers = instance.search, instance.model.layers
    total = 0
    for dp in sorted(set(search.dp)):
        options = len(stage_options(instance, dp))
        for b in set(search.micro_batch):
            if instance.training.global_batch % (dp * b):
                continue
            m = instance.training.global_batch // (dp * b)
            total += sum(options ** s * math.comb(layers - s * (v - 1) - 1, s - 1)
                         for s in range(1, min(search.max_stages, layers) + 1)
                         for v in _schedules(instance, m, s))
    return total


def _rows(block: _Block, width: int, start: int, stop: int) -> PlanBatch:
    """Rows ``start..stop-1`` of a block, padded to ``width`` stages (``layers == 0``)."""
    index = np.arange(start, stop, dtype=np.int64)
    count = stop - start
    n_options, n_comp = len(block.options), len(block.compositions)
    chain, comp = np.divmod(index, n_comp)
    layers = np.zeros((count, width), np.int64)
    layers[:, :block.stages] = block.compositions[comp]
    domain = np.zeros((count, width), np.int64)
    tp = np.ones((count, width), np.int64)
    recompute = np.zeros((count, width), np.int64)
    for j in reversed(range(block.stages)):  # mixed radix: the last stage varies fastest
        chain, option = np.divmod(chain, n_options)
        domain[:, j], tp[:, j], recompute[:, j] = block.options[option].T
    return PlanBatch(dp=np.full(count, block.dp, np.int64),
                     micro_batch=np.full(count, block.micro_batch, np.int64),
                     num_stages=np.full(count, block.stages, np.int64),
                     domain=domain, layers=layers, tp=tp, recompute=recompute,
                     virtual_stages=np.full(count, block.virtual_stages, np.int64))


def _concatenate(parts: list[PlanBatch]) -> PlanBatch:
    if len(parts) == 1:
        return parts[0]
    return PlanBatch(**{name: np.concatenate([getattr(p, name) for p in parts])
                        for name in FIELDS})


def enumerate_plans(instance: Instance, chunk: int = DEFAULT_CHUNK) -> Iterator[PlanBatch]:
    """Every plan of the search space, in batches of ``chunk`` rows (the last may be shorter).

    Each (dp, micro-batch) with ``global_batch % (dp * b) == 0``, each stage count S in
    1..min(max_stages, layers), each schedule v of the search space, each sequence of S stage
    options (domain, tp, recompute; a domain may repeat, consecutively or not) and each
    composition of the layers into S positive parts, in that order. What is infeasible for
    sure is skipped: stage options with ``tp > gpus_per_node``, ``heads % tp != 0`` or
    ``dp * tp`` above the domain's free GPUs (see :func:`stage_options`), and interleavings
    Megatron-LM cannot run (:func:`_schedules`: fewer than v layers in a stage among them);
    nothing that could be on the front is dropped. All batches
    have the same width, min(max_stages, layers), so they can be concatenated; shorter plans
    are padded.
    """
    if chunk < 1:
        raise ValueError(f"chunk must be >= 1, got {chunk}")
    width = min(instance.search.max_stages, instance.model.layers)
    pending: list[PlanBatch] = []
    filled = 0
    for block in _blocks(instance):
        start, size = 0, len(block)
        while start < size:
            stop = min(size, start + chunk - filled)
            pending.append(_rows(block, width, start, stop))
            filled += stop - start
            start = stop
            if filled == chunk:
                yield _concatenate(pending)
                pending, filled = [], 0
    if pending:
        yield _concatenate(pending)


def _take(batch: PlanBatch, rows: np.ndarray) -> PlanBatch:
    return PlanBatch(**{name: getattr(batch, name)[rows] for name in FIELDS})


def brute_force_front(instance: Instance, limit: int = DEFAULT_LIMIT, *,
                      chunk: int = DEFAULT_CHUNK, command: str | None = None) -> Front:
    """The exact front by evaluating every plan; refuses instances with more than ``limit``.

    A running non-dominated set is kept: each chunk's feasible plans are first reduced to
    their own non-dominated rows, then merged with the current front. The current front comes
    first in the merge, so of plans with equal objective vectors the earliest enumerated one
    is kept, and the result does not depend on ``chunk``. ``command`` is recorded in the
    provenance (the CLI passes its command line).
    """
    total = count_plans(instance)
    if total > limit:
        raise InputError(f"instance {instance.name!r} has {total:,} plans, more than the "
                         f"brute-force limit of {limit:,}; use a smaller instance or --limit")
    started = time.perf_counter()
    front_objectives = np.zeros((0, 3))
    front_plans: PlanBatch | None = None
    evaluated = feasible = 0
    for batch in enumerate_plans(instance, chunk):
        result = evaluate_batch(instance, batch)
        evaluated += len(batch)
        rows = np.flatnonzero(result.admissible)
        feasible += len(rows)
        if not len(rows):
            continue
        # Cheap pre-filter (keeps ties, in order); nondominated_mask's tie-breaking sort then
        # only sees the few survivors.
        rows = rows[moocore.is_nondominated(result.objectives[rows], keep_weakly=True)]
        merged = np.concatenate([front_objectives, result.objectives[rows]])
        keep = nondominated_mask(merged)
        candidates = _take(batch, rows)
        merged_plans = candidates if front_plans is None else _concatenate([front_plans,
                                                                            candidates])
        front_objectives, front_plans = merged[keep], _take(merged_plans, np.flatnonzero(keep))
    points = [] if front_plans is None else [
        FrontPoint(tuple(float(x) for x in front_objectives[i]), front_plans.plan(i))
        for i in range(len(front_plans))]
    provenance = {"command": command or f"solvers.bruteforce.brute_force_front(limit={limit})",
                  "versions": versions(), "parameters": {"limit": limit},
                  "wall_time_s": round(time.perf_counter() - started, 3),
                  "plans_evaluated": evaluated, "feasible_plans": feasible}
    return Front(instance.name, "exact", points, provenance).sorted()


def _parser() -> argparse.ArgumentParser:
    parser = CliParser(
        prog="python -m solvers.bruteforce",
        description="Exact Pareto front of a tiny instance by evaluating every plan.")
    parser.add_argument("instance", type=Path, help="instance JSON file")
    parser.add_argument("--out", type=str, required=True, help="front JSON file to write")
    parser.add_argument("--quiet", action="store_true", help="no report line")
    parser.add_argument("--limit", type=integer_arg(1, 100_000_000), default=DEFAULT_LIMIT,
                        help="refuse instances with more plans (default %(default)s)")
    return parser


def main(argv: list[str] | None = None) -> int:
    """CLI entry point; returns the exit status (2 for any bad input, no traceback)."""
    args = _parser().parse_args(argv)
    return run_cli(lambda: _run(args))


def _run(args: argparse.Namespace) -> int:
    args.out = output_path(args.out, inputs=[args.instance])
    instance = Instance.load(args.instance)
    front = brute_force_front(instance, args.limit, command=command_line("solvers.bruteforce"))
    front.save(args.out, instance)
    p = front.provenance
    print(f"{instance.name}: {len(front.points)} front points from {p['plans_evaluated']:,} "
          f"plans ({p['feasible_plans']:,} feasible) in {p['wall_time_s']:.2f} s, "
          f"written to {args.out}", file=report_stream(args.out, args.quiet))
    return 0


if __name__ == "__main__":
    sys.exit(main())
