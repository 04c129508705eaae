"""``single-domain``: the best plan inside one domain, as a traditional scheduler makes it.

Every domain, every valid (dp, micro-batch) pair, every stage count that fits the domain's
free GPUs and every uniform (tp, recompute) option, with the layers split to minimise the
slowest stage's compute within every stage's memory cap (as Megatron-LM's uneven first/last
stage splits do) and, among those splits, the fewest layers on the fullest stage (its
gradient all-reduce and optimizer step are the longest). No WAN link is used, so the plans
cost nothing in traffic. The fastest of them gives ``T_base`` of the sponsor's KPIs (SPEC 4);
the decisions are the plans that are best for some GPU budget.

The whole family is computed as arrays (:class:`UniformPlans`): the split of a uniform
option over ``c`` stages does not depend on the domain, and a plan's step time depends on
its domain only through the intra-domain network, so one row per (pair, option, stage
count, network class) covers every domain, and ``T_base`` for any free-GPU state is a
masked minimum over the rows (:meth:`UniformPlans.fastest`): a load change evaluates at
most the rows no earlier state needed. The rows are built for each domain's *total* GPUs,
so they hold in every load state.

If the model fits no single domain, the attempt with the most memory for the model (in the
largest domain: largest tp, full recompute, as many stages as fit) is returned and
reported infeasible with its violations.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from formulation.batch import RECOMPUTE_CODE, PlanBatch
from formulation.evaluator import VIOLATIONS, evaluate_batch
from formulation.instance import Instance
from formulation.plan import Plan, Stage
from instances.sample import split_layers
from solvers.baselines.common import Decisions, domains_by_free_gpus
from solvers.front import nondominated_mask
from solvers.tables import PairTables, all_pair_tables, full_capacity

BISECTIONS = 60  # halvings of the step-time threshold: far below one layer's time
_GPUS = VIOLATIONS.index("gpus")


def uniform_splits(tables: list[PairTables]) -> np.ndarray:
    """(P, O, S, S) layers per stage, front to back, of the min-max split of option ``o``
    of pair ``p`` over ``c = 1..S`` stages (row ``c - 1``; stages ``>= c`` are 0); a row of
    zeros where the model does not fit ``c`` stages of that option (``O``, ``S``: the most
    options and positions of any pair; the pairs share the model and search space).

    The least slowest stage ``tau`` is found by bisection on the threshold (stage ``j``
    then holds at most ``min(cap_j, floor((tau - extra_j) / t_layer))`` layers, ``extra``
    the embedding and head times), every pair, option and count at once; the layers are then
    water-filled up to those bounds, so the fullest stage holds as few as possible."""
    P, L = len(tables), tables[0].layers
    O = max(t.num_options for t in tables)
    S = max(t.positions for t in tables)
    cap = np.zeros((P, O, S, S), np.int64)  # (pair, option, count - 1, stage)
    per_layer, first_time, last_time = np.ones((P, O)), np.zeros((P, O)), np.zeros((P, O))
    count = np.arange(1, S + 1)[:, None]  # (C, 1)
    stage = np.arange(S)[None, :]  # (1, J) front to back
    first, last = stage == 0, stage == count - 1
    for p, t in enumerate(tables):
        real = stage < np.minimum(count, t.positions)
        position = np.clip(count - 1 - stage, 0, t.positions - 1)  # counted from the end
        caps = np.where(first[..., None], t.layer_cap_first[position], t.layer_cap[position])
        cap[p, :t.num_options] = np.where(real[..., None], caps, 0).transpose(2, 0, 1)
        per_layer[p, :t.num_options] = t.layer_time
        first_time[p, :t.num_options] = t.first_time
        last_time[p, :t.num_options] = t.last_time
    real = np.broadcast_to(stage < count, cap.shape)
    extra = first * first_time[..., None, None] + last * last_time[..., None, None]
    per_layer = per_layer[..., None, None]

    def bounds(tau: np.ndarray) -> np.ndarray:
        room = np.floor((tau[..., None] - extra) / per_layer * (1 + 1e-12))
        return np.where(real, np.minimum(cap, np.maximum(room, 0)), 0).astype(np.int64)

    def fits(b: np.ndarray) -> np.ndarray:
        return np.all((b >= 1) | ~real, axis=-1) & (b.sum(axis=-1) >= L)

    high = np.broadcast_to((L * per_layer[..., 0, 0] + first_time + last_time)[..., None],
                           (P, O, S)).copy()  # every cap binds
    ok = fits(bounds(high)) & (count[:, 0] <= L)
    low = np.zeros_like(high)
    for _ in range(BISECTIONS):
        middle = (low + high) / 2
        good = fits(bounds(middle))
        high = np.where(good, middle, high)
        low = np.where(good, low, middle)
    top = np.where(ok[..., None], bounds(high), 0)
    # water-filling: the least level such that min(top, level) holds every layer
    level_low, level_high = np.zeros(ok.shape, np.int64), np.full(ok.shape, L, np.int64)
    while np.any(level_high - level_low > 1):
        middle = (level_low + level_high) // 2
        enough = np.minimum(top, middle[..., None]).sum(axis=-1) >= L
        level_high = np.where(enough, middle, level_high)
        level_low = np.where(enough, level_low, middle)
    layers = np.minimum(top, level_high[..., None])
    excess = layers.sum(axis=-1) - L  # < the stages at the level: take one from the front ones
    at_level = (layers == level_high[..., None]) & real
    layers -= at_level & (np.cumsum(at_level, axis=-1) <= excess[..., None])
    return np.where(ok[..., None], layers, 0)


@dataclass(frozen=True, eq=False)
class UniformPlans:
    """Every balanced uniform one-domain plan shape of an instance, as arrays (module doc):
    row ``i`` is ``batch.plan(i)`` placed in domain class ``network[i]`` (its
    representative domain), taking ``gpus[i]`` GPUs, with step time ``step_time_s[i]``
    (``inf`` where it breaks a limit other than the free GPUs).

    Rows are evaluated on demand: :meth:`fastest` evaluates them in the order of a lower
    bound on their step time, ``(m - 1) max_j c_j + sum_j c_j`` (the 1F1B period is at
    least the slowest stage's compute), until no row left can be faster."""

    batch: PlanBatch
    gpus: np.ndarray  # (R,)
    lower_bound: np.ndarray  # (R,) seconds, at most the row's step time
    network: np.ndarray  # (R,) network class of the row
    domain_network: np.ndarray  # (K,) network class of each domain
    instance: Instance  # at full capacity, where the rows are evaluated
    times: np.ndarray  # (R,) step times evaluated so far, NaN: not yet

    CHUNK = 256  # rows evaluated per batch

    def _evaluate(self, rows: np.ndarray) -> None:
        rows = rows[np.isnan(self.times[rows])]
        if len(rows):
            result = evaluate_batch(self.instance, self.batch.take(rows))
            others = np.delete(result.violation, _GPUS, axis=1).any(axis=1)
            self.times[rows] = np.where(others, np.inf, result.step_time_s)

    @property
    def step_time_s(self) -> np.ndarray:
        for start in range(0, len(self.gpus), self.CHUNK * 16):  # memory bounded by chunks
            self._evaluate(np.arange(start, min(start + self.CHUNK * 16, len(self.gpus))))
        return self.times

    def fits(self, free: np.ndarray) -> np.ndarray:
        """(R, K) bool: row ``i`` fits domain ``k`` (same network class, enough free GPUs)."""
        return ((self.network[:, None] == self.domain_network[None, :])
                & (self.gpus[:, None] <= np.asarray(free)[None, :]))

    def usable(self, free: np.ndarray) -> np.ndarray:
        """(R, K) bool: row ``i`` fits domain ``k`` and breaks no other limit."""
        return self.fits(free) & np.isfinite(self.step_time_s)[:, None]

    def fastest(self, free: np.ndarray) -> tuple[int, int] | None:
        """(row, domain) of the fastest plan that fits the free GPUs, the fewest GPUs
        among equals (the one-domain front's point); None if none does."""
        fits = self.fits(free)
        rows = np.flatnonzero(fits.any(axis=1))
        rows = rows[np.argsort(self.lower_bound[rows], kind="stable")]
        best = np.inf
        for start in range(0, len(rows), self.CHUNK):
            if self.lower_bound[rows[start]] > best:  # no row left can match the best
                rows = rows[:start]
                break
            self._evaluate(rows[start:start + self.CHUNK])
            best = min(best, float(self.times[rows[start:start + self.CHUNK]].min()))
        if not np.isfinite(best):
            return None
        times = self.times[rows]
        row = int(rows[np.lexsort((self.gpus[rows], times))[0]])
        return row, int(np.argmax(fits[row]))

    def plan(self, row: int, domain: int) -> Plan:
        plan = self.batch.plan(int(row))
        return Plan(dp=plan.dp, micro_batch=plan.micro_batch, stages=tuple(
            Stage(int(domain), s.layers, s.tp, s.recompute) for s in plan.stages))


def uniform_plans(instance: Instance, tables: list[PairTables] | None = None) -> UniformPlans:
    """The :class:`UniformPlans` of ``instance``, for every load state (module doc);
    ``tables``: its pairs' tables at :func:`~solvers.tables.full_capacity`, if built."""
    total = instance.domain_gpus
    roomy = full_capacity(instance)
    keys = [(d.intra_bandwidth_gbps, d.intra_latency_ms) for d in instance.domains]
    classes = list(dict.fromkeys(keys))
    domain_network = np.array([classes.index(key) for key in keys])
    representative = np.array([keys.index(key) for key in classes])
    most = np.array([total[domain_network == c].max() for c in range(len(classes))])
    tables = all_pair_tables(roomy) if tables is None else tables
    if not tables:
        tables_empty = np.zeros((0, 1), np.int64)
        empty = np.zeros(0, np.int64)
        return UniformPlans(PlanBatch.from_arrays(empty, empty, *[tables_empty] * 4), empty,
                            np.zeros(0), empty, domain_network, roomy, np.zeros(0))
    splits = uniform_splits(tables)
    pair, option, count = np.nonzero(splits.sum(axis=-1))
    per_pair = max(t.num_options for t in tables)
    code = np.zeros((len(tables), per_pair, 5), np.int64)  # dp, mb, tp, recompute, m
    seconds = np.zeros((len(tables), per_pair, 3))  # per layer, embedding, head
    for p, t in enumerate(tables):
        for o, (tp, recompute) in enumerate(t.options):
            code[p, o] = t.dp, t.micro_batch, tp, RECOMPUTE_CODE[recompute], t.micro_batches
            seconds[p, o] = t.layer_time[o], t.first_time[o], t.last_time[o]
    dp, micro_batch, tp, recompute, micro_batches = code[pair, option].T
    gpus = (count + 1) * dp * tp
    row, network = np.nonzero(gpus[:, None] <= most[None, :])  # each class it can fit
    width = splits.shape[-1]
    layers = splits[pair, option, count]  # (rows, S)
    per_layer, embedding, head = seconds[pair, option].T
    stage = np.arange(width)[None, :]
    compute = np.where(layers > 0, layers * per_layer[:, None]
                       + (stage == 0) * embedding[:, None]
                       + (stage == count[:, None]) * head[:, None], 0.0)
    bound = ((micro_batches - 1) * compute.max(axis=1) + compute.sum(axis=1)) * (1 - 1e-9)
    batch = PlanBatch.from_arrays(
        dp[row], micro_batch[row], np.repeat(representative[network][:, None], width, axis=1),
        layers[row], np.repeat(tp[row][:, None], width, axis=1),
        np.repeat(recompute[row][:, None], width, axis=1))
    return UniformPlans(batch, gpus[row], bound[row], network, domain_network, roomy,
                        np.full(len(row), np.nan))


def single_domain_candidates(instance: Instance, domains: list[int] | None = None) -> list[Plan]:
    """Every balanced uniform one-domain plan that fits its domain's free GPUs (of
    ``domains``, default all)."""
    table = uniform_plans(instance)
    free = instance.free_gpus
    usable = table.usable(free)
    domains = range(instance.num_domains) if domains is None else domains
    return [table.plan(row, k) for k in domains for row in np.flatnonzero(usable[:, k])]


def single_domain(instance: Instance) -> Decisions:
    table = uniform_plans(instance)
    free = instance.free_gpus
    row, domain = np.nonzero(table.usable(free))
    if not len(row):
        attempt = one_domain_attempt(instance, domains_by_free_gpus(instance)[0])
        return Decisions([attempt], 0, {"fits_one_domain": False})
    objectives = np.stack([table.step_time_s[row], table.gpus[row].astype(float)], axis=1)
    keep = nondominated_mask(objectives)  # no traffic inside a domain
    return Decisions([table.plan(r, k) for r, k in zip(row[keep], domain[keep], strict=True)],
                     len(row), {"fits_one_domain": True})


def one_domain_attempt(instance: Instance, domain: int) -> Plan:
    """The plan inside ``domain`` with the most memory for the model: the largest tp that
    fits at the smallest dp, full recompute if allowed, as many stages as fit."""
    search, batch = instance.search, instance.training.global_batch
    free = instance.domains[domain].free_gpus
    # the smallest dp and micro-batch of a pair of whole micro-batches (a search space has one)
    dp, micro_batch = min((r, b) for r in search.dp for b in search.micro_batch
                          if batch % (r * b) == 0)
    tps = [t for t in search.tp if t <= instance.gpu.gpus_per_node
           and instance.model.heads % t == 0 and dp * t <= free] or [min(search.tp)]
    tp = max(tps)
    count = max(1, min(search.max_stages, instance.model.layers, free // (dp * tp)))
    recompute = "full" if "full" in search.recompute else search.recompute[0]
    layers = split_layers(instance.model.layers, np.ones(count))
    return Plan(dp=dp, micro_batch=micro_batch, stages=tuple(
        Stage(domain=domain, layers=n, tp=tp, recompute=recompute) for n in layers))
