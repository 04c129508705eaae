"""The ``labels`` engine (solvers.labels) against brute force, solve by solve.

Each run draws its tiny instances from a fresh seed (``XDSCHED_AUDIT_SEED=<seed>`` replays
one), solves every (dp, micro-batch) pair under random GPU, cost and step caps and random
weights, and compares with the least weighted value among the pair's enumerated plans: an
``optimal`` must equal it, an ``infeasible`` must have no plan, and any bound reported must
not exceed it.
"""

from __future__ import annotations

import dataclasses
import math
import os
import secrets

import numpy as np
import pytest

from formulation.evaluator import evaluate_batch
from formulation.feasibility import Kind
from formulation.result import evaluate
from instances.tiny import audit_instance, tiny_instance
from solvers.bounds import PairBounds
from solvers.bruteforce import enumerate_plans
from solvers.chain import _largest_within, chain_of
from solvers.engine import SolveRequest, SolveStatus
from solvers.labels import LabelEngine
from solvers.tables import all_pair_tables, choices_plan

COUNT = 4  # instances a run checks (about 1 s each once the kernels are compiled)
TOLERANCE = 1e-7  # relative: the engine's optimum against brute force's


@pytest.fixture(scope="module")
def seed() -> int:
    value = os.environ.get("XDSCHED_AUDIT_SEED")
    return int(value) if value else secrets.randbits(32)


def _plans_by_pair(instance) -> dict[tuple[int, int], np.ndarray]:
    """(dp, micro-batch) -> rows (step time, GPUs, cost) of the pair's feasible plans: the
    plain ones (an audit instance may list interleaving, whose plans are its cells')."""
    rows = []
    for batch in enumerate_plans(instance):
        result = evaluate_batch(instance, batch)
        ok = result.feasible & (batch.virtual_stages == 1)
        rows.append(np.column_stack([batch.dp[ok], batch.micro_batch[ok],
                                     result.objectives[ok]]))
    plans = np.concatenate(rows)
    return {(int(d), int(b)): plans[(plans[:, 0] == d) & (plans[:, 1] == b), 2:]
            for d, b in {(r[0], r[1]) for r in plans}}


def _requests(rng, plans: np.ndarray) -> list[SolveRequest]:
    """The unconstrained min-step solve, capped ones at values the plans take (so that caps
    bind exactly at a plan), and a random weighting."""
    requests = [SolveRequest()]
    for _ in range(3):
        steps, gpus, costs = (np.unique(plans[:, j]) for j in range(3))
        requests.append(SolveRequest(
            gpu_cap=float(rng.choice(gpus)),
            cost_cap=float(rng.choice(costs)) if rng.random() < 0.5 else None,
            step_cap=float(rng.choice(steps)) if rng.random() < 0.3 else None))
    w = rng.dirichlet([1.0, 1.0, 1.0])
    requests.append(SolveRequest(weights=(float(w[0]) + 0.05, float(w[1]), 10 * float(w[2]))))
    return requests


def _least(plans: np.ndarray, request: SolveRequest) -> float:
    ok = np.ones(len(plans), dtype=bool)
    for j, cap in ((0, request.step_cap), (1, request.gpu_cap), (2, request.cost_cap)):
        if cap is not None:
            ok &= plans[:, j] <= cap * (1 + 1e-12)
    return float((plans[ok] @ np.array(request.weights)).min()) if ok.any() else math.inf


def test_the_engine_agrees_with_brute_force(seed):
    rng = np.random.default_rng(seed)
    wrong, decided = [], 0
    for _ in range(COUNT):
        instance = audit_instance(rng)
        by_pair = _plans_by_pair(instance)
        for tables in all_pair_tables(instance):
            plans = by_pair.get((tables.dp, tables.micro_batch))
            if plans is None:
                continue
            engine, bounds = LabelEngine(tables), PairBounds(tables)
            for request in _requests(rng, plans):
                request = dataclasses.replace(request, period_floor=bounds.period_floor(
                    request.gpu_cap, request.cost_cap))
                least = _least(plans, request)
                solve = engine.solve(request)
                where = f"{instance.name} dp{tables.dp} b{tables.micro_batch} {request}"
                if solve.bound is not None and solve.bound > least * (1 + TOLERANCE):
                    wrong.append(f"{where}: bound {solve.bound} above {least}")
                if solve.status == SolveStatus.OPTIMAL:
                    decided += 1
                    if abs(solve.objective - least) > TOLERANCE * least:
                        wrong.append(f"{where}: optimal {solve.objective}, brute force {least}")
                    if not evaluate(instance, solve.plan).feasible:
                        wrong.append(f"{where}: its plan is infeasible")
                elif solve.status == SolveStatus.INFEASIBLE:
                    decided += 1
                    if least < math.inf:
                        wrong.append(f"{where}: infeasible, brute force {least}")
    assert not wrong, f"seed {seed}: {wrong}"
    assert decided > 0


def _relaxed_completion(*args):
    """The table :func:`solvers.label_kernels.completion` states, by plain recursion on its
    definition (:func:`_completion_by_recursion`): ``F(j, k, u, l)``, the least ``sum c +
    2 sum delta`` of the stages after a stage at position j in domain k, with l layers
    placed and ``u * dp`` GPUs in the current segment, no segment of more than
    ``units * dp`` GPUs (a domain entered again has all its GPUs free)."""
    rest, dp = _completion_by_recursion(*args), args[5]
    return lambda j, k, u, placed: rest(j, k, u * dp, placed, 0)


def _completion_by_recursion(period, layers, positions, domains, options, dp, layer_time,
                             first_time, gpus, cap, cap_first, free, delay, occupancy, units,
                             most=math.inf, whole_units=True):
    """``F(j, k, g, l, n)``: the least ``sum c + 2 sum delta`` of the stages after a stage
    at position j in domain k, with l layers placed, ``g`` GPUs in the current segment
    (rounded down to whole units of dp, as the table keys them, with ``whole_units``) and
    ``n`` in the plan so far, whose GPUs stay within ``most``; relaxed: no windows, a
    domain entered again has all its GPUs free, no segment of more than ``units * dp``."""
    import functools

    @functools.cache
    def rest(j, k, g, placed, n):
        if placed == layers:
            return 0.0
        best = math.inf
        for k2 in range(domains):
            if k2 != k and occupancy[k2, k] > period:
                continue
            base = g if k2 == k else 0
            for o in range(options):
                g1, n1 = base + gpus[o], (n + gpus[o] if most < math.inf else 0)
                if g1 > free[k2] or g1 // dp > units or n1 > most:
                    continue
                g1 = g1 // dp * dp if whole_units else g1
                stage = 2 * delay[k2, k]
                left = layers - placed
                if 1 <= left <= cap_first[j + 1, o]:  # the first stage closes the plan
                    best = min(best, stage + left * layer_time[o] + first_time[o])
                if j + 1 < positions - 1:
                    for m in range(1, min(cap[j + 1, o], left - 1) + 1):
                        best = min(best, stage + m * layer_time[o]
                                   + rest(j + 1, k2, g1, placed + m, n1))
        return best

    return rest


def _random_table_inputs(rng, layers=(2, 11), positions=(2, 6)):
    """Random inputs of :func:`solvers.label_kernels.completion`: options whose GPUs, layer
    times and caps cross each other (an instance's seldom do), a domain with room for every
    stage, and slow links; ``layers`` and ``positions``: the ranges drawn from."""
    positions, domains, options, layers = (int(rng.integers(*positions)),
                                           int(rng.integers(1, 4)), int(rng.integers(1, 7)),
                                           int(rng.integers(*layers)))
    gpus = rng.choice([1, 2, 4], size=options).astype(np.int64)
    layer_time = rng.choice([0.5, 1.0, 1.5], size=options) / gpus
    first_time = rng.choice([0.0, 0.25], size=options)
    cap = rng.integers(-1, layers + 1, size=(positions, options)).astype(np.int64)
    cap_first = rng.integers(-1, layers + 1, size=(positions, options)).astype(np.int64)
    dp = int(rng.choice([1, 2]))
    free = rng.integers(0, 9, size=domains).astype(np.int64) * dp
    free[rng.integers(domains)] = positions * 4 * dp
    delay = rng.uniform(0.0, 0.5, size=(domains, domains))
    occupancy = rng.uniform(0.0, 2.0, size=(domains, domains))
    units = int(min(free.max(), positions * gpus.max()) // dp)
    if rng.random() < 0.5:  # a run's GPU cap: no segment above it
        units = int(rng.integers(0, units + 1))
    return (1.0, layers, positions, domains, options, dp, layer_time, first_time, gpus, cap,
            cap_first, free, delay, occupancy, units)


def _instance_table_inputs(rng):
    """The inputs of :func:`solvers.label_kernels.completion` for the pairs of an audit
    instance, under a random load and period."""
    instance = audit_instance(rng)
    for tables in all_pair_tables(instance):
        if tables.interleaved:
            continue
        chain = chain_of(tables)
        free = (tables.free_gpus * rng.uniform(0, 1.5, tables.num_domains)).astype(np.int64)
        free[rng.integers(tables.num_domains)] = tables.positions * int(tables.gpus.max()) * 2
        loosest = chain.run(chain.caps(None, None), 1e30, feasibility=True)
        period = 1e30 if loosest is None else loosest.period * rng.uniform(0.6, 1.5)
        cap, cap_first = (c[:, 0, :] for c in chain.layer_caps(period))
        units = chain.units if rng.random() < 0.5 \
            else chain.table_units(chain.caps(int(rng.integers(1, chain.units + 1)) * tables.dp,
                                              None))
        yield (period, tables.layers, tables.positions, tables.num_domains,
               tables.num_options, tables.dp, tables.layer_time, tables.first_time,
               chain.gpus, cap, cap_first, free, tables.delay, tables.occupancy, units)


def test_the_bound_tables_are_the_relaxed_completion(seed):
    """The completion bounds the DP and the dives prune by equal their definition, computed
    by recursion, on audit instances under random loads and periods and on random inputs
    (the kernel skips options another dominates at a position, and copies the rows of a
    segment whose domain has room for every stage still to come: one domain has), half of
    them for a run's GPU cap (no segment above it)."""
    rng = np.random.default_rng(seed + 3)
    cases = [case for _ in range(COUNT) for case in _instance_table_inputs(rng)]
    cases += [_random_table_inputs(rng) for _ in range(200)]
    compared = sum(_table_against_definition(args, f"seed {seed}: case {number}")
                   for number, args in enumerate(cases))
    assert compared > 0


def _table_against_definition(args, where: str) -> int:
    """Asserts that the table :func:`solvers.label_kernels.completion` makes from ``args``
    equals its definition (:func:`_relaxed_completion`) in every entry a plan can reach,
    to 1e-12 relative; returns how many entries it compared."""
    from solvers.label_kernels import INF, completion

    table, rest = completion(*args), _relaxed_completion(*args)
    dp, free = args[5], args[11]
    compared = 0
    for j, k, u, placed in np.ndindex(table.shape):
        if u * dp > free[k] or j == args[2] - 1:
            continue
        want, got = rest(j, k, u, placed), table[j, k, u, placed]
        entry = f"{where}, F[{j}, {k}, {u}, {placed}]"
        assert (got >= INF) == (want == math.inf), entry
        if want < math.inf:
            assert got == pytest.approx(want, rel=1e-12), entry
        compared += 1
    return compared


def test_wide_layer_windows_give_the_relaxed_completion(seed):
    """A middle stage's layers above ``DIRECT_WINDOW`` are minimised over by doubling
    (:func:`solvers.label_kernels._next_stage`), not one layer count at a time: on random
    inputs of up to 30 layers and caps up to all of them, the table equals its definition
    (the sums round differently, within the tolerance of the test above)."""
    from solvers.label_kernels import DIRECT_WINDOW

    rng = np.random.default_rng(seed + 11)
    compared = wide = 0
    for number in range(12):
        args = _random_table_inputs(rng, layers=(DIRECT_WINDOW + 2, 31), positions=(2, 5))
        # the positions whose stages read rows a plan can complete (the last reads none)
        wide += int((np.minimum(args[9][1:args[2] - 1], args[1] - 1) > DIRECT_WINDOW).sum())
        compared += _table_against_definition(args, f"seed {seed}: case {number}")
    assert compared > 0 and wide > 0


def test_a_table_for_a_gpu_cap_bounds_every_completion_within_the_cap(seed):
    """The table made for a run's GPU cap C (``units = min(units, C // dp)``) is never
    above the relaxed completion of a partial plan whose GPUs stay within C
    (:func:`_completion_by_recursion`, GPUs counted exactly), read as the DP reads it (a
    segment with no room for another stage keyed as its domain full), for every C."""
    from solvers.label_kernels import INF, completion

    rng = np.random.default_rng(seed + 7)
    checked = 0
    for _ in range(60):
        args = list(_random_table_inputs(rng))
        positions, domains, dp, gpus, free = args[2], args[3], args[5], args[8], args[11]
        layers = args[1]
        if positions > 4 or layers > 7:
            continue
        units = int(min(free.max(), positions * gpus.max()) // dp)
        for most in range(0, int(min(free.sum(), positions * gpus.max())) + 1, dp):
            args[14] = min(units, most // dp)
            table = completion(*args)
            # every segment the plans within the cap hold: the cap is the truth's own
            truth = _completion_by_recursion(*args[:14], units, most=most, whole_units=False)
            for j, k in np.ndindex(positions - 1, domains):
                for g in range(0, min(free[k], most) + 1):
                    key = g if free[k] - g >= gpus.min() else free[k]
                    u = min(key // dp, args[14])
                    for n in {g, min(most, g + dp)}:
                        for placed in range(layers + 1):
                            want, got = truth(j, k, g, placed, n), table[j, k, u, placed]
                            assert got <= want + 1e-9 or (got >= INF and want == math.inf), \
                                f"seed {seed}: cap {most}, F[{j}, {k}, {u}, {placed}]"
                            checked += 1
    assert checked > 0


def test_a_run_under_a_gpu_cap_decides_the_same_with_its_smaller_tables(seed):
    """A run under a GPU cap reads bound tables made for segments of at most the cap
    (``Chain.table_units``): its optimum and its feasibility are those of the same run on
    the tables for every segment (as before such tables), on audit instances and a scarce
    one, with random caps, tracked domains and periods."""
    from solvers.chain import OPEN, Caps, Chain

    rng = np.random.default_rng(seed + 5)
    instances = [audit_instance(rng) for _ in range(COUNT)]
    instances.append(tiny_instance(2, domains=4, layers=12, free_gpus=(2, 1, 1, 2),
                                   max_stages=4))
    smaller = 0
    for instance in instances:
        for tables in all_pair_tables(instance):
            if tables.interleaved:
                continue
            capped, full = Chain(tables), Chain(tables)
            full.table_units = lambda caps, chain=full: chain.units
            for _ in range(4):
                gpus = int(rng.integers(int(tables.gpus.min()) - 1, full.units * tables.dp + 1))
                tracked = frozenset(int(k) for k in
                                    np.flatnonzero(rng.random(tables.num_domains) < 0.4))
                caps = Caps(gpus, math.inf, tracked)
                smaller += capped.table_units(caps) < capped.units
                loosest = full.run(caps, OPEN, feasibility=True)
                periods = [OPEN] + ([] if loosest is None else
                                    [loosest.period * f for f in (1.0, 0.9, 0.8)])
                for period in periods:
                    weights = (1.0, float(rng.uniform(0, 0.01)), 0.0)
                    a, b = capped.run(caps, period, weights), full.run(caps, period, weights)
                    where = f"seed {seed}: {instance.name} {caps} {period}"
                    assert (a is None) == (b is None), where
                    if a is not None:
                        assert a.weighted(weights) == pytest.approx(b.weighted(weights),
                                                                     rel=1e-9), where
                    assert (capped.run(caps, period, feasibility=True) is None) \
                        == (full.run(caps, period, feasibility=True) is None), where
    assert smaller > 0  # some caps made smaller tables


def _a_pair():
    instance = tiny_instance(3, domains=4, layers=10, free_gpus=(2, 2, 1, 1))
    tables = next(t for t in all_pair_tables(instance) if t.dp == 1 and t.micro_batch == 1)
    plans = _plans_by_pair(instance)[1, 1]
    return tables, plans


def test_an_optimal_solve_reports_its_bound_and_a_step_cap_below_it_is_infeasible():
    tables, plans = _a_pair()
    engine = LabelEngine(tables)
    solve = engine.solve(SolveRequest())
    assert solve.status == SolveStatus.OPTIMAL
    assert solve.bound == solve.objective == pytest.approx(plans[:, 0].min(), rel=TOLERANCE)
    below = engine.solve(SolveRequest(step_cap=solve.objective * (1 - 1e-6)))
    assert below.status == SolveStatus.INFEASIBLE and below.plan is None


def test_a_bound_target_below_the_optimum_is_proven_and_one_above_finds_the_optimum():
    tables, plans = _a_pair()
    least = plans[:, 0].min()
    engine = LabelEngine(tables)
    below = engine.solve(SolveRequest(bound_target=least * 0.999))
    assert below.status == SolveStatus.LIMIT and least * 0.999 <= below.bound <= least
    above = engine.solve(SolveRequest(bound_target=least * 1.001))
    assert above.status == SolveStatus.OPTIMAL
    assert above.objective == pytest.approx(least, rel=TOLERANCE)


def test_a_solve_out_of_time_stops_with_a_valid_bound():
    tables, plans = _a_pair()
    solve = LabelEngine(tables).solve(SolveRequest(time_limit=0.0))
    assert solve.status == SolveStatus.LIMIT
    assert solve.bound is None or solve.bound <= plans[:, 0].min()


def test_requests_the_boxes_cannot_order_are_left_to_the_confirmer():
    tables, _ = _a_pair()
    engine = LabelEngine(tables)
    for request in (SolveRequest(weights=(0.0, 1.0, 0.0)),
                    SolveRequest(weights=(1.0, 1.0, 0.0), step_cap=1e9)):
        assert engine.solve(request).status == SolveStatus.UNKNOWN


def test_the_period_floor_with_a_cutoff_never_passes_a_plan():
    """``step_floor(..., cutoff)`` may rise above the cutoff only if no plan is below it."""
    instance = tiny_instance(5, domains=4, layers=12, free_gpus=(1, 1, 2, 1))
    by_pair = _plans_by_pair(instance)
    pairs = all_pair_tables(instance)
    for tables in pairs:
        plans = by_pair.get((tables.dp, tables.micro_batch))
        if plans is None:
            continue
        bounds = PairBounds(tables)
        for gpus in np.unique(plans[:, 1]):
            least = plans[plans[:, 1] <= gpus, 0].min()
            assert bounds.step_floor(gpus, None, cutoff=least) <= least
            raised = bounds.step_floor(gpus, None, cutoff=least * (1 - 1e-3))
            assert raised <= least
    assert any(chain_of(t).period_floors or chain_of(t).witnesses for t in pairs)


def test_largest_within_finds_the_last_allowed_count():
    ok = np.array([[True, True, False, False], [False, False, False, False],
                   [True, True, True, True], [True, False, True, False]])
    assert _largest_within(ok).tolist() == [1, -1, 3, 2]


def test_domains_a_relaxed_plan_overuses_become_tracked_and_the_optimum_holds():
    """Scarce GPUs (one or two smallest stages per domain) make relaxed plans re-enter a
    domain beyond its GPUs; the engine tracks those domains and still finds brute force's
    optimum, by a plan that overuses none."""
    instance = tiny_instance(2, domains=4, layers=12, free_gpus=(2, 1, 1, 2), max_stages=4)
    by_pair = _plans_by_pair(instance)
    tracked = 0
    for tables in all_pair_tables(instance):
        plans = by_pair.get((tables.dp, tables.micro_batch))
        if plans is None:
            continue
        engine = LabelEngine(tables)
        solve = engine.solve(SolveRequest())
        assert solve.status == SolveStatus.OPTIMAL
        assert solve.objective == pytest.approx(plans[:, 0].min(), rel=TOLERANCE)
        assert evaluate(instance, solve.plan).feasible
        tracked += bool(engine.chain.critical)
    assert tracked > 0


def test_a_dive_finds_only_plans_the_dp_finds_and_finds_some(seed, monkeypatch):
    """The dive before a feasibility run (``Chain.dive``): each plan it returns is a plan
    (no domain overused; at most the WAN share cap's relaxation broken, as the DP's), within
    the caps and the period; where it finds one the label DP finds one too, and at periods
    from the loosest down to the least it finds some."""
    import solvers.chain as chain_module

    rng = np.random.default_rng(seed + 2)
    found = dp_found = 0
    for _ in range(COUNT):
        instance = audit_instance(rng)
        for tables in all_pair_tables(instance):
            if tables.interleaved:
                continue
            chain = chain_module.Chain(tables)
            gpus = int(rng.integers(int(tables.gpus.min()), int(tables.free_gpus.sum()) + 1))
            cost = float(rng.uniform(0, 2) * tables.cost.max()) if rng.random() < 0.5 else None
            caps = chain.caps(gpus, cost)
            loosest = chain.run(caps, chain_module.OPEN, feasibility=True)
            if loosest is None:
                continue
            # caps on the largest all-reduce and optimizer time (the branch and bound's)
            reduce, optimize = ((loosest.allreduce * rng.uniform(0.5, 1.0),
                                 loosest.optimizer * rng.uniform(0.5, 1.0))
                                if rng.random() < 0.5 else (chain_module.OPEN,) * 2)
            for factor in (1.0, 0.9, 0.8, 0.7, 0.6):
                period = loosest.period * factor
                plan = chain.dive(caps, period, allreduce=reduce, optimizer=optimize)
                monkeypatch.setattr(chain_module, "PROBE_WORK", 0)  # the label DP alone
                by_dp = chain.run(caps, period, allreduce=reduce, optimizer=optimize,
                                  feasibility=True)
                monkeypatch.undo()
                dp_found += by_dp is not None
                if plan is None:
                    continue
                found += 1
                where = f"seed {seed}: {instance.name} dp{tables.dp} b{tables.micro_batch}"
                assert by_dp is not None, where
                assert chain.violations(plan) in (None, []), where
                assert plan.period <= period * (1 + 1e-9), where
                assert plan.values.gpus <= gpus, where
                assert plan.values.comm_cost <= caps.cost * (1 + 1e-9), where
                assert plan.allreduce <= reduce * (1 + 1e-9), where
                assert plan.optimizer <= optimize * (1 + 1e-9), where
                broken = evaluate(instance, choices_plan(tables, plan.choices)).violations
                assert all(v.kind == Kind.WAN_CAP for v in broken), (where, broken)
    assert found > 0 and dp_found >= found


def test_a_dive_at_an_open_period_finds_a_plan_of_several_stages():
    """The first run of a placement has no period cap (``OPEN``, 1e30): the dive's layer
    count ``(P - carry) / c`` must not overflow there, or no stage but a single one is
    listed and a 70B model, which no one stage holds, gets no plan from it."""
    from formulation.instance import Instance
    from instances.suites import SUITES_DIR
    from solvers.chain import OPEN, Chain

    instance = Instance.load(SUITES_DIR / "quick" / "aws-10-k5-llama2-70b-s110.json")
    tables = all_pair_tables(instance)[0]
    chain = Chain(tables)
    plan = chain.dive(chain.caps(None, None), OPEN)
    assert plan is not None and len(plan.choices) > 1
    assert chain.violations(plan) is None


def test_a_chain_reuses_a_bound_table_only_within_its_reuse_factor_and_units():
    """A chain's cached bound table serves a period at most ``reuse`` below the period it
    was made at (the table bounds every smaller period) and a run of no more units; DP
    runs reuse within ``TABLE_REUSE``, a dive alone within the looser ``DIVE_REUSE``."""
    from formulation.instance import Instance
    from instances.suites import SUITES_DIR
    from solvers.chain import DIVE_REUSE, TABLE_REUSE, Chain

    assert 1.0 <= TABLE_REUSE < DIVE_REUSE
    instance = Instance.load(SUITES_DIR / "quick" / "cn-hubs-k5-llama2-13b-s100.json")
    chain = Chain(all_pair_tables(instance)[0])

    def table(period, units=chain.units, *reuse):
        return chain.bound_tables(period, units, *reuse)[0]  # the completion bounds

    made = 1.0
    lowest = made / TABLE_REUSE * (1 + 1e-12)  # the lowest period it serves
    between = made / (TABLE_REUSE + DIVE_REUSE) * 2  # within DIVE_REUSE, not TABLE_REUSE
    first = table(made)
    assert table(lowest) is first and table(lowest, chain.units - 1) is first
    assert table(between, chain.units, DIVE_REUSE) is first
    again = table(between)  # made anew, at its own period
    assert again is not first and table(between) is again
    assert table(between * 1.001) is not again  # a table never serves a period above it
    bigger = table(between * 1.001, chain.units + 1)  # for more units than it was made for
    assert bigger.shape[2] == chain.units + 2


def test_the_threaded_tables_are_the_serial_ones_bit_for_bit(seed):
    """Each position's domains shared among threads (``nb.prange``, where
    :func:`solvers.label_kernels.threads_pay`) write apart and read only the next
    position's rows: the table is the serial loops' bit for bit, on audit instances under
    random loads and on random inputs with windows above ``DIRECT_WINDOW``."""
    from solvers.label_kernels import _COMPLETION, DIRECT_WINDOW

    rng = np.random.default_rng(seed + 13)
    cases = [case for _ in range(COUNT) for case in _instance_table_inputs(rng)]
    cases += [_random_table_inputs(rng) for _ in range(50)]
    cases += [_random_table_inputs(rng, layers=(DIRECT_WINDOW + 2, 31), positions=(2, 5))
              for _ in range(12)]
    for number, args in enumerate(cases):
        serial, threaded = _COMPLETION[False](*args), _COMPLETION[True](*args)
        assert np.array_equal(serial, threaded), f"seed {seed}: case {number}"


@pytest.mark.parametrize(("environment", "threaded"), [
    ({"NUMBA_NUM_THREADS": "1"}, False),  # one thread: serial
    ({"NUMBA_NUM_THREADS": "2", "NUMBA_THREADING_LAYER": "workqueue"}, False),
    ({"NUMBA_NUM_THREADS": "2", "NUMBA_THREADING_LAYER": "omp"}, True),
    # where TBB is not installed, no layer loads: serial, not an error
    ({"NUMBA_NUM_THREADS": "2", "NUMBA_THREADING_LAYER": "tbb"}, None),
])
def test_the_tables_take_threads_only_where_they_pay(environment: dict, threaded: bool | None):
    """In a fresh process: threads for the tables where there are two and numba's layer
    is OpenMP, none with one thread or under numba's own ``workqueue`` layer (slower than
    the serial loops there) or where the layer asked for does not load, and the same table
    in every case (its digest)."""
    import hashlib
    import subprocess
    import sys
    from pathlib import Path

    from solvers.label_kernels import _COMPLETION

    here = Path(__file__).parent
    code = ("import hashlib, sys\n"
            f"sys.path.insert(0, {str(here)!r})\n"
            "import numpy as np\n"
            "import solvers.label_kernels as k\n"
            "from test_labels import _random_table_inputs\n"
            "args = _random_table_inputs(np.random.default_rng(5), layers=(12, 20))\n"
            "table = k.completion(*args)\n"
            "print(k.threads_pay(), hashlib.sha256(table.tobytes()).hexdigest(), "
            "k.table_threads())\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=here.parent, capture_output=True,
                          text=True, timeout=300, env={**os.environ, **environment})
    assert done.returncode == 0, done.stderr
    pays, digest, how = done.stdout.strip().splitlines()[-1].split(maxsplit=2)
    if threaded and how == "serial (no numba threading layer loads)":
        pytest.skip("numba's OpenMP layer is not installed here")
    if threaded is None:
        assert pays == "True" or how == "serial (no numba threading layer loads)", how
    else:
        assert pays == str(threaded), how
    serial = _COMPLETION[False](*_random_table_inputs(np.random.default_rng(5), layers=(12, 20)))
    assert digest == hashlib.sha256(serial.tobytes()).hexdigest()
