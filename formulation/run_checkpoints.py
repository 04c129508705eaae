"""A training run's checkpoints (:mod:`formulation.training_run`, issue 17): when the job
takes them, what they hold and cost, and what a restart reads back.

The job checkpoints every ``checkpoint_interval_s`` of the policy, at a step boundary
(inside a step longer than the interval, at a micro-batch boundary, as below, so that a failure
loses at most the interval's work and the write), each once the last is durable: each
GPU copies its shard to host memory (``host_copy_gbps``), and the checkpoint becomes
durable once every domain has written its stages' state (``storage_gbps``), in the
background; the store writes one checkpoint at a time, in order. The weights and the
optimizer's states hold still until the next step's update, so their copy runs
alongside that step and stops training only where it is the longer (the lazy snapshot
of DataStates-LLM, HPDC'24, and CheckFreq, FAST'21). A notice that
the running plan will lose GPUs, with no switch under way, makes the job checkpoint at
each step boundary until the change, whatever the interval (as a job checkpoints on a spot
instance's reclaim notice), where that checkpoint can be durable before the change: the
interruption then rolls back at most the steps since the last such boundary. Such a
checkpoint, where the last one (of the same plan, since it runs) holds the state the
step started from, is *differential*: it copies and writes the step's gradients alone
(``GRADIENT_BYTES_PER_PARAM``; reduced over the replicas, they are what the optimizer's
update applied, so a restart replays that update on the state before: LowDiff, arXiv
2509.04084, reuses the gradients as differential checkpoints), up to
:data:`MAX_DELTAS` steps after the state; a restart reads the state and each step's
gradients since (a prepared one fetches each once written). Where the
step in progress ends too late for that, the job checkpoints inside it
(:meth:`Checkpointing.save_point`): at the last micro-batch boundary from which it can, the
gradients accumulated so far (reduced over the replicas, bf16) join the state
(``MID_STEP_BYTES_PER_PARAM``), and the checkpoint holds the micro-batches done; the step
goes on after the pause, and the interruption rolls back to that point only. The
pipeline is not drained for it: each stage copies its share when its own backward pass
of that micro-batch ends (a consistent cut, as a Chandy-Lamport snapshot takes one), so
training stops for the gradients' copy alone, and the checkpoint is whole a micro-batch
slot per stage after the first later, when the first stage's copy is; the state's copy
runs alongside the rest of the step (the step's update waits for it). A checkpoint
inside a step whose state a checkpoint has copied already (after the step before, or
earlier inside it) copies and writes the gradients alone (``GRADIENT_BYTES_PER_PARAM``),
durable after that copy (the gradients' copy and a state's copy still under way share
no link in this model: each takes ``host_copy_gbps``).

:class:`Checkpointing` holds these rules as the run simulator's (``_Run``'s) checkpoint half:
it reads and keeps the run's state named in its docstring.
"""

from __future__ import annotations

import dataclasses
import math

from formulation.costmodel import PERSISTENT_BYTES_PER_PARAM
from formulation.plan import Plan
from formulation.run_costs import (
    GRADIENT_BYTES_PER_PARAM,
    MID_STEP_BYTES_PER_PARAM,
    host_copy_time,
    kept_share,
    read_after_fetch,
    restore_time,
    storage_time,
)
from formulation.run_record import SavePoint


@dataclasses.dataclass(frozen=True)
class Checkpoint:
    """A checkpoint taken: when it is durable, the work it holds, its bytes a parameter
    (a restart reads them back), the plan whose nodes hold its host-memory copy (None:
    the run's start, in the store only) and when the weights and the optimizer's states
    it holds were durable (a checkpoint inside a step holds the state the step started
    from, which an earlier checkpoint may have written); where it is differential, when
    each step's gradients written since that state were durable (a restart replays
    their optimizer updates)."""

    durable_s: float
    tokens: float
    captured_s: float  # the time it holds the work up to
    per_param: float
    plan: Plan | None
    state_durable_s: float
    deltas: tuple[float, ...] = ()


def chain_bytes(deltas: tuple[float, ...]) -> float:
    """Bytes a parameter of a state and the steps' gradients written since (``deltas``)."""
    return PERSISTENT_BYTES_PER_PARAM + GRADIENT_BYTES_PER_PARAM * len(deltas)


MAX_DELTAS = int(PERSISTENT_BYTES_PER_PARAM // GRADIENT_BYTES_PER_PARAM)
"""A differential checkpoint's chain holds at most this many steps' gradients (as many
bytes as the state again), so that a restart from the store reads at most twice the
state (and the gradients of a checkpoint inside a step)."""


@dataclasses.dataclass(frozen=True)
class SaveCost:
    """What a checkpoint inside the step in progress costs (:meth:`Checkpointing.save_point`)."""

    gradients_s: float  # training stops while the gradients are copied to host memory
    state_s: float  # the state's copy, alongside the rest of the step (0: a copy has it)
    cut_s: float  # from its micro-batch boundary until the first stage's end of it
    write_s: float  # the store's write of it
    store_free_s: float  # the store writes earlier checkpoints until then

    @property
    def lag_s(self) -> float:
        """From its micro-batch boundary until wholly copied to host memory."""
        return self.cut_s + self.gradients_s + self.state_s

    def pause(self, at: float, end: float) -> float:
        """Training stops at ``at`` for the gradients' copy, and for what the state's copy
        takes beyond the step's end ``end`` (its update waits for it)."""
        return self.gradients_s + max(0.0, self.state_s - (end - at))

    def durable(self, at: float) -> float:
        """When one taken at ``at`` is durable: copied, then written after the writes
        before it."""
        return max(at + self.lag_s, self.store_free_s) + self.write_s


class Checkpointing:
    """The run simulator's checkpoints (module doc). It reads the run's ``instance``,
    ``costs``, ``policy``, ``states``, ``step_times``, ``record``, ``tokens``,
    ``running_since`` and ``stopped``, and uses its ``loses``, ``announced_fits``,
    ``changes_ahead``, ``cutting``, ``slots``, ``drain``, ``progress``, ``add`` and
    ``stood_still``; it keeps its own state (:meth:`start_checkpoints`)."""

    def start_checkpoints(self) -> None:
        """The run's start: its only checkpoint the initial state, in the store."""
        # the checkpoints taken, in order (the store writes them so); a restart reads the
        # last one durable by then
        self.durable = [Checkpoint(0.0, 0.0, 0.0, PERSISTENT_BYTES_PER_PARAM, None, 0.0)]
        self.last_checkpoint = 0.0
        # whether a checkpoint has copied the state the step in progress started from (the
        # weights and the optimizer's, which change only at its end): one after the step
        # before it or inside it. If not, a checkpoint inside the step copies that state
        # too, else its gradients alone (the store writes in order, so it is durable after
        # that copy)
        self.state_copied = False
        # whether the state the step that just ended started from was copied by a
        # checkpoint or read back by a restart (then a checkpoint after it may write its
        # gradients alone)
        self.step_base_copied = False
        self.saved: set[float] = set()  # the changes a checkpoint inside a step was for

    @property
    def store_free_s(self) -> float:
        """Until when the store writes the checkpoints taken so far (it writes one at a
        time, in order, so the last one's durable time)."""
        return self.durable[-1].durable_s

    def written_by(self, copied: float, plan: Plan, per_param: float) -> float:
        """When a checkpoint of ``plan`` (``per_param`` bytes a parameter) copied to host
        memory by ``copied`` is durable: written after the checkpoints before it."""
        return max(copied, self.store_free_s) \
            + storage_time(self.instance, plan, self.costs, per_param)

    def boundary_durable(self, now: float, plan: Plan, differential: bool = False) -> float:
        """When a checkpoint of ``plan`` at the step boundary ``now`` would be durable: its
        state (or, ``differential``, the step's gradients) copied to host memory, then
        written."""
        per_param = GRADIENT_BYTES_PER_PARAM if differential else PERSISTENT_BYTES_PER_PARAM
        return self.written_by(now + host_copy_time(self.instance, plan, self.costs,
                                                    per_param), plan, per_param)

    def extends_chain(self, plan: Plan, base_copied: bool) -> bool:
        """Whether a checkpoint of ``plan`` at a step boundary may write the step's
        gradients alone: the step started from a state a checkpoint holds
        (``base_copied``), and the last checkpoint is one ``plan`` took since it runs (no
        switch or restart since; one inside its first step after a restart goes on with
        the chain the restart read, which the store holds), its chain shorter than
        :data:`MAX_DELTAS`."""
        last = self.durable[-1]
        return base_copied and last.plan == plan \
            and last.captured_s >= self.running_since and len(last.deltas) < MAX_DELTAS

    def differential(self, now: float, plan: Plan) -> bool:
        """Whether a checkpoint at the step boundary ``now`` writes the step's gradients
        alone (module doc): a notice delivered announces a change that takes ``plan``'s
        GPUs, and the last checkpoint, of ``plan`` with its chain open, holds the state
        the step started from."""
        return self.extends_chain(plan, self.step_base_copied) and any(
            not self.announced_fits(plan, now, effective)
            for effective in self.changes_ahead(now))

    @property
    def next_checkpoint_s(self) -> float:
        """When the policy's next periodic checkpoint is due: its interval after the last
        one, and not before the last is durable."""
        return max(self.last_checkpoint + self.policy.checkpoint_interval_s,
                   self.store_free_s)

    def announced_loss(self, now: float, plan: Plan) -> bool:
        """Whether to checkpoint at the step boundary ``now``: a notice delivered by then
        announces a change after ``now`` that takes ``plan``'s GPUs (by what the notice
        tells, :meth:`announced_fits`), a checkpoint taken now is durable by then, and no
        switch decided on a notice (one cut to be done by its change) is under way."""
        if self.cutting:
            return False
        durable = self.boundary_durable(now, plan, self.differential(now, plan))
        return any(durable <= effective and not self.announced_fits(plan, now, effective)
                   for effective in self.changes_ahead(now))

    def save_point(self, now: float, end: float, kept: float, plan: Plan, looked: float
                   ) -> SavePoint | None:
        """A checkpoint inside the step in progress of ``plan``, whose share ``kept`` of
        micro-batches was done before ``now`` and the rest is done in ``[now, end)``, the
        run having looked at every point up to ``looked`` (module doc): where a notice
        delivered announces a change that takes the plan's GPUs (by what is known at
        ``looked``), no switch decided on a notice is under way, and a checkpoint after
        the step would not be durable before the change. It is taken at the last
        micro-batch boundary, not before the notice nor ``looked``, from which the cut's
        end at the first stage (a micro-batch slot per stage after the first; the
        gradients' reduction over the replicas, within their domain, is left out), the
        copy to host memory and the store's write end by the change. None where there is
        none, or one was taken for that change.

        Also the policy's periodic checkpoint, where a step is longer than its interval
        (no step boundary could hold it): at the first micro-batch boundary, not before
        ``looked``, at which the interval since the last checkpoint has passed. The
        earlier of the two."""
        if self.cutting:
            return None
        step = self.slots(now, end, kept, plan)
        if step[1] < 2:
            return None
        changes = [effective for effective in self.changes_ahead(now)  # the first first
                   if effective not in self.saved
                   and not self.announced_fits(plan, looked, effective)]
        periodic = (end - now) / (1.0 - kept) > self.policy.checkpoint_interval_s
        if not changes and not periodic:  # (the costs below are not free)
            return None
        instance, costs = self.instance, self.costs
        # training stops while the gradients are copied (the backward passes to come add to
        # them); the weights and the optimizer's, which hold still until the step's end, are
        # copied meanwhile where no copy has them yet
        fresh = not self.state_copied
        per_param = MID_STEP_BYTES_PER_PARAM if fresh else GRADIENT_BYTES_PER_PARAM
        # each stage copies its share at its own end of the micro-batch (a consistent cut:
        # no drain); the first stage ends last, a slot per stage after it
        cost = SaveCost(
            gradients_s=host_copy_time(instance, plan, costs, GRADIENT_BYTES_PER_PARAM),
            state_s=host_copy_time(instance, plan, costs) if fresh else 0.0,
            cut_s=self.drain(plan, step[2]),
            write_s=storage_time(instance, plan, costs, per_param),
            store_free_s=self.store_free_s)  # (after the state's copy a later one needs)
        points = [self._announced_save(now, end, kept, plan, looked, step, changes, cost)
                  if changes else None,
                  self._periodic_save(now, end, kept, plan, looked, step, cost)
                  if periodic else None]
        return min((point for point in points if point is not None),
                   key=lambda point: point.time_s, default=None)

    def _periodic_save(self, now: float, end: float, kept: float, plan: Plan, looked: float,
                       step: tuple[int, int, float], cost: SaveCost) -> SavePoint | None:
        """The periodic checkpoint inside a step longer than the interval
        (:meth:`save_point`; ``step``: its :meth:`slots`)."""
        micro_batches, left, slot = step
        done = max(1, math.ceil((max(self.next_checkpoint_s, looked) - now) / slot
                                - 1e-9))
        at = now + done * slot
        pause = cost.pause(at, end)
        if done > left - 1 or self.loses(plan, at, at + pause):  # no pause that breaks
            return None
        return SavePoint(at, None, kept + done / micro_batches, pause, cost.durable(at))

    def _announced_save(self, now: float, end: float, kept: float, plan: Plan, looked: float,
                        step: tuple[int, int, float], changes: list[float], cost: SaveCost
                        ) -> SavePoint | None:
        """The checkpoint inside the step before the first of the announced ``changes``
        that takes the plan's GPUs and leaves it time (:meth:`save_point`; ``step``: its
        :meth:`slots`)."""
        micro_batches, left, slot = step
        # (a notice announces the change: differential where the store has the state the
        # step started from)
        after_step = self.boundary_durable(end, plan,
                                           self.extends_chain(plan, self.state_copied))
        for effective in changes:
            if effective >= after_step or cost.store_free_s + cost.write_s > effective:
                continue  # a checkpoint after the step will do; none can be in time
            done = min(left - 1, math.floor((effective - cost.write_s - cost.lag_s - now)
                                            / slot))
            if cost.durable(now + done * slot) > effective:  # rounding: durable by then
                done -= 1
            at = now + done * slot
            if done >= 1 and at >= looked:  # (a notice is delivered by the time looked)
                return SavePoint(at, effective, kept + done / micro_batches,
                                 cost.pause(at, end), cost.durable(at))
        return None

    def save(self, now: float, end: float, kept: float, plan: Plan, point: SavePoint
             ) -> float:
        """The checkpoint inside the step at ``point`` (:meth:`save_point`): the
        micro-batches done since ``now`` are progress, and the state with them is durable
        after the pause and the write (no pause if the plan loses GPUs during it). Returns
        when the step goes on."""
        if point.change_s is not None:
            self.saved.add(point.change_s)
        at = point.time_s
        self.progress(now, at, "partial", plan,
                      (point.kept - kept) * self.record.tokens_per_step)
        if self.loses(plan, at, at + point.pause_s):
            return at
        self.add(at, at + point.pause_s, "checkpoint", plan)
        # a restart reads the state (and the steps' gradients since, where differential)
        # and these gradients, whichever this copy held
        last = self.durable[-1]
        chain = last.deltas if self.state_copied else ()
        state_durable = last.state_durable_s if self.state_copied else point.durable_s
        self.durable.append(Checkpoint(
            point.durable_s, self.tokens, at, chain_bytes(chain) + GRADIENT_BYTES_PER_PARAM,
            plan, state_durable, chain))
        self.state_copied = True
        self.last_checkpoint = at
        self.stood_still(at + point.pause_s)
        return at + point.pause_s

    def checkpoint(self, now: float, plan: Plan) -> float:
        """A checkpoint after the step that ended at ``now`` (none if the plan loses GPUs
        during its pause: the next step sees that), of the state or, :meth:`differential`,
        of the step's gradients; returns when training goes on (the write to the store goes
        on in the background)."""
        differential = self.differential(now, plan)
        per_param = GRADIENT_BYTES_PER_PARAM if differential else PERSISTENT_BYTES_PER_PARAM
        copy = host_copy_time(self.instance, plan, self.costs, per_param)
        # the state holds still until the next step's optimizer update, so its copy goes on
        # while that step runs and stalls training only where it is the longer; the
        # gradients do not (the next step's backward passes overwrite them): their copy
        # stops training
        pause = copy if differential else max(0.0, copy - self.step_times.at(plan, now))
        if self.loses(plan, now, now + pause):
            return now
        self.add(now, now + pause, "checkpoint", plan)
        durable_from = self.written_by(now + copy, plan, per_param)
        last = self.durable[-1]
        chain = (*last.deltas, durable_from) if differential else ()
        state_durable = last.state_durable_s if differential else durable_from
        self.durable.append(Checkpoint(durable_from, self.tokens, now, chain_bytes(chain),
                                       plan, state_durable, chain))
        self.state_copied = True  # the state the next step starts from
        self.last_checkpoint = now
        self.stood_still(now + pause)
        return now + pause

    def restore_time(self, now: float, plan: Plan, prepared_s: float | None = None) -> float:
        """Reading the last durable checkpoint into ``plan`` at ``now``
        (:func:`~formulation.run_costs.restore_time`). Its host-memory copy is on the nodes
        of the plan that took it where that plan is the one the interruption stopped and
        ran since (no switch or restart since), less the GPUs of each domain taken at any
        time since it was captured (a failure, other tenants' load: their nodes' memory
        goes with them).
        A restart prepared on a decision at ``prepared_s``: its nodes fetch the weights
        and the optimizer's states from then into host memory, once durable (a fetch
        needs no GPU, so it runs alongside the stages' start): where that ends by
        ``now``, only their copy to the GPUs and the gradients of a checkpoint inside a
        step are left (a step's state holds still until its end, so it is the state the
        step started from)."""
        checkpoint = self.durable[-1]
        held, kept = checkpoint.plan, None
        if held is None or held != self.stopped or checkpoint.captured_s < self.running_since:
            held = None  # (a switch since, or a restart: the copy is not on its nodes)
        else:
            states = self.states
            first, last = states.index_at(checkpoint.captured_s), states.index_at(now)
            kept = kept_share(held, states.free_gpus[first:last + 1].min(axis=0))
        per_param = checkpoint.per_param
        if prepared_s is not None:
            fetched = max(prepared_s, checkpoint.state_durable_s) + restore_time(
                self.instance, plan, self.costs, PERSISTENT_BYTES_PER_PARAM, held, kept)
            step = restore_time(self.instance, plan, self.costs, GRADIENT_BYTES_PER_PARAM,
                                held, kept)
            for durable in checkpoint.deltas:  # each step's gradients, once written
                fetched = max(fetched, durable) + step
            if fetched <= now:  # the state and the steps' gradients wait in host memory
                return read_after_fetch(self.instance, plan, self.costs, per_param, held,
                                        kept, chain_bytes(checkpoint.deltas))
        return restore_time(self.instance, plan, self.costs, per_param, held, kept)
