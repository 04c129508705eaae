"""The online evaluation: the run simulator against hand-computed timelines, migration bytes
against the memory model, the oracle as an upper bound, determinism, where units run, the CLI."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from clitools import run_module

from evaluation.methods import METHODS
from evaluation.online import OnlineUnit, run_online_unit
from evaluation.online_metrics import adjustments, run_kpis
from evaluation.replanning import (
    Oracle,
    Planner,
    PolicySettings,
    ReplanningPolicy,
    rate,
    resize_in_place,
)
from formulation.costmodel import BYTES_PER_VALUE, GBIT, PERSISTENT_BYTES_PER_PARAM, CostModel
from formulation.evaluator import cost_model
from formulation.instance import Instance
from formulation.plan import Plan, Stage
from formulation.reference import simulated_step_time
from formulation.run_costs import (
    GRADIENT_BYTES_PER_PARAM,
    MID_STEP_BYTES_PER_PARAM,
    RunCosts,
    host_copy_time,
    kept_share,
    migration_bytes,
    migration_time,
    restore_time,
    stage_state_bytes,
    storage_time,
)
from formulation.run_record import Replan, RunRecord, Segment, Trigger
from formulation.scenario import Event, EventKind, Scenario, state_series
from formulation.training_run import scenario_step_times, simulate_run
from instances.scenarios import ScenarioSettings, generate_scenario
from instances.suites import SUITES_DIR
from solvers.parallel import map_tasks

QUICK = SUITES_DIR / "quick" / "cn-hubs-k6-llama2-7b-s130.json"
# state moves and checkpoints at a rate that makes them instant, unless a test says otherwise
FAST = RunCosts(host_copy_gbps=1e6, storage_gbps=1e6, restart_s=60.0, prepare_s=30.0,
                switch_s=5.0, load_notice_s=0.0)
PLAN_A = Plan(2, 1, (Stage(0, 12, 4), Stage(1, 12, 4)))  # 8 GPUs in alpha, 8 in beta
PLAN_B = Plan(2, 1, (Stage(0, 12, 4), Stage(2, 12, 4)))  # beta's half moved to gamma
PLAN_C = Plan(2, 1, (Stage(0, 24, 8),))  # alpha alone


class Scripted:
    """A policy that runs ``plan`` and answers a timer or a notice with ``then``."""

    oracle = False
    name = "scripted"

    def __init__(self, plan: Plan, checkpoint_interval_s: float = 1e9,
                 timer_s: float = math.inf, then: Plan | None = None, charged_s: float = 1.0,
                 notice_for: float | None = None):
        self.plan, self.then, self.timer_s, self.charged_s = plan, then, timer_s, charged_s
        self.checkpoint_interval_s = checkpoint_interval_s
        self.notice_for = notice_for  # answer only the notice of a change at this time

    def next_timer(self, now: float) -> float:
        return self.timer_s if now < self.timer_s else math.inf

    notices: list

    def observe(self, now, state, plan, trigger, deadline_s=None):
        if trigger is Trigger.START:
            self.notices = []
            return Replan(self.plan, 0.0, 0.0)
        if trigger is Trigger.NOTICE:
            self.notices.append((now, deadline_s))
            if self.notice_for not in (None, deadline_s):
                return None
        if trigger in (Trigger.TIMER, Trigger.NOTICE) and self.then is not None:
            return Replan(self.then, self.charged_s, 0.0)
        if trigger is Trigger.CHANGE and plan is not None:
            return Replan(plan, self.charged_s, 0.0)  # looked, and kept it
        return None


def _long_steps(instance: Instance) -> Instance:
    """``instance`` with 4,096 sequences a step: PLAN_A's steps take about 3 minutes."""
    return instance.replace(training=dataclasses.replace(instance.training, global_batch=4096))


def _half_minute_steps(instance: Instance) -> Instance:
    """``instance`` with 768 sequences a step: PLAN_A's steps take about 33 s."""
    return instance.replace(training=dataclasses.replace(instance.training, global_batch=768))


def _copying_in(instance: Instance, seconds: float) -> RunCosts:
    """FAST, but PLAN_A's state (14 bytes a parameter) takes ``seconds`` to copy to host
    memory."""
    at_one = host_copy_time(instance, PLAN_A, dataclasses.replace(FAST, host_copy_gbps=1.0))
    return dataclasses.replace(FAST, host_copy_gbps=at_one / seconds)


def _writing_in(instance: Instance, seconds: float,
                per_param: float = PERSISTENT_BYTES_PER_PARAM) -> RunCosts:
    """FAST, but the store writes PLAN_A's checkpoint of ``per_param`` bytes a parameter in
    ``seconds``."""
    at_one = storage_time(instance, PLAN_A, dataclasses.replace(FAST, storage_gbps=1.0),
                          per_param)
    return dataclasses.replace(FAST, storage_gbps=at_one / seconds)


def _steps(record, plan_index=None):
    return [s for s in record.segments if s.kind == "step"
            and (plan_index is None or s.plan == plan_index)]


def test_a_failure_rolls_back_to_the_checkpoint_and_waits_for_its_gpus(hand_instance):
    """beta fails at 20.5 s for 30 s. Steps of T end at k T; a checkpoint follows the first
    step end >= 10 s after the last one (4 T). The failure loses steps 5-7; the static plan
    waits for beta, restarts (60 s) and regains the 7 steps and the part of the 8th done
    at the failure 3 steps and that part later."""
    scenario = Scenario.of(200.0, [Event(20.5, EventKind.DOMAIN_FAILURE, 1, duration_s=30.0)])
    step = simulated_step_time(hand_instance, PLAN_A)
    record = simulate_run(hand_instance, scenario, Scripted(PLAN_A, 10.0), FAST)
    done = [s for s in record.segments if s.kind == "step" and s.end_s <= 20.5]
    assert [round(s.end_s / step, 3) for s in done] == pytest.approx(range(1, 8), abs=1e-3)
    assert sum(s.rolled_back for s in done) == 3  # steps 5, 6, 7: after the checkpoint at 4 T
    (interruption,) = record.interruptions
    assert interruption["cause"] == "failure"
    assert interruption["tokens_lost"] == pytest.approx(3 * record.tokens_per_step)
    assert interruption["resumed_s"] == pytest.approx(50.5 + 60.0, abs=1e-3)
    in_progress = 20.5 - done[-1].end_s
    assert interruption["tokens_in_progress"] == pytest.approx(
        in_progress / step * record.tokens_per_step)
    (cut,) = [s for s in record.segments if s.kind == "lost"]  # trained, then lost
    assert (cut.start_s, cut.end_s) == pytest.approx((done[-1].end_s, 20.5))
    assert cut.tokens == interruption["tokens_in_progress"]
    assert interruption["regained_s"] == pytest.approx(50.5 + 60.0 + 3 * step + in_progress,
                                                       abs=1e-3)
    kpis = run_kpis(hand_instance, record)
    assert kpis["failure_switch_s_max"] == pytest.approx(90.0, abs=1e-3)
    assert kpis["failure_interruption_s_max"] == pytest.approx(90.0 + 3 * step + in_progress,
                                                               abs=1e-3)


def test_shared_step_times_give_the_same_run_and_must_be_the_scenarios(hand_instance):
    scenario = Scenario.of(200.0, [Event(20.5, EventKind.DOMAIN_FAILURE, 1, duration_s=30.0)])
    alone = simulate_run(hand_instance, scenario, Scripted(PLAN_A, 10.0), FAST)
    shared = scenario_step_times(hand_instance, scenario, FAST)
    simulate_run(hand_instance, scenario, Scripted(PLAN_B, 10.0), FAST, shared)
    assert simulate_run(hand_instance, scenario, Scripted(PLAN_A, 10.0), FAST,
                        shared).segments == alone.segments
    other = Scenario.of(200.0, [Event(20.5, EventKind.DOMAIN_FAILURE, 1, duration_s=40.0)])
    with pytest.raises(ValueError, match="step_times: made for another"):
        simulate_run(hand_instance, scenario, Scripted(PLAN_A, 10.0), FAST,
                     scenario_step_times(hand_instance, other, FAST))


def test_stability_leaves_out_the_recovery_from_a_failure(hand_instance):
    """The same run: outside the window from the restored checkpoint's last step to the
    regained progress, training never stopped (the checkpoint pauses aside)."""
    scenario = Scenario.of(200.0, [Event(20.5, EventKind.DOMAIN_FAILURE, 1, duration_s=30.0)])
    kpis = run_kpis(hand_instance, simulate_run(hand_instance, scenario,
                                                Scripted(PLAN_A, 10.0), FAST))
    assert kpis["stability"] == pytest.approx(1.0, abs=1e-4)
    assert kpis["progress_share"] < 0.6


def test_a_failure_at_a_step_end_or_during_a_switch_is_not_missed(hand_instance):
    step = simulated_step_time(hand_instance, PLAN_A)
    at_end = Scenario.of(100.0, [Event(6 * step, EventKind.DOMAIN_FAILURE, 1,
                                       duration_s=50.0)])
    record = simulate_run(hand_instance, at_end, Scripted(PLAN_A), FAST)
    assert [i["time_s"] for i in record.interruptions] == [6 * step]
    assert not [s for s in _steps(record) if 6 * step < s.end_s <= 6 * step + 50.0]
    # with a checkpoint due at that step end: none is taken on the GPUs gone, and the
    # failure interrupts the plan then
    record = simulate_run(hand_instance, at_end, Scripted(PLAN_A, 5.5 * step), FAST)
    (interruption,) = record.interruptions
    assert (interruption["time_s"], interruption["cause"]) == (6 * step, "failure")
    assert not [s for s in record.segments if s.kind == "checkpoint"]
    # PLAN_B's switch stops training from the step end after 41 s for about 15 s; gamma,
    # which PLAN_B needs, fails meanwhile: no switch, PLAN_A trains on
    boundary = math.ceil(41.0 / step) * step
    during = Scenario.of(150.0, [Event(boundary + 7.0, EventKind.DOMAIN_FAILURE, 2,
                                       duration_s=100.0)])
    record = simulate_run(hand_instance, during, Scripted(PLAN_A, timer_s=10.0, then=PLAN_B),
                          FAST)
    assert not record.switches and not record.interruptions
    assert all(record.plans[s.plan] == PLAN_A for s in _steps(record))


def test_a_switch_whose_old_gpus_go_before_the_state_has_left_them_is_interrupted(
        hand_instance):
    """The same switch; beta, whose layers move to gamma, fails halfway through their
    transfer: the state still on beta is lost, so the run is interrupted there and rolls
    back (no checkpoint: to the start); no switch is made."""
    step = simulated_step_time(hand_instance, PLAN_A)
    boundary = math.ceil(41.0 / step) * step
    moving = migration_time(hand_instance, migration_bytes(hand_instance, PLAN_A, PLAN_B))
    assert moving > 2.0
    scenario = Scenario.of(150.0, [Event(boundary + moving / 2, EventKind.DOMAIN_FAILURE, 1,
                                         duration_s=100.0)])
    record = simulate_run(hand_instance, scenario, Scripted(PLAN_A, timer_s=10.0,
                                                            then=PLAN_B), FAST)
    assert not record.switches
    (interruption,) = record.interruptions
    assert interruption["time_s"] == pytest.approx(boundary + moving / 2)
    assert interruption["cause"] == "failure" and interruption["rolled_back_from_s"] == 0.0
    assert interruption["tokens_lost"] == pytest.approx(
        round(boundary / step) * record.tokens_per_step)
    assert not [s for s in _steps(record) if s.start_s >= boundary - 1e-9]


def test_an_adjustments_drop_is_read_until_the_new_plan_is_interrupted():
    """A switch decided at 90 s stops training from 100 to 110 s; at 200 s a later change
    interrupts the new plan for 200 s, in a step begun at 170 s. Over the 5-minute window
    that drop would be 2/3; the adjustment's own shortfall is read up to the
    interruption, the step it cut counted as trained (throughput as seen then): 10 s of
    the rate in the 300 s window."""
    record = RunRecord("hand", 1000.0, 100.0)
    record.segments += [Segment(0.0, 100.0, "step", 0, 100.0),
                        Segment(100.0, 110.0, "switch", 1),
                        Segment(110.0, 170.0, "step", 1, 60.0),
                        Segment(170.0, 200.0, "lost", 1, 30.0),
                        Segment(200.0, 400.0, "stopped"),
                        Segment(400.0, 1000.0, "step", 1, 600.0)]
    record.switches.append({"event_s": 90.0, "rate_before": 1.0, "trigger": "change",
                            "stop_s": 100.0, "resume_s": 110.0, "plan": 1, "bytes": 1.0})
    assert adjustments(record) == ([pytest.approx(1.0 - 100.0 / 300.0)], [10.0])
    record.interruptions.append({"time_s": 200.0, "cause": "load"})
    assert adjustments(record) == ([pytest.approx(10.0 / 300.0)], [10.0])


class Spy(Scripted):
    """:class:`Scripted`, and every (time, trigger) it was asked at."""

    def observe(self, now, state, plan, trigger, deadline_s=None):
        if trigger is Trigger.START:
            self.asked = []
        self.asked.append((now, trigger))
        return super().observe(now, state, plan, trigger, deadline_s)


def test_a_timer_during_a_checkpoints_pause_is_shown_when_training_goes_on(hand_instance):
    """A host copy slower than a step: the state holds still until the next step's
    optimizer update, so the copy after the first step runs alongside the second and
    stalls training for what it takes longer (10 s here); a policy timer inside that pause
    is asked at the pause's end (before, the timer was skipped)."""
    step = simulated_step_time(hand_instance, PLAN_A)
    costs = _copying_in(hand_instance, step + 10.0)
    pause = host_copy_time(hand_instance, PLAN_A, costs) - step
    assert pause == pytest.approx(10.0)
    policy = Spy(PLAN_A, checkpoint_interval_s=step, timer_s=step + pause / 2)
    record = simulate_run(hand_instance, Scenario.of(3 * step + pause, []), policy, costs)
    (first, *_), = [[s for s in record.segments if s.kind == "checkpoint"]]
    assert (first.start_s, first.end_s) == pytest.approx((step, step + pause))
    assert [(now, trigger) for now, trigger in policy.asked
            if trigger is Trigger.TIMER] == [(pytest.approx(step + pause), Trigger.TIMER)]


def test_a_checkpoint_copied_while_the_next_step_runs_is_durable_after_the_copy(
        hand_instance):
    """A host copy of half a step: training does not stop for it (the state holds still
    until the next step's update), but the checkpoint is durable only once copied and
    written, so a failure during the copy rolls back to the start, one after it to the
    checkpoint."""
    step = simulated_step_time(hand_instance, PLAN_A)
    costs = _copying_in(hand_instance, step / 2)
    copy = host_copy_time(hand_instance, PLAN_A, costs)
    durable = step + copy + storage_time(hand_instance, PLAN_A, costs)

    def failed_at(time_s):
        record = simulate_run(hand_instance, Scenario.of(3 * step, [Event(
            time_s, EventKind.DOMAIN_FAILURE, 1, duration_s=step)]),
            Scripted(PLAN_A, step), costs)
        assert not [s for s in record.segments if s.kind == "checkpoint"]  # no pause
        (interruption,) = record.interruptions
        return interruption

    assert failed_at(durable - 1.0)["rolled_back_from_s"] == 0.0
    after = failed_at(durable + 1.0)
    assert after["rolled_back_from_s"] == pytest.approx(step)
    assert after["tokens_lost"] == 0.0


def test_changes_during_a_switchs_stop_are_shown_once_when_training_goes_on(hand_instance):
    """PLAN_B's switch stops training from the step end after 41 s for about 15 s; a
    latency spike on alpha-beta begins and ends inside that stop: the policy is asked
    once, with a change, when the new plan starts (before, neither was shown)."""
    step = simulated_step_time(hand_instance, PLAN_A)
    boundary = math.ceil(41.0 / step) * step
    scenario = Scenario.of(150.0, [Event(boundary + 2.0, EventKind.LATENCY, 0, 1, 2.0, 1.0)])
    policy = Spy(PLAN_A, timer_s=10.0, then=PLAN_B)
    record = simulate_run(hand_instance, scenario, policy, FAST)
    (switch,) = record.switches
    assert switch["resume_s"] > boundary + 3.0
    assert [(now, trigger) for now, trigger in policy.asked if trigger is Trigger.CHANGE] \
        == [(pytest.approx(switch["resume_s"]), Trigger.CHANGE)]


def test_a_periodic_checkpoint_inside_a_step_and_one_before_an_announced_change(
        hand_instance):
    """3-minute steps, checkpoints every 60 s, and beta's load at 100 s announced at 40 s:
    the periodic checkpoint inside the step comes first (at the first micro-batch boundary
    after 60 s), then the one for the change (at the last boundary from which the second
    stage's end of the micro-batch and the copy end by 100 s); the interruption rolls back
    to the second."""
    instance = _long_steps(hand_instance)
    step = simulated_step_time(instance, PLAN_A)
    slot = step / (4096 // 2)
    pause = host_copy_time(instance, PLAN_A, FAST, GRADIENT_BYTES_PER_PARAM)
    scenario = Scenario.of(300.0, [Event(100.0, EventKind.LOAD, 1, value=0.25)])
    record = simulate_run(instance, scenario, Scripted(PLAN_A, 60.0),
                          dataclasses.replace(FAST, load_notice_s=60.0))
    first, second = [s for s in record.segments if s.kind == "checkpoint"][:2]
    assert first.start_s == pytest.approx(math.ceil(60.0 / slot) * slot)
    # the second, in the same step, copies and writes the gradients alone
    lag = slot + pause + storage_time(instance, PLAN_A, FAST, GRADIENT_BYTES_PER_PARAM)
    assert 100.0 - lag - slot - 1e-6 < second.start_s <= 100.0 - lag
    assert second.end_s - second.start_s == pytest.approx(pause)
    (interruption,) = record.interruptions
    assert interruption["time_s"] == 100.0
    assert interruption["rolled_back_from_s"] == pytest.approx(second.start_s)


def test_a_plan_that_loses_its_gpus_while_restarting_is_shown_that_change(hand_instance):
    """beta fails at 20.5 s for 30 s; the plan restarts when it is repaired (60 s), and
    beta fails again 20 s into the restart: the policy is asked then, as its plan cannot
    start (before, it was asked only at the next change, the repair 30 s later)."""
    scenario = Scenario.of(300.0, [
        Event(20.5, EventKind.DOMAIN_FAILURE, 1, duration_s=30.0),
        Event(70.5, EventKind.DOMAIN_FAILURE, 1, duration_s=30.0)])
    policy = Spy(PLAN_A)
    record = simulate_run(hand_instance, scenario, policy, FAST)
    assert (70.5, Trigger.WAITING) in policy.asked
    assert min(now for now, trigger in policy.asked if trigger is Trigger.WAITING) == 50.5
    assert record.interruptions[0]["resumed_s"] == pytest.approx(100.5 + 60.0)


def test_every_notice_is_delivered_and_a_later_keep_does_not_cancel_its_switch(hand_instance):
    """Loads at 100 s (gamma) and 220 s (beta), announced 120 s ahead: at 0 s (due before
    the run began) and at 100 s (with gamma's change). A latency spike between the second
    notice and its change asks the policy, which keeps its plan: the switch the notice
    decided still happens before beta's GPUs go."""
    events = [Event(100.0, EventKind.LOAD, 2, value=0.5),
              Event(220.0, EventKind.LOAD, 1, value=0.25),
              Event(110.0, EventKind.LATENCY, 0, 1, 2.0, 5.0)]
    policy = Scripted(PLAN_A)  # first only watch the notices
    record = simulate_run(hand_instance, Scenario.of(300.0, events), policy,
                          dataclasses.replace(FAST, load_notice_s=120.0))
    assert policy.notices == [(0.0, 100.0), (100.0, 220.0)]
    assert [i["time_s"] for i in record.interruptions] == [220.0]
    policy = Scripted(PLAN_A, then=PLAN_C, notice_for=220.0)
    record = simulate_run(hand_instance, Scenario.of(300.0, events), policy,
                          dataclasses.replace(FAST, load_notice_s=120.0))
    kept = [d["time_s"] for d in record.decisions if d["trigger"] == "change"
            and not d["changed"]]
    (switch,) = record.switches
    assert switch["event_s"] == 100.0 and any(100.0 < t < switch["stop_s"] for t in kept)
    assert not record.interruptions and switch["resume_s"] <= 220.0


def test_migration_bytes_are_the_memory_models_state_of_the_moved_layers(hand_instance, cost):
    """Layers 12-23 and the LM head move from beta to gamma: weights and optimizer state,
    the memory model's bytes per parameter at dp = tp = 1 less the gradients."""
    moves = migration_bytes(hand_instance, PLAN_A, PLAN_B)
    per_param = cost.state_bytes_per_param(1, 1) - BYTES_PER_VALUE
    assert per_param == 14.0
    assert moves == {(1, 2): pytest.approx((12 * cost.layer_params + cost.head_params)
                                           * per_param)}
    assert migration_bytes(hand_instance, PLAN_A, PLAN_A) == {}
    back = migration_bytes(hand_instance, PLAN_A, PLAN_C)  # beta's layers and head to alpha
    assert back == {(1, 0): pytest.approx(moves[(1, 2)])}


def test_a_planned_switch_waits_for_preparation_and_a_step_boundary(hand_instance, cost):
    """At 10 s the policy asks for PLAN_B (charged 1 s, prepared in 30 s): at the first step
    end after 41 s training stops while the moved state crosses beta -> gamma (10 Gbit/s,
    50 ms), then 5 s of cut-over."""
    scenario = Scenario.of(150.0, [])
    step = simulated_step_time(hand_instance, PLAN_A)
    record = simulate_run(hand_instance, scenario, Scripted(PLAN_A, timer_s=10.0,
                                                            then=PLAN_B), FAST)
    (switch,) = record.switches
    boundary = math.ceil(41.0 / step) * step
    size = (12 * cost.layer_params + cost.head_params) * 14.0
    stop = size / (10.0 * GBIT) + 0.05 + 5.0
    assert switch["stop_s"] == pytest.approx(boundary, abs=1e-6)
    assert switch["resume_s"] == pytest.approx(boundary + stop, abs=1e-6)
    assert switch["bytes"] == pytest.approx(size)
    after = _steps(record, record.plans.index(PLAN_B))
    assert after[0].start_s == pytest.approx(boundary + stop, abs=1e-6)
    assert after[0].end_s - after[0].start_s == pytest.approx(
        simulated_step_time(hand_instance, PLAN_B), rel=1e-9)
    assert not record.interruptions


def test_a_load_swing_interrupts_a_static_plan_and_a_notice_lets_it_switch(hand_instance):
    """Other tenants take 12 of beta's 16 free GPUs at 100 s. Unannounced, the plan on 8 of
    them stops and loses its steps since the start (no checkpoint); announced 60 s before,
    the policy moves to alpha alone in time and nothing is lost."""
    scenario = Scenario.of(300.0, [Event(100.0, EventKind.LOAD, 1, value=0.25)])
    assert state_series(scenario, hand_instance).free_gpus[-1].tolist() == [32, 4, 32]
    static = simulate_run(hand_instance, scenario, Scripted(PLAN_A), FAST)
    (interruption,) = static.interruptions
    assert interruption["time_s"] == 100.0 and interruption["cause"] == "load"
    assert interruption["tokens_lost"] == pytest.approx(
        math.floor(100.0 / simulated_step_time(hand_instance, PLAN_A)) * static.tokens_per_step)
    noticed = simulate_run(hand_instance, scenario, Scripted(PLAN_A, then=PLAN_C),
                           dataclasses.replace(FAST, load_notice_s=60.0))
    assert not noticed.interruptions
    (switch,) = noticed.switches
    assert switch["trigger"] == "notice" and switch["event_s"] == 40.0
    assert switch["resume_s"] <= 100.0 + 1e-9
    assert all(not s.rolled_back for s in noticed.segments)


def test_a_step_checkpointed_inside_goes_on_and_its_parts_make_one_step(hand_instance):
    """A load announced 3 s before it takes beta at 98 s, inside a step, with a store slow
    enough that a checkpoint after that step would not be durable by the change: the
    checkpoint inside it comes first; the step then goes on, its end later by the pause,
    and its rest commits the rest of its tokens: the part and the rest make one step,
    until the change rolls back what followed the checkpoint (the step's gradients, which
    the store would write after the checkpoint's state, would not be durable by then).
    When the load leaves at 150 s, the restart reads the state with the gradients (16
    bytes a parameter): alpha's stage from its nodes' host memory, and beta's from there
    for the 4 of its 8 GPUs the load left, from the store for the other half."""
    scenario = Scenario.of(300.0, [Event(98.0, EventKind.LOAD, 1, value=0.25),
                                   Event(150.0, EventKind.LOAD, 1, value=1.0)])
    costs = dataclasses.replace(FAST, load_notice_s=3.0, storage_gbps=66.0)
    record = simulate_run(hand_instance, scenario, Scripted(PLAN_A), costs)
    step = simulated_step_time(hand_instance, PLAN_A)
    segments = record.segments
    (i,) = [i for i, s in enumerate(segments) if s.kind == "partial" and s.end_s < 98.0]
    part, saved, rest = segments[i:i + 3]
    assert (saved.kind, rest.kind) == ("checkpoint", "step")
    assert rest.start_s == saved.end_s == pytest.approx(part.end_s + saved.end_s - saved.start_s)
    assert rest.end_s - part.start_s == pytest.approx(step + saved.end_s - saved.start_s)
    assert part.tokens + rest.tokens == pytest.approx(record.tokens_per_step)
    assert rest.end_s < 98.0 and not part.rolled_back and rest.rolled_back
    (interruption,) = record.interruptions
    assert interruption["rolled_back_from_s"] == part.end_s
    assert interruption["tokens_lost"] == pytest.approx(rest.tokens + sum(
        s.tokens for s in segments[i + 3:] if s.kind == "step" and s.end_s <= 98.0))
    (restart,) = [s for s in segments if s.kind == "stopped" and s.start_s >= 150.0]
    beta = stage_state_bytes(hand_instance, PLAN_A, MID_STEP_BYTES_PER_PARAM)[1]
    read = 0.5 * beta / (costs.storage_gbps * GBIT) \
        + host_copy_time(hand_instance, PLAN_A, costs, MID_STEP_BYTES_PER_PARAM)
    assert restart.start_s == 150.0
    assert restart.end_s - restart.start_s == pytest.approx(costs.restart_s + read)
    assert read < storage_time(hand_instance, PLAN_A, costs, MID_STEP_BYTES_PER_PARAM)


class RestartsWith(Scripted):
    """Runs ``plan``; after an interruption, restarts with ``then``; at a timer, switches
    to ``switch_to``."""

    def __init__(self, plan: Plan, then: Plan, switch_to: Plan | None = None, **kwargs):
        super().__init__(plan, then=switch_to, **kwargs)
        self.restart_with = then

    def observe(self, now, state, plan, trigger, deadline_s=None):
        if trigger is Trigger.INTERRUPTED:
            return Replan(self.restart_with, 1.0, 0.0)
        return super().observe(now, state, plan, trigger, deadline_s)


@pytest.mark.parametrize("switch_first", [False, True])
def test_a_restart_reads_from_host_memory_what_its_nodes_still_hold(hand_instance,
                                                                   switch_first):
    """Checkpoints every 30 s at step boundaries (14 bytes a parameter, a 10-second
    write). beta fails for good at 200 s and the job restarts on alpha alone (PLAN_C):
    the 12 layers alpha held read from its nodes' host memory, beta's 12 and the LM head
    from the store. Where the job had switched from PLAN_B (alpha and gamma) to PLAN_A
    at 150 s and no checkpoint of PLAN_A is durable when beta fails, the checkpoint is
    PLAN_B's, whose nodes the job had left: everything comes from the store."""
    costs = _writing_in(hand_instance, 10.0)
    costs = dataclasses.replace(costs, host_copy_gbps=costs.storage_gbps)
    if switch_first:
        policy = RestartsWith(PLAN_B, PLAN_C, switch_to=PLAN_A, timer_s=150.0,
                              checkpoint_interval_s=30.0)
        (switch,) = simulate_run(hand_instance, Scenario.of(400.0, []), policy,
                                 costs).switches
        failure = switch["resume_s"] + 0.5  # before PLAN_A's first checkpoint is durable
    else:
        policy, failure = RestartsWith(PLAN_A, PLAN_C, checkpoint_interval_s=30.0), 200.0
    record = simulate_run(hand_instance, Scenario.of(400.0, [
        Event(failure, EventKind.DOMAIN_FAILURE, 1, duration_s=1000.0)]), policy, costs)
    (interruption,) = record.interruptions
    restart = next(s for s in record.segments if s.kind == "stopped"
                   and s.start_s > interruption["time_s"] + 3.5)  # after detection, decision
    cm = cost_model(hand_instance)
    rate = costs.storage_gbps * GBIT
    if switch_first:
        read = storage_time(hand_instance, PLAN_C, costs)
    else:
        read = (12 * cm.layer_params + cm.head_params) * PERSISTENT_BYTES_PER_PARAM / rate \
            + host_copy_time(hand_instance, PLAN_C, costs)
    assert restart.end_s - restart.start_s == pytest.approx(costs.restart_s + read)
    assert restore_time(hand_instance, PLAN_C, costs, PERSISTENT_BYTES_PER_PARAM) \
        == storage_time(hand_instance, PLAN_C, costs)


@pytest.mark.parametrize("notice_s", [120.0, 20.0])
def test_an_announced_interruption_restarts_on_a_plan_prepared_during_the_notice(
        hand_instance, notice_s):
    """Load takes beta at 150 s, announced ``notice_s`` before; the policy restarts on
    alpha alone. With 120 s the job knew in time: the policy was asked at the notice (30
    s; its 1 s and the 30 s of preparation end by 150 s), no heartbeat detection, no cold
    start: training stops at 150 s for the cut-over alone (state moves are instant here).
    With 20 s the preparation alone cannot end by then: the interruption is detected,
    decided and the plan starts cold, as an unannounced one."""
    scenario = Scenario.of(300.0, [Event(150.0, EventKind.LOAD, 1, value=0.25)])
    costs = dataclasses.replace(FAST, load_notice_s=notice_s)
    record = simulate_run(hand_instance, scenario, RestartsWith(PLAN_A, PLAN_C), costs)
    (interruption,) = record.interruptions
    assert interruption["time_s"] == 150.0 and interruption["tokens_lost"] == 0.0
    decided = [d["time_s"] for d in record.decisions if d["trigger"] == "interrupted"]
    stops = [s for s in record.segments if s.kind == "stopped" and s.start_s >= 150.0]
    assert stops[0].start_s == 150.0
    if notice_s == 120.0:
        assert decided == [30.0]
        assert [s.end_s for s in stops] == [pytest.approx(150.0 + costs.switch_s, abs=1e-3)]
    else:
        assert decided == [150.0 + costs.detection_s]
        assert stops[-1].end_s == pytest.approx(
            150.0 + costs.detection_s + 1.0 + costs.restart_s, abs=1e-3)
    assert interruption["resumed_s"] == stops[-1].end_s


def test_a_restart_is_prepared_only_from_when_the_interrupted_plan_started(hand_instance):
    """PLAN_B (alpha and gamma) runs; a notice at 30 s announces load on beta at 150 s,
    which PLAN_B does not use. gamma fails at 120 s and the job restarts on PLAN_A (alpha
    and beta), running from 134 s. At 150 s the load takes PLAN_A's beta GPUs: a restart
    could be prepared for it only from 134 s, too late (134 + 1 + 30 s), so that
    interruption is detected, decided and started cold."""

    class Restarts(Scripted):
        def observe(self, now, state, plan, trigger, deadline_s=None):
            if trigger is Trigger.INTERRUPTED:
                return Replan(PLAN_A if plan == PLAN_B else PLAN_C, 1.0, 0.0)
            return super().observe(now, state, plan, trigger, deadline_s)

    costs = dataclasses.replace(FAST, load_notice_s=120.0, restart_s=10.0)
    record = simulate_run(hand_instance, Scenario.of(300.0, [
        Event(120.0, EventKind.DOMAIN_FAILURE, 2, duration_s=1000.0),
        Event(150.0, EventKind.LOAD, 1, value=0.25)]), Restarts(PLAN_B), costs)
    assert [d["time_s"] for d in record.decisions if d["trigger"] == "interrupted"] == [
        120.0 + costs.detection_s, 150.0 + costs.detection_s]
    second = record.interruptions[1]
    assert second["resumed_s"] == pytest.approx(150.0 + costs.detection_s + 1.0 + 10.0,
                                                abs=1e-3)


def test_a_restart_is_prepared_on_the_gpus_free_both_before_and_after_the_change(
        hand_instance):
    """Other tenants hold 24 of alpha's 32 free GPUs until 150 s, when they free them and
    load takes beta's, announced at 30 s. The policy is asked at the notice for the plan
    to restart on, shown the GPUs free both now and after the change (alpha 8, beta 4,
    gamma 32; the announced state has alpha 32): it answers PLAN_B (alpha and gamma),
    whose stages start on GPUs the job holds, so the change stops training for the
    cut-over alone. Shown alpha's 32, it would answer PLAN_C (16 of alpha's GPUs), which
    could not be prepared on the 8 alpha has until then. Once PLAN_B runs, the policy is
    shown the GPUs the change freed."""

    class ByAlpha(Scripted):
        shown: list
        changes: list

        def observe(self, now, state, plan, trigger, deadline_s=None):
            if trigger is Trigger.INTERRUPTED:
                self.shown.append(state.free_gpus.tolist())
                return Replan(PLAN_C if state.free_gpus[0] >= 16 else PLAN_B, 1.0, 0.0)
            if trigger is Trigger.CHANGE:
                self.changes.append((now, state.free_gpus.tolist()))
            return super().observe(now, state, plan, trigger, deadline_s)

    policy = ByAlpha(PLAN_A)
    policy.shown, policy.changes = [], []
    costs = dataclasses.replace(FAST, load_notice_s=120.0)
    record = simulate_run(hand_instance, Scenario.of(300.0, [
        Event(0.0, EventKind.LOAD, 0, value=0.25), Event(150.0, EventKind.LOAD, 0, value=1.0),
        Event(150.0, EventKind.LOAD, 1, value=0.25)]), policy, costs)
    assert policy.shown == [[8, 4, 32]]
    assert [d["time_s"] for d in record.decisions if d["trigger"] == "interrupted"] == [30.0]
    (interruption,) = record.interruptions
    assert interruption["resumed_s"] == pytest.approx(150.0 + costs.switch_s, abs=1e-3)
    assert record.plans[_steps(record)[-1].plan] == PLAN_B
    assert policy.changes == [(pytest.approx(150.0 + costs.switch_s, abs=1e-3), [32, 4, 32])]


@pytest.mark.parametrize(("notice_s", "prepare_s"), [(120.0, 30.0), (40.0, 30.0), (20.0, 10.0)])
def test_a_prepared_restart_fetches_the_state_of_a_long_step_before_the_change(
        hand_instance, notice_s, prepare_s):
    """3-minute steps; load takes beta inside the second step, announced ``notice_s``
    before; the policy restarts on alpha alone. The job checkpoints inside the step
    before the change (the state the step started from, durable since the checkpoint
    after the first step, and the gradients). With 120 s of notice, the notice comes
    before that step boundary, and the checkpoint there is differential: the checkpoints
    inside the first step (every 60 s) hold the state the step started from, so it writes
    the step's gradients. The plan's nodes fetch that state (and those gradients) into
    host memory from the decision on (1 s after the notice), alongside the stages' start
    (``prepare_s``): the fetch (about 25 s) ends before the change with 120 s and with
    40 s of notice (the stages alone are ready 9 s before it), and at the change only its
    copy to the GPUs and the gradients are left. With 20 s (stages ready in 10 s), the
    fetch would end 6 s after the change: the state is read with the gradients."""
    instance = _long_steps(hand_instance)
    step = simulated_step_time(instance, PLAN_A)
    change = step + 120.0
    costs = dataclasses.replace(_writing_in(instance, 20.0), load_notice_s=notice_s,
                                prepare_s=prepare_s)
    costs = dataclasses.replace(costs, host_copy_gbps=costs.storage_gbps)
    policy = RestartsWith(PLAN_A, PLAN_C, checkpoint_interval_s=60.0)
    record = simulate_run(instance, Scenario.of(change + 300.0, [
        Event(change, EventKind.LOAD, 1, value=0.25)]), policy, costs)
    (interruption,) = record.interruptions
    assert interruption["time_s"] == change and interruption["rolled_back_from_s"] > step
    (restart,) = [s for s in record.segments if s.kind == "stopped"]
    kept = np.array([1.0, 0.5, 1.0])  # (beta's layers all move to alpha: from the store)
    fetch = restore_time(instance, PLAN_C, costs, PERSISTENT_BYTES_PER_PARAM, PLAN_A, kept)
    assert 40.0 - 1.0 > fetch > 40.0 - 31.0 and fetch > 20.0 - 1.0  # (about 25 s)
    fetched = notice_s - 1.0 > fetch
    delta = GRADIENT_BYTES_PER_PARAM if change - notice_s <= step else 0.0
    per_param = GRADIENT_BYTES_PER_PARAM if fetched else MID_STEP_BYTES_PER_PARAM + delta
    read = restore_time(instance, PLAN_C, costs, per_param, PLAN_A, kept)
    if fetched:  # the state fetched, and the step's gradients, wait in host memory
        read += host_copy_time(instance, PLAN_C, costs, PERSISTENT_BYTES_PER_PARAM + delta)
    assert (restart.start_s, restart.end_s) == (change, pytest.approx(
        change + read + costs.switch_s))


@pytest.mark.parametrize("steps_before", [5.2, 6.9])
def test_checkpoints_on_a_notice_write_each_steps_gradients_after_the_state(
        hand_instance, steps_before):
    """33-second steps, a store that writes PLAN_A's state in 20 s, and beta's load
    announced 120 s before it comes ``steps_before`` steps in; the policy restarts on
    alpha alone. From the notice on the job checkpoints at every step boundary: the first
    writes the state, each later one the step's gradients alone (a differential
    checkpoint, 2.9 s), and one inside the last step its gradients. The nodes fetch the
    state (20 s) and each step's gradients once written, all before the change, which is
    left with the gradients of the step in progress: a stop of 2.9 s and the cut-over.
    Were every boundary's checkpoint the state (20 s each), the last one's fetch would end
    after the change, and the restart would read the whole state (a 27.9 s stop). A failure
    before the change rolls back to the last boundary's checkpoint, and the cold restart
    reads the state and the steps' gradients since."""
    instance = _half_minute_steps(hand_instance)
    step = simulated_step_time(instance, PLAN_A)
    change = steps_before * step
    costs = dataclasses.replace(_writing_in(instance, 20.0), load_notice_s=120.0)
    record = simulate_run(instance, Scenario.of(change + 100.0, [
        Event(change, EventKind.LOAD, 1, value=0.25)]),
        RestartsWith(PLAN_A, PLAN_C, checkpoint_interval_s=1e9), costs)
    (interruption,) = record.interruptions
    assert change - step < interruption["rolled_back_from_s"] < change
    (restart,) = [s for s in record.segments if s.kind == "stopped" and s.start_s > 0.0]
    kept = np.array([1.0, 0.5, 1.0])  # (beta's layers all move to alpha: from the store)
    gradients = restore_time(instance, PLAN_C, costs, GRADIENT_BYTES_PER_PARAM, PLAN_A, kept)
    whole = restore_time(instance, PLAN_C, costs, MID_STEP_BYTES_PER_PARAM, PLAN_A, kept)
    assert gradients == pytest.approx(20.0 / 7, rel=1e-4)  # (alpha: host memory, quick)
    assert whole == pytest.approx(20.0 * 8 / 7, rel=1e-4)
    # (the state and the steps' gradients since, in host memory, copied to the GPUs)
    deltas = math.floor(steps_before) - math.ceil(steps_before - 120.0 / step)
    read = host_copy_time(instance, PLAN_C, costs, PERSISTENT_BYTES_PER_PARAM
                          + deltas * GRADIENT_BYTES_PER_PARAM) + gradients
    assert (restart.start_s, restart.end_s) == (change, pytest.approx(
        change + read + costs.switch_s))
    # beta fails 0.3 steps before instead, unannounced: back to the checkpoint at the last
    # boundary (its step's gradients, the second after the state written at the first
    # boundary of the notice), and a cold restart that reads the state and both steps'
    # gradients (alpha's from host memory, beta's from the store)
    failure = change - 0.3 * step
    record = simulate_run(instance, Scenario.of(change + 100.0, [
        Event(change, EventKind.LOAD, 1, value=0.25),
        Event(failure, EventKind.DOMAIN_FAILURE, 1, duration_s=500.0)]),
        RestartsWith(PLAN_A, PLAN_C, checkpoint_interval_s=1e9), costs)
    (interruption,) = record.interruptions
    assert interruption["rolled_back_from_s"] == pytest.approx(
        math.floor(steps_before - 0.3) * step)
    detected = failure + costs.detection_s + 1.0  # (the policy's decision: 1 s)
    (restart,) = [s for s in record.segments if s.kind == "stopped" and s.start_s == detected]
    chain = restore_time(instance, PLAN_C, costs, PERSISTENT_BYTES_PER_PARAM
                         + 2 * GRADIENT_BYTES_PER_PARAM, PLAN_A, np.array([1.0, 0.0, 1.0]))
    assert restart.end_s == pytest.approx(detected + chain + costs.restart_s)


def test_a_prepared_restart_reads_what_its_nodes_have_not_fetched_by_the_change(
        hand_instance):
    """As above, with the change 4 s after the sixth step boundary: the gradients of the
    sixth step, the third after the state, are durable 2.9 s after that boundary, and the
    nodes would have fetched them 2.9 s later, after the change: the restart reads the
    state and the three steps' gradients from the store."""
    instance = _half_minute_steps(hand_instance)
    step = simulated_step_time(instance, PLAN_A)
    change = 6.12 * step
    costs = dataclasses.replace(_writing_in(instance, 20.0), load_notice_s=120.0)
    record = simulate_run(instance, Scenario.of(change + 100.0, [
        Event(change, EventKind.LOAD, 1, value=0.25)]),
        RestartsWith(PLAN_A, PLAN_C, checkpoint_interval_s=1e9), costs)
    (interruption,) = record.interruptions
    assert interruption["rolled_back_from_s"] == pytest.approx(6 * step)
    (restart,) = [s for s in record.segments if s.kind == "stopped" and s.start_s > 0.0]
    read = restore_time(instance, PLAN_C, costs, PERSISTENT_BYTES_PER_PARAM
                        + 3 * GRADIENT_BYTES_PER_PARAM, PLAN_A, np.array([1.0, 0.5, 1.0]))
    assert (restart.start_s, restart.end_s) == (change, pytest.approx(
        change + read + costs.switch_s))


def _cold_read(record, failure: float, costs: RunCosts) -> float:
    """The read of the cold restart after the interruption at ``failure``: its stop less
    the cold start, once the GPUs are back (the detection and the decision aside)."""
    (interruption,) = [i for i in record.interruptions if i["time_s"] == failure]
    (restart,) = [s for s in record.segments if s.kind == "stopped"
                  and s.end_s == interruption["resumed_s"]]
    return restart.end_s - restart.start_s - costs.restart_s


def test_a_chain_of_step_gradients_ends_at_its_cap_and_at_a_restart(hand_instance):
    """33-second steps, a store that writes the state in 20 s, and beta's load announced
    400 s before it comes: from the first step boundary of the notice (the third) the job
    checkpoints at each one, the state, then 7 steps' gradients (the cap: as many bytes
    again), then the state again, then gradients. Beta fails, unannounced, 0.9 steps after
    the tenth, the eleventh or the thirteenth boundary: the cold restart reads the state
    and 7, 0 or 2 steps' gradients (14 + 2n bytes a parameter; alpha's from host memory).
    And after a restart the chain starts again: the first boundary's checkpoint writes
    the state, not the step's gradients after the restored chain."""
    instance = _half_minute_steps(hand_instance)
    step = simulated_step_time(instance, PLAN_A)
    costs = dataclasses.replace(_writing_in(instance, 20.0), load_notice_s=400.0)
    assert 2 * step < 14.5 * step - 400.0 < 3 * step
    beta_gone = np.array([1.0, 0.0, 1.0])

    def chain_read(plan: Plan, deltas: int) -> float:
        return restore_time(instance, plan, costs, PERSISTENT_BYTES_PER_PARAM
                            + deltas * GRADIENT_BYTES_PER_PARAM, PLAN_A, beta_gone)

    change = Event(14.5 * step, EventKind.LOAD, 1, value=0.25)
    for boundary, deltas in ((10, 7), (11, 0), (13, 2)):
        failure = (boundary + 0.9) * step
        record = simulate_run(instance, Scenario.of(change.time_s + 100.0, [
            change, Event(failure, EventKind.DOMAIN_FAILURE, 1, duration_s=1000.0)]),
            RestartsWith(PLAN_A, PLAN_C, checkpoint_interval_s=1e9), costs)
        (interruption,) = record.interruptions
        assert interruption["rolled_back_from_s"] == pytest.approx(boundary * step)
        assert _cold_read(record, failure, costs) == pytest.approx(chain_read(PLAN_C, deltas))
    # beta fails inside the sixth step for 30 s (back to the state of the fifth boundary,
    # the first of the notice), and again 1.9 steps after the restart: back to the first
    # boundary after it, whose checkpoint holds the state
    change = Event(16.5 * step, EventKind.LOAD, 1, value=0.25)
    first = Event(5.9 * step, EventKind.DOMAIN_FAILURE, 1, duration_s=30.0)
    once = simulate_run(instance, Scenario.of(change.time_s + 100.0, [change, first]),
                        RestartsWith(PLAN_A, PLAN_A, checkpoint_interval_s=1e9), costs)
    resumed = once.interruptions[0]["resumed_s"]
    second = Event(resumed + 1.9 * step, EventKind.DOMAIN_FAILURE, 1, duration_s=30.0)
    twice = simulate_run(instance, Scenario.of(change.time_s + 100.0, [change, first, second]),
                         RestartsWith(PLAN_A, PLAN_A, checkpoint_interval_s=1e9), costs)
    assert twice.interruptions[0]["resumed_s"] == resumed  # (the same run until then)
    assert twice.interruptions[1]["rolled_back_from_s"] == pytest.approx(resumed + step)
    assert _cold_read(twice, second.time_s, costs) == pytest.approx(chain_read(PLAN_A, 0))


def test_steps_longer_than_the_interval_are_checkpointed_inside_every_interval(
        hand_instance):
    """3-minute steps, checkpoints every 60 s: no step boundary can hold them, so each is
    taken inside the step, at the first micro-batch boundary 60 s after the last one.
    Training stops only while the gradients are copied (no drain: each stage copies at its
    own end of that micro-batch). The first copies the state with the gradients (16 bytes
    a parameter) and is durable a slot (the second stage's end of the micro-batch), the
    copy and a 20-second write later; the second, in the same step, writes the gradients
    alone (2 bytes) and is durable once the first is too. A failure rolls back to the
    last checkpoint durable then, and the restart reads the state with the gradients:
    beta's, whose nodes failed, from the store (20 s: the larger domain's share, with the
    LM head), alpha's from its nodes' host memory."""
    instance = _long_steps(hand_instance)
    step = simulated_step_time(instance, PLAN_A)
    assert step > 150.0
    slot = step / (4096 // 2)
    costs = _writing_in(instance, 20.0, MID_STEP_BYTES_PER_PARAM)
    pause = host_copy_time(instance, PLAN_A, costs, GRADIENT_BYTES_PER_PARAM)
    record = simulate_run(instance, Scenario.of(170.0, []), Scripted(PLAN_A, 60.0), costs)
    saves = [s for s in record.segments if s.kind == "checkpoint"]
    first = math.ceil(60.0 / slot) * slot
    second = first + pause + math.ceil((60.0 - pause) / slot) * slot
    assert [(s.start_s, s.end_s) for s in saves] == [
        pytest.approx((first, first + pause)), pytest.approx((second, second + pause))]
    parts = [s for s in record.segments if s.kind == "partial"]
    assert [p.tokens / record.tokens_per_step for p in parts[:2]] == [
        pytest.approx(first / step), pytest.approx((second - first - pause) / step)]
    durable = first + slot + host_copy_time(instance, PLAN_A, costs, MID_STEP_BYTES_PER_PARAM) \
        + 20.0
    gradients = storage_time(instance, PLAN_A, costs, GRADIENT_BYTES_PER_PARAM)
    assert gradients == pytest.approx(20.0 * GRADIENT_BYTES_PER_PARAM
                                      / MID_STEP_BYTES_PER_PARAM)

    def failed_at(time_s):
        failed = simulate_run(instance, Scenario.of(400.0, [Event(
            time_s, EventKind.DOMAIN_FAILURE, 1, duration_s=10.0)]),
            Scripted(PLAN_A, 60.0), costs)
        (interruption,) = failed.interruptions
        return failed, interruption

    assert failed_at(durable - 1.0)[1]["rolled_back_from_s"] == 0.0
    assert failed_at(durable + 1.0)[1]["rolled_back_from_s"] == pytest.approx(first)
    failed, interruption = failed_at(second + slot + pause + gradients + 1.0)
    assert interruption["rolled_back_from_s"] == pytest.approx(second)
    assert interruption["tokens_lost"] == 0.0
    restart = next(s for s in failed.segments if s.kind == "stopped"
                   and s.start_s >= interruption["time_s"] + 10.0)  # (failed for 10 s)
    assert restart.end_s - restart.start_s == pytest.approx(
        costs.restart_s + 20.0 + host_copy_time(instance, PLAN_A, costs, MID_STEP_BYTES_PER_PARAM))


def test_a_checkpoint_after_a_restart_writes_the_gradients_alone(hand_instance):
    """3-minute steps, checkpoints every 60 s, a store that writes the state with the
    gradients (16 bytes a parameter) in 20 s. beta fails for 10 s once the first
    checkpoint inside the first step is durable; the job restarts PLAN_A from it. The
    restart read back the state its step starts from, which the store holds: the next
    checkpoint, inside that step, copies and writes the gradients alone (2 bytes, 2.5 s),
    so that a second failure just after that write rolls back to it (with the state
    written again, as before, it would roll back to the first)."""
    instance = _long_steps(hand_instance)
    step = simulated_step_time(instance, PLAN_A)
    slot = step / (4096 // 2)
    costs = _writing_in(instance, 20.0, MID_STEP_BYTES_PER_PARAM)
    pause = host_copy_time(instance, PLAN_A, costs, GRADIENT_BYTES_PER_PARAM)
    gradients = storage_time(instance, PLAN_A, costs, GRADIENT_BYTES_PER_PARAM)
    first = math.ceil(60.0 / slot) * slot
    failure = first + slot + host_copy_time(instance, PLAN_A, costs, MID_STEP_BYTES_PER_PARAM) \
        + 20.0 + 1.0

    def run(*failures):
        return simulate_run(instance, Scenario.of(600.0, [
            Event(t, EventKind.DOMAIN_FAILURE, 1, duration_s=10.0) for t in failures]),
            Scripted(PLAN_A, 60.0), costs)

    once = run(failure)
    (interruption,) = once.interruptions
    assert interruption["rolled_back_from_s"] == pytest.approx(first)
    resumed = interruption["resumed_s"]
    saves = [s for s in once.segments if s.kind == "checkpoint" and s.start_s > resumed]
    after = resumed + math.ceil(60.0 / slot) * slot
    assert (saves[0].start_s, saves[0].end_s) == pytest.approx((after, after + pause))
    twice = run(failure, after + slot + pause + gradients + 1.0)
    assert twice.interruptions[1]["rolled_back_from_s"] == pytest.approx(after)


def test_a_state_copy_that_outlasts_its_step_stops_training_for_the_rest(hand_instance):
    """3-minute steps, checkpoints every 60 s, and a host copy that takes 150 s for the
    state: the checkpoint inside the step at about 60 s stops training for the gradients'
    copy, and for what the state's copy, alongside the rest of the step, takes beyond the
    step's end (its update waits for it)."""
    instance = _long_steps(hand_instance)
    step = simulated_step_time(instance, PLAN_A)
    slot = step / (4096 // 2)
    costs = _copying_in(instance, 150.0)
    gradients = host_copy_time(instance, PLAN_A, costs, GRADIENT_BYTES_PER_PARAM)
    assert gradients == pytest.approx(150.0 * GRADIENT_BYTES_PER_PARAM / 14)
    record = simulate_run(instance, Scenario.of(400.0, []), Scripted(PLAN_A, 60.0), costs)
    first = next(s for s in record.segments if s.kind == "checkpoint")
    at = math.ceil(60.0 / slot) * slot
    assert first.start_s == pytest.approx(at)
    pause = gradients + 150.0 - (step - at)
    assert first.end_s - first.start_s == pytest.approx(pause)
    rest = next(s for s in record.segments if s.kind == "step")  # the step's end moves
    assert (rest.start_s, rest.end_s) == pytest.approx((at + pause, step + pause))


def test_a_checkpoint_before_a_change_is_written_after_the_one_before_it(hand_instance):
    """3-minute steps, a store that writes the state in 60 s, and beta's load at T + 100 s
    announced 120 s before, so that the job checkpoints after the first step (T): the
    checkpoint inside
    the second step for the change holds its gradients alone (the one at T holds the
    state) and is taken at the last micro-batch boundary from which the cut (a slot), the
    copy and its own 8.6-second write end by the change; the store writes it after the
    one at T (durable at T + 60 s), which leaves it time; with the load at T + 65 s it
    leaves none, and the interruption rolls back to T."""
    instance = _long_steps(hand_instance)
    step = simulated_step_time(instance, PLAN_A)
    slot = step / (4096 // 2)
    costs = dataclasses.replace(_writing_in(instance, 60.0), load_notice_s=120.0)
    write = storage_time(instance, PLAN_A, costs, GRADIENT_BYTES_PER_PARAM)
    assert write == pytest.approx(60.0 * GRADIENT_BYTES_PER_PARAM / 14)
    pause = host_copy_time(instance, PLAN_A, costs, GRADIENT_BYTES_PER_PARAM)
    change = step + 100.0
    record = simulate_run(instance, Scenario.of(change + 50.0, [
        Event(change, EventKind.LOAD, 1, value=0.25)]), Scripted(PLAN_A), costs)
    saves = [s.start_s for s in record.segments if s.kind == "checkpoint"]  # (those that
    latest = change - write - pause - slot  # stop training: the one at T does not)
    assert len(saves) == 1 and latest - slot - 1e-6 < saves[0] <= latest + 1e-6
    assert saves[0] > step + 60.0  # (it used to wait for the one at T: about T + 40 s)
    (interruption,) = record.interruptions
    assert interruption["rolled_back_from_s"] == pytest.approx(saves[0])
    # the load at T + 65 s instead: behind the write of the one at T, no checkpoint inside
    # the step can be durable by then (its own copy and write alone could: by T + 56 s)
    soon = simulate_run(instance, Scenario.of(step + 115.0, [
        Event(step + 65.0, EventKind.LOAD, 1, value=0.25)]), Scripted(PLAN_A), costs)
    assert not [s for s in soon.segments if s.kind == "checkpoint"]
    (interruption,) = soon.interruptions
    assert interruption["rolled_back_from_s"] == pytest.approx(step)


def test_a_switch_that_cuts_its_step_keeps_the_micro_batches_done(hand_instance):
    """The switch on the notice above, prepared only just before it must begin (no step
    boundary in between), must be done by 100 s: the step in progress is cut at 100 s
    less the move of beta's layers with their accumulated gradients (16 bytes a
    parameter) and the cut-over; the pipeline drains (one slot of T / 32) from the last
    micro-batch boundary that leaves it time, and the micro-batches before it are kept."""
    scenario = Scenario.of(300.0, [Event(100.0, EventKind.LOAD, 1, value=0.25)])
    moves = migration_bytes(hand_instance, PLAN_A, PLAN_C, MID_STEP_BYTES_PER_PARAM)
    stop = migration_time(hand_instance, moves) + FAST.switch_s
    # decided at 40 s, charged 1 s, prepared 10 ms before the cut
    costs = dataclasses.replace(FAST, load_notice_s=60.0, prepare_s=100.0 - stop - 41.01)
    record = simulate_run(hand_instance, scenario, Scripted(PLAN_A, then=PLAN_C), costs)
    (switch,) = record.switches
    assert switch["stop_s"] == pytest.approx(100.0 - stop)
    assert switch["resume_s"] == pytest.approx(100.0)
    assert switch["bytes"] == pytest.approx(sum(moves.values()))
    assert switch["bytes"] == pytest.approx(
        sum(migration_bytes(hand_instance, PLAN_A, PLAN_C).values()) * 16 / 14)
    slot = simulated_step_time(hand_instance, PLAN_A) / 32
    (part,) = [s for s in record.segments if s.kind == "partial" and s.end_s < 100.0]
    (lost,) = [s for s in record.segments if s.kind == "lost"]
    done = round((part.end_s - part.start_s) / slot)
    assert part.end_s - part.start_s == pytest.approx(done * slot)
    assert part.tokens == pytest.approx(record.tokens_per_step * done / 32)
    assert (lost.start_s, lost.end_s) == (part.end_s, switch["stop_s"])
    assert slot <= lost.end_s - lost.start_s < 2 * slot  # the drain, and less than a slot
    assert not record.interruptions and all(not s.rolled_back for s in record.segments)


def test_a_later_notice_keeps_the_deadline_of_an_earlier_one(hand_instance):
    """Steps of about 3 minutes (4,096 sequences a step). beta's load at 100 s is
    announced at 40 s and gamma's at 130 s at 70 s; the policy answers both with alpha
    alone. The second answer must still be done by 100 s, when the running plan loses
    beta's GPUs: its step is cut in time, and nothing is interrupted."""
    instance = _long_steps(hand_instance)
    scenario = Scenario.of(600.0, [Event(100.0, EventKind.LOAD, 1, value=0.25),
                                   Event(130.0, EventKind.LOAD, 2, value=0.5)])
    record = simulate_run(instance, scenario, Scripted(PLAN_A, then=PLAN_C),
                          dataclasses.replace(FAST, load_notice_s=60.0))
    assert simulated_step_time(instance, PLAN_A) > 150.0
    moves = migration_bytes(instance, PLAN_A, PLAN_C, MID_STEP_BYTES_PER_PARAM)
    assert not record.interruptions
    (switch,) = record.switches
    assert switch["stop_s"] == pytest.approx(100.0 - migration_time(instance, moves)
                                             - FAST.switch_s)
    assert switch["resume_s"] == pytest.approx(100.0)


class ByTime(Scripted):
    """Runs ``plan``; at the notice or timer at each time of ``answers``, that plan."""

    def __init__(self, plan: Plan, answers: dict[float, Plan], timer_s: float = math.inf):
        super().__init__(plan, timer_s=timer_s)
        self.answers = answers

    def observe(self, now, state, plan, trigger, deadline_s=None):
        if trigger is Trigger.START:
            return Replan(self.plan, 0.0, 0.0)
        if trigger in (Trigger.TIMER, Trigger.NOTICE) and now in self.answers:
            return Replan(self.answers[now], 1.0, 0.0)
        return None


@pytest.mark.parametrize("timer_s", [50.0, 110.0])
def test_a_switch_to_a_plan_an_announced_change_takes_gpus_from_is_called_off(hand_instance,
                                                                              timer_s):
    """3-minute steps; a notice at 100 s announces that load takes 26 of gamma's 32 GPUs
    at 220 s, which PLAN_B (alpha and gamma) needs 8 of and PLAN_A none. A switch to
    PLAN_B decided on a timer at 50 s, due at the first step's end, is called off at the
    notice (it would move onto GPUs about to go); one decided at 110 s is not made. PLAN_A
    trains on uninterrupted."""
    instance = _long_steps(hand_instance)
    step = simulated_step_time(instance, PLAN_A)
    assert 200.0 > step > 150.0
    costs = dataclasses.replace(FAST, load_notice_s=120.0)
    policy = Scripted(PLAN_A, timer_s=timer_s, then=PLAN_B, notice_for=-1.0)
    record = simulate_run(instance, Scenario.of(400.0, [
        Event(220.0, EventKind.LOAD, 2, value=0.2)]), policy, costs)
    assert policy.notices == [(100.0, 220.0)]
    assert not record.switches and not record.interruptions
    assert {record.plans[s.plan] for s in _steps(record)} == {PLAN_A}


def test_a_switch_that_cannot_beat_the_change_does_not_replace_one_that_can(hand_instance):
    """gamma is loaded from 5 s, beta's load at 100 s is announced at 40 s (answered with
    alpha alone) and gamma's return at 130 s at 70 s (answered with a plan on gamma's
    GPUs, which come too late): the first switch stays and is done by 100 s."""
    scenario = Scenario.of(300.0, [Event(5.0, EventKind.LOAD, 2, value=0.1),
                                   Event(100.0, EventKind.LOAD, 1, value=0.25),
                                   Event(130.0, EventKind.LOAD, 2, value=1.0)])
    record = simulate_run(hand_instance, scenario, ByTime(PLAN_A, {40.0: PLAN_C, 70.0: PLAN_B}),
                          dataclasses.replace(FAST, load_notice_s=60.0))
    assert not record.interruptions
    (switch,) = record.switches
    assert record.plans[switch["plan"]] == PLAN_C and switch["resume_s"] <= 100.0 + 1e-9


def test_a_switch_decided_on_a_timer_must_beat_an_announced_change(hand_instance):
    """3-minute steps; beta's load at 100 s is announced at 40 s, which the policy lets
    pass, and a timer at 60 s moves the plan to alpha alone: the switch is due by 100 s
    all the same, its step cut in time, and nothing is interrupted."""
    instance = _long_steps(hand_instance)
    scenario = Scenario.of(600.0, [Event(100.0, EventKind.LOAD, 1, value=0.25)])
    record = simulate_run(instance, scenario, ByTime(PLAN_A, {60.0: PLAN_C}, timer_s=60.0),
                          dataclasses.replace(FAST, load_notice_s=60.0, prepare_s=1.0))
    assert not record.interruptions
    (switch,) = record.switches
    assert switch["trigger"] == "timer" and switch["resume_s"] == pytest.approx(100.0)


def test_a_notice_with_no_switch_checkpoints_until_the_change(hand_instance):
    """The same load, announced 60 s before, to a policy that keeps its plan: the job
    checkpoints at every step boundary from the notice on, so the interruption loses only
    the step in progress; unannounced, every step since the start."""
    scenario = Scenario.of(300.0, [Event(100.0, EventKind.LOAD, 1, value=0.25)])
    step = simulated_step_time(hand_instance, PLAN_A)
    noticed = simulate_run(hand_instance, scenario, Scripted(PLAN_A),
                           dataclasses.replace(FAST, load_notice_s=60.0))
    (interruption,) = noticed.interruptions
    assert interruption["time_s"] == 100.0 and interruption["tokens_lost"] == 0.0
    pauses = [s for s in noticed.segments if s.kind == "checkpoint"]
    assert pauses and all(40.0 <= s.start_s < 100.0 for s in pauses)
    kept = [s for s in noticed.segments if s.kind == "step" and not s.rolled_back]
    assert len(kept) >= math.floor(100.0 / step) - 1  # the checkpoint pauses take a step
    assert all(not s.rolled_back for s in noticed.segments)
    # a switch decided on a timer, ready only after the change, does not stop them
    late = simulate_run(hand_instance, scenario,
                        Scripted(PLAN_A, timer_s=80.0, then=PLAN_C, notice_for=-1.0),
                        dataclasses.replace(FAST, load_notice_s=60.0))
    (interruption,) = late.interruptions
    assert interruption["time_s"] == 100.0 and interruption["tokens_lost"] == 0.0
    slow = simulate_run(hand_instance, scenario, Scripted(PLAN_A),  # never durable in time
                        dataclasses.replace(FAST, load_notice_s=60.0, storage_gbps=1e-3))
    assert not [s for s in slow.segments if s.kind == "checkpoint"]


def test_a_notice_inside_a_step_checkpoints_the_micro_batches_done(hand_instance):
    """The same load, announced 60 s before, to a policy that keeps its plan, with steps
    of T: the step in progress at 100 s ends too late for a checkpoint after it, so the job
    checkpoints inside it, at the last micro-batch boundary (T / 32: 64 sequences in
    micro-batches of 1 on 2 replicas) from which the second stage's end of that
    micro-batch (one slot), the copy of the state with its bf16 gradients and the store's
    write end by the change; training stops for the gradients' copy alone. The
    micro-batches before it are kept; the interruption rolls back to it."""
    scenario = Scenario.of(300.0, [Event(100.0, EventKind.LOAD, 1, value=0.25)])
    costs = dataclasses.replace(FAST, load_notice_s=60.0)
    record = simulate_run(hand_instance, scenario, Scripted(PLAN_A), costs)
    slot = simulated_step_time(hand_instance, PLAN_A) / 32
    pause = host_copy_time(hand_instance, PLAN_A, costs, GRADIENT_BYTES_PER_PARAM)
    durable = slot + host_copy_time(hand_instance, PLAN_A, costs, MID_STEP_BYTES_PER_PARAM) \
        + storage_time(hand_instance, PLAN_A, costs, MID_STEP_BYTES_PER_PARAM)
    (part,) = [s for s in record.segments if s.kind == "partial"]
    done = round((part.end_s - part.start_s) / slot)
    assert 1 <= done < 32 and part.end_s - part.start_s == pytest.approx(done * slot)
    assert part.end_s + durable <= 100.0 < part.end_s + slot + durable
    assert part.tokens == pytest.approx(record.tokens_per_step * done / 32)
    assert not part.rolled_back
    (saved,) = [s for s in record.segments if s.kind == "checkpoint"
                and s.start_s == part.end_s]
    assert saved.end_s - saved.start_s == pytest.approx(pause)
    (interruption,) = record.interruptions
    assert interruption["time_s"] == 100.0 and interruption["tokens_lost"] == 0.0
    assert interruption["rolled_back_from_s"] == part.end_s
    (lost,) = [s for s in record.segments if s.kind == "lost"]
    assert (lost.start_s, lost.end_s) == (saved.end_s, 100.0)
    # the state with its gradients: 16 bytes a parameter against 14 after a step
    assert storage_time(hand_instance, PLAN_A, costs, MID_STEP_BYTES_PER_PARAM) \
        == pytest.approx(storage_time(hand_instance, PLAN_A, costs) * 16 / 14)


def test_a_notice_tells_the_announced_load_not_a_failure_meanwhile(hand_instance):
    """A load on gamma (which the plan does not use) announced 60 s before, and beta failing
    unannounced at 80 s: the notice gives no reason to checkpoint, so the failure rolls
    back every step since the start; the policy is shown the load, not the failure."""
    events = [Event(80.0, EventKind.DOMAIN_FAILURE, 1, duration_s=30.0),
              Event(100.0, EventKind.LOAD, 2, value=0.5)]
    scenario = Scenario.of(300.0, events)
    policy = Scripted(PLAN_A)
    shown = []
    observe = policy.observe

    def spy(now, state, plan, trigger, deadline_s=None):
        if trigger is Trigger.NOTICE:
            shown.append(state.free_gpus.tolist())
        return observe(now, state, plan, trigger, deadline_s)

    policy.observe = spy
    record = simulate_run(hand_instance, scenario, policy,
                          dataclasses.replace(FAST, load_notice_s=60.0))
    assert shown == [[32, 16, 16]]  # gamma's load; beta still up (its failure is unknown)
    assert not [s for s in record.segments if s.kind == "checkpoint"]
    (interruption,) = record.interruptions
    assert interruption["cause"] == "failure" and interruption["tokens_lost"] == \
        pytest.approx(math.floor(80.0 / simulated_step_time(hand_instance, PLAN_A))
                      * record.tokens_per_step)


@pytest.mark.parametrize("storage_gbps, time_left, restarts", [
    (1e6, 120.0, True),  # the restart stops training for the cut-over alone: it pays
    (1.0, 120.0, False),  # beta's layers read into alpha: past the 20 s stop bound, resize
    (None, 120.0, True),  # their write and fetch end in the notice: the gradients are left
    (None, 50.0, False)])  # they cannot: the whole read is left, past the bound
def test_on_a_notice_a_policy_weighs_a_prepared_restart_against_a_switch(
        hand_instance, monkeypatch, storage_gbps, time_left, restarts):
    """A notice: the load will leave beta 4 free GPUs, PLAN_A must go. The planner's plan
    (PLAN_C, alpha alone) is past the stop bound over the WAN, so a switch can only
    resize PLAN_A in place (beta's stage narrower). Letting the change stop PLAN_A and
    restarting on PLAN_C, prepared during the notice, costs the read of beta's layers from
    the store (alpha's come from host memory) and the cut-over; where the plan's nodes
    fetch the weights and the optimizer's states within the notice (as the run does), only
    their copy to the GPUs and the gradients are read at the change (the fetch waits for
    PLAN_A's state to be written). The policy keeps PLAN_A for that where it trains more
    within the payback time. (None: a store that fetches beta's state in 40 s.)"""
    announced = hand_instance.with_link_state(free_gpus=np.array([32, 4, 32]))
    kept = kept_share(PLAN_A, announced.free_gpus)
    if storage_gbps is None:
        storage_gbps = restore_time(announced, PLAN_C, dataclasses.replace(
            FAST, storage_gbps=1.0), PERSISTENT_BYTES_PER_PARAM, PLAN_A, kept) / 40.0
    costs = dataclasses.replace(FAST, storage_gbps=storage_gbps)
    planner = Planner("greedy", METHODS["greedy"].options_type())
    monkeypatch.setattr(planner, "decide", lambda state: (PLAN_C, 0.0, 0.0))
    policy = ReplanningPolicy("event", planner, costs=costs)
    policy.observe(0.0, hand_instance, None, Trigger.START)
    resized = resize_in_place(announced, PLAN_A)
    assert resized is not None and rate(announced, PLAN_C) > rate(announced, resized)
    answer = policy.observe(10.0, announced, PLAN_A, Trigger.NOTICE, 10.0 + time_left)
    assert answer.plan == (PLAN_A if restarts else resized)


def test_the_oracle_is_never_below_any_policy():
    instance = Instance.load(QUICK)
    scenario = generate_scenario(instance, 3, ScenarioSettings(hours=1.0))
    oracle = run_kpis(instance, simulate_run(instance, scenario, Oracle()))
    for kind in ("static", "periodic", "event"):
        for planner in ("greedy", "sailor", "exact"):
            policy = ReplanningPolicy(kind, Planner(planner, METHODS[planner].options_type()),
                                      PolicySettings(period_s=900.0))
            kpis = run_kpis(instance, simulate_run(instance, scenario, policy))
            assert kpis["goodput_tokens_per_h"] <= oracle["goodput_tokens_per_h"], policy.name


def test_the_oracle_keeps_its_plan_without_asking_when_nothing_got_better(hand_instance,
                                                                         monkeypatch):
    """A latency spike on a link its plan does not use, or GPUs taken where it has none,
    cannot make another plan faster: the oracle keeps its plan, also when the state comes
    back to the one it proved the plan in, and asks the engine again once something got
    better than there (or its own links or GPUs changed)."""
    from evaluation.replanning import still_optimal

    links = hand_instance.links
    spiked = hand_instance.with_link_state(latency_ms=links.latency_ms
                                           * np.array([[1, 1, 3], [1, 1, 1], [3, 1, 1]]))
    assert still_optimal(hand_instance, spiked, PLAN_A)  # alpha-beta, not alpha-gamma
    assert not still_optimal(hand_instance, spiked, PLAN_B)  # alpha-gamma spiked
    assert not still_optimal(spiked, hand_instance, PLAN_A)  # the spike ends: better
    fewer = hand_instance.with_link_state(free_gpus=[32, 16, 8])
    assert still_optimal(hand_instance, fewer, PLAN_A) and not still_optimal(
        hand_instance, hand_instance.with_link_state(free_gpus=[32, 4, 32]), PLAN_A)
    oracle = Oracle()
    calls = []
    monkeypatch.setattr(oracle.planner, "decide",
                        lambda state: calls.append(state) or (PLAN_A, 0.5, 0.5))
    assert oracle.observe(0.0, hand_instance, None, Trigger.START).plan == PLAN_A
    assert oracle.observe(1.0, spiked, PLAN_A, Trigger.CHANGE).plan == PLAN_A
    assert len(calls) == 1
    oracle.observe(2.0, hand_instance, PLAN_A, Trigger.CHANGE)  # back where it was proven
    assert len(calls) == 1
    oracle.observe(3.0, hand_instance.with_link_state(free_gpus=[40, 16, 32]), PLAN_A,
                   Trigger.CHANGE)  # more GPUs free: a faster plan may fit
    assert len(calls) == 2


def _unit(scenario: Scenario, instance: Instance, policies) -> OnlineUnit:
    options = {name: method.options_type() for name, method in METHODS.items()}
    return OnlineUnit(instance.to_dict(), scenario.to_dict(), tuple(policies), options,
                      PolicySettings(), RunCosts())


MEASURED = ("latency_s_p50", "latency_s_p99", "latency_s_max", "coordination_s", "over_bound")


def _numbers(result: dict) -> pd.DataFrame:
    return pd.DataFrame(result["rows"]).drop(columns=list(MEASURED))


def test_a_replayed_file_gives_identical_runs_in_a_pool_and_on_dask(tmp_path: Path):
    """The same scenario read back from JSON and from CSV, run in this process, in a local
    pool and on a Dask LocalCluster: the same numbers (the measured latencies aside)."""
    distributed = pytest.importorskip("distributed")
    instance = Instance.load(QUICK)
    drawn = generate_scenario(instance, 4, ScenarioSettings(hours=1.0))
    (tmp_path / "s.json").write_text(json.dumps(drawn.to_dict()))
    (tmp_path / "s.csv").write_text(drawn.to_csv())
    policies = [("static", "greedy"), ("event", "greedy"), ("periodic", "sailor")]
    units = [_unit(Scenario.load(tmp_path / name, instance), instance, policies)
             for name in ("s.json", "s.csv")]
    here = [_numbers(run_online_unit(unit)) for unit in units]
    pd.testing.assert_frame_equal(here[0], here[1])
    pooled = map_tasks(run_online_unit, units, workers=2)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster:
        remote = map_tasks(run_online_unit, units, scheduler=cluster.scheduler_address)
    for result in (*pooled, *remote):
        pd.testing.assert_frame_equal(_numbers(result), here[0])


def test_the_command_writes_every_table_and_plot(tmp_path: Path):
    out = tmp_path / "online"
    done = run_module("evaluation.online", "--suite", "quick", "--match", "cn-hubs-k6",
                      "--hours", "0.5", "--planners", "greedy", "--out", out, "--quiet")
    assert done.returncode == 0, done.stderr
    runs = pd.read_parquet(out / "runs.parquet")
    assert set(runs["policy"]) == {"oracle", "static:greedy", "periodic:greedy",
                                   "event:greedy"}
    assert (pd.read_csv(out / "policies.csv")["instances"] == 1).all()
    assert "Online KPIs" in (out / "report.md").read_text()
    assert len(list((out / "plots").glob("timeline-*.png"))) == 1
    records = json.loads((out / "records.json").read_text())
    assert records["provenance"]["hours"] == 0.5


@pytest.mark.parametrize(("args", "needle"), [
    (["--policies", "sometimes"], "unknown kind 'sometimes'"),
    (["--planners", "diloco"], "'diloco' cannot re-plan"),
    (["--scenario", "absent.json"], "replays the events of one instance"),
    (["--match", "cn-hubs-k6", "--scenario", "absent.json"], "absent.json"),
    (["--headroom", "2"], "--headroom must be a finite number in [0, 0.95]"),
    (["--planners", "greedy", "--checkpoint", "rl/checkpoints/hi_ppo.pt"],
     "--checkpoint: an option of hippo, which this run does not use"),
    (["--policies", "event:sailor", "--generations", "3"],
     "--generations: an option of nsga2, which this run does not use"),
    (["--match", "cn-hubs-k6", "--scenario", "absent.json", "--hours", "1"],
     "--hours: a replayed --scenario runs for its own horizon_s"),
])
def test_bad_input_is_one_line(tmp_path: Path, args: list[str], needle: str):
    done = run_module("evaluation.online", "--suite", "quick", "--out", tmp_path / "o",
                      "--quiet", *args)
    assert done.returncode == 2, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and needle in done.stderr, done.stderr
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(("horizon", "events", "needle"), [
    (1e-9, [], "horizon_s 1e-09 needs 1 to 100,000 samples of 10 s"),
    (600, [{"time_s": 1, "kind": "bandwidth", "domain": 0, "peer": 1, "value": 1e308}],
     "events[0].value: 1e+308 x the link's"),
])
def test_a_bad_scenario_is_one_line_naming_the_file(tmp_path: Path, horizon, events, needle):
    scenario = tmp_path / "s.json"
    scenario.write_text(json.dumps({"schema": "xdsched.scenario/1", "horizon_s": horizon,
                                    "events": events}))
    assert needle in _refused_naming(tmp_path, "--scenario", scenario)


def _refused_naming(tmp_path: Path, flag: str, path: Path) -> str:
    """The one line a run with a bad ``flag`` file is refused with: it names the file, and
    no output is left."""
    done = run_module("evaluation.online", "--suite", "quick", "--match", "cn-hubs-k6",
                      flag, path, "--out", tmp_path / "o", "--quiet")
    assert done.returncode == 2, done.stderr
    line = done.stderr.strip()
    assert "\n" not in line and str(path) in line, line
    assert not (tmp_path / "o").exists()
    return line


def test_state_series_by_hand(hand_instance):
    events = [Event(10.0, EventKind.LOAD, 0, value=0.5),
              Event(20.0, EventKind.NODE_FAILURE, 2, value=8, duration_s=10.0),
              Event(25.0, EventKind.LATENCY, 0, 1, 3.0, 2.0),
              Event(40.0, EventKind.DOMAIN_JOIN, 1)]
    series = state_series(Scenario.of(60.0, events), hand_instance)
    assert series.times.tolist() == [0.0, 10.0, 20.0, 25.0, 27.0, 30.0, 40.0]
    assert series.free_gpus.tolist() == [[32, 0, 32], [16, 0, 32], [16, 0, 24], [16, 0, 24],
                                         [16, 0, 24], [16, 0, 32], [16, 16, 32]]
    assert series.latency_factor[3, 0, 1] == 3.0 and series.latency_factor[4, 0, 1] == 1.0
    state = series.instance_at(3)
    assert state.links.latency_ms[0, 1] == 90.0 and state.free_gpus.tolist() == [16, 0, 24]
    assert np.isinf(series.next_change(40.0)) and series.next_change(12.0) == 20.0


def test_cost_model_state_bytes_unchanged(cost: CostModel):
    """The named byte counts give the ZeRO-1 figure they replaced (the hand instance)."""
    assert cost.state_bytes_per_param(1, 4) == (16.0 - 12.0) + 12.0 / 4


@pytest.mark.parametrize(("document", "needle"), [
    ('{"storage_gbps": 0}', "storage_gbps must be"),
    ('{"restart_s": "1 min"}', "restart_s must be a number"),
    ('{"missed_heartbeats": 2.5}', "missed_heartbeats must be an integer"),
    ('{"storage_gbs": 100}', "storage_gbs is not a known field"),
    ('[{"storage_gbps": 100}]', "must be an object"),
    ('{"storage_gbps": 100,}', "is not valid JSON"),
    ('{"trace_interval_s": 0.001}', "trace_interval_s"),
    ('{"trace_interval_s": 0.1}', "got 216000 (trace_interval_s of costs"),
    ('{"a\\nb": 1}', "'a\\nb' is not a known field"),
])
def test_bad_costs_are_one_line_naming_the_file(tmp_path: Path, document: str, needle: str):
    costs = tmp_path / "costs.json"
    costs.write_text(document)
    assert needle in _refused_naming(tmp_path, "--costs", costs)


def test_a_costs_file_sets_the_costs_of_every_run(tmp_path: Path):
    """Fields a costs file names replace the defaults (the others stay), and the runs pay
    them: with no reclaim notice, no decision is made on one."""
    costs = tmp_path / "costs.json"
    costs.write_text('{"load_notice_s": 0, "storage_gbps": 100}')
    triggers = {}
    for name, extra in (("default", []), ("own", ["--costs", costs])):
        out = tmp_path / name
        done = run_module("evaluation.online", "--suite", "quick", "--match", "cn-hubs-k6",
                          "--hours", "1", "--policies", "event:greedy", "--out", out,
                          "--quiet", *extra)
        assert done.returncode == 0, done.stderr
        records = json.loads((out / "records.json").read_text())
        triggers[name] = {d["trigger"] for result in records["results"]
                          for log in result["logs"].values() for d in log["decisions"]}
        provenance = records["provenance"]
    assert provenance["costs"] == dataclasses.asdict(
        RunCosts(load_notice_s=0.0, storage_gbps=100.0))
    assert provenance["costs_file"] == str(costs)
    assert "notice" in triggers["default"] and "notice" not in triggers["own"]
