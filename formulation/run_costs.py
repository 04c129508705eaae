"""What a change costs a training job (:mod:`formulation.training_run`, issue 17): the costs'
settings (:class:`RunCosts`), the state a switch moves over the WAN and how long that takes,
and a checkpoint's pause and its write to (or read from) the store. Every byte is the memory
model's persistent state (``PERSISTENT_BYTES_PER_PARAM`` per parameter: the weights and the
optimizer's states, the gradients aside), but a checkpoint taken inside a step and a switch
that cuts a step, which keep the gradients accumulated so far too
(``MID_STEP_BYTES_PER_PARAM``), and a later checkpoint inside the same step, which copies
those gradients alone (``GRADIENT_BYTES_PER_PARAM``)."""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np

from formulation.costmodel import BYTES_PER_VALUE, GBIT, PERSISTENT_BYTES_PER_PARAM
from formulation.evaluator import cost_model
from formulation.instance import Instance
from formulation.plan import Plan
from formulation.schema import InputError, Reader, check_ranges, read_json

# a checkpoint inside a step, or a switch that cuts one: the persistent state and the bf16
# gradients accumulated over the step's micro-batches done (what the rest of the step adds
# to; the run counts the rest as a new step's work at the same rate)
MID_STEP_BYTES_PER_PARAM = PERSISTENT_BYTES_PER_PARAM + BYTES_PER_VALUE
# a checkpoint inside a step whose state an earlier checkpoint holds (the weights and the
# optimizer's states change only at the step's end): the gradients' buffer alone
GRADIENT_BYTES_PER_PARAM = BYTES_PER_VALUE


@dataclass(frozen=True)
class RunCosts:
    """What changes cost a training job (defaults: a 2024 cluster, seeds/003 topic 4)."""

    heartbeat_s: float = 1.0
    """Heartbeat period of the job's ranks."""
    missed_heartbeats: int = 3
    """Heartbeats missed before a rank counts as failed (3 s: the seeds' response time)."""
    restart_s: float = 60.0
    """A cold start after an interruption: processes, communicators, data loaders."""
    prepare_s: float = 30.0
    """The same for a planned switch on GPUs the job is given, while the old plan trains."""
    switch_s: float = 5.0
    """The cut-over of a prepared switch, besides moving state."""
    host_copy_gbps: float = 200.0
    """Per GPU, device to host memory (a checkpoint's copy; PCIe 4 x16 is 256)."""
    storage_gbps: float = 40.0
    """Per domain, to and from the checkpoint store."""
    trace_interval_s: float = 10.0
    """Sampling of the scenario for the 1F1B simulator (bandwidth and latency)."""
    load_notice_s: float = 120.0
    """How long before a load change takes effect it is announced (0: not announced; AWS
    gives two minutes before it reclaims a spot instance)."""

    @property
    def detection_s(self) -> float:
        return self.heartbeat_s * self.missed_heartbeats

    @staticmethod
    def load(path: str | Path) -> RunCosts:
        """A JSON object of some of the fields, e.g. ``{"storage_gbps": 100,
        "load_notice_s": 30}``, the others at their defaults: a cluster's own costs. A bad
        file is one :class:`~formulation.schema.InputError` naming it and the field."""
        document = read_json(path, "costs")  # its errors name the file
        try:
            reader = Reader(document, "")
            given = {f.name: reader.raw(f.name) for f in fields(RunCosts) if reader.has(f.name)}
            reader.finish()
            costs = RunCosts(**given)
            check_ranges(costs, RUN_COST_RANGES)
        except InputError as err:
            raise InputError(f"costs {str(path)!r}: {err}") from None
        return costs


DEFAULT_COSTS = RunCosts()

RUN_COST_RANGES = {"heartbeat_s": (0.0, 3600.0), "missed_heartbeats": (1, 1000),
                   "restart_s": (0.0, 86_400.0), "prepare_s": (0.0, 86_400.0),
                   "switch_s": (0.0, 86_400.0), "host_copy_gbps": (1e-3, 1e6),
                   "storage_gbps": (1e-3, 1e6), "trace_interval_s": (1e-2, 3600.0),
                   "load_notice_s": (0.0, 86_400.0)}


def layer_domains(plan: Plan) -> np.ndarray:
    """The domain of every layer, in model order."""
    return np.concatenate([np.full(stage.layers, stage.domain) for stage in plan.stages])


def migration_bytes(instance: Instance, old: Plan, new: Plan,
                    per_param: float = PERSISTENT_BYTES_PER_PARAM
                    ) -> dict[tuple[int, int], float]:
    """Bytes each directed link carries when ``old`` becomes ``new``: the weights and
    optimizer state (``PERSISTENT_BYTES_PER_PARAM``; inside a step, with the gradients
    accumulated, ``MID_STEP_BYTES_PER_PARAM``) of every layer whose domain changes, the
    embedding with the first stage and the LM head with the last."""
    cm = cost_model(instance)
    moves: dict[tuple[int, int], float] = {}

    def add(source: int, target: int, params: float) -> None:
        if source != target:
            moves[(source, target)] = moves.get((source, target), 0.0) + params * per_param

    for source, target in zip(layer_domains(old), layer_domains(new), strict=True):
        add(int(source), int(target), cm.layer_params)
    add(old.stages[0].domain, new.stages[0].domain, cm.embedding_params)
    add(old.stages[-1].domain, new.stages[-1].domain, cm.head_params)
    return moves


def migration_time(state: Instance, moves: dict[tuple[int, int], float]) -> float:
    """Seconds to send ``moves`` over the WAN of ``state``, each link at its bandwidth and
    latency then, the links in parallel."""
    links = state.links
    return max((size / (links.bandwidth_gbps[a, b] * GBIT) + links.latency_ms[a, b] * 1e-3
                for (a, b), size in moves.items()), default=0.0)


def stage_state_bytes(instance: Instance, plan: Plan,
                      per_param: float = PERSISTENT_BYTES_PER_PARAM) -> np.ndarray:
    """Per stage, the state bytes of its parameters (one copy; ``per_param`` a parameter):
    its layers, and the embedding on the first stage, the LM head on the last."""
    cm = cost_model(instance)
    last = plan.num_stages - 1
    return np.array([(stage.layers * cm.layer_params + cm.edge_params(j == 0, j == last))
                     * per_param for j, stage in enumerate(plan.stages)])


def host_copy_time(instance: Instance, plan: Plan, costs: RunCosts,
                     per_param: float = PERSISTENT_BYTES_PER_PARAM) -> float:
    """Copying a checkpoint to host memory: the largest per-GPU shard, every GPU copying
    its own at once (``host_copy_gbps``)."""
    shards = stage_state_bytes(instance, plan, per_param) / np.array([s.tp for s in plan.stages])
    return float(shards.max()) / (costs.host_copy_gbps * GBIT)


def storage_time(instance: Instance, plan: Plan, costs: RunCosts,
                 per_param: float = PERSISTENT_BYTES_PER_PARAM) -> float:
    """Writing (or reading) a checkpoint of ``plan``: every domain its stages' state."""
    per_domain = np.bincount([s.domain for s in plan.stages],
                             weights=stage_state_bytes(instance, plan, per_param),
                             minlength=instance.num_domains)
    return float(per_domain.max()) / (costs.storage_gbps * GBIT)


def kept_share(plan: Plan, free: np.ndarray) -> np.ndarray:
    """Per domain, the share of ``plan``'s GPUs there within ``free`` (0 where it has
    none): where fewer are free, the others were taken, with their nodes' memory."""
    used = plan.gpus_by_domain(len(free))
    return np.minimum(used, free) / np.maximum(used, 1)


def restore_time(instance: Instance, plan: Plan, costs: RunCosts, per_param: float,
                 held: Plan | None = None, kept: np.ndarray | None = None) -> float:
    """Reading a checkpoint back into ``plan``'s stages. Where ``held``, the plan that took
    it, is given, its nodes kept their host-memory copy (the checkpoint's copy stage, kept
    until the next checkpoint is durable, as Gemini, SOSP'23, and DataStates-LLM keep
    theirs; the state a differential one builds on, until the next of the state) on
    ``kept`` of each domain's GPUs it used (:func:`kept_share`): a layer that stays in its
    domain reads that share from host memory (every GPU at most its shard, at
    ``host_copy_gbps``) and the rest from the store; a layer that moves, or every layer
    without ``held``, reads it all from the store (``storage_gbps`` per domain)."""
    cm = cost_model(instance)
    target = layer_domains(plan)
    params = np.full(len(target), cm.layer_params)
    params[0] += cm.embedding_params
    params[-1] += cm.head_params
    local = np.zeros(len(target))
    if held is not None:
        source = layer_domains(held)
        local = np.where(source == target, kept[target], 0.0)
    store = np.bincount(target, weights=params * per_param * (1.0 - local),
                        minlength=instance.num_domains)
    seconds = float(store.max()) / (costs.storage_gbps * GBIT)
    if local.any():
        seconds += host_copy_time(instance, plan, costs, per_param)
    return seconds


def read_after_fetch(instance: Instance, plan: Plan, costs: RunCosts, per_param: float,
                     held: Plan | None = None, kept: np.ndarray | None = None,
                     fetched: float = PERSISTENT_BYTES_PER_PARAM) -> float:
    """What is left of reading a checkpoint of ``per_param`` bytes a parameter into
    ``plan`` once its nodes have fetched ``fetched`` of them into host memory (a prepared
    restart: the weights and the optimizer's states, and a differential checkpoint's
    steps' gradients): their copy to the GPUs and the read of the rest, the gradients of
    a checkpoint inside a step (:func:`restore_time`, ``held``, ``kept``). (Replaying a
    differential checkpoint's optimizer updates on the GPUs reads and writes the state
    once a step, at memory bandwidth: milliseconds, left out.)"""
    return host_copy_time(instance, plan, costs, fetched) + restore_time(
        instance, plan, costs, per_param - fetched, held, kept)
