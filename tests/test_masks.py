"""The masks under budgets: the vectorised segment table against a scalar reading of the
rule in rl/masks.py's docstring, budgets met exactly, no dead ends, the feature layout."""

from __future__ import annotations

import numpy as np
import pytest

from formulation.evaluator import evaluate_plans
from formulation.instance import Instance
from instances.generate import generate_instance
from instances.suites import suite_paths
from instances.tiny import tiny_instance
from rl.env import NoPlanWithinBudget, PlanEnv
from rl.features import CONTEXT, EDGE, NODE, FeatureBlock, FeatureLayout
from rl.masks import Budgets, BuildState, PlanRules, Segment, even_split
from rl.tasks import BudgetRange


def reference_rest(rules: PlanRules, state: BuildState) -> np.ndarray:
    """(L + 1,) bool, loop by loop: the layer counts a uniform completion of ``state``
    holds (module doc of rl.masks)."""
    tables = rules.pairs[state.pair]
    out = np.zeros(rules.layers + 1, dtype=bool)
    out[0] = True
    room = tables.positions - state.positions_used
    behind = state.behind
    dearest = float(tables.cost.max(initial=0.0))
    allowance = state.cost_left + state.cost_slack
    for option in range(tables.num_options):
        g = int(tables.gpus[option])
        slots = state.free // g
        most = min(room, int(slots.sum()), state.gpus_left // g)
        if np.isfinite(state.cost_left):
            any_packing = most if dearest <= 0 else min(
                most, int(np.floor(allowance / dearest)))
            if behind is None:
                two = max(int(slots.max()), max(
                    (int(slots[a] + slots[d]) for a in range(len(slots))
                     for d in range(len(slots))
                     if a != d and tables.cost[d, a] <= allowance), default=0))
            else:
                two = int(slots[behind]) + max(
                    (int(slots[k]) for k in range(len(slots))
                     if k != behind and tables.cost[k, behind] <= allowance), default=0)
            most = max(any_packing, min(two, state.gpus_left // g, room))
        p = state.positions_used
        for n in range(1, most + 1):
            caps = tables.layer_cap[p:p + n, option]
            first = tables.layer_cap_first[p + n - 1, option]
            if (n > 1 and caps[:-1].min() < 1) or first < 1:
                continue
            top = min(int(caps[:-1].sum() + first), rules.layers)
            if top >= n:
                out[n:top + 1] = True
    return out


def even_split_capacity(tables, position: int, option: int, stages: int,
                        finishing: bool) -> int:
    """Most layers an even split over ``stages`` stages from ``position`` fits (0: none),
    layer count by layer count."""
    if position + stages > tables.positions:
        return 0
    caps = tables.layer_cap[position:position + stages, option].copy()
    if finishing:
        caps[-1] = tables.layer_cap_first[position + stages - 1, option]
    best = 0
    for layers in range(stages, tables.layers + 1):  # fitting is monotone in the layer count
        if all(n <= cap for n, cap in zip(even_split(layers, stages), caps, strict=True)):
            best = layers
        else:
            break
    return best


def reference_segments(rules: PlanRules, state: BuildState) -> np.ndarray:
    """(K, O, S, L + 1) bool, loop by loop: the admissible segments of ``state``."""
    tables = rules.pairs[state.pair]
    K, O, S = len(rules.free), tables.num_options, tables.positions
    out = np.zeros((K, O, S, rules.layers + 1), dtype=bool)
    left, position = state.layers_left, state.positions_used
    for d in range(K):
        entry = rules.entry_cost(state, d)
        for o in range(O):
            for n in range(1, S + 1):
                need = int(tables.gpus[o]) * n
                if (need > state.free[d] or need > state.gpus_left or n > S - position
                        or n > left or entry > state.cost_left + state.cost_slack):
                    continue
                if left <= even_split_capacity(tables, position, o, n, True):
                    out[d, o, n - 1, left] = True
                most = min(left - 1, even_split_capacity(tables, position, o, n, False))
                if most < n:
                    continue
                after = rules.place(state, Segment(d, n, o, n))  # layers do not matter
                rest = reference_rest(rules, after)
                for c in range(n, most + 1):
                    out[d, o, n - 1, c] = rest[left - c]
    return out


def _instances() -> list[Instance]:
    return [Instance.load(suite_paths("quick")[1]),
            generate_instance(9, "13b", 31, "cn-hubs"),
            tiny_instance(5, domains=5, layers=8)]


def _budgets(rng: np.random.Generator, limits: BudgetRange) -> Budgets:
    gpus = int(rng.integers(limits.least_gpus, limits.free_gpus + 1)) \
        if rng.random() < 0.7 else None
    cost = None
    if rng.random() < 0.7:
        cost = 0.0 if rng.random() < 0.3 else \
            limits.c_base * float(np.exp(rng.uniform(-5, 0.5)))
    return Budgets(gpus, cost)


def _episodes(instance: Instance, rng: np.random.Generator, count: int):
    """Random admissible episodes under random budgets: yields (rules, budgets, states
    from the start to the finished plan); budgets no plan meets are skipped."""
    rules = PlanRules(instance)
    limits = BudgetRange.of(instance)
    for _ in range(count):
        budgets = _budgets(rng, limits)
        pairs = [i for i in range(len(rules.pairs)) if rules.startable(i, budgets)]
        if not pairs:
            continue
        states = [rules.start(int(rng.choice(pairs)), budgets)]
        while states[-1].layers_left:
            choices = np.argwhere(rules.segments(states[-1]))
            assert len(choices), "dead end"
            d, o, n, c = (int(x) for x in choices[int(rng.integers(len(choices)))])
            states.append(rules.place(states[-1], Segment(d, c, o, n + 1)))
        yield rules, budgets, states


def test_segment_table_equals_the_rule_read_loop_by_loop():
    rng = np.random.default_rng(11)
    checked = 0
    for instance in _instances():
        for rules, _, states in _episodes(instance, rng, 4):
            assert reference_rest(rules, states[0])[rules.layers]
            for state in states[:-1]:
                assert np.array_equal(rules.segments(state), reference_segments(rules, state))
                checked += 1
    assert checked >= 12


@pytest.mark.parametrize("seed", [0, 1])
def test_random_episodes_meet_their_budgets_and_never_stick(seed: int):
    rng = np.random.default_rng(seed)
    plans = 0
    for path in suite_paths("quick"):
        instance = Instance.load(path)
        for rules, budgets, states in _episodes(instance, rng, 8):
            result = evaluate_plans(instance, [rules.plan(states[-1])])
            assert result.feasible[0]
            assert np.all(result.objectives[0] <= budgets.limits() * (1 + 1e-12))
            plans += 1
    assert plans >= 30


def test_an_impossible_budget_is_named_at_reset():
    instance = Instance.load(suite_paths("quick")[1])
    env = PlanEnv()
    with pytest.raises(NoPlanWithinBudget, match="no plan within budget .GPU budget 1"):
        env.reset(options={"instance": instance, "budgets": Budgets(gpus=1)})
    least = BudgetRange.of(instance).least_gpus
    env.reset(options={"instance": instance, "budgets": Budgets(gpus=least)})
    with pytest.raises(NoPlanWithinBudget):
        env.reset(options={"instance": instance, "budgets": Budgets(gpus=least - 1)})


@pytest.mark.parametrize("bad", [dict(gpus=0), dict(gpus=2.5), dict(cost=-1.0),
                                 dict(cost=float("nan")), dict(step_time=0.0),
                                 dict(step_time=float("inf"))])
def test_bad_budgets_name_the_field(bad: dict):
    with pytest.raises(ValueError, match=f"budgets.{next(iter(bad))}"):
        Budgets(**bad)


def test_feature_layouts_derive_sizes_and_slices_from_their_blocks():
    for layout in (NODE, EDGE, CONTEXT):
        covered = np.zeros(layout.size, dtype=int)
        for block in layout.blocks:
            covered[layout[block.name]] += 1
        assert np.all(covered == 1)  # every column in exactly one block
        assert len(layout.describe()) == len(layout.blocks)
    row = np.zeros(CONTEXT.size, np.float32)
    CONTEXT.put(row, "model_layers", 64)
    assert row[CONTEXT["model_layers"]][0] == 0.5  # scaled by its block's 128
    with pytest.raises(ValueError, match="declared twice"):
        FeatureLayout(FeatureBlock("a", 1, 1, ""), FeatureBlock("a", 2, 1, ""))
