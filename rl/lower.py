"""The lower level of Hi-PPO: the stages of one (dp, micro-batch) pair, placed by exact DP.

The seeds' hierarchy (002, section 2) splits a decision in two: the upper level decides
between domains, the lower level the parallel layout inside them. Here the upper level is
the policy's PAIR decision (:mod:`rl.env`): it ranks the (dp, micro-batch) pairs for the
instance state, the preference and the budgets. For each of the pairs it ranks first, the
lower level places the stages (domain, tp, recompute, layers, in pipeline order) with the
label-setting DP of the exact engine (:mod:`solvers.chain`, :func:`~solvers.label_kernels
.label_dp`): given a cap on the 1F1B period, that DP finds the plan of least compute and
boundary delay ``S = sum c + 2 sum delta`` whose every stage, window and link fits the cap,
within the GPU and cost budgets, exactly.

The lower level:

1. **least period** of the pair within the budgets, by bisection on the DP's feasibility
   run, to ``PERIOD_PRECISION``; it starts from the period of hints (the constructive
   episode's plan, when it is of this pair; the pair's plans on the instance's earlier
   states, :mod:`rl.warm_starts`) or of any plan, and from the period floors that
   earlier decisions on the same instance state proved (a :class:`~solvers.chain.Chain` is
   kept per pair and state, so a warm decision or the next step of a budget sweep starts
   with a narrow interval);
2. **the plan of least S** at that period, the DP starting with the least S of the plans
   found at that period as its incumbent (it then prunes from its first label, not from
   its first complete plan; the same plan).

A feasibility run first dives for a plan (:meth:`solvers.chain.Chain.dive`, a depth-first
search that finds one in milliseconds at most periods above the least), and only where the
dive finds none does the label DP decide. Before the bisection, dives alone descend from the
first plan's period in steps of 5 % then 1 % until a few in a row find none (:meth:`_Runs
.descend`), so that the bisection starts near where dives stop finding plans and a
placement cut short holds a plan of that period, not of the first; one miss a step where
the first plan was known (a hint, or a plan an earlier decision on the state found), which
is mostly near the least period already. Where no plan is known,
the first comes from dives at a few multiples of the compute floor (:func:`compute_floor`:
the least compute over the most stages, which no period is below) before a run at an open
period; the bisection's lower end is that floor where no larger one is proven.

The step time is ``(m - 1) P + S + A + O``; step 1 and 2 minimise the first two terms, the
largest ones. What it leaves to the exact engine's branch and bound is the trade of a
slightly longer period for a smaller ``S``, all-reduce ``A`` or optimizer time ``O``, and the
last ``PERIOD_PRECISION`` of the period: the plan is within about 1 % of the pair's best,
not certified. Other preferences than least step time get the same plan; the decision keeps
whichever of its candidates has the best reward.

Beyond the pairs ranked first, :func:`beaten` tells a decision which further pairs need no
placement: a plan's step time is at least ``(m - 1) P + sum c``, so a pair can beat a step
time ``T`` only with a period below ``(T - least sum c) / (m - 1)``, which one feasibility
run (or a floor already proven) settles.

Decisions on one instance state share what earlier ones found (:class:`_Memory`, per pair
and state): a placement made under budgets at least as loose whose plan fits the new ones
is the answer again (its period is within the precision of the loose least period, hence of
the tight one); every plan found under any budgets is a plan of a placement whose budgets
it fits (one cut short keeps the best of them: a budget sweep's decisions otherwise fell to
a plan of far fewer GPUs than earlier decisions had found within their budget); those
plans bound the period from above, the floors proven from below (a floor proven with any
domains tracked bounds every plan). A feasibility run stopped before it decided is
remembered, and the next placement under the same budgets bisects above it, so that
repeated decisions progress from above rather than stop in the same run.

A decision may give the lower level an :class:`Allowance`: a deadline (no DP run starts
after it and each run stops at it, the DP reading the clock every few milliseconds), or a
number of units of the DP's work (candidate labels and dominance tests) for all its runs
together (counted, not timed: the same decision on any machine;
:data:`solvers.chain.WORK_PER_SECOND` turns seconds into such units); the
placement is then the best plan found so far (none, if none), and is not remembered as an
answer. The period bisection's runs cost about
1-50 ms each on the bench suite's K = 20 instances and up to seconds on the full search
space's (README), so the deadline is what bounds a decision's latency there.

The DP's relaxation (a domain entered again has all its GPUs again, unless tracked) is
repaired as the engine does: a plan that overuses a domain makes that domain tracked and the
run is repeated. Each placement starts tracking none: every domain tracked multiplies the
labels (they dominate each other less), and the domains that one period needed can make the
runs at other periods, which need fewer, many times dearer. A plan that breaks the
instance's WAN share cap is never returned.
"""

from __future__ import annotations

import math
import time
import weakref
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from formulation.plan import Plan
from rl.masks import COST_TOLERANCE, Budgets
from solvers.chain import (
    OPEN,
    UNLIMITED_WORK,
    Caps,
    Chain,
    LabelBudgetExceeded,
    Terms,
    chain_of,
    forget_chains,
)
from solvers.engine import OutOfTime
from solvers.tables import PairTables, choices_plan, plan_choices

PERIOD_PRECISION = 0.01  # relative width at which the period's bisection stops
# Before the bisection, dives at periods a step below the last one tried (at most
# DESCENT_DIVES), going on below a dive that finds none until DESCENT_MISSES in a row
# found none, then again from the last plan with the next, finer step: a few milliseconds
# each where the label DP takes up to seconds, they bring the bisection's upper end down to
# where dives stop finding plans (a dive that finds none proves nothing, and one further
# down may find one). The finer step took the descent from 5.8 / 7.4 % above the least
# period to 3.5 / 4.0 % on two pairs of the full space's K = 20 70B instance (tests/test_lower.py)
DESCENT_STEPS = (0.05, 0.01)
DESCENT_DIVES = 48
DESCENT_MISSES = 3
# From a plan already known (a hint, a kept plan from the state before, an earlier
# decision's on the state) one miss a step: such a plan is mostly near the least period,
# and the misses below it cost a bound table each. The held-out suite's fronts went from
# 1.77 / 1.96 s to 1.54 / 1.62 s at the median with the same coverage, and
# scripts/bench_hippo.py's from 3.88-3.94 s to 3.36 s (README)
KNOWN_DESCENT_MISSES = 1
# The coarse step doubles after each plan, up to this, and falls back to the step after a
# dive that finds none: the first plan's period can be several times the least (the open
# run's dive orders by the relaxed sum of stage times, not by the period), and a 5 % walk
# took dozens of dives, each with its bound tables, a large part of a cold decision's time
# on the generated K = 20 instances (scratch profile); the same end in fewer dives on a
# pair of the full space's K = 20 70B instance (tests/test_lower.py)
DESCENT_STRIDE_MAX = 0.4
# Each dive reads bound tables made at its own period (or up to solvers.chain.DIVE_REUSE
# above; a DP run, up to TABLE_REUSE), not from tables made up to 25 % above as in an
# earlier round: under a counted allowance such looser tables steered some dives on the
# full space's 70B fronts worse (scratch comparison), and since the tables were made
# several times faster a table costs about what a dive does (the full suite's K = 12-20
# coverage, 81.3 % with them, 81.9-84.7 % without in two runs, moves as much from run to
# run)
# Where no plan is known, dives at these multiples of the compute floor (compute_floor)
# look for a first plan before a run at an open period does: the open run's dive orders by
# the relaxed sum of stage times, and its plan's period was several times the least (6.7x
# on a generated K = 20 70B pair), where these found one within 1.25-1.5x (scratch count);
# a dive at a high period costs several times one at a low one (larger layer caps)
OPENING_DIVES = (1.5, 3.0, 6.0)
MIN_STEP = (1.0, 0.0, 0.0)  # DP weights: least S (the period is capped, not weighed)


class Allowance:
    """What one decision's lower level may spend (module doc): wall time up to ``deadline``
    (``time.perf_counter()`` seconds) and ``work`` units of the DP's work, whichever ends
    first (None: no such limit)."""

    def __init__(self, deadline: float | None = None, work: int | None = None):
        self.deadline, self.work = deadline, work
        # whether the lower level left work undone for want of time or work: a run or dive
        # refused or stopped, or pairs left unplaced (not merely the clock past the deadline
        # when the lower level is done, which the scoring after it can make so)
        self.stopped = False

    @staticmethod
    def of(seconds: float | None, work: int | None, start: float | None = None
           ) -> Allowance | None:
        """An allowance of ``seconds`` from ``start`` (a ``time.perf_counter()`` reading;
        default now) and ``work`` units (None where neither limit is given)."""
        if seconds is None and work is None:
            return None
        start = time.perf_counter() if start is None else start
        return Allowance(None if seconds is None else start + seconds, work)

    def spent(self) -> bool:
        return (self.work is not None and self.work <= 0) or (
            self.deadline is not None and time.perf_counter() >= self.deadline)

    def stops(self) -> bool:
        """Whether the allowance is spent, and if so, that it stopped the lower level."""
        if self.spent():
            self.stopped = True
            return True
        return False

    def next_run(self) -> tuple[int, float]:
        """The work the next DP run may do and its deadline (inf: none); raises
        :class:`OutOfTime` where nothing is left."""
        if self.stops():
            raise OutOfTime
        return (UNLIMITED_WORK if self.work is None else self.work,
                math.inf if self.deadline is None else self.deadline)

    def charge(self, work: int) -> None:
        if self.work is not None:
            self.work -= work


@dataclass(frozen=True)
class Placement:
    """The lower level's answer for one pair: its plan (None: no plan of the pair within
    the budgets was found) and the DP runs it took."""

    plan: Plan | None
    step_time_s: float
    runs: int


@dataclass
class _Memory:
    """What the decisions on one pair and instance state have established: the placements
    they made, every plan they found (their periods are also the chain's witnesses,
    :attr:`solvers.chain.Chain.witnesses`), and the feasibility runs their allowance
    stopped."""

    # (GPU cap, cost cap, precision, the plan's terms or None)
    answers: list[tuple[float, float, float, Terms | None]] = field(default_factory=list)
    # every plan the runs found (feasible, under any budgets): a placement under budgets
    # they fit starts with them, so one that runs out of time keeps the best of them
    plans: list[Terms] = field(default_factory=list)
    known: set[tuple] = field(default_factory=set)  # the plans' stage choices, each once
    # (GPU cap, cost cap, period) of the feasibility runs stopped before they decided (by
    # the allowance's work or deadline, or the label budget): the next placement under
    # those caps bisects above them, so that repeated decisions progress from above
    # instead of stopping in the same run
    cuts: list[tuple[float, float, float]] = field(default_factory=list)

    def answer(self, gpus: float, cost: float, precision: float) -> tuple[bool, Terms | None]:
        """(known, plan) for caps (gpus, cost): a placement under caps at least as loose
        whose plan fits these, or one under caps at least as tight that found nothing."""
        for g, c, p, terms in self.answers:
            if p > precision:
                continue
            if terms is None and g >= gpus and c >= cost:
                return True, None
            if terms is not None and g >= gpus and c >= cost \
                    and terms.values.gpus <= gpus \
                    and terms.values.comm_cost <= cost:
                return True, terms
        return False, None


_MEMORY: weakref.WeakKeyDictionary[PairTables, _Memory] = weakref.WeakKeyDictionary()


class _Runs:
    """DP runs on one pair under fixed budgets, repairing the relaxation as they go."""

    def __init__(self, tables: PairTables, budgets: Budgets, allowance: Allowance | None):
        self.allowance = allowance
        self.chain = chain_of(tables)
        self.memory = _MEMORY.setdefault(tables, _Memory())
        caps = _budget_caps(self.chain, budgets)
        self.gpus, self.cost = caps.gpus, caps.cost
        self.runs = 0
        self.critical: set[int] = set()  # the domains a relaxed plan of these runs overused
        # every plan found within the budgets, by these runs or earlier ones on the state
        self.found: list[Terms] = [terms for terms in self.memory.plans
                                   if self.fits(terms.values.gpus, terms.values.comm_cost)]

    def caps(self):
        """The budgets' caps, with the domains these runs track."""
        return Caps(self.gpus, self.cost, frozenset(self.critical))

    def fits(self, gpus: float, cost: float) -> bool:
        return gpus <= self.gpus and cost <= self.cost  # the cap has the tolerance

    def least_known_period(self) -> float:
        """The least period of a plan found so far (by any decision) within the budgets."""
        return min((p for n, c, p in self.chain.witnesses if self.fits(n, c)),
                   default=math.inf)

    def least_s(self, period: float) -> float:
        """Just above the least S of a plan found within the budgets with a period at most
        ``period``: the least-S run at that period has such a plan, so this cap, its
        incumbent from the first label, prunes what it would only have pruned after its
        first complete plan and changes no answer (inf where there is none)."""
        m = self.chain.tables.micro_batches
        return min((t.values.step_time_s - (m - 1) * t.period - t.allreduce - t.optimizer
                    for t in self.found if t.period <= period),
                   default=math.inf) * (1 + 1e-9) + 1e-12

    def offer(self, terms: Terms) -> list[int] | None:
        """Keep ``terms`` if it is a plan (no domain overused, the share cap met) within
        the budgets, and remember any plan as a witness, once (a plan remembered already
        is among :attr:`found` where it fits). Returns its violations
        (:meth:`solvers.chain.Chain.violations`: None for a plan)."""
        key = tuple(sorted(terms.choices.items()))
        if key in self.memory.known:
            return None
        over = self.chain.violations(terms)
        if over is not None:
            return over
        self.memory.known.add(key)
        values = terms.values
        self.chain.witnesses.append((values.gpus, values.comm_cost, terms.period))
        self.memory.plans.append(terms)
        if self.fits(values.gpus, values.comm_cost):
            self.found.append(terms)
        return None

    def dive(self, period: float) -> Terms | None:
        """A plan within the budgets with period at most ``period`` from one dive
        (:meth:`solvers.chain.Chain.dive`, charged to the allowance), or None."""
        if self.allowance is not None and self.allowance.stops():
            raise OutOfTime
        before = self.chain.work
        found = self.chain.dive(self.caps(), period)
        if self.allowance is not None:
            self.allowance.charge(self.chain.work - before)
        return found if found is not None and self.offer(found) is None else None

    def opening(self) -> float:
        """The period of a first plan from dives at ``OPENING_DIVES`` times the compute
        floor (:func:`compute_floor`), the lowest first (inf where none finds one)."""
        floor = compute_floor(self.chain.tables, self.gpus)
        if not 0 < floor < math.inf:
            return math.inf
        for factor in OPENING_DIVES:
            found = self.dive(floor * factor)
            if found is not None:
                return found.period
        return math.inf

    def descend(self, high: float, misses: int | None = None) -> float:
        """The least period of the plans that dives (:meth:`solvers.chain.Chain.dive`) find
        at periods a step below the last one tried, starting below ``high``: after a plan,
        below its period (with the first of ``DESCENT_STEPS``, by that step doubled after
        each plan, up to ``DESCENT_STRIDE_MAX``, and after a dive at a doubled step that
        finds none, by the step again; the finer steps stay fixed); after ``misses`` dives
        in a row at the step that find none (which proves nothing), again below the last
        plan's with the next of ``DESCENT_STEPS`` (``misses`` None: ``DESCENT_MISSES``);
        ``DESCENT_DIVES`` dives at most."""
        misses = DESCENT_MISSES if misses is None else misses
        dives = 0
        for step in DESCENT_STEPS:
            tried, missed, stride = high, 0, step
            while missed < misses and dives < DESCENT_DIVES:
                tried *= 1 - stride
                found = self.dive(tried)
                dives += 1
                if found is None:
                    if stride > step:  # back to the step, below the last plan
                        tried, stride = high, step
                    else:
                        missed += 1
                    continue
                missed = 0
                high = min(high, found.period)
                tried = high
                if step == DESCENT_STEPS[0]:  # the coarse step doubles
                    stride = min(2 * stride, DESCENT_STRIDE_MAX)
        return high

    def floor(self) -> float:
        """The largest period floor proven for the plans within these budgets, or the
        compute's (:func:`compute_floor`) where that is larger."""
        return max(self.chain.plans_period_floor(self.gpus, self.cost),
                   compute_floor(self.chain.tables, self.gpus))

    def cut_below(self, high: float, precision: float) -> float:
        """The largest period below ``high`` at which a feasibility run under these
        budgets stopped before it decided, where that is below ``high`` by more than
        twice the precision (0 where there is none)."""
        return max((p for g, c, p in self.memory.cuts if g == self.gpus and c == self.cost
                    and p < high * (1 - 2 * precision)), default=0.0)

    @property
    def best(self) -> Terms | None:
        """The best plan found within the budgets (the first of equals)."""
        return min(self.found, key=lambda terms: terms.values.step_time_s, default=None)

    def at(self, period: float, feasibility: bool, value_cap: float = math.inf
           ) -> Terms | None:
        """A plan of the relaxation with period at most ``period`` (with ``feasibility``,
        any; otherwise the one of least S below ``value_cap``), repaired: None if there is
        none. A plan that
        only breaks the WAN share cap is returned, not kept (:meth:`offer`). The bound tables
        are made at ``period`` itself: tighter than one table for a whole bisection, they
        save more labels than they cost (README)."""
        chain = self.chain
        while True:
            allowance = self.allowance
            work, deadline = (UNLIMITED_WORK, math.inf) if allowance is None \
                else allowance.next_run()
            self.runs += 1
            caps = self.caps()
            before = chain.work
            try:
                found = chain.run(caps, period, MIN_STEP, value_cap=value_cap,
                                  feasibility=feasibility, work_budget=work,
                                  deadline=deadline)
            except LabelBudgetExceeded:  # the allowance's work or deadline stopped it
                if allowance is not None:
                    allowance.stopped = True
                if feasibility:
                    self.memory.cuts.append((self.gpus, self.cost, period))
                raise
            finally:
                if allowance is not None:
                    allowance.charge(chain.work - before)
            if found is None:
                if feasibility:  # a proven floor for caps at least as tight
                    chain.period_floors.append((caps, period))
                return None
            over = self.offer(found)
            if not over:  # feasible (kept), or over the share cap only
                return found
            chain.critical |= set(over)
            self.critical |= set(over)


def forget() -> None:
    """Drop what earlier decisions found, the pairs' chains included: the next decision on
    any state is made cold (the evaluation scores each front so)."""
    _MEMORY.clear()
    forget_chains()


def place(tables: PairTables, budgets: Budgets, hints: Iterable[Plan] = (),
          precision: float = PERIOD_PRECISION, allowance: Allowance | None = None
          ) -> Placement:
    """The lower level on one pair (module docstring), within ``allowance``; ``hints``:
    plans of the pair (of any state of the instance) that start its search where they are
    plans of this state."""
    known = _known(tables, budgets, precision)
    if known is not None:
        return known
    runs = _Runs(tables, budgets, allowance)
    memory = runs.memory
    for hint in hints:
        choices = plan_choices(tables, hint)
        if choices is not None and _holds_the_model(tables, choices):
            runs.offer(runs.chain.terms(choices))
    high = runs.least_known_period()
    known = high < math.inf
    try:
        if high == math.inf:
            high = runs.opening()
        if high == math.inf:
            found = runs.at(OPEN, True)
            if found is None:
                memory.answers.append((runs.gpus, runs.cost, precision, None))
                return _placement(tables, None, runs.runs)
            high = found.period
        high = runs.descend(high, KNOWN_DESCENT_MISSES if known else None)
        low = runs.floor()
        while high - low > precision * high:
            mid = (max(low, runs.cut_below(high, precision)) + high) / 2
            found = runs.at(mid, True)
            if found is None:
                low = mid
            else:
                high = min(mid, found.period)
        runs.at(high * (1 + 1e-9), False, value_cap=runs.least_s(high * (1 + 1e-9)))
    except (LabelBudgetExceeded, OutOfTime):  # out of time: keep what was found
        return _placement(tables, runs.best, runs.runs)
    memory.answers.append((runs.gpus, runs.cost, precision, runs.best))
    return _placement(tables, runs.best, runs.runs)


def beaten(tables: PairTables, budgets: Budgets, step_time: float,
           allowance: Allowance | None = None) -> bool:
    """Whether no plan of the pair within the budgets has a step time below ``step_time``,
    proven: every plan's step time is at least ``(m - 1) P + sum c`` with ``sum c`` at
    least the pair's least compute and ``P`` at least ``sum c / S``; where that bound does
    not settle it, a plan below ``step_time`` needs a period below
    ``(step_time - sum c) / (m - 1)``, and one feasibility run (or a floor already proven)
    tells whether there is one. False where it cannot tell in time."""
    t = tables
    least_compute, stages = _least_compute(t, budgets.gpus)
    # no DP run where the compute alone settles it: the period is at least the mean stage
    # compute sum c / S (compute_floor), so a plan's step time is at least
    # sum c (1 + (m - 1) / S)
    if stages < 1 or least_compute * (1 + (t.micro_batches - 1) / stages) >= step_time:
        return True
    if t.micro_batches == 1:
        return False
    period = (step_time - least_compute) / (t.micro_batches - 1)
    runs = _Runs(tables, budgets, allowance)
    if runs.least_known_period() <= period:
        return False
    if runs.floor() >= period:
        return True
    try:
        return runs.at(period, True) is None
    except (LabelBudgetExceeded, OutOfTime):
        return False


def _holds_the_model(tables: PairTables, choices: dict) -> bool:
    """Whether stage choices (a hint's, from another state or the policy) hold the model's
    layers, each stage at least one and within its memory cap: the DP's own plans do by
    construction, :meth:`_Runs.offer` checks the GPUs and the share cap."""
    t, first = tables, max(choices)
    return sum(c.layers for c in choices.values()) == t.layers and all(
        1 <= c.layers <= (t.layer_cap_first if p == first else t.layer_cap)[p, c.option]
        for p, c in choices.items())


def _least_compute(tables: PairTables, gpu_cap: float | None) -> tuple[float, int]:
    """(the least compute ``sum c`` of a plan of the pair, the most stages ``S`` a plan
    within ``gpu_cap`` has: the positions, and what the GPUs allow)."""
    t = tables
    least = (t.layers * float(t.layer_time.min()) + float(t.first_time.min())
             + float(t.last_time.min()))
    gpus = min(float(t.free_gpus.sum()), math.inf if gpu_cap is None else gpu_cap)
    return least, min(t.positions, int(gpus // int(t.gpus.min())))


def compute_floor(tables: PairTables, gpu_cap: float | None) -> float:
    """A floor on the 1F1B period of the pair's plans within ``gpu_cap``, from the compute
    alone: a period is at least its window over all stages, ``(sum c + 2 sum delta) / S``,
    so at least the least ``sum c`` over the most stages. On the generated K = 20 70B
    instances it is within 2 % of most pairs' least period (within 20-70 % of the others'),
    where a bisection from 0 spent most of its runs far below (scratch count); 0 for an
    interleaved pair, whose period is the schedule graph's."""
    if tables.interleaved:
        return 0.0
    least, stages = _least_compute(tables, gpu_cap)
    return least / stages if stages >= 1 else math.inf


def search(ranked: Iterable[PairTables], budgets: Budgets, first: int, exhaust: bool = True,
           hints: Mapping[tuple[int, int], Sequence[Plan]] | None = None,
           allowance: Allowance | None = None) -> list[Placement]:
    """The lower level over the pairs in the upper level's order (``ranked``): it places
    the ``first`` ones; then, with ``exhaust``, each further one that :func:`beaten` cannot
    prove slower than the best plan placed so far by more than the period precision, until
    the allowance is spent. ``hints``: plans per (dp, micro-batch), to start that pair's
    search (:func:`place`).

    With ``exhaust``, the pairs whose placement an earlier decision on the state already
    answers (:func:`_known`: no DP run) come first and set the bound; a ``first`` pair the
    bound proves slower is then not placed either (a sweep's decisions mostly tighten a
    budget the best pair's known plan still meets)."""
    placements: list[Placement] = []
    best = math.inf  # the least step time placed so far
    answered: list[Placement | None] = []
    if exhaust:  # what earlier decisions on this state placed bounds the search for free
        ranked = list(ranked)
        answered = [_known(tables, budgets) for tables in ranked]
        placements = [known for known in answered if known is not None]
        best = min((known.step_time_s for known in placements), default=math.inf)
    for rank, tables in enumerate(ranked):
        if exhaust and answered[rank] is not None:
            continue
        if rank >= first and (not exhaust or (allowance is not None
                                              and allowance.stops())):
            break
        if exhaust and best < math.inf \
                and beaten(tables, budgets, best * (1 - PERIOD_PRECISION), allowance):
            continue
        placed = place(tables, budgets, allowance=allowance,
                       hints=() if hints is None else hints.get((tables.dp,
                                                                 tables.micro_batch), ()))
        placements.append(placed)
        best = min(best, placed.step_time_s)
    return placements


def _known(tables: PairTables, budgets: Budgets,
           precision: float = PERIOD_PRECISION) -> Placement | None:
    """The placement an earlier decision on this pair and state made that answers
    ``budgets`` too (:meth:`_Memory.answer`), without a DP run; None if there is none."""
    memory = _MEMORY.get(tables)
    if memory is None:
        return None
    caps = _budget_caps(chain_of(tables), budgets)
    known, terms = memory.answer(caps.gpus, caps.cost, precision)
    return _placement(tables, terms, 0) if known else None


def _budget_caps(chain: Chain, budgets: Budgets) -> Caps:
    """The DP's caps for ``budgets``, with the instance's cost budget: the cost budget with
    the masks' ``COST_TOLERANCE``, so that a plan whose cost equals the budget is not lost
    to the order in which the DP sums its link prices."""
    cost = None if budgets.cost is None else budgets.cost * (1 + COST_TOLERANCE)
    return chain.caps(budgets.gpus, cost)


def _placement(tables: PairTables, terms: Terms | None, runs: int) -> Placement:
    if terms is None:
        return Placement(None, math.inf, runs)
    return Placement(choices_plan(tables, terms.choices), terms.values.step_time_s, runs)
