"""Hi-PPO's lower level (rl.lower): exact-DP placement of one pair's stages."""

from __future__ import annotations

import time

import pytest

from formulation.instance import Instance
from formulation.result import evaluate
from instances.suites import FRONTS_DIR, SUITES_DIR
from rl.decision_settings import DecisionSettings
from rl.lower import (
    PERIOD_PRECISION,
    Allowance,
    Placement,
    beaten,
    forget,
    place,
    search,
)
from rl.masks import COST_TOLERANCE, Budgets
from solvers.chain import chain_of
from solvers.front import Front
from solvers.tables import all_pair_tables, choices_plan, plan_choices

QUICK = sorted(p for p in (SUITES_DIR / "quick").glob("*.json") if p.name != "manifest.json")


@pytest.mark.parametrize("path", QUICK, ids=lambda p: p.stem)
def test_given_the_pair_of_an_exact_point_it_is_within_the_period_precision(path):
    """At the budgets of every point of the committed exact front, with that point's pair,
    the placed plan is feasible, within the budgets, and at most ``PERIOD_PRECISION``
    slower than the point (the README's claim; measured at most 0.8 % on the quick and
    bench fronts)."""
    instance = Instance.load(path)
    front = Front.load(FRONTS_DIR / "quick" / f"{path.stem}.front.json", instance)
    tables = {(t.dp, t.micro_batch): t for t in all_pair_tables(instance)}
    for point in front.points:
        step_time, gpus, cost = point.objectives
        budgets = Budgets(gpus=int(gpus), cost=cost)
        placed = place(tables[(point.plan.dp, point.plan.micro_batch)], budgets)
        result = evaluate(instance, placed.plan)
        assert result.feasible
        assert result.objectives[1] <= gpus
        assert result.objectives[2] <= cost * (1 + COST_TOLERANCE)
        assert result.objectives[0] <= step_time * (1 + PERIOD_PRECISION)
        assert placed.step_time_s == pytest.approx(result.objectives[0], rel=1e-9)


def test_a_cost_budget_equal_to_a_plans_cost_keeps_that_plan():
    """The DP sums link prices in its own order: with the budget as its exact cost cap, the
    bench point below (cost 6.8719476736, the budget) was lost to rounding and the pair's
    plan came out 4.8 % slower; with the masks' tolerance on the cap it is within 1 %."""
    path = SUITES_DIR / "bench" / "random-k8-llama2-70b-s1501.json"
    instance = Instance.load(path)
    front = Front.load(FRONTS_DIR / "bench" / f"{path.stem}.front.json", instance)
    point = front.points[1]
    step_time, gpus, cost = point.objectives
    pair = {(t.dp, t.micro_batch): t for t in all_pair_tables(instance)}[
        (point.plan.dp, point.plan.micro_batch)]
    placed = place(pair, Budgets(gpus=int(gpus), cost=cost))
    result = evaluate(instance, placed.plan)
    assert result.feasible and result.objectives[2] <= cost * (1 + COST_TOLERANCE)
    assert result.objectives[0] <= step_time * (1 + PERIOD_PRECISION)


@pytest.mark.parametrize("path", QUICK[:4], ids=lambda p: p.stem)
def test_a_pair_proven_beaten_has_no_faster_plan_and_the_optimum_is_never_beaten(path):
    """At the budgets of every exact front point: a pair :func:`beaten` rules out below
    the point's step time places no plan below it (its placement is a real plan within
    the budgets, hence no faster than the pair's optimum), and the pair of the point is
    never ruled out just above the point's own step time."""
    instance = Instance.load(path)
    front = Front.load(FRONTS_DIR / "quick" / f"{path.stem}.front.json", instance)
    pairs = all_pair_tables(instance)
    ruled_out = 0
    for point in front.points:
        step_time, gpus, cost = point.objectives
        budgets = Budgets(gpus=int(gpus), cost=cost)
        forget()
        for tables in pairs:
            own = (tables.dp, tables.micro_batch) == (point.plan.dp, point.plan.micro_batch)
            if own:
                assert not beaten(tables, budgets, step_time * (1 + 1e-6))
            if beaten(tables, budgets, step_time):
                ruled_out += 1
                assert place(tables, budgets).step_time_s >= step_time * (1 - 1e-9)
    assert ruled_out > 0  # the bound does rule pairs out


def test_the_compute_bound_rules_a_pair_out_without_a_dp_run():
    """Every plan's step time is at least sum c (1 + (m - 1) / S): below that, beaten
    needs no DP run; the fewer stages a GPU budget allows, the higher the bound."""
    instance = Instance.load(QUICK[0])
    forget()
    tables = max(all_pair_tables(instance), key=lambda t: t.micro_batches)
    least = (tables.layers * float(tables.layer_time.min()) + float(tables.first_time.min())
             + float(tables.last_time.min()))
    stages = tables.positions
    bound = least * (1 + (tables.micro_batches - 1) / stages)
    chain = chain_of(tables)
    assert beaten(tables, Budgets(), bound) and chain.runs == 0
    smallest = int(tables.gpus.min())
    two = Budgets(gpus=2 * smallest)  # at most two stages
    assert beaten(tables, two, least * (1 + (tables.micro_batches - 1) / 2))
    assert chain.runs == 0


@pytest.mark.parametrize("path", QUICK[:3], ids=lambda p: p.stem)
def test_the_least_s_run_with_its_incumbent_gives_the_same_placements(path, monkeypatch):
    """The last DP run of a placement starts with the least S of the plans found at its
    period as its incumbent (``_Runs.least_s``): the same plans as a run without one."""
    import rl.lower

    instance = Instance.load(path)
    front = Front.load(FRONTS_DIR / "quick" / f"{path.stem}.front.json", instance)
    tables = {(t.dp, t.micro_batch): t for t in all_pair_tables(instance)}

    def placements():
        out = []
        for point in front.points:
            forget()
            _, gpus, cost = point.objectives
            out.append(place(tables[(point.plan.dp, point.plan.micro_batch)],
                             Budgets(gpus=int(gpus), cost=cost)))
        return out

    capped = placements()
    monkeypatch.setattr(rl.lower._Runs, "least_s", lambda self, period: float("inf"))
    assert [p.plan for p in placements()] == [p.plan for p in capped]


def test_a_hint_within_the_budgets_is_never_lost_and_no_plan_is_none():
    instance = Instance.load(QUICK[0])
    front = Front.load(FRONTS_DIR / "quick" / f"{QUICK[0].stem}.front.json", instance)
    tables = {(t.dp, t.micro_batch): t for t in all_pair_tables(instance)}
    hint = front.points[0].plan
    pair = tables[(hint.dp, hint.micro_batch)]
    placed = place(pair, Budgets(), hints=[hint])
    assert placed.step_time_s <= front.points[0].objectives[0] * (1 + 1e-9)
    nothing = place(pair, Budgets(gpus=1))
    assert nothing.plan is None and nothing.step_time_s == float("inf")


def test_a_hint_that_is_no_plan_of_the_state_is_not_kept():
    """A hint (from another state, or the policy) is offered only where it holds the
    model's layers within each stage's memory cap: placed plans made faster by dropping a
    stage's recompute or moving a layer, over memory, are not returned (they were, before
    the check: aws-10-k5 70B, dp 2)."""
    import dataclasses

    tried = 0
    for path in QUICK:
        instance = Instance.load(path)
        for pair in all_pair_tables(instance):
            forget()
            plan = place(pair, Budgets()).plan
            if plan is None:
                continue
            step_time = evaluate(instance, plan).objectives[0]
            stages = plan.stages
            variants = [stages[:j] + (dataclasses.replace(s, recompute="none"),) + stages[j + 1:]
                        for j, s in enumerate(stages) if s.recompute != "none"]
            for j, k in ((j, k) for j in range(len(stages)) for k in range(len(stages))
                         if j != k and stages[k].layers > 1):
                moved = list(stages)
                moved[j] = dataclasses.replace(stages[j], layers=stages[j].layers + 1)
                moved[k] = dataclasses.replace(stages[k], layers=stages[k].layers - 1)
                variants.append(tuple(moved))
            for variant in variants:
                hint = dataclasses.replace(plan, stages=variant)
                result = evaluate(instance, hint)
                if result.feasible or result.objectives[0] >= step_time:
                    continue
                forget()
                assert place(pair, Budgets(), hints=[hint]).plan != hint
                tried += 1
    assert tried > 0
    forget()  # a hint that is a plan is kept
    pair = all_pair_tables(Instance.load(QUICK[0]))[0]
    plan = place(pair, Budgets()).plan
    forget()
    assert place(pair, Budgets(), hints=[plan], allowance=Allowance(work=1)).plan == plan


def test_a_placement_is_reused_where_it_fits_tighter_budgets():
    instance = Instance.load(QUICK[1])
    pair = all_pair_tables(instance)[0]
    first = place(pair, Budgets())
    assert first.runs >= 1
    again = place(pair, Budgets())
    assert again == Placement(first.plan, first.step_time_s, 0)  # no DP run
    fits = place(pair, Budgets(gpus=first.plan.gpus()))
    assert fits.plan == first.plan and fits.runs == 0
    finer = place(pair, Budgets(), precision=0.001)  # a finer request is solved again
    assert finer.runs >= 1 and finer.step_time_s <= first.step_time_s


def test_known_answers_bound_the_search_and_spare_the_first_pair_proven_slower():
    instance = Instance.load(QUICK[1])
    forget()
    pairs = all_pair_tables(instance)
    placed = {id(t): place(t, Budgets()) for t in pairs}  # every pair, answered unbudgeted
    fastest = min(pairs, key=lambda t: placed[id(t)].step_time_s)
    budget = Budgets(gpus=placed[id(fastest)].plan.gpus())
    # the fastest pair's known plan meets the budget: no DP run, and a first-ranked pair
    # the bound proves slower is not placed
    slowest = max((t for t in pairs if placed[id(t)].plan is not None
                   and placed[id(t)].step_time_s > placed[id(fastest)].step_time_s
                   * (1 + 2 * PERIOD_PRECISION)), key=lambda t: placed[id(t)].step_time_s)
    ranked = [slowest] + [t for t in pairs if t is not slowest]
    found = search(ranked, budget, first=1)
    assert all(p.runs == 0 for p in found)
    assert min(p.step_time_s for p in found) == placed[id(fastest)].step_time_s
    # without the exhaust the first pair is placed whatever the bound says
    assert search(ranked, budget, first=1, exhaust=False)[0].plan.dp == slowest.dp


def test_a_deadline_stops_the_runs_and_keeps_the_hint():
    instance = Instance.load(QUICK[2])
    forget()
    pair = all_pair_tables(instance)[0]
    full = place(pair, Budgets())
    forget()  # cold again: nothing remembered
    late = place(pair, Budgets(), hints=[full.plan],
                 allowance=Allowance(deadline=time.perf_counter() - 1))
    assert late.runs == 0 and late.plan == full.plan  # no run, the hint kept
    forget()  # without a hint or a plan remembered, nothing
    assert place(pair, Budgets(), allowance=Allowance(time.perf_counter() - 1)).plan is None
    assert place(pair, Budgets()).runs >= 1  # a stopped placement is not an answer
    assert Allowance.of(0.5, None, start=100.0).deadline == 100.5  # from the decision's start
    assert Allowance.of(None, None) is None
    with pytest.raises(ValueError, match="lower_time"):
        DecisionSettings(lower_time=0)
    with pytest.raises(ValueError, match="lower_work"):
        DecisionSettings(lower_work=0)


def test_an_allowance_says_it_stopped_the_lower_level_only_where_it_left_work_undone():
    """A run refused or stopped for want of time or work marks the allowance ``stopped``;
    a lower level that finished within it does not, even where the clock passes the
    deadline after it (a decision's scoring can: it would be resumed for nothing)."""
    instance = Instance.load(QUICK[2])
    pair = all_pair_tables(instance)[0]
    for allowance in (Allowance(deadline=time.perf_counter() - 1), Allowance(work=1)):
        forget()
        place(pair, Budgets(), allowance=allowance)
        assert allowance.stopped
    forget()
    ample = Allowance(deadline=time.perf_counter() + 60)
    assert place(pair, Budgets(), allowance=ample).plan is not None
    ample.deadline = time.perf_counter() - 1  # past it now, with nothing left to do
    assert ample.spent() and not ample.stopped


def test_a_placement_out_of_time_keeps_the_best_plan_earlier_ones_found_within_its_budgets():
    """The plans found by earlier placements on the state (under other budgets) that fit
    this one's budgets are its plans too: out of time before its first run, it keeps the
    fastest of them rather than none (a sweep's budgeted decisions lost the fast end so)."""
    instance = Instance.load(QUICK[2])
    forget()
    pair = all_pair_tables(instance)[0]
    free = place(pair, Budgets())
    cheap = place(pair, Budgets(cost=0.5 * evaluate(instance, free.plan).objectives[2]))
    assert cheap.plan is not None and cheap.step_time_s >= free.step_time_s
    gpus = cheap.plan.gpus()  # under a GPU budget only: no earlier placement answers it
    late = place(pair, Budgets(gpus=gpus), allowance=Allowance(time.perf_counter() - 1))
    assert late.runs == 0 and late.plan is not None
    fitting = [p for p in (free, cheap) if p.plan.gpus() <= gpus]
    assert late.step_time_s == min(p.step_time_s for p in fitting)
    # each plan remembered once, however often it is found or given as a hint
    from rl.lower import _MEMORY

    memory = _MEMORY[pair]
    size = len(memory.plans)
    place(pair, Budgets(gpus=gpus), hints=[free.plan],
          allowance=Allowance(time.perf_counter() - 1))
    assert len(memory.plans) == size == len(memory.known)
    assert len({tuple(sorted(t.choices.items())) for t in memory.plans}) == size
    forget()
    assert place(pair, Budgets(gpus=gpus), allowance=Allowance(time.perf_counter() - 1)
                 ).plan is None


@pytest.mark.parametrize("suite", ["quick", "bench"])
def test_the_compute_floor_is_below_every_exact_points_period(suite):
    """``compute_floor`` is a floor: no plan of the committed exact fronts has a 1F1B period
    below it at its own GPU count (the bisection starts there), and it is no mere 0."""
    from rl.lower import compute_floor

    tight = 0
    for front_path in sorted((FRONTS_DIR / suite).glob("*.front.json")):
        instance = Instance.load(SUITES_DIR / suite / front_path.name.replace(".front", ""))
        front = Front.load(front_path, instance)
        pairs = {(t.dp, t.micro_batch, t.virtual_stages): t for t in all_pair_tables(instance)}
        for point in front.points:
            plan = point.plan
            pair = pairs[(plan.dp, plan.micro_batch, plan.virtual_stages)]
            period = chain_of(pair).terms(plan_choices(pair, plan)).period
            floor = compute_floor(pair, plan.gpus())
            assert floor <= period * (1 + 1e-12)
            tight += floor >= 0.5 * period
    assert tight > 0


def test_a_first_plan_comes_from_dives_at_the_compute_floor_before_an_open_run(monkeypatch):
    """Where no plan is known, dives at ``OPENING_DIVES`` times the compute floor look for
    a first plan, the lowest first; only where none finds one does a run at an open
    period (whose plan's period can be several times the least) start the descent."""
    import rl.lower as lower
    from rl.lower import OPENING_DIVES, compute_floor
    from solvers.chain import OPEN, Chain, LabelBudgetExceeded

    instance = Instance.load(SUITES_DIR / "full" / f"{FULL_70B[0]}.json")
    pair = {(t.dp, t.micro_batch): t for t in all_pair_tables(instance)}[(4, 1)]
    floor = compute_floor(pair, None)
    dives, runs = [], []
    dive, run = Chain.dive, Chain.run
    monkeypatch.setattr(Chain, "dive", lambda self, caps, period, *args, **kwargs: (
        dives.append(period), dive(self, caps, period, *args, **kwargs))[1])
    monkeypatch.setattr(Chain, "run", lambda self, caps, period, *args, **kwargs: (
        runs.append(period), run(self, caps, period, *args, **kwargs))[1])
    forget()
    runs_ = lower._Runs(pair, Budgets(), None)
    first = runs_.opening()
    assert dives[0] == pytest.approx(OPENING_DIVES[0] * floor, rel=1e-12)
    assert floor < first <= dives[-1] and not runs
    dives.clear()
    monkeypatch.setattr(lower, "OPENING_DIVES", (0.5,))  # below the floor: none found

    def stop(self, caps, period, *args, **kwargs):  # the first run is all this asks
        runs.append(period)
        raise LabelBudgetExceeded

    monkeypatch.setattr(Chain, "run", stop)
    forget()
    assert place(pair, Budgets()).plan is None
    assert dives == pytest.approx([0.5 * floor], rel=1e-12) and runs == [OPEN]


@pytest.mark.parametrize("path", QUICK[:3], ids=lambda p: p.stem)
def test_the_descent_dives_find_plans_within_the_budgets_each_below_the_last(path):
    """Before the bisection, dives at periods at least the finest of ``DESCENT_STEPS`` below
    the last plan's: each
    plan they keep is feasible, within the budgets and at most that period; the period
    returned is the least of them and no less than the placement's own."""
    from rl.lower import DESCENT_STEPS, _Runs

    instance = Instance.load(path)
    dives = 0
    for pair in all_pair_tables(instance)[:4]:
        forget()
        loose = place(pair, Budgets())
        if loose.plan is None:
            continue
        budgets = Budgets(gpus=loose.plan.gpus())
        forget()
        runs = _Runs(pair, budgets, None)
        start = runs.at(1e30, True).period
        before = len(runs.found)
        high = runs.descend(start)
        dived = runs.found[before:]
        dives += len(dived)
        assert high == min([start] + [terms.period for terms in dived])
        limit = start
        for terms in dived:
            assert terms.period <= limit * (1 - min(DESCENT_STEPS)) * (1 + 1e-9)
            limit = terms.period
            plan = choices_plan(pair, terms.choices)
            result = evaluate(instance, plan)
            assert result.feasible and plan.gpus() <= budgets.gpus
        assert place(pair, budgets).plan is not None
    assert dives > 0


FULL_70B = ("cn-hubs-k20-llama2-70b-s6100", "random-k12-llama2-70b-s5701")


@pytest.mark.parametrize("name, dp, within", [(FULL_70B[0], 2, 0.05), (FULL_70B[0], 4, 0.05),
                                              (FULL_70B[1], 4, 0.10)])
def test_the_descent_comes_near_the_least_period_on_the_full_space(name, dp, within):
    """On the full search space's 70B instances the least period of a pair is where the
    label DP takes up to seconds, so the descent's dives decide how close a placement cut
    short gets: from the first dive's plan, they end within 5 or 10 % of the least period
    of the committed exact front's plans of the pair (measured 3.5, 4.0 and 8.7 %). Dives
    ordered by layers per GPU stopped 36-43 % above it; without the thin stages or with a
    stop at the first dive that finds none, the last one or two fail; with 5 % steps alone
    (no finer step), the first two (5.8 and 7.4 %)."""
    from rl.lower import _Runs

    instance = Instance.load(SUITES_DIR / "full" / f"{name}.json")
    front = Front.load(FRONTS_DIR / "full" / f"{name}.front.json", instance)
    pair = {(t.dp, t.micro_batch): t for t in all_pair_tables(instance)}[(dp, 1)]
    chain = chain_of(pair)
    least = min(chain.terms(plan_choices(pair, point.plan)).period for point in front.points
                if (point.plan.dp, point.plan.micro_batch) == (dp, 1))
    forget()
    runs = _Runs(pair, Budgets(), None)
    high = runs.descend(runs.at(1e30, True).period)
    assert high <= (1 + within) * least


def test_the_descent_doubles_its_coarse_step_after_each_plan(monkeypatch):
    """From a first plan far above the least period, the coarse step doubles after each
    plan: on a pair of the full space's K = 20 70B instance the descent ends at the same
    period in fewer dives than with the 5 % step alone (measured 15 against 26)."""
    import rl.lower as lower
    from solvers.chain import Chain

    instance = Instance.load(SUITES_DIR / "full" / f"{FULL_70B[0]}.json")
    pair = {(t.dp, t.micro_batch): t for t in all_pair_tables(instance)}[(2, 1)]
    asked = []
    dive = Chain.dive

    def counted(self, caps, period, *args, **kwargs):
        asked.append(period)
        return dive(self, caps, period, *args, **kwargs)

    monkeypatch.setattr(Chain, "dive", counted)
    ends = []
    for stride_max in (lower.DESCENT_STEPS[0], lower.DESCENT_STRIDE_MAX):
        monkeypatch.setattr(lower, "DESCENT_STRIDE_MAX", stride_max)
        forget()
        runs = lower._Runs(pair, Budgets(), None)
        start = runs.at(1e30, True).period
        asked.clear()
        ends.append((runs.descend(start), len(asked)))
    (plain, plain_dives), (doubled, doubled_dives) = ends
    assert doubled <= plain * (1 + 1e-9)
    assert doubled_dives < plain_dives


@pytest.mark.parametrize("misses", [None, 1])
def test_the_descent_steps_by_its_rule(monkeypatch, misses):
    """The descent's periods, with dives scripted to find a plan at the period asked down to
    0.48 and none below: the coarse step doubles after each plan (5, 10, 20, 40 %), falls
    back to 5 % below the last plan after a miss at a doubled step (not a miss counted),
    ends after ``misses`` misses at 5 % (None: ``DESCENT_MISSES``, 3 here; 1 from a known
    plan), then goes on from the last plan in 1 % steps until as many misses there."""
    import types

    import rl.lower as lower
    from solvers.chain import Chain

    asked = []

    def scripted(self, caps, period, *args, **kwargs):
        asked.append(period)
        return types.SimpleNamespace(period=period) if period >= 0.48 else None

    monkeypatch.setattr(Chain, "dive", scripted)
    monkeypatch.setattr(lower._Runs, "offer", lambda self, terms: None)
    monkeypatch.setattr(lower, "DESCENT_STEPS", (0.05, 0.01))
    monkeypatch.setattr(lower, "DESCENT_STRIDE_MAX", 0.4)
    monkeypatch.setattr(lower, "DESCENT_MISSES", 3)
    monkeypatch.setattr(lower, "DESCENT_DIVES", 100)
    forget()
    runs = lower._Runs(all_pair_tables(Instance.load(QUICK[0]))[0], Budgets(), None)
    end = runs.descend(1.0, misses)
    count = 3 if misses is None else misses
    want, high, stride = [], 1.0, 0.05
    while True:  # the coarse phase, by the rule
        tried = high * (1 - stride)
        want.append(tried)
        if tried >= 0.48:
            high, stride = tried, min(2 * stride, 0.4)
        elif stride > 0.05:
            stride = 0.05
        else:
            break
    want += [high * 0.95 ** q for q in range(2, count + 1)]  # the further misses at 5 %
    fine = high
    while fine * 0.99 >= 0.48:
        fine *= 0.99
        want.append(fine)
    want += [fine * 0.99 ** q for q in range(1, count + 1)]
    assert asked == pytest.approx(want, rel=1e-12)
    assert end == pytest.approx(fine, rel=1e-12)
    assert want[:4] == pytest.approx([0.95, 0.855, 0.684, 0.4104])
    assert len(want) - want.index(high * 0.95 ** count) > 5  # plans in the fine phase too


def test_a_placement_stopped_in_a_run_bisects_above_that_run_the_next_time(monkeypatch):
    """A feasibility run stopped by the allowance is remembered; the next placement under
    the same budgets tries a period above it, so that repeated decisions progress from
    above instead of stopping in the same run."""
    from solvers.chain import Chain

    instance = Instance.load(QUICK[0])
    pair = all_pair_tables(instance)[0]
    forget()
    periods = []
    run = Chain.run
    monkeypatch.setattr(Chain, "run", lambda self, caps, period, *args, **kwargs: (
        periods.append((period, kwargs.get("feasibility"))),
        run(self, caps, period, *args, **kwargs))[1])
    work = 1
    while True:  # the least work that reaches a bisection run and stops in it
        forget()
        periods.clear()
        if place(pair, Budgets(), allowance=Allowance(work=work)).runs >= 2:
            break
        work *= 2
    cut = periods[-1][0]
    assert periods[-1][1] and cut < 1e30
    periods.clear()
    place(pair, Budgets(), allowance=Allowance(work=work))
    assert periods[0][0] > cut


def test_a_work_allowance_stops_the_runs_the_same_way_every_time():
    """Counted work, not time: a cold placement under the same allowance makes the same
    runs and finds the same plan however fast the machine is; the runs charge it their
    work, and one left without work does not start."""
    instance = Instance.load(QUICK[2])
    pair = all_pair_tables(instance)[0]
    forget()
    full = place(pair, Budgets())
    outcomes = []
    for _ in range(2):
        forget()
        allowance = Allowance(work=10_000)
        placed = place(pair, Budgets(), allowance=allowance)
        outcomes.append((placed.runs, placed.plan, placed.step_time_s))
        assert allowance.spent() and placed.runs < full.runs
    assert outcomes[0] == outcomes[1]
    forget()
    assert place(pair, Budgets(), allowance=Allowance(work=0)).runs == 0


def test_a_dp_run_stops_at_its_deadline_within_the_clock_interval():
    """A run past its deadline stops at its next reading of the clock (every
    ``CLOCK_EVERY`` units of work) instead of running to its end; a deadline ahead
    changes nothing."""
    from solvers.chain import OPEN, Chain, LabelBudgetExceeded
    from solvers.label_kernels import CLOCK_EVERY

    path = next(p for p in QUICK if p.stem.startswith("aws-10-k5"))
    chain = Chain(all_pair_tables(Instance.load(path))[0])
    caps = chain.caps(None, None)
    full = chain.run(caps, OPEN)
    work = chain.work
    assert work > 2 * CLOCK_EVERY  # a run long enough to read the clock
    assert chain.run(caps, OPEN, deadline=time.perf_counter() + 3600) == full
    assert chain.work == 2 * work
    with pytest.raises(LabelBudgetExceeded):
        chain.run(caps, OPEN, deadline=time.perf_counter() - 1)
    # stopped at its first reading: the candidates up to it and the walks between
    assert chain.work - 2 * work < work / 2


def test_a_dp_run_stops_at_its_work_budget_and_counts_its_work():
    """A counted allowance reaches into a DP run through its work budget: the run stops
    at the first unit past it, exactly (the same on any machine), with or without a
    deadline ahead."""
    from solvers.chain import OPEN, Chain, LabelBudgetExceeded
    from solvers.label_kernels import CLOCK_EVERY

    instance = Instance.load(QUICK[3])
    chain = Chain(all_pair_tables(instance)[0])
    caps = chain.caps(None, None)
    chain.run(caps, OPEN)
    assert chain.runs == 1 and chain.work > 100
    for budget in (chain.work // 2, CLOCK_EVERY, CLOCK_EVERY + 1):
        for deadline in (float("inf"), time.perf_counter() + 3600):
            if budget >= chain.work:
                continue
            before = chain.work
            with pytest.raises(LabelBudgetExceeded):
                chain.run(caps, OPEN, work_budget=budget, deadline=deadline)
            assert chain.work - before == budget + 1


def test_each_placement_tracks_only_the_domains_its_own_plans_overused():
    """Domains another placement's relaxed plans overused are not tracked by a new one
    (tracking multiplies the labels), and a period floor proven while tracking domains
    still bounds it (every relaxation holds every plan)."""
    from rl.lower import _Runs, compute_floor
    from solvers.chain import Caps

    instance = Instance.load(QUICK[0])
    pair = all_pair_tables(instance)[0]
    forget()
    chain = chain_of(pair)
    chain.critical.add(0)
    runs = _Runs(pair, Budgets(gpus=64), None)
    assert runs.caps().critical == frozenset()
    assert runs.floor() == compute_floor(pair, runs.gpus) < 2.5  # no floor proven yet
    chain.period_floors.append((Caps(64, float("inf"), frozenset({0, 1})), 2.5))
    chain.period_floors.append((Caps(32, float("inf"), frozenset()), 9.0))  # tighter GPUs
    assert runs.floor() == 2.5
    forget()


def test_a_placement_from_a_known_plan_descends_with_one_miss_a_step(monkeypatch):
    """A placement that starts from a plan already known (here a hint: the first plan of
    an open run, far above the least period) descends with one miss a step, a cold one
    with ``DESCENT_MISSES`` (the test above: what one miss does); from that far start it
    still ends within the period precision of the cold placement."""
    import rl.lower as lower
    from solvers.chain import OPEN

    misses = []
    real = lower._Runs.descend

    def spy(self, high, missed=None):
        misses.append(missed)
        return real(self, high, missed)

    monkeypatch.setattr(lower._Runs, "descend", spy)
    instance = Instance.load(QUICK[0])
    tables = max(all_pair_tables(instance), key=lambda t: t.layers * t.micro_batches)
    forget()
    cold = place(tables, Budgets())
    assert cold.plan is not None and misses == [None]
    forget()
    chain = chain_of(tables)
    start = chain.run(chain.caps(None, None), OPEN, feasibility=True)
    assert start is not None and start.values.step_time_s > cold.step_time_s * 1.1
    forget()
    warm = place(tables, Budgets(), hints=[choices_plan(tables, start.choices)])
    assert misses[1:] == [lower.KNOWN_DESCENT_MISSES] == [1]
    assert warm.step_time_s <= cold.step_time_s * (1 + PERIOD_PRECISION)
