"""The chain relaxation of one (dp, micro-batch) pair: what a run of the label-setting DP needs.

A plan is a chain of stages from the last (position 0, LM head) to the first (embedding).
Under caps on the 1F1B period ``P``, the largest all-reduce ``A`` and the largest optimizer
time ``O``, :func:`solvers.label_kernels.label_dp` finds the plan of least
``w_T (sum c + 2 sum delta) + w_N N + w_C C`` among those whose every stage, window and link
fits the caps. It relaxes two things, which :meth:`Chain.violations` checks on the plan it
returns: a domain entered again has all its GPUs again unless it is *critical* (the DP then
tracks the GPUs it gave), and under a WAN share cap a boundary may occupy ``share * P`` of
the period cap, not of the plan's own period.

One :class:`Chain` per pair (:func:`chain_of`) is shared by the ``labels`` engine
(:mod:`solvers.labels`) and the period floors of :mod:`solvers.bounds`, so that the domains
found critical and the least periods proven serve both.
"""

from __future__ import annotations

import dataclasses
import math
import time
import weakref

import numpy as np

from formulation.result import evaluate
from solvers.engine import ModelValues
from solvers.label_kernels import (
    INF,
    LABEL_LIMIT,
    completion,
    label_dp,
    least_gpus,
    probe,
)
from solvers.tables import PairTables, StageChoice, choice_terms, choices_plan

OPEN = 1e30  # an absent cap
LABEL_BUDGET = 4_000_000  # labels of one DP run (about 0.5 GB); beyond it the run stops
UNLIMITED_WORK = 2 ** 62
# Work units (a candidate label, pruned or kept; a label visited by a dominance walk) a DP
# run does a second on this machine, what a counted allowance (rl.lower.Allowance's work,
# the online re-plans') turns seconds into: the 1st percentile over the runs of 10 ms or
# more (`python scripts/dp_work_rate.py`: 8.1 M on the bench suite, 6.5 M on the full one;
# median 11.3 M and 12.1 M), so that such a run rarely outlasts the time it stands for. A
# deadline reaches a run as a deadline (label_dp reads the clock). Candidates a bound prunes
# count too: with the least-S run's incumbent from its first label (rl.lower) most are
# pruned, and uncounted they left runs at 0.3 M units a second at the 1st percentile (the
# same script before they counted).
WORK_PER_SECOND = 7_000_000
MAX_DEADLINE_S = 3600.0  # the longest time a caller may give DP runs (its work stays an int)
MAX_WORK = int(MAX_DEADLINE_S * WORK_PER_SECOND)  # DP work of the longest time allowed
# Candidates a feasibility run's dive (solvers.label_kernels.probe) may try before the label
# DP decides: a few milliseconds, against the hundreds to thousands a DP run that finds a
# plan takes on the full search space's K = 20 instances. A dive's candidate costs less
# than a unit of the DP's work (no dominance walk): 60-154 M a second at the 1st percentile
# of the dives of 1 ms or more in two runs, 252 M at the median (the same script), so it
# is charged 1/8.
PROBE_WORK = 1_000_000
PROBE_SPEED = 8
# Bound tables made at a period up to this factor above serve a DP run (feasibility or
# least S, and the dive a feasibility run starts with): a table costs about a millisecond
# on the generated K = 20 70B instances, and a looser one prunes less. At 1.03 rather than
# 1.05 a front there makes more tables but spends less in DP runs and dives: 2.80-2.81 s
# at the median instead of 3.13 s, in two runs each back to back (`scripts/bench_hippo.py
# --instance-seeds 1 2 --repeats 20`; its other rows, and every plan it compares, did not
# move); coverage the same on the bench and held-out suites, and on the full suite under a
# counted allowance the same at K = 5-10 and a point more at K = 12-20 (README)
TABLE_REUSE = 1.03
# ... and a dive alone (rl.lower's descent and opening dives): these are heuristics, and at
# 1.03 the descent on a pair of the full space's K = 12 70B instance ended 15 % above the
# least period instead of 8.7 % (tests/test_lower.py)
DIVE_REUSE = 1.05


@dataclasses.dataclass
class KernelSeconds:
    """Wall time the process's chains spent making what a DP run reads (:meth:`Chain.
    layer_caps` and :meth:`Chain.bound_tables`: ``inputs``), in label DP runs (``runs``) and
    in dives (``dives``), added up since the process started: a benchmark tells where a
    decision's time goes by the difference of two readings (``scripts/bench_hippo.py``).
    Two clock readings a call, against a millisecond a table or run."""

    inputs: float = 0.0
    runs: float = 0.0
    dives: float = 0.0

    def reading(self) -> tuple[float, float, float]:
        return self.inputs, self.runs, self.dives


KERNEL_SECONDS = KernelSeconds()


class LabelBudgetExceeded(Exception):
    """A DP run reached its label or work budget."""


@dataclasses.dataclass(frozen=True)
class Terms:
    """A plan of the pair: its choices, period, largest all-reduce and optimizer times, and
    objective values."""

    choices: dict[int, StageChoice]
    period: float
    allreduce: float
    optimizer: float
    values: ModelValues

    def weighted(self, weights) -> float:
        return self.values.weighted(weights)


@dataclasses.dataclass(frozen=True)
class Caps:
    """What one DP run may use: GPUs, traffic cost, and the domains whose GPUs it tracks
    across visits."""

    gpus: int
    cost: float
    critical: frozenset[int]


class Chain:
    """The pieces of a pair's DP runs, and what runs have established about the pair."""

    def __init__(self, tables: PairTables):
        t = self.tables = tables
        self.gpus = t.gpus.astype(np.int64)
        self.free = t.free_gpus.astype(np.int64)
        self.units = int(min(self.free.max(), t.positions * self.gpus.max()) // t.dp)
        self.cost = np.where(np.eye(t.num_domains, dtype=bool), 0.0, t.cost)
        left = np.maximum(0, t.positions - 1 - np.arange(t.positions))[:, None] \
            * np.ones(t.layers + 1, dtype=np.int64)[None, :]
        left[:, t.layers] = 0
        self.gpus_left_max = left * int(self.gpus.max())
        self.cost_left_max = left * float(self.cost.max())
        self.carry_floor = -2.0 * float(t.delay.max())  # window excess below this cannot matter
        self.extra = np.zeros(t.positions)  # parameters beyond the layers: LM head, embedding
        self.extra[0] = t.head_params
        self.extra_first = self.extra + t.embedding_params
        self.share = t.instance.constraints.wan_share_cap
        budget = t.instance.constraints.cost_budget
        self.budget = math.inf if budget is None else float(budget)
        self.least_compute = t.layers * float(t.layer_time.min())  # sum c of any plan
        self.critical: set[int] = set()  # domains a relaxed plan overused
        # least periods proven for relaxations: (caps, period) holds for tighter caps
        self.period_floors: list[tuple[Caps, float]] = []
        # feasible plans found: (GPUs, cost, period), a witness for looser caps
        self.witnesses: list[tuple[int, float, float]] = []
        # DP runs (and dives that found a plan), the labels and work they made
        self.runs = self.labels = self.work = 0
        self._tables: tuple[float, tuple[np.ndarray, np.ndarray]] | None = None
        # the last layer caps computed, by their arguments: a run's inputs and the tables
        # made at its period ask for the same ones
        self._caps: tuple[tuple[float, float, float], tuple[np.ndarray, np.ndarray]] | None \
            = None

    def caps(self, gpu_cap: float | None, cost_cap: float | None) -> Caps:
        """The caps of a request, with the instance's cost budget, and the critical domains
        known now."""
        return Caps(int(min(gpu_cap if gpu_cap is not None else 2 ** 40, 2 ** 40)),
                    min(cost_cap if cost_cap is not None else math.inf, self.budget),
                    frozenset(self.critical))

    def known_period_floor(self, caps: Caps) -> float:
        """The best least period proven for a relaxation at least as loose as ``caps``."""
        return max((p for c, p in self.period_floors if c.gpus >= caps.gpus
                    and c.cost >= caps.cost and c.critical <= caps.critical), default=0.0)

    def plans_period_floor(self, gpu_cap: float, cost_cap: float) -> float:
        """The best floor on the period of the plans within the GPU and cost caps: a floor
        proven under caps at least as loose bounds them whichever domains its relaxation
        tracked (every relaxation holds every plan); :meth:`known_period_floor` is that of
        a relaxation."""
        return max((p for c, p in self.period_floors
                    if c.gpus >= gpu_cap and c.cost >= cost_cap), default=0.0)

    # -- plans -----------------------------------------------------------------------------
    def terms(self, choices: dict[int, StageChoice]) -> Terms:
        """A plan's period, all-reduce and optimizer terms and its objective values."""
        return Terms(choices, *choice_terms(self.tables, choices))

    def violations(self, terms: Terms) -> list[int] | None:
        """None if the plan is feasible; else the domains it overuses (empty: it breaks the
        WAN share cap only)."""
        t = self.tables
        used = np.zeros(t.num_domains, dtype=np.int64)
        for choice in terms.choices.values():
            used[choice.domain] += t.gpus[choice.option]
        over = [int(k) for k in np.flatnonzero(used > t.free_gpus)]
        if over:
            return over
        if self.share is not None and \
                not evaluate(t.instance, choices_plan(t, terms.choices)).admissible:
            return []
        return None

    # -- one DP run -------------------------------------------------------------------------
    def layer_caps(self, period: float, allreduce: float = OPEN,
                   optimizer: float = OPEN) -> tuple[np.ndarray, np.ndarray]:
        """The most layers a stage holds, per (position, domain, option), as a middle stage
        and as the first stage (embedding): memory, period, and the all-reduce and optimizer
        caps, each the largest n whose value (computed as :meth:`terms` does) is within.
        The arrays are shared with the next call of the same arguments: read them only."""
        key = (period, allreduce, optimizer)
        if self._caps is not None and self._caps[0] == key:
            return self._caps[1]
        t = self.tables
        positions, domains, options, layers = t.positions, t.num_domains, t.num_options, t.layers
        edge = np.zeros((positions, options))
        edge[0] = t.last_time
        n = np.arange(layers + 1, dtype=np.float64)
        out = []
        for memory, extra, first in ((t.layer_cap, self.extra, 0.0),
                                     (t.layer_cap_first, self.extra_first, 1.0)):
            room = np.floor((period - edge - first * t.first_time[None, :])
                            / t.layer_time[None, :] * (1 + 1e-12))
            cap = np.minimum(memory, np.clip(room, -1, layers)).astype(np.int64)
            cap = np.broadcast_to(cap[:, None, :], (positions, domains, options)).copy()
            params = n[None, :] * t.layer_params + extra[:, None]  # (S, L+1)
            if optimizer < OPEN:
                value = t.optimizer_per_param[None, :, None] * params[:, None, :]
                cap = np.minimum(cap, _largest_within(value <= optimizer)[:, None, :])
            if allreduce < OPEN:
                value = (t.allreduce_per_param[None, :, :, None] * params[:, None, None, :]
                         + t.allreduce_fixed[None, :, :, None])
                cap = np.minimum(cap, _largest_within(value <= allreduce))
            out.append(cap)
        self._caps = (key, (out[0], out[1]))
        return out[0], out[1]

    def table_units(self, caps: Caps) -> int:
        """The most GPUs a segment of a plan under ``caps`` takes, in units of dp: the
        bound tables of a run under a GPU cap need no row above it (:meth:`bound_tables`)."""
        return max(0, min(self.units, caps.gpus // self.tables.dp))

    def bound_tables(self, period: float, units: int, reuse: float = TABLE_REUSE
                     ) -> tuple[np.ndarray, np.ndarray]:
        """The completion bounds of :func:`solvers.label_kernels.completion` and the fewest
        GPUs still needed, at ``period``, for segments of at most ``units * dp`` GPUs
        (:meth:`table_units`: the most a plan under a run's caps holds). Valid at
        every smaller period and for fewer units: a table made at a period up to ``reuse``
        times larger (``TABLE_REUSE``; a dive alone: ``DIVE_REUSE``) and for at least as
        many units is reused. A table for
        a run's GPU cap is smaller (its rows grow with the units) and tighter under the cap
        (a segment above it is no completion), which the tight GPU budgets of the decisions
        after a change or on a new budget make most of (README)."""
        if self._tables is not None and period <= self._tables[0] <= period * reuse \
                and self._tables[1][0].shape[2] > units:
            return self._tables[1]
        t = self.tables
        cap, cap_first = self.layer_caps(period)
        cap, cap_first = cap[:, 0, :], cap_first[:, 0, :]  # no domain-dependent caps here
        rest = completion(period, t.layers, t.positions, t.num_domains, t.num_options, t.dp,
                          t.layer_time, t.first_time, self.gpus, cap, cap_first, self.free,
                          t.delay, t.occupancy, units)
        gpus = least_gpus(t.layers, t.positions, t.num_options, self.gpus, cap, cap_first)
        self._tables = (period, (rest, gpus))
        return rest, gpus

    def run(self, caps: Caps, period: float, weights=(1.0, 0.0, 0.0),
            allreduce: float = OPEN, optimizer: float = OPEN, value_cap: float = math.inf,
            feasibility: bool = False, tables_at: float | None = None,
            label_budget: int = LABEL_BUDGET, work_budget: int = UNLIMITED_WORK,
            deadline: float = math.inf) -> Terms | None:
        """The plan of least DP value below ``value_cap`` under the caps (with
        ``feasibility``: any plan, from a dive, :func:`~solvers.label_kernels.probe`, where
        one finds it within ``PROBE_WORK``), or None. Bound tables are made at ``tables_at``
        (default: the period). Raises :class:`LabelBudgetExceeded` past ``label_budget``
        labels, ``work_budget`` units of work or the ``deadline`` (``time.perf_counter()``
        seconds) (:func:`~solvers.label_kernels.label_dp`)."""
        t = self.tables
        inputs = self._inputs(period, allreduce, optimizer, tables_at, self.table_units(caps),
                              TABLE_REUSE)
        cap, cap_first, wan_limit, rest, gpus = inputs
        marks = -np.ones(t.num_domains, dtype=np.int64)
        for i, k in enumerate(sorted(caps.critical)):
            marks[k] = i
        candidates = min(PROBE_WORK, work_budget * PROBE_SPEED)
        # a dive first: most such runs have plans it finds (it knows no value cap)
        if feasibility and candidates > 0 and value_cap == math.inf:
            before = self.work
            found = self._dive(caps, period, candidates, inputs)
            work_budget -= self.work - before
            if found is not None:
                return found
            if work_budget <= 0:
                raise LabelBudgetExceeded
        start = time.perf_counter()
        out = label_dp(float(period), t.layers, t.positions, t.num_domains, t.num_options, t.dp,
                       t.layer_time, t.first_time, t.last_time, self.gpus, cap, cap_first,
                       self.free, t.delay, t.occupancy, float(wan_limit), self.cost,
                       np.asarray(weights, dtype=np.float64), caps.gpus, float(caps.cost),
                       float(min(value_cap, 1e300)), rest, rest.shape[2] - 1, gpus,
                       self.gpus_left_max, self.cost_left_max, self.carry_floor,
                       int(self.gpus.min()), marks, len(caps.critical), int(label_budget),
                       int(work_budget), float(min(deadline, INF)), feasibility)
        KERNEL_SECONDS.runs += time.perf_counter() - start
        status, _, labels, work, parent, option, layers, domain, last, o, n, k = out
        self.runs += 1
        self.labels += int(labels)
        self.work += int(work)
        if status == LABEL_LIMIT:
            raise LabelBudgetExceeded
        if o < 0:
            return None
        stages = [(k, o, n)]
        while last >= 0:
            stages.append((domain[last], option[last], layers[last]))
            last = parent[last]
        count = len(stages)
        return self.terms({count - 1 - q: StageChoice(int(d), int(x), int(y))
                           for q, (d, x, y) in enumerate(stages)})

    def dive(self, caps: Caps, period: float, candidates: int = PROBE_WORK,
             allreduce: float = OPEN, optimizer: float = OPEN) -> Terms | None:
        """A plan under the caps with period at most ``period`` found by the depth-first
        dive of :func:`~solvers.label_kernels.probe` within ``candidates``, or None (which
        proves nothing). Its work is counted at ``1 / PROBE_SPEED`` unit a candidate."""
        return self._dive(caps, period, candidates,
                          self._inputs(period, allreduce, optimizer, None,
                                       self.table_units(caps), DIVE_REUSE))

    def _inputs(self, period: float, allreduce: float, optimizer: float,
                tables_at: float | None, units: int, reuse: float) -> tuple:
        """What the dive and the DP at ``period`` read: the layer caps (middle, first
        stage), the WAN boundary limit, and the bound tables (made at ``tables_at``, for
        segments of at most ``units * dp`` GPUs, or reused from up to ``reuse`` times above,
        :meth:`bound_tables`)."""
        start = time.perf_counter()
        cap, cap_first = self.layer_caps(period, allreduce, optimizer)
        wan_limit = period if self.share is None else min(period, self.share * period)
        rest, gpus = self.bound_tables(period if tables_at is None else tables_at, units,
                                       reuse)
        KERNEL_SECONDS.inputs += time.perf_counter() - start
        return cap, cap_first, wan_limit, rest, gpus

    def _dive(self, caps: Caps, period: float, candidates: int, inputs: tuple
              ) -> Terms | None:
        t = self.tables
        cap, cap_first, wan_limit, rest, gpus = inputs
        start = time.perf_counter()
        found, work, domain, option, layers = probe(
            float(period), t.layers, t.positions, t.num_domains, t.num_options, t.dp,
            t.layer_time, t.first_time, t.last_time, self.gpus, cap, cap_first, self.free,
            t.delay, t.occupancy, float(wan_limit), self.cost, caps.gpus, float(caps.cost),
            rest, rest.shape[2] - 1, gpus, int(candidates))
        KERNEL_SECONDS.dives += time.perf_counter() - start
        self.work += -(-int(work) // PROBE_SPEED)
        if not found:
            return None
        self.runs += 1
        return self.terms({p: StageChoice(int(domain[p]), int(option[p]), int(layers[p]))
                           for p in range(found)})

    # -- the period floor ---------------------------------------------------------------------
    def period_above(self, gpu_cap: float | None, cost_cap: float | None,
                     period: float) -> bool:
        """Whether every plan under the caps has a 1F1B period above ``period``: no plan of
        the relaxation has one at most ``period``, or each that does overuses a domain,
        which then becomes critical and the question is asked again."""
        while True:
            caps = self.caps(gpu_cap, cost_cap)
            if self.known_period_floor(caps) >= period:
                return True
            if any(n <= caps.gpus and c <= caps.cost and p <= period
                   for n, c, p in self.witnesses):
                return False
            found = self.run(caps, period, feasibility=True)
            if found is None:
                self.period_floors.append((caps, period))
                return True
            over = self.violations(found)
            if over is None:
                self.witnesses.append((found.values.gpus, found.values.comm_cost,
                                       found.period))
            if not over:  # a plan, or one the share cap's relaxation cannot tell apart
                return False
            self.critical |= set(over)


def _largest_within(ok: np.ndarray) -> np.ndarray:
    """Along the last axis (layer counts 0..L, ``ok`` falling with n): the largest n with
    ``ok`` (-1 if none)."""
    return np.where(ok.any(axis=-1), ok.shape[-1] - 1 - np.argmax(ok[..., ::-1], axis=-1), -1)


_CHAINS: weakref.WeakKeyDictionary[PairTables, Chain] = weakref.WeakKeyDictionary()


def forget_chains() -> None:
    """Drop every pair's chain (what earlier runs established), e.g. to time a cold run."""
    _CHAINS.clear()


def chain_of(tables: PairTables) -> Chain:
    """The pair's one :class:`Chain` (shared by its engine and its floors)."""
    chain = _CHAINS.get(tables)
    if chain is None:
        chain = _CHAINS[tables] = Chain(tables)
    return chain
