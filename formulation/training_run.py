"""A training run through a dynamic scenario, step by step (issue 17's run simulator).

:func:`simulate_run` advances one training job over a :class:`~formulation.scenario.Scenario`
under a re-planning *policy* (:class:`~formulation.run_record.Policy`: it observes the
state changes and keeps its plan or returns a new one). Each training step of the running
plan is timed by the event-level 1F1B simulator
(:func:`formulation.reference.simulated_step_time`) on the scenario sampled every
``trace_interval_s``, so bandwidth changes and latency spikes inside a step count as they
happen (:class:`~formulation.reference.StepTimes`: a step in which the
plan's links hold still is simulated once for all such steps). What a change costs is
charged as in a real job (:class:`~formulation.run_costs.RunCosts`):

* **Interruption.** A state in which the running plan's GPUs are no longer all free (a
  failure, other tenants' load, a domain leaving) stops it at once: the step in progress and
  every step since the last *durable* checkpoint are lost. The job notices after the
  heartbeat timeout (``heartbeat_s x missed_heartbeats``); the policy then decides (its
  declared decision time is charged), the new plan's stages read their state back and
  start cold (``restart_s``). They read it from the nodes' host memory where the
  checkpoint's copy is still there: a layer that stays in its domain, on the share of
  that domain's GPUs that no failure or load took since the checkpoint (where the plan
  that took it is the one interrupted, with no switch or restart since; Gemini, SOSP'23,
  restores from such in-memory copies);
  the rest from the checkpoint store (``storage_gbps`` per domain). A plan that does not
  fit when it would start waits for the next change. Where a notice announced the change
  ``prepare_s`` or more ahead (load), the job knew it would stop: the policy was asked
  then for the plan to restart on, in the announced state on the GPUs free both then and
  after the change (:meth:`_Run.preparable`), and where its decision and the preparation
  ended in time, that plan's stages were started while the old one trained. The
  interruption then needs no detection and the restart no cold start, only the cut-over
  (``switch_s``) after the read (:meth:`_Run.prepare_restart`); from the decision on, its
  nodes fetch the weights and the optimizer's states of the checkpoint into host memory
  (alongside the stages' start: a fetch needs no GPU), once durable, so that where this
  ends in time only their copy to the GPUs and the gradients of a checkpoint inside a
  step are left at the change (the store's reads and writes share no bandwidth in this
  model, nor the fetch host memory and PCIe with the old plan's checkpoints; after the
  change the policy is shown the GPUs it freed). A restart reads back the state its step
  starts from, which the store holds: a checkpoint inside that step writes the gradients
  alone. The read lands in host memory, where it serves as that checkpoint's copy of the
  state (a restore through host memory, as torch.distributed.checkpoint loads; one
  straight to the GPUs, with GPUDirect Storage, would leave none).
* **Planned switch.** A policy that returns a new plan while the old one runs pays its
  decision time and ``prepare_s`` (the new stages start) while the old plan keeps training;
  at the next step boundary after that the old plan stops (its pipeline is drained: steps
  end with a flush), every layer that moves to another domain sends its weights and
  optimizer state (``PERSISTENT_BYTES_PER_PARAM`` per parameter, the memory model's) over
  the WAN link between the two domains at that moment's bandwidth (links in parallel), and
  the new plan starts after ``switch_s`` more. If the old plan's GPUs go before the
  moving state has left them, that state is lost: an interruption.
* **Notice.** Other tenants' load is placed by the same platform, so a load change is
  announced ``load_notice_s`` before it takes effect (failures are not): the policy is
  asked with the announced state. A switch decided while a notice announces that the
  plan will lose GPUs (on that notice, a later one, a change or a timer) must be done when
  the GPUs go: if the next step boundary comes too late, the step in progress is cut early
  enough for the state to move in time, the gradients its micro-batches have accumulated
  moving with it (``MID_STEP_BYTES_PER_PARAM``): the pipeline drains from the last
  micro-batch boundary that leaves it time, and the micro-batches before it are kept (the
  run counts the rest of the step as the new plan's work at its rate). A switch that
  cannot be done by then does not replace one that can; if none is, the plan is
  interrupted when the load takes its GPUs. No switch is made to a plan that an announced
  change leaves short of GPUs no later than the running plan (one pending is called off
  at the notice that tells it).
* **Checkpoints** (:mod:`formulation.run_checkpoints`): every ``checkpoint_interval_s`` of
  the policy, and at each step boundary from a notice that the running plan will lose
  GPUs until the change (differential after the first), inside a step where none
  could be durable in time; a restart reads the last durable one back. A notice
  tells the announced load; a failure in between is not announced
  (:meth:`~formulation.scenario.StateSeries.announced`).

Changes and policy timers that come while training stands still (a checkpoint's pause, a
switch's stop, a restart) are shown to the policy when it goes on, as one point; a plan
that loses its GPUs while it restarts shows the policy that change.

An *oracle* policy (``Policy.oracle``) re-plans at every change with perfect knowledge and
free migration: it switches at the very moment of a change, keeps the part of the step
done so far and pays nothing; it is never interrupted (it leaves a failing domain as the
failure happens). It bounds what any policy can reach.

The run's record (:class:`~formulation.run_record.RunRecord`) holds its timeline as
segments, its decisions, interruptions and switches; :mod:`evaluation.online_metrics` reads
the KPIs from it. The simulation is deterministic: decision times are charged as the policy
declares them (:class:`~formulation.run_record.Replan`), never as measured, so the same
scenario and policy give the same record.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from formulation.costmodel import PERSISTENT_BYTES_PER_PARAM
from formulation.instance import Instance
from formulation.plan import Plan
from formulation.reference import StepTimes
from formulation.run_checkpoints import Checkpointing
from formulation.run_costs import (
    DEFAULT_COSTS,
    MID_STEP_BYTES_PER_PARAM,
    RUN_COST_RANGES,
    RunCosts,
    migration_bytes,
    migration_time,
)
from formulation.run_record import Point, Policy, Replan, RunRecord, Segment, Trigger
from formulation.scenario import EventKind, Scenario, StateSeries, state_series
from formulation.schema import check_ranges


@dataclasses.dataclass(frozen=True)
class _PreparedRestart:
    """A restart prepared during a notice of the interruption (:meth:`_Run.prepare_restart`)."""

    plan: Plan
    at_s: float  # the change it restarts at
    decided_s: float  # when its nodes began to fetch the checkpoint
    free_gpus: np.ndarray  # the GPUs it was planned on (free before and after the change)


class _Run(Checkpointing):
    """One run's mutable state and what happens to it; :func:`simulate_run` drives it."""

    def __init__(self, instance: Instance, scenario: Scenario, policy: Policy,
                 costs: RunCosts, step_times: StepTimes | None = None):
        check_ranges(costs, RUN_COST_RANGES)
        self.instance, self.policy, self.costs = instance, policy, costs
        self.horizon = scenario.horizon_s
        self.states: StateSeries = state_series(scenario, instance)
        own = scenario_step_times(instance, scenario, costs)
        if step_times is not None and not step_times.serves(own.instance):
            raise ValueError("step_times: made for another instance, scenario or sampling")
        self.step_times = step_times or own
        self.causes: dict[float, str] = {}  # what interrupts a plan at a time
        for e in scenario.events:
            if e.kind in (EventKind.NODE_FAILURE, EventKind.DOMAIN_FAILURE):
                self.causes[e.time_s] = "failure"
            elif e.kind is EventKind.LOAD:
                self.causes.setdefault(e.time_s, "load")
        # (notice time, effective time), delivered in order, each once
        self.notices = sorted({(max(0.0, e.time_s - costs.load_notice_s), e.time_s)
                               for e in scenario.events if e.kind is EventKind.LOAD}) \
            if costs.load_notice_s > 0 and not policy.oracle else []
        self.delivered = 0
        self.seen = 0.0  # every change and timer up to here has been looked at
        # the changes and timers that came while training stood still, shown as one point
        # at its end (:meth:`stood_still`)
        self.caught: Point | None = None
        training = instance.training
        self.record = RunRecord(policy.name, self.horizon,
                                float(training.global_batch * instance.model.seq_len))
        self.tokens = 0.0  # work kept: steps and their parts (less what rollbacks took back)
        self.start_checkpoints()
        # the plan an interruption stopped: a restart reads from its nodes' host memory
        # what they still hold of the checkpoint it rolled back to (:meth:`start`)
        self.stopped: Plan | None = None
        self.running_since = 0.0  # when the running plan started (launch, restart, switch)
        self.prepared: _PreparedRestart | None = None
        self.pending: dict | None = None  # a planned switch: plan, ready_s, cut_s, info

    # -- the state -------------------------------------------------------------------------
    def state(self, time_s: float) -> Instance:
        return self.states.instance_at(self.states.index_at(time_s))

    def fits(self, plan: Plan, time_s: float) -> bool:
        return self._within(plan, self.states.free_gpus[self.states.index_at(time_s)])

    def _within(self, plan: Plan, free: np.ndarray) -> bool:
        return bool(np.all(plan.gpus_by_domain(self.instance.num_domains) <= free))

    def breaks(self, plan: Plan, start: float, end: float) -> float | None:
        """The first state change in (start, end] in which ``plan`` does not fit."""
        change = self.states.next_change(start)
        while change <= min(end, self.horizon):
            if not self.fits(plan, change):
                return change
            change = self.states.next_change(change)
        return None

    def lost_at(self, plan: Plan, start: float, end: float) -> float | None:
        """When ``plan`` loses GPUs: ``start`` if it has lost them by then (a change at that
        very time), else the first change in ``(start, end]`` that takes them, or None."""
        return start if not self.fits(plan, start) else self.breaks(plan, start, end)

    def loses(self, plan: Plan, start: float, end: float) -> bool:
        """Whether ``plan`` has lost GPUs by ``start`` or loses them in ``(start, end]``
        (:meth:`lost_at`)."""
        return self.lost_at(plan, start, end) is not None

    @property
    def cutting(self) -> bool:
        """Whether a switch that must cut its step (one due by an announced change) is
        pending: it moves the state, so no checkpoint is taken meanwhile."""
        return self.pending is not None and self.pending["cut_s"] is not None

    def changes_ahead(self, now: float) -> list[float]:
        """The changes after ``now`` that the notices delivered announce, in time order."""
        first = self.delivered  # the notices are in order of their (and so these) times
        while first > 0 and self.notices[first - 1][1] > now:
            first -= 1
        return [effective for _, effective in self.notices[first:self.delivered]]

    def slots(self, now: float, end: float, kept: float, plan: Plan) -> tuple[int, int, float]:
        """(micro-batches of a step, those left, the time of each) of the step in progress
        of ``plan``, whose share ``kept`` was done before ``now`` and the rest in
        ``[now, end)``."""
        micro_batches = self.instance.training.global_batch // (plan.dp * plan.micro_batch)
        left = max(1, round((1.0 - kept) * micro_batches))
        return micro_batches, left, (end - now) / left

    def drain(self, plan: Plan, slot: float) -> float:
        """A pipeline's drain: a micro-batch slot per stage after the first."""
        return (plan.num_stages - 1) * slot

    def next_point(self, after: float) -> Point:
        """The next state change or policy timer after ``after``, or the next notice not
        yet delivered (at ``after`` if it is due already); the horizon at most. At equal
        times a timer (its state has the change), then a change, then a notice. The point
        standing for what came while training stood still (:meth:`stood_still`) first."""
        if self.caught is not None:
            return self.caught
        change = self.states.next_change(after)
        timer = self.policy.next_timer(after)
        notice = self.notices[self.delivered] if self.delivered < len(self.notices) \
            else (math.inf, None)
        first = min(change, timer, max(notice[0], after))
        if first >= self.horizon:
            return Point(self.horizon, Trigger.CHANGE)
        if timer == first:
            return Point(timer, Trigger.TIMER)
        if change == first:
            return Point(change, Trigger.CHANGE)
        return Point(first, Trigger.NOTICE, notice[1])

    def stood_still(self, until: float) -> None:
        """Training stood still up to ``until`` (a checkpoint's pause, a switch's stop, a
        restart): the changes and timers that came meanwhile are shown to the policy at
        ``until``, as one point (a timer if one came, else a change), not skipped."""
        if until <= self.seen:
            return
        came = None
        if self.policy.next_timer(self.seen) <= until:
            came = Trigger.TIMER
        elif self.states.next_change(self.seen) <= until:
            came = Trigger.CHANGE
        if self.caught is not None and came is not Trigger.TIMER:
            came = self.caught.trigger  # an earlier stand-still's, not yet shown
        self.seen = until
        if came is not None and until < self.horizon:
            self.caught = Point(until, came)

    def take(self, point: Point) -> None:
        """``point`` has been looked at: a notice is not delivered again."""
        if self.caught is not None and point == self.caught:
            self.caught = None
        elif point.trigger is Trigger.NOTICE:
            self.delivered += 1
        else:
            self.seen = max(self.seen, point.time_s)

    def ask(self, point: Point, plan: Plan | None, trigger: Trigger | None = None,
            state: Instance | None = None) -> Replan | None:
        """The policy's answer at ``point``, shown ``state`` (default: :meth:`observed`)."""
        trigger = trigger or point.trigger
        answer = self.policy.observe(point.time_s, state or self.observed(point), plan,
                                     trigger, point.effective_s)
        if answer is not None:
            self.record.decisions.append({
                "time_s": point.time_s, "trigger": str(trigger),
                "charged_s": answer.charged_s, "latency_s": answer.latency_s,
                "found": answer.plan is not None,
                "changed": answer.plan is not None and answer.plan != plan})
        return answer

    def observed(self, point: Point) -> Instance:
        """The state a point shows the policy: the state then; at a notice, the announced
        one (:meth:`formulation.scenario.StateSeries.announced`: the links as they are,
        the announced load, the failures known then)."""
        states = self.states
        if point.effective_s is None:
            return self.state(point.time_s)
        return states.announced(states.index_at(point.time_s),
                                states.index_at(point.effective_s))

    def preparable(self, point: Point) -> Instance:
        """The state a notice shows for a restart prepared from ``point``: the announced
        one (:meth:`observed`) with the GPUs free both then and after the change (stages
        start only on GPUs the job holds; those the change frees are other tenants' until
        then)."""
        announced = self.observed(point)
        now = self.states.free_gpus[self.states.index_at(point.time_s)]
        return announced.with_link_state(free_gpus=np.minimum(announced.free_gpus, now))

    def announced_fits(self, plan: Plan, now: float, effective: float) -> bool:
        """Whether ``plan`` fits the free GPUs a notice at ``now`` announces for
        ``effective`` (what the job knows; an unannounced failure meanwhile is not)."""
        states = self.states
        return self._within(plan, states.announced_free(states.index_at(now),
                                                        states.index_at(effective)))

    def add(self, start: float, end: float, kind: str, plan: Plan | None = None,
            tokens: float = 0.0) -> None:
        end = min(end, self.horizon)
        if end > start or kind == "lost":
            self.record.segments.append(Segment(
                start, end, kind, None if plan is None else self.record.plan_index(plan),
                tokens))

    def progress(self, start: float, end: float, kind: str, plan: Plan, tokens: float) -> None:
        """Work kept: an interruption's progress is regained where the work reaches what
        it was when the interruption came, the step then in progress included (at the
        segment's own rate)."""
        self.add(start, end, kind, plan, tokens)
        if kind == "step":  # the optimizer's step: the state copied before is not this one
            self.step_base_copied, self.state_copied = self.state_copied, False
        before, self.tokens = self.tokens, self.tokens + tokens
        for interruption in self.record.interruptions:
            target = interruption["tokens_before"] + interruption["tokens_in_progress"]
            if interruption["regained_s"] is None and self.tokens >= target - 1e-6:
                share = min(1.0, max(0.0, (target - before) / tokens)) if tokens > 0 else 1.0
                interruption["regained_s"] = min(start + share * (end - start), self.horizon)

    # -- what happens ----------------------------------------------------------------------
    def interrupt(self, at: float, plan: Plan, in_progress: float = 0.0
                  ) -> tuple[float, Plan | None]:
        """``plan`` lost GPUs at ``at``: back to the last checkpoint durable then (the steps
        since are lost, and ``in_progress``, the tokens of the step in progress done so
        far), detection, the policy's decision. Returns (when that decision is made, the
        plan it chose: the same one if it keeps it)."""
        before = self.tokens
        self.caught = None  # the policy is shown the state at the interruption
        self.durable = [d for d in self.durable if d.durable_s <= at]
        tokens, captured = self.durable[-1].tokens, self.durable[-1].captured_s
        self.stopped = plan
        for segment in self.record.segments:
            if segment.kind in ("step", "partial") and segment.end_s > captured:
                segment.rolled_back = True
        self.tokens = tokens
        self.pending = None
        self.state_copied = False  # (until a restart has read it back)
        self.record.interruptions.append({
            "time_s": at, "cause": self.causes.get(at, "load"), "tokens_before": before,
            "tokens_lost": before - tokens, "tokens_in_progress": in_progress,
            "rolled_back_from_s": captured,
            "resumed_s": None, "regained_s": None})
        prepared = self.prepare_restart(at, plan)
        if prepared is not None:
            return at, prepared
        detected = at + self.costs.detection_s
        self.add(at, detected, "stopped")
        if detected >= self.horizon:
            return detected, plan
        answer = self.ask(Point(detected, Trigger.INTERRUPTED), plan)
        if answer is None:
            return detected, plan
        self.add(detected, detected + answer.charged_s, "stopped")
        return detected + answer.charged_s, answer.plan

    def start(self, now: float, plan: Plan) -> float | None:
        """Starting ``plan`` after a stop: its stages read the last checkpoint (with the
        gradients of one taken inside a step) and start cold. Returns when it runs, or
        None if it loses GPUs meanwhile (then nothing is lost: nothing ran; returns with
        ``self.seen`` at that change, which the policy is shown)."""
        prepared, self.prepared = self.prepared, None
        if prepared is not None and (prepared.plan, prepared.at_s) == (plan, now):
            ready = now + self.restore_time(now, plan, prepared.decided_s) + self.costs.switch_s
        else:
            ready, prepared = now + self.restore_time(now, plan) + self.costs.restart_s, None
        lost = self.breaks(plan, now, ready)
        if lost is not None and lost < self.horizon:
            self.add(now, lost, "stopped")
            self.stood_still(lost)  # the policy is shown that change: its plan cannot start
            return None
        self.add(now, ready, "stopped")
        self.last_checkpoint = ready
        # the restart read the state the step (re)starts from out of the store, through
        # host memory: the store holds it, so a checkpoint inside the step writes the
        # gradients alone
        self.state_copied = True
        self.stood_still(ready)
        if prepared is not None and self.caught is None and ready < self.horizon \
                and np.any(self.states.free_gpus[self.states.index_at(ready)]
                           != prepared.free_gpus):
            # planned on the GPUs free before the change too: shown those the change freed
            self.caught = Point(ready, Trigger.CHANGE)
        return ready

    def prepare_restart(self, at: float, plan: Plan) -> Plan | None:
        """Where a notice announced the change at ``at`` that takes ``plan``'s GPUs, the
        job knew it would stop then: the policy was asked then (or when ``plan`` started,
        if later) for the plan it restarts with, in the state announced then on the GPUs
        it holds (:meth:`preparable`), and where that decision and ``prepare_s`` ended
        by ``at`` on GPUs that stay free until then, its stages were started while the
        old plan trained, as a planned switch's are. The interruption then needs no
        detection, and the restart no cold start: the cut-over (``switch_s``) after the
        checkpoint's read, less what the plan's nodes fetched from the decision on
        (:meth:`restore_time`).
        Returns that plan where it fits at ``at`` (else the interruption is handled as an
        unannounced one), or None."""
        if self.causes.get(at) == "failure":
            return None
        notice = next((n for n, effective in self.notices[:self.delivered]
                       if effective == at and not self.announced_fits(plan, n, at)), None)
        if notice is None:
            return None
        asked = max(notice, self.running_since)  # (a plan started after the notice: then)
        if asked + self.costs.prepare_s > at:
            return None
        announced = Point(asked, Trigger.INTERRUPTED, at)
        shown = self.preparable(announced)
        answer = self.ask(announced, plan, state=shown)
        if answer is None or answer.plan is None:
            return None
        decided = asked + answer.charged_s
        # its nodes fetch from the decision on, its stages start on GPUs free from then
        # on (the old plan's, shared meanwhile)
        if decided + self.costs.prepare_s > at \
                or self.lost_at(answer.plan, decided, at) is not None:
            return None
        self.prepared = _PreparedRestart(answer.plan, at, decided, shown.free_gpus)
        return answer.plan

    def first_loss(self, now: float, plan: Plan) -> float | None:
        """The first change after ``now`` that a notice delivered by then announces to take
        ``plan``'s GPUs (by what is known at ``now``), or None. A plan that does not fit
        now counts from the first announced change that gives it its GPUs."""
        runs = self.fits(plan, now)
        for effective in self.changes_ahead(now):
            if self.announced_fits(plan, now, effective):
                runs = True
            elif runs:
                return effective
        return None

    def plan_switch(self, point: Point, plan: Plan, answer: Replan, rate: float) -> None:
        """A switch to ``answer.plan`` decided at ``point``, pending until prepared. Where
        a notice has announced a change that takes the running plan's GPUs, it must be
        done by that change, whatever point decided it: the step in progress is cut in
        time for the state to move. A switch that cannot be done by then, or to a plan
        that change takes GPUs from too, does not replace the one pending; a plan needing
        GPUs the change announced at ``point`` frees waits for them (so it can be done by
        a change that also takes the running plan's GPUs only where no state moves off
        them)."""
        new = answer.plan
        pending = self.pending
        ready = point.time_s + answer.charged_s + self.costs.prepare_s
        if pending is not None and pending["plan"] == new:  # prepared or being prepared
            ready = min(ready, pending["ready_s"])
        if point.effective_s is not None and not self.fits(new, point.time_s):
            ready = max(ready, point.effective_s)  # it needs what the change frees
        if self.doomed(point.time_s, new, plan):
            return
        gone_by = self.first_loss(point.time_s, plan)  # the change it must beat
        cut = None
        if gone_by is not None:
            moves = migration_bytes(self.instance, plan, new, MID_STEP_BYTES_PER_PARAM)
            stop = migration_time(self.state(point.time_s), moves) \
                + self.costs.switch_s  # the links as they are now
            cut = max(ready, gone_by - stop)
            # too late: the change will interrupt it (where no state moves off the GPUs
            # it takes, a plan that needs what it frees may cut over at the change)
            if ready > gone_by - stop and (moves or self.fits(new, point.time_s)
                                           or ready > gone_by):
                return
        self.pending = {"plan": new, "ready_s": ready, "cut_s": cut,
                        "info": {"event_s": point.time_s, "rate_before": rate,
                                 "trigger": str(point.trigger)}}

    def doomed(self, now: float, new: Plan, plan: Plan) -> bool:
        """Whether a switch from ``plan`` to ``new`` at ``now`` would move onto GPUs that an
        announced change (by the notices delivered by then) leaves ``new`` short of, no
        later than one leaves ``plan`` short: it would stop training to move onto GPUs
        about to go (:meth:`first_loss`)."""
        lost, gone_by = self.first_loss(now, new), self.first_loss(now, plan)
        return lost is not None and (gone_by is None or lost <= gone_by)

    def drop_doomed_switch(self, point: Point, plan: Plan) -> None:
        """At the notice ``point``: a pending switch from ``plan`` that no notice forces,
        and that is now :meth:`doomed`, is called off."""
        pending = self.pending
        if pending is not None and pending["cut_s"] is None \
                and self.doomed(point.time_s, pending["plan"], plan):
            self.pending = None

    def cut(self, now: float, end: float, kept: float, plan: Plan
            ) -> tuple[float, Plan | None, bool]:
        """The pending switch, cutting the step in progress (``kept`` done before ``now``,
        the rest due by ``end``) at its cut: the micro-batches before the last boundary
        from which the pipeline drains by then are kept, and their gradients move."""
        at = self.pending["cut_s"]
        micro_batches, left, slot = self.slots(now, end, kept, plan)
        done = max(0, min(left - 1, math.floor((at - self.drain(plan, slot) - now) / slot)))
        if done:
            self.progress(now, now + done * slot, "partial", plan,
                          done / micro_batches * self.record.tokens_per_step)
        self.add(now + done * slot, at, "lost", plan)
        return self.switch(at, plan, inside_step=done > 0 or kept > 0)

    def switch(self, now: float, old: Plan, inside_step: bool = False
               ) -> tuple[float, Plan | None, bool]:
        """The planned switch at ``now`` (a step boundary, or a cut ``inside_step``: the
        gradients accumulated move too): state moves, then the cut-over; not made if the
        new plan does not fit meanwhile. Where the old plan's GPUs go before the state
        has left them (a failure, load no notice had announced when the switch was
        decided, a transfer slower than planned), the state on them is lost: the old plan
        is interrupted then. Returns
        (when training goes on or the policy has decided, the plan, whether it runs)."""
        new = self.pending["plan"]
        info = self.pending["info"]
        self.pending = None
        moves = migration_bytes(self.instance, old, new, MID_STEP_BYTES_PER_PARAM
                                if inside_step else PERSISTENT_BYTES_PER_PARAM)
        moving = migration_time(self.state(now), moves)
        stop = moving + self.costs.switch_s
        if self.loses(new, now, now + stop):
            return now, old, True
        self.state_copied = False  # (the new plan's first checkpoint copies the state anew)
        gone = self.lost_at(old, now, now + moving) if moving > 0 else None
        if gone is not None and gone < self.horizon:
            self.add(now, gone, "stopped")
            self.take(Point(gone, Trigger.CHANGE))
            decided, plan = self.interrupt(gone, old)
            return decided, plan, False
        self.add(now, now + stop, "switch", new)
        self.running_since = now + stop
        self.record.switches.append({**info, "stop_s": now, "resume_s": float(now + stop),
                                     "plan": self.record.plan_index(new),
                                     "bytes": float(sum(moves.values()))})
        self.stood_still(now + stop)
        return now + stop, new, True


def scenario_step_times(instance: Instance, scenario: Scenario,
                        costs: RunCosts = DEFAULT_COSTS) -> StepTimes:
    """The step times of plans on ``instance`` through ``scenario``, sampled as a run samples
    it: one object serves every policy's run of the same scenario (they share its steps)."""
    return StepTimes(instance.replace(trace=scenario.to_trace(instance,
                                                              costs.trace_interval_s)))


def simulate_run(instance: Instance, scenario: Scenario, policy: Policy,
                 costs: RunCosts = DEFAULT_COSTS, step_times: StepTimes | None = None
                 ) -> RunRecord:
    """The run of ``policy`` through ``scenario`` (module doc); ``step_times``: those of
    :func:`scenario_step_times` for the same instance, scenario and costs, shared with other
    runs."""
    run = _Run(instance, scenario, policy, costs, step_times)
    horizon = run.horizon
    answer = run.ask(Point(0.0, Trigger.START), None)
    plan = None if answer is None else answer.plan
    now = 0.0 if answer is None else answer.charged_s
    run.add(0.0, now, "stopped")
    running, launched = False, False
    resumed = None  # (end, share done) of a step that goes on after a checkpoint inside it
    while now < horizon:
        if not running:
            if plan is not None and run.fits(plan, now):
                # the job's launch costs every policy alike; a restart costs (not the oracle)
                began = now if policy.oracle or not launched else run.start(now, plan)
                launched = True
                if began is None:  # it lost GPUs while starting
                    now = run.seen
                    continue
                now, running = began, True
                run.running_since = now
                run.stood_still(now)
                for interruption in run.record.interruptions:
                    if interruption["resumed_s"] is None:
                        interruption["resumed_s"] = now
                continue
            point = run.next_point(max(now, run.seen))
            run.take(point)
            run.add(now, point.time_s, "waiting")
            now = max(now, point.time_s)
            point = dataclasses.replace(point, time_s=now)
            if now >= horizon or point.trigger is Trigger.NOTICE:
                continue
            answer = run.ask(point, plan, Trigger.WAITING)
            if answer is not None:
                run.add(now, now + answer.charged_s, "stopped")
                plan, now = answer.plan, now + answer.charged_s
            continue
        # running: one step, watching every change, timer and notice up to its end
        if resumed is None:  # a new step
            length = run.step_times.at(plan, now)
            end, kept = now + length, 0.0
            rate = run.record.tokens_per_step / length
        else:  # the step goes on after a checkpoint inside it
            end, kept = resumed
        resumed = cut = save = None
        looked = now  # every point up to here has been looked at in this step
        while True:
            point = run.next_point(run.seen)
            at = max(point.time_s, now)  # a change at the last step's end is seen now
            cut = None if run.pending is None else run.pending["cut_s"]
            if cut is not None and cut < min(end, horizon) and cut <= at:
                break
            cut = None
            save = None if policy.oracle else run.save_point(now, end, kept, plan, looked)
            # a point at the save's time first: it may take the GPUs
            if save is not None and save.time_s < min(end, horizon) and save.time_s < at:
                break
            save = None
            if at >= min(end, horizon):
                break
            run.take(point)
            looked = at
            point = dataclasses.replace(point, time_s=at)
            if policy.oracle:  # switch at the change, keeping the part of the step done
                answer = run.ask(point, plan)
                new = plan if answer is None else answer.plan
                if new != plan or not run.fits(plan, at):
                    run.progress(now, at, "partial", plan, rate * (at - now))
                    now, plan, running = at, new, False
                    break
            elif point.trigger is not Trigger.NOTICE and not run.fits(plan, at):
                run.add(now, at, "lost", plan, rate * (at - now))  # the work then lost
                now, plan = run.interrupt(at, plan, rate * (at - now))
                running = False
                break
            else:
                if point.trigger is Trigger.NOTICE:
                    run.drop_doomed_switch(point, plan)
                answer = run.ask(point, plan)
                if answer is not None and answer.plan is not None:
                    if answer.plan != plan:
                        run.plan_switch(point, plan, answer, rate)
                    elif run.pending is not None and run.pending["cut_s"] is None:
                        run.pending = None  # kept: a switch not forced by a notice is off
        if not running:
            continue
        if cut is not None:  # a switch that cannot wait for the step's end
            now, plan, running = run.cut(now, end, kept, plan)
            continue
        if save is not None:  # a checkpoint inside the step
            goes_on = run.save(now, end, kept, plan, save)
            now, resumed = goes_on, (end + goes_on - save.time_s, save.kept)
            continue
        if end > horizon:  # the run ends inside the step: the part done counts
            run.progress(now, horizon, "partial", plan, rate * (horizon - now))
            break
        run.progress(now, end, "step", plan, run.record.tokens_per_step * (1.0 - kept))
        now = end
        if not policy.oracle and not run.cutting and (
                now >= run.next_checkpoint_s
                or run.announced_loss(now, plan)):
            now = run.checkpoint(now, plan)
        if run.pending is not None and run.pending["ready_s"] <= now:
            now, plan, running = run.switch(now, plan)
    return run.record
