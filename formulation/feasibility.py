"""Feasibility, stated once: what makes a plan infeasible and what takes it outside its
instance's search space.

Every evaluator reads these definitions: the batched evaluator (one boolean column per
:class:`Kind` of :data:`PHYSICAL`), the single-plan evaluator (the same tests on a one-row
:class:`Facts`, plus a message per violation) and the DiLoCo family (its workers' violations
and its own sync against the same WAN-share and cost-budget rules). A violation carries its
kind as a value (:class:`Violation`), never inside its message.

Two classes of finding, reported apart:

* **violations** (:data:`PHYSICAL`): the plan cannot run as stated (its stages do not hold
  the model, a tensor-parallel degree the GPUs or heads do not allow, memory, free GPUs) or
  breaks one of the instance's constraints (WAN share cap, traffic-cost budget). A plan is
  *feasible* when it has none;
* **search-space mismatches** (:class:`Mismatch`): a dp degree, micro-batch, tp, recompute
  mode or stage count the instance's ``search`` does not list. Such a plan is still scored
  physically (a published run is often outside a benchmark's reduced space); it is
  *admissible* (a point the solvers and the benchmark may count) only when it is feasible
  and within the search space.

A plan whose ``dp x micro_batch`` does not divide the global batch is no plan at all (its
step would hold a fraction of a micro-batch): the plan readers and both evaluators refuse it
(:func:`check_micro_batches`) instead of scoring it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum

import numpy as np

from formulation.costmodel import GB
from formulation.instance import RECOMPUTE_MODES, Instance
from formulation.schema import InputError


class Kind(StrEnum):
    """What a violation is about (its value is the name used in JSON and reports)."""

    LAYERS = "layers"  # the stages do not hold exactly the model's layers
    TP = "tp"  # a tensor-parallel degree above a node's GPUs or not dividing the heads
    MEMORY = "memory"  # a stage's GPU needs more than the usable HBM
    GPUS = "gpus"  # a domain gives more GPUs than it has free
    WAN_CAP = "wan_cap"  # a WAN link busy more than the instance's share cap
    COST_BUDGET = "cost_budget"  # traffic cost per step above the instance's budget
    SCHEDULE = "schedule"  # an interleaved schedule the plan cannot run
    DILOCO = "diloco"  # a DiLoCo worker across domains, or two workers in one domain


# the violation kinds of a pipeline plan, in the column order of the batch evaluator
PHYSICAL: tuple[Kind, ...] = (Kind.LAYERS, Kind.TP, Kind.MEMORY, Kind.GPUS, Kind.WAN_CAP,
                              Kind.COST_BUDGET, Kind.SCHEDULE)
COST_TOLERANCE = 1e-12  # relative slack on the cost budget (sums of prices round)


@dataclass(frozen=True)
class Violation:
    kind: Kind
    message: str  # what is violated, naming the stage, domain or link

    def __str__(self) -> str:
        return f"{self.kind.value}: {self.message}"

    def to_dict(self) -> dict[str, str]:
        return {"kind": self.kind.value, "message": self.message}


@dataclass(frozen=True)
class Mismatch:
    """A plan's value the instance's search space does not list (a warning, not a
    violation: the plan is scored all the same)."""

    field: str  # "dp", "micro_batch", "virtual_stages", "tp", "recompute" or "max_stages"
    message: str

    def __str__(self) -> str:
        return f"search: {self.message}"

    def to_dict(self) -> dict[str, str]:
        return {"field": self.field, "message": self.message}


@dataclass(frozen=True, eq=False)
class Facts:
    """What the rules read about N plans, as arrays; stages front to back, padded after the
    last real one with ``layers == 0``; boundary ``j`` joins stages ``j`` and ``j + 1``."""

    instance: Instance
    dp: np.ndarray  # (N,)
    micro_batch: np.ndarray  # (N,)
    layers: np.ndarray  # (N, S)
    tp: np.ndarray  # (N, S)
    recompute: np.ndarray  # (N, S) codes into RECOMPUTE_MODES
    domain: np.ndarray  # (N, S)
    memory: np.ndarray  # (N, S) bytes per GPU of each stage
    usable_memory: float  # bytes per GPU a stage may use
    domain_gpus: np.ndarray  # (N, K) GPUs each plan takes from each domain
    occupancy: np.ndarray  # (N, B) seconds a link is busy per period (B boundaries)
    wan: np.ndarray  # (N, B) whether the boundary crosses a WAN link
    period: np.ndarray  # (N,) the time the occupancy is a share of
    comm_cost: np.ndarray  # (N,) USD per step
    link_from: np.ndarray  # (N, B) the domains a boundary joins
    link_to: np.ndarray  # (N, B)
    virtual_stages: np.ndarray  # (N,) model chunks per stage
    ring: bool = False  # the one "boundary" is a DiLoCo sync ring, busy a share of the step

    @property
    def real(self) -> np.ndarray:
        return self.layers > 0

    @property
    def num_stages(self) -> np.ndarray:
        return self.real.sum(axis=1)


@dataclass(frozen=True)
class Rule:
    """One violation kind: which of N plans break it, and why one of them does."""

    kind: Kind
    test: Callable[[Facts], np.ndarray]  # (N,) bool
    explain: Callable[[Facts, int, Sequence[str]], list[str]]  # messages for row i


def _tp_bad(facts: Facts) -> np.ndarray:
    node, heads = facts.instance.gpu.gpus_per_node, facts.instance.model.heads
    return facts.real & ((facts.tp > node) | (heads % facts.tp != 0))


def _explain_layers(facts: Facts, i: int, names: Sequence[str]) -> list[str]:
    return [f"the stages hold {int(facts.layers[i].sum())} layers, the model has "
            f"{facts.instance.model.layers}"]


def _explain_tp(facts: Facts, i: int, names: Sequence[str]) -> list[str]:
    node, heads = facts.instance.gpu.gpus_per_node, facts.instance.model.heads
    out = []
    for j in np.flatnonzero(_tp_bad(facts)[i]):
        t = int(facts.tp[i, j])
        out.append(f"stage {j} has tp={t} > {node} GPUs per node" if t > node
                   else f"stage {j} has tp={t}, which does not divide {heads} heads")
    return out


def _explain_memory(facts: Facts, i: int, names: Sequence[str]) -> list[str]:
    return [f"stage {j} (domain {names[facts.domain[i, j]]!r}) needs "
            f"{facts.memory[i, j] / GB:.1f} GB per GPU > {facts.usable_memory / GB:.1f} GB usable"
            for j in np.flatnonzero(facts.memory[i] > facts.usable_memory)]


def _free(facts: Facts) -> np.ndarray:
    return np.array([d.free_gpus for d in facts.instance.domains])


def _explain_gpus(facts: Facts, i: int, names: Sequence[str]) -> list[str]:
    free = _free(facts)
    return [f"domain {names[k]!r} uses {int(facts.domain_gpus[i, k])} GPUs > {free[k]} free"
            for k in np.flatnonzero(facts.domain_gpus[i] > free)]


def _wan_busy(facts: Facts) -> np.ndarray:
    cap = facts.instance.constraints.wan_share_cap
    if cap is None:
        return np.zeros(facts.occupancy.shape, dtype=bool)
    return facts.wan & (facts.occupancy > cap * facts.period[:, None])


def _explain_wan_cap(facts: Facts, i: int, names: Sequence[str]) -> list[str]:
    cap = facts.instance.constraints.wan_share_cap
    if facts.ring:
        return [f"the DiLoCo sync keeps the ring busy {facts.occupancy[i, 0] / facts.period[i]:.0%}"
                f" of the time > cap {cap:.0%}"]
    return [f"link {_link(facts, i, j, names)} is busy "
            f"{facts.occupancy[i, j] / facts.period[i]:.0%} of the period > cap {cap:.0%}"
            for j in np.flatnonzero(_wan_busy(facts)[i])]


def _link(facts: Facts, i: int, j: int, names: Sequence[str]) -> str:
    wrap = " (the wrap-around)" if j == facts.link_from.shape[1] - 1 \
        and facts.virtual_stages[i] > 1 else ""
    return f"{names[facts.link_from[i, j]]!r}->{names[facts.link_to[i, j]]!r}{wrap}"


def _over_budget(facts: Facts) -> np.ndarray:
    budget = facts.instance.constraints.cost_budget
    if budget is None:
        return np.zeros(facts.comm_cost.shape, dtype=bool)
    return facts.comm_cost > budget * (1 + COST_TOLERANCE)


def _explain_budget(facts: Facts, i: int, names: Sequence[str]) -> list[str]:
    return [f"comm_cost {facts.comm_cost[i]:.4f} USD/step > budget "
            f"{facts.instance.constraints.cost_budget:.4f}"]


def _schedule_bad(facts: Facts) -> np.ndarray:
    """(N, 3) bool: an interleaved plan with one stage, a stage of fewer than v layers, or
    micro-batches that are not a multiple of the stages (Megatron-LM's interleaved order)."""
    v = facts.virtual_stages
    interleaved = v > 1
    if not interleaved.any():  # plain 1F1B runs any plan
        return np.zeros((len(v), 3), dtype=bool)
    stages = facts.num_stages
    m = facts.instance.training.global_batch // (facts.dp * facts.micro_batch)
    return np.stack([interleaved & (stages < 2),
                     interleaved & (facts.real & (facts.layers < v[:, None])).any(axis=1),
                     interleaved & (m % np.maximum(stages, 1) != 0)], axis=1)


def _explain_schedule(facts: Facts, i: int, names: Sequence[str]) -> list[str]:
    v, stages = int(facts.virtual_stages[i]), int(facts.num_stages[i])
    m = facts.instance.training.global_batch // int(facts.dp[i] * facts.micro_batch[i])
    bad = _schedule_bad(facts)[i]
    return [text for flag, text in zip(bad, (
        f"interleaving {v} chunks needs at least 2 stages",
        f"interleaving {v} chunks needs at least {v} layers in every stage",
        f"interleaving needs micro-batches a multiple of the {stages} stages, got {m}"),
        strict=True) if flag]


WAN_CAP_RULE = Rule(Kind.WAN_CAP, lambda f: _wan_busy(f).any(axis=1), _explain_wan_cap)
COST_BUDGET_RULE = Rule(Kind.COST_BUDGET, _over_budget, _explain_budget)
RULES: tuple[Rule, ...] = (
    Rule(Kind.LAYERS, lambda f: f.layers.sum(axis=1) != f.instance.model.layers,
         _explain_layers),
    Rule(Kind.TP, lambda f: _tp_bad(f).any(axis=1), _explain_tp),
    Rule(Kind.MEMORY, lambda f: (f.memory > f.usable_memory).any(axis=1), _explain_memory),
    Rule(Kind.GPUS, lambda f: (f.domain_gpus > _free(f)[None, :]).any(axis=1), _explain_gpus),
    WAN_CAP_RULE,
    COST_BUDGET_RULE,
    Rule(Kind.SCHEDULE, lambda f: _schedule_bad(f).any(axis=1), _explain_schedule),
)
assert tuple(rule.kind for rule in RULES) == PHYSICAL


def violation_matrix(facts: Facts) -> np.ndarray:
    """(N, len(PHYSICAL)) bool: which plan breaks which rule."""
    return np.stack([rule.test(facts) for rule in RULES], axis=1)


def violations(facts: Facts, i: int = 0) -> list[Violation]:
    """Every violation of plan ``i``, with a message naming the stage, domain or link."""
    names = [d.name for d in facts.instance.domains]
    return [Violation(rule.kind, message) for rule in RULES if rule.test(facts)[i]
            for message in rule.explain(facts, i, names)]


# -- the search space -------------------------------------------------------------------------

def outside_search(facts: Facts) -> np.ndarray:
    """(N,) bool: a plan uses a value the instance's search space does not list."""
    search, real = facts.instance.search, facts.real
    allowed_modes = [RECOMPUTE_MODES.index(mode) for mode in search.recompute]
    return (~_member(facts.dp, search.dp) | ~_member(facts.micro_batch, search.micro_batch)
            | ~_member(facts.virtual_stages, search.virtual_stages)
            | (real & ~_member(facts.tp, search.tp)).any(axis=1)
            | (real & ~_member(facts.recompute, allowed_modes)).any(axis=1)
            | (facts.num_stages > search.max_stages))


def _member(values: np.ndarray, allowed: Sequence[int]) -> np.ndarray:
    """``np.isin`` for the few values a search space lists (at most 32): one comparison
    with each, several times faster on the small batches the solvers score."""
    out = np.zeros(np.shape(values), dtype=bool)
    for value in allowed:
        out |= values == value
    return out


def mismatches(facts: Facts, i: int = 0) -> list[Mismatch]:
    """Plan ``i``'s values outside the search space, one :class:`Mismatch` each."""
    search = facts.instance.search
    out = []
    if facts.dp[i] not in search.dp:
        out.append(Mismatch("dp", f"dp={int(facts.dp[i])} is not in the allowed "
                                  f"{list(search.dp)}"))
    if facts.micro_batch[i] not in search.micro_batch:
        out.append(Mismatch("micro_batch", f"micro_batch={int(facts.micro_batch[i])} is not "
                                           f"in the allowed {list(search.micro_batch)}"))
    v = int(facts.virtual_stages[i])
    if v not in search.virtual_stages:
        out.append(Mismatch("virtual_stages", f"virtual_stages={v} is not in the allowed "
                                              f"{list(search.virtual_stages)}"))
    count = int(facts.num_stages[i])
    for j in range(count):
        if facts.tp[i, j] not in search.tp:
            out.append(Mismatch("tp", f"stage {j} tp={int(facts.tp[i, j])} is not in "
                                      f"{list(search.tp)}"))
        mode = RECOMPUTE_MODES[int(facts.recompute[i, j])]
        if mode not in search.recompute:
            out.append(Mismatch("recompute", f"stage {j} recompute={mode!r} is not in "
                                             f"{list(search.recompute)}"))
    if count > search.max_stages:
        out.append(Mismatch("max_stages", f"{count} stages > max_stages {search.max_stages}"))
    return out


# -- what is no plan at all -------------------------------------------------------------------

def check_micro_batches(instance: Instance, dp: int, micro_batch: int, where: str = "plan",
                        ) -> None:
    """Refuse a plan whose dp x micro_batch does not divide the global batch, in one line."""
    batch = instance.training.global_batch
    if batch % (dp * micro_batch):
        raise InputError(f"{where}: dp x micro_batch = {dp * micro_batch} does not divide "
                         f"training.global_batch {batch} ({batch / (dp * micro_batch):g} "
                         f"micro-batches a step; a step holds whole micro-batches)")
