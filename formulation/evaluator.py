"""The evaluator: the one place where a plan becomes objectives (SPEC sections 3-5).

``evaluate_batch`` scores many plans in one vectorised pass; ``evaluate``
(:mod:`formulation.result`) scores one plan and adds per-stage detail and named violations.
Both take every number from :class:`~formulation.costmodel.CostModel`, which the MILP also
uses, and every violation from the rules of :mod:`formulation.feasibility`.

Step time, 1F1B (SPEC 3.1), with positions p counted from the end of the pipeline::

    P      = max( max_p c_p , max_links occupancy ,
                  max_{k<=j} (sum_{k<=i<=j} c_i + 2 sum_{k<=i<j} delta_i) / (j-k+1) )
    T_pipe = (m - 1) P + sum_p c_p + 2 sum_links delta
    T_step = T_pipe + max_p T_allreduce_p + max_p T_optimizer_p

The last term generalises the SPEC's latency bound (its k = 0 case) to every window of
consecutive stages: with a slow link in the middle of a chain the binding round trip need
not include the last stage, and the SPEC term alone then underestimated the event-level
simulation by up to 21 %. Each window is still linear in the MILP's position variables.

Interleaved 1F1B (``virtual_stages`` v > 1, SC'21 section 2.2): every micro-batch crosses
each boundary v times a direction and the wrap-around boundary (last stage to first) v - 1
times, so a boundary's occupancy per period, its traffic and its cost scale by v (v - 1 on
the wrap). Megatron-LM's order runs a group of S micro-batches round by round, so a window
of stages is no longer a cycle of the schedule for every micro-batch; the period P is the
steady state of the schedule's event graph over one group, FIFO links included
(:mod:`formulation.schedule_graph`: the largest cycle ratio, exact against the event
simulation's long-run rate), and::

    T_pipe  = max((m - 1) P + sum c / v + (1 - 1/v) P + 2 (v sum delta + (v - 1) delta_wrap),
                  sum c + 2 (v sum delta + (v - 1) delta_wrap))

the fill and drain paying every crossing of one micro-batch's path (the first micro-batch's
forward and the last one's backward cross each boundary v times with nothing to overlap
them), the second term being that micro-batch's own path through every chunk. Exact on
uniform pipelines without communication (Megatron's ``(m + (S-1)/v)`` makespan); over the
WAN the fill and drain are the approximate part (README: ``scripts/closed_form_vs_simulation.py
--virtual-stages V``). The schedule is Megatron-Core's (no all-forward special case when
m = S), and the wrap-around's gradients and a forward boundary's activations on the same pair
of domains are separate channels, as two boundaries of a plain plan on one pair are. A
stage's activations are those of ``(2 q + (v - 1) S + 1) / v`` micro-batches, q its position
from the end (Korthikanti et al. 2022, section 4.2.3: ``S (1 + (S - 1) / (S v))`` on the first
stage).
An interleaved plan needs S >= 2, at least v layers per stage and micro-batches a multiple
of S (violation ``schedule``).

An infeasible plan is still scored; it gets ``feasible = False`` and named violations.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass

import numpy as np

from formulation.batch import PlanBatch
from formulation.costmodel import CostModel
from formulation.feasibility import (
    PHYSICAL,
    DomainFacts,
    Facts,
    Limits,
    LinkFacts,
    PlanFacts,
    StageFacts,
    outside_search,
    violation_matrix,
)
from formulation.instance import RECOMPUTE_MODES, Instance
from formulation.plan import Plan

# Violation kinds (:class:`formulation.feasibility.Kind` values), in the column order of
# ``BatchEvaluation.violation``.
VIOLATIONS = tuple(kind.value for kind in PHYSICAL)
OBJECTIVES = ("step_time_s", "gpus", "comm_cost")

_COST_MODELS: weakref.WeakKeyDictionary[Instance, CostModel] = weakref.WeakKeyDictionary()


def cost_model(instance: Instance) -> CostModel:
    """The (cached) cost model of an instance."""
    model = _COST_MODELS.get(instance)
    if model is None:
        model = _COST_MODELS[instance] = CostModel(instance)
    return model


_LIMITS: weakref.WeakKeyDictionary[Instance, Limits] = weakref.WeakKeyDictionary()


def limits(instance: Instance) -> Limits:
    """The (cached) limits the feasibility rules read of an instance."""
    found = _LIMITS.get(instance)
    if found is None:
        found = _LIMITS[instance] = Limits.of(instance, cost_model(instance).usable_memory)
    return found


def robust_instance(instance: Instance, latency_spike: float = 0.5) -> Instance:
    """The instance with every WAN link at its worst case: ``B (1 - eps)``, ``L (1 + spike)``."""
    return instance.with_link_state(
        bandwidth_gbps=instance.links.bandwidth_gbps * (1 - instance.links.eps),
        latency_ms=instance.links.latency_ms * (1 + latency_spike))


@dataclass(frozen=True, eq=False)
class BatchEvaluation:
    step_time_s: np.ndarray  # (N,)
    gpus: np.ndarray  # (N,)
    comm_cost: np.ndarray  # (N,) USD per step
    feasible: np.ndarray  # (N,) bool: no violation (a plan outside the search space may be)
    violation: np.ndarray  # (N, len(VIOLATIONS)) bool
    outside_search: np.ndarray  # (N,) bool: a value the instance's search space does not list
    mfu: np.ndarray
    achieved_tflops_per_gpu: np.ndarray  # counts recompute FLOPs, as Megatron-LM does
    tokens_per_s: np.ndarray
    wan_gb_per_step: np.ndarray
    cluster_utilisation: np.ndarray  # useful FLOP/s over the peak of all free GPUs
    period_s: np.ndarray  # P
    pipeline_s: np.ndarray  # T_pipe
    allreduce_s: np.ndarray
    optimizer_s: np.ndarray
    stage_compute_s: np.ndarray  # (N, S) c per micro-batch, front to back
    stage_memory_bytes: np.ndarray  # (N, S)
    stage_in_flight: np.ndarray  # (N, S) micro-batches whose activations a stage holds
    boundary_delay_s: np.ndarray  # (N, S-1) between front stages j and j+1
    boundary_occupancy_s: np.ndarray  # (N, S-1) busy seconds per period (v crossings each)
    domain_gpus: np.ndarray  # (N, K) GPUs each plan takes from each domain
    wrap_delay_s: np.ndarray  # (N,) the wrap-around boundary of interleaved plans (else 0)
    wrap_occupancy_s: np.ndarray  # (N,)

    @property
    def admissible(self) -> np.ndarray:
        """(N,) bool: feasible and within the search space, the plans a solver may return."""
        return self.feasible & ~self.outside_search

    @property
    def objectives(self) -> np.ndarray:
        """(N, 3) objective vectors (step_time_s, gpus, comm_cost), all minimised."""
        return np.stack([self.step_time_s, self.gpus.astype(float), self.comm_cost], axis=1)


def _layer_tables(cm: CostModel, b: np.ndarray, t: np.ndarray, rc: np.ndarray) -> dict:
    """Per-layer coefficients for each (micro-batch, tp, recompute) entry, computed once per
    distinct triple by the cached scalar functions of the cost model."""
    key = (b * 4096 + t) * 4 + rc
    unique, inverse = _distinct(key)
    names = ("compute", "activation", "workspace", "edge_first", "edge_last", "logits",
             "recompute_flops")
    columns = np.empty((len(names), len(unique)))
    for i, code in enumerate(unique.tolist()):
        ub, ut, urc = code // 4 // 4096, code // 4 % 4096, RECOMPUTE_MODES[code % 4]
        columns[:, i] = (cm.layer_compute_time(ub, ut, urc),
                         cm.layer_activation_bytes(ub, ut, urc), cm.workspace_bytes(ub, ut, urc),
                         cm.edge_compute_time(ub, ut, True, False),
                         cm.edge_compute_time(ub, ut, False, True), cm.logits_bytes(ub, ut),
                         cm.recompute_flops_per_layer(1, urc))
    gathered = columns[:, inverse]  # one gather for all the columns
    return dict(zip(names, gathered, strict=True))


DENSE_KEYS = 1 << 22  # keys below this are told apart by a look-up table, not by sorting


def _distinct(key: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(key, return_inverse=True)`` with the inverse in ``key``'s shape; for
    small non-negative keys (every realistic batch) by counting, ten times faster."""
    top = int(key.max(initial=0))
    if key.size == 0 or key.min() < 0 or top >= DENSE_KEYS:
        unique, inverse = np.unique(key, return_inverse=True)
        return unique, inverse.reshape(key.shape)
    unique = np.flatnonzero(np.bincount(key.ravel(), minlength=top + 1))
    rank = np.zeros(top + 1, dtype=np.intp)
    rank[unique] = np.arange(len(unique))
    return unique, rank[key]


def latency_bound(compute_from_end: np.ndarray, delay_from_end: np.ndarray,
                  stages: np.ndarray | None = None) -> np.ndarray:
    """max over windows k <= j of (sum_{k<=i<=j} c_i + 2 sum_{k<=i<j} delta_i) / (j - k + 1),
    positions counted from the end, delta_i joining positions i+1 and i (SPEC indexing);
    ``delay_from_end[:, p]`` holds delta_{p-1}. ``stages``: each row's number of real
    positions, the rest zero padding: windows that start in the padding are skipped (they
    add nothing), which saves a third of the work on batches of mixed lengths."""
    n, width = compute_from_end.shape
    # round_trip[:, j] - round_trip[:, k] + c_k is the window k..j (its links are delta
    # k+1..j; delay_from_end[:, k] joins k to k-1, outside the window)
    round_trip = np.cumsum(compute_from_end + 2 * delay_from_end, axis=1)
    base = round_trip - compute_from_end
    order = None
    rows = np.full(width, n)  # rows[k]: the leading rows with a window starting at k
    if stages is not None and n:
        order = np.argsort(-np.asarray(stages), kind="stable")  # longest plans first
        round_trip, base = round_trip[order], base[order]
        rows = (np.asarray(stages)[:, None] > np.arange(width)[None, :]).sum(axis=0)
    best = np.zeros(n)
    inverse_length = 1.0 / np.arange(1, width + 1)[:, None]
    # positions along axis 0: each reduction then runs over whole rows of plans, which numpy
    # vectorises, instead of over the few positions of each plan
    round_trip, base = np.ascontiguousarray(round_trip.T), np.ascontiguousarray(base.T)
    for k in range(width):  # windows starting at position k, all ends j >= k at once
        r = int(rows[k])
        mean = (round_trip[k:, :r] - base[k, :r]) * inverse_length[:width - k]
        np.maximum(best[:r], mean.max(axis=0, initial=0.0), out=best[:r])
    if order is None:
        return best
    out = np.empty(n)
    out[order] = best
    return out


def _check_batch(batch: PlanBatch, instance: Instance) -> None:
    """Arrays built by a solver may be wrong in ways the formulas cannot score."""
    num_domains = instance.num_domains
    if min(batch.dp.min(initial=1), batch.micro_batch.min(initial=1), batch.tp.min(initial=1)) < 1:
        raise ValueError("PlanBatch: dp, micro_batch and tp must be >= 1")
    if batch.domain.size and (batch.domain.min() < 0 or batch.domain.max() >= num_domains):
        raise ValueError(f"PlanBatch: domain indices must lie in 0..{num_domains - 1}")
    if batch.recompute.size and (batch.recompute.min() < 0 or batch.recompute.max() > 2):
        raise ValueError("PlanBatch: recompute codes must be 0, 1 or 2")
    broken = np.flatnonzero(instance.training.global_batch % (batch.dp * batch.micro_batch))
    if broken.size:  # plans read from files are checked when read: this is a solver's bug
        i = int(broken[0])
        raise ValueError(f"PlanBatch row {i}: dp x micro_batch = "
                         f"{int(batch.dp[i] * batch.micro_batch[i])} does not divide "
                         f"training.global_batch {instance.training.global_batch}")


def evaluate_batch(instance: Instance, batch: PlanBatch,
                   model: CostModel | None = None) -> BatchEvaluation:
    """Score N plans at once. Infeasibility is reported, not rejected; a row whose
    dp x micro_batch does not divide the global batch is no plan and raises ValueError.

    ``model`` overrides the instance's cost model (used to fit the efficiency constants)."""
    cm = model or cost_model(instance)
    training = instance.training
    _check_batch(batch, instance)
    n_plans, width = batch.layers.shape
    n_stages = batch.num_stages
    index = np.arange(width)[None, :]
    real = index < n_stages[:, None]
    position = n_stages[:, None] - 1 - index  # from the end: 0 is the last stage
    first = real & (index == 0)
    last = real & (position == 0)
    dp, b = batch.dp[:, None], batch.micro_batch[:, None]
    t, layers, domain = batch.tp, batch.layers, batch.domain
    m = training.global_batch / (batch.dp * batch.micro_batch)

    table = _layer_tables(cm, np.broadcast_to(b, t.shape), t, batch.recompute)
    compute = np.where(real, layers * table["compute"] + first * table["edge_first"]
                       + last * table["edge_last"], 0.0)
    in_flight = np.where(real, micro_batches_in_flight(m[:, None], position, n_stages[:, None],
                                                       batch.virtual_stages[:, None]), 0.0)
    memory = np.where(real, cm.stage_memory_bytes(
        layers, in_flight, cm.state_bytes_per_param(t, dp), table["activation"],
        table["workspace"], table["logits"], first, last), 0.0)
    params = layers * cm.layer_params + cm.edge_params(first, last)
    allreduce = np.where(real, cm.allreduce_time(domain, params, t, dp, m[:, None]), 0.0)
    optimizer = np.where(real, cm.optimizer_time(params, t, dp), 0.0)

    # Boundary j joins front stages j and j+1; interleaved plans cross each v times.
    v = batch.virtual_stages
    joined = real[:, 1:]
    k_from, k_to = domain[:, :-1], domain[:, 1:]
    occupancy, delay = cm.boundary_link_terms(k_from, k_to, b, dp)
    occupancy = np.where(joined, v[:, None] * occupancy, 0.0)
    delay = np.where(joined, delay, 0.0)
    traffic = np.where(joined, v[:, None] * cm.boundary_traffic_gb(k_from, k_to, b, dp,
                                                                    m[:, None]), 0.0)
    cost = traffic * cm.boundary_price(k_from, k_to)
    # the wrap-around boundary, last stage to first, crossed v - 1 times
    k_last, k_first = np.take_along_axis(domain, n_stages[:, None] - 1, axis=1)[:, 0], domain[:, 0]
    wrapped = v > 1
    wrap_occupancy, wrap_delay, wrap_traffic, wrap_cost = (np.zeros(n_plans) for _ in range(4))
    if wrapped.any():  # plain plans (nearly every batch) have no wrap-around boundary
        occupied, delayed = cm.boundary_link_terms(k_last, k_first, batch.micro_batch, batch.dp)
        wrap_occupancy = np.where(wrapped, (v - 1) * occupied, 0.0)
        wrap_delay = np.where(wrapped, delayed, 0.0)
        wrap_traffic = np.where(wrapped, (v - 1) * cm.boundary_traffic_gb(
            k_last, k_first, batch.micro_batch, batch.dp, m), 0.0)
        wrap_cost = wrap_traffic * cm.boundary_price(k_last, k_first)

    # Latency bound over every window of consecutive positions k..j (k = 0 is the SPEC term):
    # in 1F1B, B_k(u) -> ... -> B_j(u) -> F_j(u+j+1) -> ... -> F_k(u+j+1) -> B_k(u+j-k+1) is
    # a cycle through j-k+1 micro-batches. Reorder stages by position (padding sorts last).
    by_position = np.maximum(n_stages[:, None] - 1 - index, 0)
    compute_from_end = np.where(real, np.take_along_axis(compute, by_position, axis=1), 0.0)
    delay_from_end = np.zeros_like(compute)  # delay_from_end[:, p] joins positions p and p-1
    if width > 1:
        by_boundary = np.maximum(n_stages[:, None] - 2 - index[:, :-1], 0)
        delay_from_end[:, 1:] = np.where(real[:, 1:],
                                         np.take_along_axis(delay, by_boundary, axis=1), 0.0)
    busiest = np.maximum(compute.max(axis=1), occupancy.max(axis=1, initial=0.0))
    windows = latency_bound(compute_from_end, delay_from_end, n_stages)
    for i in np.flatnonzero(wrapped):  # interleaved rows are few; each has its own graph
        count = int(n_stages[i])
        windows[i] = interleaved_period(cm, int(batch.micro_batch[i]), int(batch.dp[i]),
                                        layers[i, :count], t[i, :count], domain[i, :count],
                                        compute[i, :count], int(v[i]))
    period, pipeline = pipeline_time(m, v, compute.sum(axis=1),
                                     np.maximum(busiest, wrap_occupancy), windows,
                                     2 * delay.sum(axis=1), wrap_delay)
    step_time = pipeline + allreduce.max(axis=1) + optimizer.max(axis=1)

    stage_gpus = np.where(real, dp * t, 0)
    n_domains = instance.num_domains
    domain_gpus = np.bincount((np.arange(n_plans)[:, None] * n_domains + domain).ravel(),
                              weights=stage_gpus.ravel(), minlength=n_plans * n_domains)
    domain_gpus = domain_gpus.reshape(n_plans, n_domains).astype(np.int64)
    gpus = stage_gpus.sum(axis=1)
    comm_cost = cost.sum(axis=1) + wrap_cost
    links = LinkFacts(
        occupancy=np.concatenate([occupancy, wrap_occupancy[:, None]], axis=1),
        period=period[:, None],
        wan=np.concatenate([k_from != k_to, (k_last != k_first)[:, None]], axis=1),
        link_from=np.concatenate([k_from, k_last[:, None]], axis=1),
        link_to=np.concatenate([k_to, k_first[:, None]], axis=1))
    facts = Facts(
        plan=PlanFacts(layers=layers.sum(axis=1),
                       fewest_layers=np.where(real, layers, instance.model.layers).min(axis=1),
                       stages=n_stages, virtual_stages=v,
                       micro_batches=training.global_batch // (batch.dp * batch.micro_batch),
                       comm_cost=comm_cost),
        stages=StageFacts(tp=t, memory=memory, domain=domain),
        domains=DomainFacts(used=domain_gpus, free=instance.free_gpus), links=links,
        real_stages=real, real_links=np.concatenate([joined, wrapped[:, None]], axis=1))
    violation = violation_matrix(facts, limits(instance) if model is None
                                 else Limits.of(instance, cm.usable_memory))

    hardware_flops = cm.model_flops_per_step() + training.global_batch * np.sum(
        np.where(real, layers * table["recompute_flops"], 0.0), axis=1)
    return BatchEvaluation(
        step_time_s=step_time, gpus=gpus, comm_cost=comm_cost,
        feasible=~violation.any(axis=1), violation=violation,
        outside_search=outside_search(instance.search, batch.dp, batch.micro_batch, v, t,
                                      batch.recompute, real),
        **derived_metrics(instance, cm, step_time, gpus, hardware_flops),
        wan_gb_per_step=traffic.sum(axis=1) + wrap_traffic,
        period_s=period, pipeline_s=pipeline, allreduce_s=allreduce.max(axis=1),
        optimizer_s=optimizer.max(axis=1), stage_compute_s=compute,
        stage_memory_bytes=memory, stage_in_flight=in_flight, boundary_delay_s=delay,
        boundary_occupancy_s=occupancy, domain_gpus=domain_gpus, wrap_delay_s=wrap_delay,
        wrap_occupancy_s=wrap_occupancy)


def micro_batches_in_flight(m, position, stages, virtual_stages):
    """Micro-batches whose activations a stage holds at its fullest, ``position`` counted
    from the end (0: the last stage): ``q + 1`` in 1F1B; interleaved, the chunks of
    Megatron-LM's warm-up plus one, ``2 q + (v - 1) S + 1``, over v. At most m. Scalars or
    arrays."""
    plain = np.minimum(m, position + 1)
    if not np.any(virtual_stages > 1):  # nearly every batch: no interleaving to price
        return plain
    interleaved = (2 * position + (virtual_stages - 1) * stages + 1) / virtual_stages
    return np.where(virtual_stages > 1, np.minimum(m, interleaved), plain)


def interleaved_period(cm: CostModel, b: int, dp: int, layers, tp, domain, compute,
                       virtual_stages: int) -> float:
    """The steady-state period P of an interleaved plan: the largest cycle ratio of its
    schedule graph (:mod:`formulation.schedule_graph`), over a group of S micro-batches.
    ``layers``, ``tp``, ``domain``, ``compute``: the stages front to back. A single stage
    cannot interleave (a ``schedule`` violation); it is still scored, by its compute."""
    count = len(layers)
    if count < 2:
        return float(max(compute))
    # imported here: the graph's kernel loads numba (a sixth of a second), which plain plans,
    # nearly all of them, never need
    from formulation.schedule_graph import steady_period

    forward = np.array([layers[j] * cm.layer_forward_time(b, int(tp[j]))
                        + cm.edge_times(b, int(tp[j]), j == 0, j == count - 1)[0]
                        for j in range(count)])
    ends = np.append(np.asarray(domain, dtype=np.int64), int(domain[0]))  # the wrap last
    links = cm.boundary_directions(ends[:-1], ends[1:], b, dp)
    terms = np.concatenate([forward, np.asarray(compute, dtype=float) - forward,
                            *(np.broadcast_to(x, (count,)) for x in links)])
    return steady_period(count, virtual_stages, terms)


def pipeline_time(m, v, compute_sum, busiest, windows, round_trips, wrap_delay):
    """(P, T_pipe) of a plain or interleaved 1F1B pipeline (module docstring): ``busiest``
    the slowest stage or busiest link per period (the wrap included), ``windows`` the
    latency bound (:func:`latency_bound` for plain 1F1B, :func:`interleaved_period`),
    ``round_trips`` the ``2 sum delta`` of the boundaries. Scalars or arrays."""
    period = np.maximum(busiest, windows)
    steady = ((m - 1) * period + compute_sum / v + (1 - 1 / v) * period + v * round_trips
              + 2 * (v - 1) * wrap_delay)
    path = compute_sum + v * round_trips + 2 * (v - 1) * wrap_delay
    return period, np.where(v == 1, (m - 1) * period + compute_sum + round_trips,
                            np.maximum(steady, path))


def derived_metrics(instance: Instance, cm: CostModel, step_time_s, gpus,
                    hardware_flops) -> dict:
    """MFU, tokens per second, cluster utilisation and achieved TFLOP/s per GPU, defined once
    for every plan family; scalars or arrays. ``hardware_flops``: the FLOPs a step runs,
    recompute included (Megatron-LM counts them in its TFLOP/s); MFU counts the model's."""
    model_flops = cm.model_flops_per_step()
    peak = instance.gpu.peak_tflops * 1e12
    return {"mfu": model_flops / (gpus * peak * step_time_s),
            "tokens_per_s": instance.training.global_batch * instance.model.seq_len
            / step_time_s,
            "cluster_utilisation": model_flops / step_time_s / (peak * cm.free_gpus_total),
            "achieved_tflops_per_gpu": hardware_flops / (gpus * step_time_s) / 1e12}


def evaluate_plans(instance: Instance, plans: list[Plan],
                   model: CostModel | None = None) -> BatchEvaluation:
    return evaluate_batch(instance, PlanBatch.from_plans(plans), model)
