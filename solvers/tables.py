"""Coefficient tables of the exact models for one (dp, micro-batch) pair, or one cell of it.

Both engines (the Pyomo MILP on HiGHS and the CP-SAT model) are built from these tables, and
every number in them comes from :class:`formulation.costmodel.CostModel`, the functions the
evaluator itself calls. Data-parallel degree ``r`` and micro-batch ``b`` are enumerated
outside the models (SPEC 3: almost every coefficient depends on them non-linearly), so inside
a model every term is linear in the assignment and layer-count variables.

Index sets: positions ``p`` counted from the end of the pipeline (0 is the last stage),
domains ``k``, stage options ``o`` = (tp, recompute) pairs allowed by the search space.

Interleaved 1F1B (a search space listing ``virtual_stages`` v > 1) is searched in *cells*:
tables of one (dp, micro-batch, v, S) with exactly S stages, since the schedule graph that
prices its period (:mod:`formulation.schedule_graph`) depends on S and v. A cell's layer caps
hold the interleaved activations, and its stages take at least v layers.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from formulation.evaluator import cost_model, micro_batches_in_flight, pipeline_time
from formulation.feasibility import interleaving_runs
from formulation.instance import Instance
from formulation.plan import Plan, Stage
from formulation.schedule_graph import steady_period
from solvers.engine import ModelValues


@dataclass(frozen=True, eq=False)
class PairTables:
    instance: Instance
    dp: int
    micro_batch: int
    micro_batches: int  # m
    positions: int  # S: the most stages a plan may have
    options: tuple[tuple[int, str], ...]  # (tp, recompute) per option index
    layers: int
    # per option
    gpus: np.ndarray  # (O,) r * t GPUs a stage takes
    layer_time: np.ndarray  # (O,) forward + backward seconds per layer and micro-batch
    first_time: np.ndarray  # (O,) embedding forward + backward on the first stage
    last_time: np.ndarray  # (O,) LM head + loss on the last stage
    layer_cap: np.ndarray  # (S, O) most layers a stage at position p fits (not first)
    layer_cap_first: np.ndarray  # (S, O) the same when it is also the first stage (embedding)
    optimizer_per_param: np.ndarray  # (O,) seconds of the Adam step per parameter of a stage
    # per domain and option
    allreduce_per_param: np.ndarray  # (K, O)
    allreduce_fixed: np.ndarray  # (K, O)
    # per ordered domain pair (k -> k', k == k' inside a domain)
    delay: np.ndarray  # (K, K) delta: seconds per micro-batch crossing
    occupancy: np.ndarray  # (K, K) seconds a link is busy per micro-batch
    cost: np.ndarray  # (K, K) USD per step for a boundary on this pair
    free_gpus: np.ndarray  # (K,)
    layer_params: int
    embedding_params: int
    head_params: int
    # interleaved cells: the stages' forward share and each link direction apart
    forward_time: np.ndarray  # (O,) forward seconds per layer and micro-batch
    first_forward: np.ndarray  # (O,) the embedding's forward
    last_forward: np.ndarray  # (O,) the LM head's and loss's forward
    drain_forward: np.ndarray  # (K, K) seconds a micro-batch's activations hold k -> k'
    drain_backward: np.ndarray  # (K, K) ... and its gradients, k' -> k
    latency_forward: np.ndarray  # (K, K) latency k -> k'
    latency_backward: np.ndarray  # (K, K) latency k' -> k
    virtual_stages: int = 1  # v; > 1: an interleaved cell of exactly ``positions`` stages

    @property
    def num_domains(self) -> int:
        return len(self.free_gpus)

    @property
    def num_options(self) -> int:
        return len(self.options)

    @property
    def interleaved(self) -> bool:
        return self.virtual_stages > 1

    def usable(self, k: int, o: int) -> bool:
        """Whether option ``o`` fits domain ``k`` at all (its r*t GPUs are free there)."""
        return self.gpus[o] <= self.free_gpus[k]


def pair_tables(instance: Instance, dp: int, micro_batch: int, virtual_stages: int = 1,
                stages: int | None = None) -> PairTables | None:
    """Tables for one (dp, micro-batch) pair, or with ``virtual_stages`` v > 1 its
    interleaved cell of ``stages`` S stages; None if no valid plan has them (for a cell:
    S < 2, m not a multiple of S, fewer than v S layers, more than ``max_stages``)."""
    training, search, model = instance.training, instance.search, instance.model
    if training.global_batch % (dp * micro_batch):
        return None
    cm = cost_model(instance)
    m = training.global_batch // (dp * micro_batch)
    b = micro_batch
    free = instance.free_gpus
    options = tuple((t, rc) for t in search.tp for rc in search.recompute
                    if t <= instance.gpu.gpus_per_node and model.heads % t == 0
                    and dp * t <= free.max())
    if not options:
        return None
    v = virtual_stages
    positions = min(search.max_stages, model.layers)
    if v > 1:
        if stages is None or stages > positions \
                or not interleaving_runs(model.layers, m, stages, v):
            return None
        positions = stages
    tp = np.array([t for t, _ in options])
    layer_time = np.array([cm.layer_compute_time(b, t, rc) for t, rc in options])
    first_time = np.array([cm.edge_compute_time(b, t, True, False) for t, _ in options])
    last_time = np.array([cm.edge_compute_time(b, t, False, True) for t, _ in options])

    layer_cap = np.zeros((positions, len(options)), dtype=np.int64)
    layer_cap_first = np.zeros_like(layer_cap)
    # every position at once (the same arithmetic per element as for one)
    in_flight = micro_batches_in_flight(m, np.arange(positions), positions, v)
    last = (np.arange(positions) == 0).astype(np.int64)
    for o, (t, rc) in enumerate(options):
        state = cm.state_bytes_per_param(t, dp)
        per_layer = cm.stage_memory_bytes(1, in_flight, state,
                                          cm.layer_activation_bytes(b, t, rc), 0, 0, 0, 0)
        for first, caps in ((0, layer_cap), (1, layer_cap_first)):
            fixed = cm.stage_memory_bytes(0, in_flight, state, 0.0,
                                          cm.workspace_bytes(b, t, rc),
                                          cm.logits_bytes(b, t), first, last)
            room = (cm.usable_memory - fixed) / per_layer
            caps[:, o] = np.maximum(0, np.minimum(model.layers,
                                                  np.floor(room * (1 + 1e-12))))

    k = np.arange(instance.num_domains)
    per_param, fixed = cm.allreduce_coefficients(k[:, None], tp[None, :], dp, m)  # (K, O)
    return PairTables(
        instance=instance, dp=dp, micro_batch=micro_batch, micro_batches=m, positions=positions,
        options=options, layers=model.layers, gpus=dp * tp, layer_time=layer_time,
        first_time=first_time, last_time=last_time, layer_cap=layer_cap,
        layer_cap_first=layer_cap_first,
        optimizer_per_param=np.array([float(cm.optimizer_time(1.0, t, dp)) for t, _ in options]),
        allreduce_per_param=np.broadcast_to(per_param, (len(free), len(options))).astype(float),
        allreduce_fixed=np.broadcast_to(fixed, (len(free), len(options))).astype(float),
        **_link_terms(instance, dp, b, m), free_gpus=free, layer_params=cm.layer_params,
        embedding_params=cm.embedding_params, head_params=cm.head_params,
        forward_time=np.array([cm.layer_forward_time(b, t) for t, _ in options]),
        first_forward=np.array([cm.edge_times(b, t, True, False)[0] for t, _ in options]),
        last_forward=np.array([cm.edge_times(b, t, False, True)[0] for t, _ in options]),
        virtual_stages=v)


def _link_terms(instance: Instance, dp: int, b: int, m: int) -> dict[str, np.ndarray]:
    """The tables' terms per ordered domain pair: what a change of the WAN links' state
    changes."""
    cm = cost_model(instance)
    k = np.arange(instance.num_domains)
    kk_from, kk_to = np.meshgrid(k, k, indexing="ij")
    directions = cm.boundary_directions(kk_from, kk_to, b, dp)
    occupancy, delay = cm.occupancy_and_delay(*directions)
    return {**{name: np.broadcast_to(np.asarray(x, dtype=float), kk_from.shape).copy()
               for name, x in zip(("drain_forward", "drain_backward", "latency_forward",
                                   "latency_backward"), directions, strict=True)},
            "delay": np.asarray(delay, dtype=float),
            "occupancy": np.asarray(occupancy, dtype=float),
            "cost": np.asarray(cm.boundary_cost(kk_from, kk_to, b, dp, m), dtype=float)}


def with_links(tables: PairTables, instance: Instance) -> PairTables:
    """``tables`` in the WAN links' state (bandwidth, latency, prices) and load of
    ``instance``, an instance of the same domains, model and search space (e.g. after a
    bandwidth change): the per-pair terms recomputed, the rest kept."""
    return dataclasses.replace(
        tables, instance=instance, free_gpus=instance.free_gpus,
        **_link_terms(instance, tables.dp, tables.micro_batch, tables.micro_batches))


def all_pair_tables(instance: Instance, interleaved: bool = False) -> list[PairTables]:
    """Tables of every valid (dp, micro-batch) pair of the search space; with
    ``interleaved``, also every valid interleaved cell (v > 1 of the search space, each S)."""
    out = []
    search = instance.search
    chunks = sorted(v for v in set(search.virtual_stages) if v > 1) if interleaved else []
    for dp in search.dp:
        for b in search.micro_batch:
            tables = pair_tables(instance, dp, b)
            if tables is None:
                continue
            out.append(tables)
            out += [cell for v in chunks for s in range(2, tables.positions + 1)
                    if (cell := pair_tables(instance, dp, b, v, s)) is not None]
    return out


def full_capacity(instance: Instance) -> Instance:
    """The instance with every GPU free: its pair tables hold the options and caps of every
    load state (a load change only changes ``free_gpus``, :func:`with_free_gpus`)."""
    return instance.with_link_state(free_gpus=instance.domain_gpus)


def with_free_gpus(tables: PairTables, free: np.ndarray) -> PairTables:
    """``tables`` in another load state. Its options may include some that fit no domain
    now (the options of :func:`full_capacity`); every GPU test on ``free_gpus`` drops them."""
    return dataclasses.replace(tables, free_gpus=np.asarray(free))


@dataclass(frozen=True)
class StageChoice:
    """What an engine chose for one active position: domain, option index, layer count."""

    domain: int
    option: int
    layers: int


def choices_plan(tables: PairTables, chosen: dict[int, StageChoice]) -> Plan:
    """The plan of an engine's choices (position -> choice); the highest active position
    is the first stage."""
    stages = []
    for p in sorted(chosen, reverse=True):
        tp, recompute = tables.options[chosen[p].option]
        stages.append(Stage(domain=int(chosen[p].domain), layers=int(chosen[p].layers),
                            tp=int(tp), recompute=recompute))
    return Plan(dp=tables.dp, micro_batch=tables.micro_batch, stages=tuple(stages),
                virtual_stages=tables.virtual_stages)


def plan_choices(tables: PairTables, plan: Plan) -> dict[int, StageChoice] | None:
    """The inverse of :func:`choices_plan`; None if the plan is not one of this pair's
    model (another dp or micro-batch, more stages than positions, an option the model
    does not have)."""
    if (plan.dp, plan.micro_batch, plan.virtual_stages) != (
            tables.dp, tables.micro_batch, tables.virtual_stages) \
            or not 1 <= plan.num_stages <= tables.positions \
            or (tables.interleaved and plan.num_stages != tables.positions):
        return None
    chosen = {}
    for j, stage in enumerate(plan.stages):
        if (stage.tp, stage.recompute) not in tables.options:
            return None
        chosen[plan.num_stages - 1 - j] = StageChoice(
            stage.domain, tables.options.index((stage.tp, stage.recompute)), stage.layers)
    return chosen


def choice_values(tables: PairTables, chosen: dict[int, StageChoice],
                    links: tuple[list[float], list[float], list[float]] | None = None
                    ) -> ModelValues:
    """Objective values of the choices with every epigraph at its tight value: the engines'
    own account of a plan, checked against the evaluator at run time.

    ``links`` gives (delta, occupancy, cost) per boundary from position p+1 to p, in order
    of active positions, as an engine's own link variables hold them; by default they are
    read from the tables."""
    return choice_terms(tables, chosen, links)[3]


def choice_terms(tables: PairTables, chosen: dict[int, StageChoice],
                 links: tuple[list[float], list[float], list[float]] | None = None
                 ) -> tuple[float, float, float, ModelValues]:
    """(1F1B period, largest all-reduce, largest optimizer time, objective values) of the
    choices, as :func:`choice_values` computes them."""
    t = tables
    active = sorted(chosen)
    compute, allreduce, optimizer = [], [], []
    for p in active:
        k, o, layers = chosen[p].domain, chosen[p].option, chosen[p].layers
        is_first, is_last = p == active[-1], p == 0
        compute.append(layers * t.layer_time[o] + is_first * t.first_time[o]
                       + is_last * t.last_time[o])
        params = layers * t.layer_params + is_first * t.embedding_params + is_last * t.head_params
        allreduce.append(t.allreduce_per_param[k, o] * params + t.allreduce_fixed[k, o])
        optimizer.append(t.optimizer_per_param[o] * params)
    if t.interleaved:  # its links, the wrap-around among them, are read from the tables
        return _interleaved_terms(t, chosen, compute, allreduce, optimizer)
    if links is None:
        pairs = [(chosen[p + 1].domain, chosen[p].domain) for p in active[:-1]]
        links = ([float(t.delay[a, b]) for a, b in pairs],
                 [float(t.occupancy[a, b]) for a, b in pairs],
                 [float(t.cost[a, b]) if a != b else 0.0 for a, b in pairs])
    delta, occupancy, cost = links
    windows = [(sum(compute[k:j + 1]) + 2 * sum(delta[k:j])) / (j - k + 1)
               for k in range(len(active)) for j in range(k, len(active))]
    period = max([*compute, *occupancy, *windows])
    step = ((t.micro_batches - 1) * period + sum(compute) + 2 * sum(delta)
            + max(allreduce) + max(optimizer))
    values = ModelValues(step_time_s=float(step),
                         gpus=sum(int(t.gpus[chosen[p].option]) for p in active),
                         comm_cost=float(sum(cost)))
    return float(period), float(max(allreduce)), float(max(optimizer)), values


def _interleaved_terms(t: PairTables, chosen: dict[int, StageChoice], compute: list[float],
                       allreduce: list[float], optimizer: list[float]
                       ) -> tuple[float, float, float, ModelValues]:
    """:func:`choice_terms` of an interleaved cell: the period of the schedule graph, v
    crossings of each boundary and v - 1 of the wrap-around (last stage to first)."""
    v, front = t.virtual_stages, sorted(chosen, reverse=True)  # positions, front to back
    forward = np.array([chosen[p].layers * t.forward_time[chosen[p].option]
                        + (p == front[0]) * t.first_forward[chosen[p].option]
                        + (p == 0) * t.last_forward[chosen[p].option] for p in front])
    ring = [chosen[p].domain for p in front] + [chosen[front[0]].domain]
    links = list(zip(ring, ring[1:], strict=False))  # the boundaries, then the wrap-around
    by_link = {name: np.array([getattr(t, name)[a, b] for a, b in links]) for name in (
        "drain_forward", "drain_backward", "latency_forward", "latency_backward", "delay",
        "occupancy", "cost")}
    stage_compute = np.array(compute[::-1])  # ``compute`` runs from the last stage
    graph_period = steady_period(len(front), v, np.concatenate([
        forward, stage_compute - forward, by_link["drain_forward"], by_link["drain_backward"],
        by_link["latency_forward"], by_link["latency_backward"]]))
    crossings = np.full(len(links), v)
    crossings[-1] = v - 1
    busiest = max(max(compute), float((crossings * by_link["occupancy"]).max()))
    delay = by_link["delay"]
    period, pipeline = pipeline_time(t.micro_batches, v, sum(compute), busiest, graph_period,
                                     2 * delay[:-1].sum(), delay[-1])
    wan = np.array([a != b for a, b in links])
    values = ModelValues(
        step_time_s=float(pipeline + max(allreduce) + max(optimizer)),
        gpus=sum(int(t.gpus[chosen[p].option]) for p in front),
        comm_cost=float((crossings * by_link["cost"] * wan).sum()))
    return float(period), float(max(allreduce)), float(max(optimizer)), values
