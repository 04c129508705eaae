"""The SPEC problem as a Pyomo MILP for one (dp, micro-batch) pair, and its HiGHS solves.

Built only from :mod:`solvers.tables` (hence from the evaluator's cost model). Families of
constraints, with the SPEC sections they state:

* Positions (SPEC 3.1): ``u[p]`` marks an active position, counted from the end; position 0
  (the last stage, LM head) is always active and active positions are contiguous.
* Assignment (SPEC 2): ``z[p,k,o]`` puts the stage at position p in domain k with option o =
  (tp, recompute); one per active position. ``n[p,k,o]`` is its layer count: at least one,
  at most the memory cap of that position (SPEC 3 memory, written as a layer cap so no
  product appears; a smaller cap applies to the first stage, which also holds the
  embedding). All layers are placed: ``sum n = L`` (the cut points are the running sums).
* GPUs (SPEC 2, 5): ``sum r t z <= a_k`` per domain; the objective N is their total.
* Links (SPEC 3, 4): consecutive positions p+1 -> p are joined through a transportation
  linearisation ``y[p,k,k']`` (continuous, exact for binary z; notes/milp-formulation.md
  measured it 50x faster than big-M pairs): delta, link occupancy and traffic cost are linear
  in y. Inside one domain the pair (k, k) carries the intra-domain delay at no cost.
* 1F1B period (SPEC 3.1): epigraph ``P`` above every stage's compute, every link's
  occupancy and the round trip of every window of consecutive positions (the evaluator's
  generalisation of the SPEC latency bound).
* All-reduce and optimizer (SPEC 3): epigraphs above every stage's (affine) time.
* Step time ``T = (m - 1) P + sum c + 2 sum delta + T_allreduce + T_optimizer``.
* Caps: ``N <= gpu_cap``, ``C <= cost_cap`` (mutable, for the epsilon-constraint method),
  and the instance's optional WAN share cap and cost budget (SPEC 5).
* Interleaved cells (:mod:`solvers.tables`; v chunks a stage, exactly S stages): every
  position active, at least v layers a stage, boundaries crossed v times (occupancy, cost),
  a wrap-around link from the last stage to the first (a second transportation, crossed
  v - 1 times), and in place of the windows the period of the schedule graph
  (:mod:`formulation.schedule_graph`) stated by node potentials: ``P`` covers the graph's
  largest cycle ratio iff potentials exist with ``pi_b - pi_a >= w_e - S P tokens_e`` on every
  edge, each ``w_e`` linear in the layers and the links. ``T_pipe`` is the epigraph of the
  evaluator's two interleaved terms. A WAN share cap is not stated there (refused).
* Cuts (mutable, off by default): a floor on the period and on the step time, valid for
  every plan under the request's caps (``solvers.bounds``), with a per-cell McCormick form
  of "a stage's compute fits the period".
"""

from __future__ import annotations

import numpy as np
import pyomo.environ as pyo

from formulation.schedule_graph import schedule_graph
from solvers.engine import NO_CAP, ModelValues
from solvers.tables import PairTables, StageChoice, choice_values


def stage_cells(tables: PairTables) -> list[tuple[int, int, int]]:
    """The (position, domain, option) a stage may take: the option's GPUs free in the
    domain, and room for a layer there (none: the pair has no plan)."""
    t = tables
    return [(p, k, o) for p in range(t.positions) for k in range(t.num_domains)
            for o in range(t.num_options)
            if t.usable(k, o) and max(t.layer_cap[p, o], t.layer_cap_first[p, o]) >= 1]


def build_model(tables: PairTables) -> pyo.ConcreteModel:
    """The pair's MILP (module doc); the pair must have stage cells (:func:`stage_cells`)."""
    t = tables
    model = pyo.ConcreteModel(name=f"xdsched-dp{t.dp}-b{t.micro_batch}")
    positions = range(t.positions)
    domains = range(t.num_domains)
    cells = stage_cells(t)
    if not cells:
        raise ValueError(f"pair dp {t.dp}, micro-batch {t.micro_batch}: no stage cell")
    model.cells = pyo.Set(initialize=cells, dimen=3)
    links = [(p, k, q) for p in range(t.positions - 1) for k in domains for q in domains]
    model.links = pyo.Set(initialize=links, dimen=3)

    model.u = pyo.Var(positions, domain=pyo.Binary)
    model.z = pyo.Var(model.cells, domain=pyo.Binary)
    model.n = pyo.Var(model.cells, domain=pyo.NonNegativeIntegers, bounds=(0, t.layers))
    model.y = pyo.Var(model.links, bounds=(0, 1))
    model.u[0].fix(1)
    if t.interleaved:  # a cell has exactly S stages
        for p in positions:
            model.u[p].fix(1)
    v = t.virtual_stages  # crossings of a boundary a micro-batch, each direction

    def first(p):  # 1 iff p is the first stage (the highest active position)
        return model.u[p] - (model.u[p + 1] if p + 1 < t.positions else 0)

    by_position = {p: [c for c in cells if c[0] == p] for p in positions}
    by_domain = {k: [c for c in cells if c[1] == k] for k in domains}
    model.contiguous = pyo.Constraint(range(t.positions - 1),
                                      rule=lambda m_, p: m_.u[p + 1] <= m_.u[p])
    model.one_option = pyo.Constraint(
        positions, rule=lambda m_, p: sum(m_.z[c] for c in by_position[p]) == m_.u[p])
    model.min_layers = pyo.Constraint(model.cells, rule=lambda m_, *c: m_.n[c] >= v * m_.z[c])
    model.memory_cap = pyo.Constraint(model.cells, rule=lambda m_, p, k, o: m_.n[p, k, o] <= (
        t.layer_cap_first[p, o] * m_.z[p, k, o]
        + (t.layer_cap[p, o] - t.layer_cap_first[p, o]) * (1 - first(p))))
    model.memory_cap_any = pyo.Constraint(
        model.cells, rule=lambda m_, p, k, o: m_.n[p, k, o] <= t.layer_cap[p, o] * m_.z[p, k, o])
    model.all_layers = pyo.Constraint(expr=sum(model.n[c] for c in cells) == t.layers)

    # GPUs per domain and in total; a domain no option fits has no cells and no constraint.
    hosts = [k for k in domains if by_domain[k]]
    model.domain_gpus = pyo.Constraint(hosts, rule=lambda m_, k: sum(
        int(t.gpus[c[2]]) * m_.z[c] for c in by_domain[k]) <= int(t.free_gpus[k]))
    model.gpus = pyo.Expression(expr=sum(int(t.gpus[c[2]]) * model.z[c] for c in cells))

    # Links: transportation linearisation between positions p+1 (sender) and p.
    def located(p, k):
        return sum(model.z[c] for c in by_position[p] if c[1] == k)

    # Two consecutive stages in one domain need GPUs for both: the same-domain share of y is
    # split by the pair of options, and only pairs whose GPUs fit the domain exist. Without
    # this the LP relaxation chains fractional stages inside one domain and ignores the WAN.
    cell_set = set(cells)
    pairs = [(p, k, a, b) for p in range(t.positions - 1) for k in domains
             for a in range(t.num_options) for b in range(t.num_options)
             if (p + 1, k, a) in cell_set and (p, k, b) in cell_set
             and t.gpus[a] + t.gpus[b] <= t.free_gpus[k]]
    model.same = pyo.Var(pairs, bounds=(0, 1))
    model.same_def = pyo.Constraint(range(t.positions - 1), domains, rule=lambda m_, p, k: (
        m_.y[p, k, k] == sum(m_.same[q] for q in pairs if q[0] == p and q[1] == k)))
    model.same_from = pyo.Constraint(
        [c for c in cells if c[0] >= 1], rule=lambda m_, p, k, a: sum(
            m_.same[q] for q in pairs if q[0] == p - 1 and q[1] == k and q[2] == a)
        <= m_.z[p, k, a])
    model.same_to = pyo.Constraint(
        [c for c in cells if c[0] < t.positions - 1], rule=lambda m_, p, k, b: sum(
            m_.same[q] for q in pairs if q[0] == p and q[1] == k and q[3] == b)
        <= m_.z[p, k, b])

    model.link_out = pyo.Constraint(range(t.positions - 1), domains, rule=lambda m_, p, k: sum(
        m_.y[p, k, q] for q in domains) == located(p + 1, k))
    model.link_in = pyo.Constraint(range(t.positions - 1), domains, rule=lambda m_, p, q: sum(
        m_.y[p, k, q] for k in domains) <= located(p, q))
    model.delta = pyo.Expression(range(t.positions - 1), rule=lambda m_, p: sum(
        float(t.delay[k, q]) * m_.y[p, k, q] for k in domains for q in domains))
    model.occupancy = pyo.Expression(range(t.positions - 1), rule=lambda m_, p: v * sum(
        float(t.occupancy[k, q]) * m_.y[p, k, q] for k in domains for q in domains))
    model.cost = pyo.Expression(expr=v * sum(
        float(t.cost[k, q]) * model.y[p, k, q] for (p, k, q) in links if k != q))

    # Stage compute c[p]; the embedding term only on the first stage.
    max_first = float(t.first_time.max())
    model.first_compute = pyo.Var(positions, bounds=(0, max_first))
    model.first_compute_def = pyo.Constraint(positions, rule=lambda m_, p: m_.first_compute[p] >= (
        sum(float(t.first_time[c[2]]) * m_.z[c] for c in by_position[p])
        - max_first * (1 - first(p))))
    # ... and at most that, so that it is exact: an epigraph the solver could inflate would
    # let a plan buy the WAN share cap's period with compute it does not have (audit seed
    # 1061896966: a plan 1.3e-4 short of the period the cap needs, "optimal")
    model.first_compute_on = pyo.Constraint(positions, rule=lambda m_, p: m_.first_compute[p] <= (
        sum(float(t.first_time[c[2]]) * m_.z[c] for c in by_position[p])))
    model.first_compute_first = pyo.Constraint(positions, rule=lambda m_, p: (
        m_.first_compute[p] <= max_first * first(p)))
    model.compute = pyo.Expression(positions, rule=lambda m_, p: sum(
        float(t.layer_time[c[2]]) * m_.n[c]
        + (float(t.last_time[c[2]]) * m_.z[c] if p == 0 else 0.0) for c in by_position[p])
        + m_.first_compute[p])

    # 1F1B period: stage compute, link occupancy, round trip of every window of positions.
    model.period = pyo.Var(bounds=(0, None))
    model.period_compute = pyo.Constraint(
        positions, rule=lambda m_, p: m_.period >= m_.compute[p])
    model.period_link = pyo.Constraint(
        range(t.positions - 1), rule=lambda m_, p: m_.period >= m_.occupancy[p])
    windows = [(k, j) for k in positions for j in positions if j > k and not t.interleaved]
    model.period_window = pyo.Constraint(windows, rule=lambda m_, k, j: (j - k + 1) * m_.period >= (
        sum(m_.compute[i] for i in range(k, j + 1)) + 2 * sum(m_.delta[i] for i in range(k, j))))

    # Data-parallel all-reduce and optimizer epigraphs (max over stages, affine in params).
    def stage_params_time(coefficient, p):
        """sum over the position's cells of coefficient * (params without embedding)."""
        return sum(float(coefficient(c)) * (t.layer_params * model.n[c]
                                            + (t.head_params * model.z[c] if p == 0 else 0))
                   for c in by_position[p])

    def first_params_time(name, coefficient):
        bound = float(max(coefficient(c) for c in cells)) * t.embedding_params
        var = pyo.Var(positions, bounds=(0, bound))
        model.add_component(name, var)
        model.add_component(name + "_def", pyo.Constraint(positions, rule=lambda m_, p: var[p] >= (
            sum(float(coefficient(c)) * t.embedding_params * m_.z[c] for c in by_position[p])
            - bound * (1 - first(p)))))
        return var

    def allreduce_coefficient(c):
        return t.allreduce_per_param[c[1], c[2]]

    def optimizer_coefficient(c):
        return t.optimizer_per_param[c[2]]

    ar_first = first_params_time("allreduce_first", allreduce_coefficient)
    opt_first = first_params_time("optimizer_first", optimizer_coefficient)
    model.allreduce = pyo.Var(bounds=(0, None))
    model.allreduce_def = pyo.Constraint(positions, rule=lambda m_, p: m_.allreduce >= (
        stage_params_time(allreduce_coefficient, p) + ar_first[p]
        + sum(float(t.allreduce_fixed[c[1], c[2]]) * m_.z[c] for c in by_position[p])))
    model.optimizer = pyo.Var(bounds=(0, None))
    model.optimizer_def = pyo.Constraint(positions, rule=lambda m_, p: m_.optimizer >= (
        stage_params_time(optimizer_coefficient, p) + opt_first[p]))

    if t.interleaved:
        model.step_time = pyo.Expression(expr=_interleaved_pipeline(model, t, by_position)
                                         + model.allreduce + model.optimizer)
    else:
        model.step_time = pyo.Expression(expr=(
            (t.micro_batches - 1) * model.period + sum(model.compute[p] for p in positions)
            + 2 * sum(model.delta[p] for p in range(t.positions - 1))
            + model.allreduce + model.optimizer))

    # Caps (mutable for the epsilon-constraint method) and the instance's own constraints.
    model.gpu_cap = pyo.Param(mutable=True, initialize=NO_CAP)
    model.cost_cap = pyo.Param(mutable=True, initialize=NO_CAP)
    model.step_cap = pyo.Param(mutable=True, initialize=NO_CAP)
    # With a step-time cap the period is at most cap / (m - 1), so no stage can carry more
    # layers than fit in that period: a cap on n per unit of z that is far tighter in the LP
    # relaxation than the memory cap when the pool prunes with a good incumbent.
    model.period_cap = pyo.Param(mutable=True, initialize=NO_CAP)
    model.period_layers = pyo.Constraint(model.cells, rule=lambda m_, p, k, o: (
        float(t.layer_time[o]) * m_.n[p, k, o] <= m_.period_cap * m_.z[p, k, o]))
    # Cuts from valid lower bounds of the request (solvers.bounds), inactive without one:
    # the period is at least its floor, and each cell's compute fits the period in a
    # McCormick form of ``compute <= period * z`` (a stage that is on fits the period; one
    # that is off needs the period only to reach its floor), which keeps the LP from
    # buying a fraction of a GPU-hungry stage with a matching fraction of the layers.
    model.period_floor = pyo.Param(mutable=True, initialize=0.0)
    model.period_floor_cells = pyo.Constraint(model.cells, rule=lambda m_, p, k, o: (
        float(t.layer_time[o]) * m_.n[p, k, o]
        + (float(t.last_time[o]) * m_.z[p, k, o] if p == 0 else 0.0)
        <= m_.period - m_.period_floor * (1 - m_.z[p, k, o])))
    model.step_floor = pyo.Param(mutable=True, initialize=0.0)
    model.step_floor_con = pyo.Constraint(expr=model.step_time >= model.step_floor)
    model.gpu_cap_con = pyo.Constraint(expr=model.gpus <= model.gpu_cap)
    model.cost_cap_con = pyo.Constraint(expr=model.cost <= model.cost_cap)
    model.step_cap_con = pyo.Constraint(expr=model.step_time <= model.step_cap)
    constraints = t.instance.constraints
    if constraints.cost_budget is not None:
        model.budget = pyo.Constraint(expr=model.cost <= constraints.cost_budget)
    if constraints.wan_share_cap is not None:
        if t.interleaved:  # the cap needs the term that sets the period, not a graph's
            raise ValueError("the MILP states a WAN share cap for plain 1F1B only")
        _wan_share_cap(model, t, constraints.wan_share_cap, windows)
    model.weights = pyo.Param(range(3), mutable=True, initialize={0: 1.0, 1: 0.0, 2: 0.0})
    model.objective = pyo.Objective(expr=model.weights[0] * model.step_time
                                    + model.weights[1] * model.gpus
                                    + model.weights[2] * model.cost)
    return model


def _interleaved_pipeline(model: pyo.ConcreteModel, t: PairTables, by_position: dict):
    """An interleaved cell's pipeline time (:mod:`formulation.evaluator`), adding to the
    model the wrap-around link and the period of the schedule graph
    (:mod:`formulation.schedule_graph`) as potentials: ``P`` covers the largest cycle ratio
    of the graph iff every node has a potential ``pi`` with ``pi[b] >= pi[a] + w_e - S P
    tokens_e`` on each edge a -> b (no cycle is heavier than S P per group), every ``w_e``
    linear in the layers and the links. Returns the expression of T_pipe."""
    s, v, domains = t.positions, t.virtual_stages, range(t.num_domains)
    first, last = s - 1, 0
    # The wrap-around: activations from the last stage (position 0) to the first.
    model.wrap = pyo.Var(domains, domains, bounds=(0, 1))
    model.wrap_out = pyo.Constraint(domains, rule=lambda m_, k: sum(
        m_.wrap[k, q] for q in domains) == sum(m_.z[c] for c in by_position[last] if c[1] == k))
    model.wrap_in = pyo.Constraint(domains, rule=lambda m_, q: sum(
        m_.wrap[k, q] for k in domains) == sum(m_.z[c] for c in by_position[first] if c[1] == q))

    def link(table: np.ndarray, j: int):
        """A link term of front boundary j (stage j -> j + 1; j = S - 1: the wrap)."""
        if j == s - 1:
            return sum(float(table[k, q]) * model.wrap[k, q] for k in domains for q in domains)
        p = s - 2 - j  # y[p] joins position p + 1 (stage j) to p (stage j + 1)
        return sum(float(table[k, q]) * model.y[p, k, q] for k in domains for q in domains)

    def forward(i: int):  # stage i from the front
        p = s - 1 - i
        return sum(float(t.forward_time[c[2]]) * model.n[c]
                   + (float(t.first_forward[c[2]]) * model.z[c] if p == first else 0.0)
                   + (float(t.last_forward[c[2]]) * model.z[c] if p == last else 0.0)
                   for c in by_position[p])

    forwards = [forward(i) for i in range(s)]
    terms = (forwards + [model.compute[s - 1 - i] - forwards[i] for i in range(s)]
             + [link(table, j) for table in (t.drain_forward, t.drain_backward,
                                            t.latency_forward, t.latency_backward)
                for j in range(s)])
    wrap_occupancy = (v - 1) * link(t.occupancy, s - 1)
    model.wrap_cost = pyo.Expression(expr=(v - 1) * sum(
        float(t.cost[k, q]) * model.wrap[k, q] for k in domains for q in domains if k != q))
    model.cost.expr = model.cost.expr + model.wrap_cost
    model.period_wrap = pyo.Constraint(expr=model.period >= wrap_occupancy)
    graph = schedule_graph(s, v)
    model.potential = pyo.Var(range(graph.nodes))
    model.potential[0].fix(0.0)  # potentials are defined up to a constant
    model.period_graph = pyo.Constraint(range(len(graph.source)), rule=lambda m_, e: (
        m_.potential[int(graph.target[e])] - m_.potential[int(graph.source[e])]
        >= sum(float(graph.coefficient[e, q]) * terms[int(graph.term[e, q])]
               for q in range(2) if graph.term[e, q] >= 0)
        - s * int(graph.tokens[e]) * m_.period))
    compute = sum(model.compute[p] for p in range(s))
    crossings = 2 * (v * sum(model.delta[p] for p in range(s - 1))
                     + (v - 1) * link(t.delay, s - 1))
    model.pipeline = pyo.Var(bounds=(0, None))
    model.pipeline_steady = pyo.Constraint(expr=model.pipeline >= (
        (t.micro_batches - 1) * model.period + compute / v + (1 - 1 / v) * model.period
        + crossings))
    model.pipeline_path = pyo.Constraint(expr=model.pipeline >= compute + crossings)
    return model.pipeline


def _wan_share_cap(model: pyo.ConcreteModel, t: PairTables, share: float,
                   windows: list[tuple[int, int]]) -> None:
    """SPEC 5: a WAN link may be busy at most ``share`` of the period, i.e. the period (the
    largest of its terms) must reach ``occupancy / share`` on every WAN boundary. ``P`` is
    only an epigraph, which the solver could inflate to meet the cap, so the cap is put on
    the terms: one binary picks a term that must reach the required period."""
    domains = range(t.num_domains)
    positions = range(t.positions)
    needed = max(float(t.occupancy[k, q]) for k in domains for q in domains if k != q) / share
    model.wan_required = pyo.Var(bounds=(0, needed))
    model.wan_required_def = pyo.Constraint(range(t.positions - 1), rule=lambda m_, p: (
        share * m_.wan_required >= sum(float(t.occupancy[k, q]) * m_.y[p, k, q]
                                       for k in domains for q in domains if k != q)))
    terms = ([model.compute[p] for p in positions]
             + [model.occupancy[p] for p in range(t.positions - 1)]
             + [(sum(model.compute[i] for i in range(k, j + 1))
                 + 2 * sum(model.delta[i] for i in range(k, j))) / (j - k + 1)
                for k, j in windows])
    model.wan_pick = pyo.Var(range(len(terms)), domain=pyo.Binary)
    model.wan_pick_one = pyo.Constraint(expr=sum(model.wan_pick.values()) == 1)
    model.wan_term = pyo.Constraint(range(len(terms)), rule=lambda m_, i: (
        terms[i] >= m_.wan_required - needed * (1 - m_.wan_pick[i])))


def choices(model: pyo.ConcreteModel) -> dict[int, StageChoice]:
    """The model's current (integral) solution as position -> choices."""
    return {p: StageChoice(int(k), int(o), int(round(pyo.value(model.n[p, k, o]))))
            for (p, k, o) in model.cells if pyo.value(model.z[p, k, o]) > 0.5}


def model_values(model: pyo.ConcreteModel, tables: PairTables) -> ModelValues:
    """The MILP's value of the plan it encodes: its own link variables (delta, occupancy,
    cost from the transportation linearisation) and every epigraph at its tight value."""
    active = sorted(p for p in range(tables.positions) if pyo.value(model.u[p]) > 0.5)
    boundaries = active[:-1]
    links = ([pyo.value(model.delta[p]) for p in boundaries],
             [pyo.value(model.occupancy[p]) for p in boundaries],
             [sum(float(tables.cost[k, q]) * pyo.value(model.y[p, k, q])
                  for k in range(tables.num_domains) for q in range(tables.num_domains) if k != q)
              for p in boundaries])
    return choice_values(tables, choices(model), links)
