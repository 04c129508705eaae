"""Feasibility, stated once: what makes a plan infeasible and what takes it outside its
instance's search space.

Each :class:`Rule` states one way to be infeasible once, as an elementwise test over one
scope (the plan, each stage, each domain or each link) and the message for one broken
element. Every evaluator applies the same rules: the batched evaluator to arrays of N plans
(:func:`violation_matrix`, one boolean column per :class:`Kind` of :data:`PHYSICAL`), the
single-plan evaluator to one plan's numbers (:func:`violations`, with a message per broken
element: no arrays, so a plan costs microseconds) and the DiLoCo family (its workers'
violations and its own sync against the same WAN-share and cost-budget rules). A violation
carries its kind as a value (:class:`Violation`), never inside its message.

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

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from enum import Enum, StrEnum
from typing import Any, NamedTuple

import numpy as np

from formulation.costmodel import GB
from formulation.instance import RECOMPUTE_MODES, Instance, SearchSpace
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


# -- what the rules read ----------------------------------------------------------------------
# One record type per scope. Its fields are numbers for one element (the single-plan
# evaluator, a DiLoCo sync) or arrays for N plans (the batch evaluator: (N,) for plan
# fields, (N, S) for stages, (N, K) for domains, (N, B) for links; a plan-level value a
# stage or link rule reads comes as an (N, 1) column).

class PlanFacts(NamedTuple):
    layers: Any  # layers the stages hold together
    fewest_layers: Any  # layers of the thinnest stage
    stages: Any  # pipeline stages (>= 1)
    virtual_stages: Any  # model chunks per stage (1: plain 1F1B)
    micro_batches: Any  # micro-batches a step
    comm_cost: Any  # USD of cross-domain traffic per step


class StageFacts(NamedTuple):
    tp: Any
    memory: Any  # bytes per GPU
    domain: Any  # index into the instance's domains


class DomainFacts(NamedTuple):
    used: Any  # GPUs the plan takes
    free: Any  # GPUs the domain has free


class Role(Enum):
    """What a link carries (only its violation message tells them apart)."""

    BOUNDARY = "boundary"  # stage j to stage j + 1
    WRAP = "wrap"  # an interleaved plan's last stage back to its first
    RING = "ring"  # a DiLoCo sync ring (one "link": its busiest hop, for the whole sync)


class LinkFacts(NamedTuple):
    occupancy: Any  # seconds busy per period
    period: Any  # the seconds the occupancy is a share of
    wan: Any  # whether it crosses a WAN link
    link_from: Any  # domain indices
    link_to: Any
    role: Role | None = None  # None in a batch: the rules' tests do not read it


@dataclass(frozen=True)
class Limits:
    """The instance's side of every rule, read once per instance."""

    layers: int
    gpus_per_node: int
    heads: int
    usable_memory: float  # bytes per GPU a stage may use
    wan_share_cap: float | None
    cost_budget: float | None

    @staticmethod
    def of(instance: Instance, usable_memory: float) -> Limits:
        constraints = instance.constraints
        return Limits(layers=instance.model.layers, gpus_per_node=instance.gpu.gpus_per_node,
                      heads=instance.model.heads, usable_memory=usable_memory,
                      wan_share_cap=constraints.wan_share_cap,
                      cost_budget=constraints.cost_budget)


class Scope(Enum):
    """What one test of a rule looks at."""

    PLAN = "plan"
    STAGE = "stage"
    DOMAIN = "domain"
    LINK = "link"


@dataclass(frozen=True)
class Rule:
    """One way a plan can be infeasible, stated once: ``broken`` is elementwise, so the
    same expression tests one element's numbers (single plan) or N plans' arrays (batch).
    ``message`` describes one broken element (``index``: its stage, domain or link);
    ``applies`` says whether the instance has the constraint at all."""

    kind: Kind
    scope: Scope
    broken: Callable[[Any, Limits], Any]
    message: Callable[[Any, Limits, int, Sequence[str]], str]
    applies: Callable[[Limits], bool] = lambda limits: True


def _tp_broken(s: StageFacts, lim: Limits) -> Any:
    return (s.tp > lim.gpus_per_node) | (lim.heads % s.tp != 0)


def _tp_message(s: StageFacts, lim: Limits, j: int, names: Sequence[str]) -> str:
    if s.tp > lim.gpus_per_node:
        return f"stage {j} has tp={s.tp} > {lim.gpus_per_node} GPUs per node"
    return f"stage {j} has tp={s.tp}, which does not divide {lim.heads} heads"


def _wan_broken(link: LinkFacts, lim: Limits) -> Any:
    return link.wan & (link.occupancy > lim.wan_share_cap * link.period)


def _wan_message(link: LinkFacts, lim: Limits, j: int, names: Sequence[str]) -> str:
    share, cap = link.occupancy / link.period, lim.wan_share_cap
    if link.role is Role.RING:
        return f"the DiLoCo sync keeps the ring busy {share:.0%} of the time > cap {cap:.0%}"
    wrap = " (the wrap-around)" if link.role is Role.WRAP else ""
    return (f"link {names[link.link_from]!r}->{names[link.link_to]!r}{wrap} is busy "
            f"{share:.0%} of the period > cap {cap:.0%}")


RULES: tuple[Rule, ...] = (
    Rule(Kind.LAYERS, Scope.PLAN, lambda p, lim: p.layers != lim.layers,
         lambda p, lim, j, names: f"the stages hold {p.layers} layers, the model has "
                                  f"{lim.layers}"),
    Rule(Kind.TP, Scope.STAGE, _tp_broken, _tp_message),
    Rule(Kind.MEMORY, Scope.STAGE, lambda s, lim: s.memory > lim.usable_memory,
         lambda s, lim, j, names: f"stage {j} (domain {names[s.domain]!r}) needs "
                                  f"{s.memory / GB:.1f} GB per GPU > "
                                  f"{lim.usable_memory / GB:.1f} GB usable"),
    Rule(Kind.GPUS, Scope.DOMAIN, lambda d, lim: d.used > d.free,
         lambda d, lim, k, names: f"domain {names[k]!r} uses {d.used} GPUs > {d.free} free"),
    Rule(Kind.WAN_CAP, Scope.LINK, _wan_broken, _wan_message,
         applies=lambda lim: lim.wan_share_cap is not None),
    Rule(Kind.COST_BUDGET, Scope.PLAN,
         lambda p, lim: p.comm_cost > lim.cost_budget * (1 + COST_TOLERANCE),
         lambda p, lim, j, names: f"comm_cost {p.comm_cost:.4f} USD/step > budget "
                                  f"{lim.cost_budget:.4f}",
         applies=lambda lim: lim.cost_budget is not None),
    # Megatron-LM's interleaved order: at least two stages, a chunk of at least one layer
    # on every stage, micro-batches in groups of the stage count
    Rule(Kind.SCHEDULE, Scope.PLAN, lambda p, lim: (p.virtual_stages > 1) & (p.stages < 2),
         lambda p, lim, j, names: f"interleaving {p.virtual_stages} chunks needs at least 2 "
                                  f"stages"),
    Rule(Kind.SCHEDULE, Scope.PLAN,
         lambda p, lim: (p.virtual_stages > 1) & (p.fewest_layers < p.virtual_stages),
         lambda p, lim, j, names: f"interleaving {p.virtual_stages} chunks needs at least "
                                  f"{p.virtual_stages} layers in every stage (the thinnest "
                                  f"holds {p.fewest_layers})"),
    Rule(Kind.SCHEDULE, Scope.PLAN,
         lambda p, lim: (p.virtual_stages > 1) & (p.micro_batches % p.stages != 0),
         lambda p, lim, j, names: f"interleaving needs micro-batches a multiple of the "
                                  f"{p.stages} stages, got {p.micro_batches}"),
)
assert tuple(dict.fromkeys(rule.kind for rule in RULES)) == PHYSICAL
# the two rules a DiLoCo sync answers to as well
WAN_CAP_RULE = next(rule for rule in RULES if rule.kind is Kind.WAN_CAP)
COST_BUDGET_RULE = next(rule for rule in RULES if rule.kind is Kind.COST_BUDGET)


# -- applying the rules -----------------------------------------------------------------------

@dataclass(frozen=True, eq=False)
class Facts:
    """What the rules read about N plans, as arrays, with the masks of the elements that
    exist (stages padded after a plan's last, links of plain plans' wrap-around column)."""

    plan: PlanFacts  # (N,)
    stages: StageFacts  # (N, S)
    domains: DomainFacts  # (N, K)
    links: LinkFacts  # (N, B)
    real_stages: np.ndarray  # (N, S) bool
    real_links: np.ndarray  # (N, B) bool


def violation_matrix(facts: Facts, limits: Limits) -> np.ndarray:
    """(N, len(PHYSICAL)) bool: which plan breaks which kind of rule."""
    out = np.zeros((len(facts.plan.layers), len(PHYSICAL)), dtype=bool)
    elements = {Scope.PLAN: (facts.plan, None), Scope.STAGE: (facts.stages, facts.real_stages),
                Scope.DOMAIN: (facts.domains, None), Scope.LINK: (facts.links, facts.real_links)}
    for rule in RULES:
        if not rule.applies(limits):
            continue
        records, real = elements[rule.scope]
        broken = rule.broken(records, limits)
        if rule.scope is not Scope.PLAN:
            if real is not None:
                broken = broken & real
            broken = np.logical_or.reduce(broken, axis=1)
        out[:, PHYSICAL.index(rule.kind)] |= broken
    return out


def violations(limits: Limits, names: Sequence[str], plan: PlanFacts,
               stages: Iterable[StageFacts], domains: Iterable[tuple[int, DomainFacts]],
               links: Iterable[LinkFacts], rules: Sequence[Rule] = RULES) -> list[Violation]:
    """Every violation of one plan, from its elements' numbers, with a message naming the
    stage, domain or link (``domains``: (index, facts) of the domains the plan uses). The
    elements of a scope are read only if a rule that applies looks at them."""
    given = {Scope.PLAN: ((0, plan),), Scope.STAGE: stages, Scope.DOMAIN: domains,
             Scope.LINK: links}
    elements: dict[Scope, tuple] = {}
    out = []
    for rule in rules:
        if not rule.applies(limits):
            continue
        scope = elements.get(rule.scope)
        if scope is None:
            scope = elements[rule.scope] = tuple(
                given[rule.scope] if rule.scope in (Scope.PLAN, Scope.DOMAIN)
                else enumerate(given[rule.scope]))
        out += [Violation(rule.kind, rule.message(record, limits, index, names))
                for index, record in scope if rule.broken(record, limits)]
    return out


# -- the search space -------------------------------------------------------------------------

def interleaving_runs(layers: int, micro_batches: int, stages: int,
                      virtual_stages: int) -> bool:
    """Whether some plan of ``stages`` S stages can run ``virtual_stages`` v chunks a stage
    under the ``schedule`` rules: S >= 2, m a multiple of S, and layers for at least v in
    every stage. The enumerations (brute force, the exact models' cells) skip the rest."""
    return stages >= 2 and micro_batches % stages == 0 and layers >= virtual_stages * stages


def outside_search(search: SearchSpace, dp: np.ndarray, micro_batch: np.ndarray,
                   virtual_stages: np.ndarray, tp: np.ndarray, recompute: np.ndarray,
                   real: np.ndarray) -> np.ndarray:
    """(N,) bool: a plan uses a value the instance's search space does not list (stage
    arrays (N, S) with ``real`` marking the stages that exist)."""
    allowed_modes = [RECOMPUTE_MODES.index(mode) for mode in search.recompute]
    return (~_member(dp, search.dp) | ~_member(micro_batch, search.micro_batch)
            | ~_member(virtual_stages, search.virtual_stages)
            | (real & ~_member(tp, search.tp)).any(axis=1)
            | (real & ~_member(recompute, allowed_modes)).any(axis=1)
            | (real.sum(axis=1) > search.max_stages))


def _member(values: np.ndarray, allowed: Sequence[int]) -> np.ndarray:
    """``np.isin`` for the few values a search space lists (at most 32): one comparison
    with each, several times faster on the small batches the solvers score."""
    out = np.zeros(np.shape(values), dtype=bool)
    for value in allowed:
        out |= values == value
    return out


def mismatches(search: SearchSpace, dp: int, micro_batch: int, virtual_stages: int,
               stages: Sequence[Any]) -> list[Mismatch]:
    """One plan's values outside the search space, one :class:`Mismatch` each
    (``stages``: each with its ``tp`` and ``recompute`` mode)."""
    out = []
    if dp not in search.dp:
        out.append(Mismatch("dp", f"dp={dp} is not in the allowed {list(search.dp)}"))
    if micro_batch not in search.micro_batch:
        out.append(Mismatch("micro_batch", f"micro_batch={micro_batch} is not in the allowed "
                                           f"{list(search.micro_batch)}"))
    if virtual_stages not in search.virtual_stages:
        out.append(Mismatch("virtual_stages", f"virtual_stages={virtual_stages} is not in "
                                              f"the allowed {list(search.virtual_stages)}"))
    for j, stage in enumerate(stages):
        if stage.tp not in search.tp:
            out.append(Mismatch("tp", f"stage {j} tp={stage.tp} is not in {list(search.tp)}"))
        if stage.recompute not in search.recompute:
            out.append(Mismatch("recompute", f"stage {j} recompute={stage.recompute!r} is not "
                                             f"in {list(search.recompute)}"))
    if len(stages) > search.max_stages:
        out.append(Mismatch("max_stages", f"{len(stages)} stages > max_stages "
                                          f"{search.max_stages}"))
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
