"""The compiled loops of the ``labels`` engine (:mod:`solvers.labels`), in numba.

Two kernels, both over the positions of a pipeline counted from its end (0 = the last stage,
which holds the LM head), for one (dp, micro-batch) pair at a fixed period cap ``P``:

* :func:`completion`: a lower bound on what a partial plan still has to pay, by a backward
  DP over (position, domain, GPUs of the current segment, layers placed), each position's
  domains shared among numba's threads where they pay (:func:`threads_pay`);
* :func:`label_dp`: the label-setting DP itself (labels, dominance, the least objective).

A label-setting DP is a sequence of small, data-dependent branches over lists of
non-dominated partial plans, which numpy cannot vectorise and CPython runs about 100x
slower than compiled code; numba compiles it (``cache=True``: once per machine, the compiled
code is kept beside this file).
"""

from __future__ import annotations

import functools
import time

import numba as nb
import numpy as np

INF = 1e300
LABEL_LIMIT = 1  # label_dp's status when it stopped at its label or work budget, or deadline
# label_dp reads the clock once per this many units of work (a few milliseconds; a reading
# costs about a microsecond, through numba's object mode)
CLOCK_EVERY = 1 << 16
# added to the rank of a dive's thin stage (probe), above any S in seconds: it comes last
THIN = 1e9
# completion's middle stages: a window of at most this many layers is minimised directly
# (vectorised passes, one per layer count); above it by doubling (_next_stage)
DIRECT_WINDOW = 8
# The columns of label_dp's label records
_SEG, _GPUS, _COST, _EXCESS, _VALUE, _NEXT, _ALIVE = 0, 1, 2, 3, 4, 5, 6


@nb.njit(cache=True)
def _now():
    """``time.perf_counter()`` inside compiled code."""
    with nb.objmode(now="float64"):
        now = time.perf_counter()
    return now


@nb.njit(cache=True)
def _grow(a, size):
    b = np.empty((size,) + a.shape[1:], a.dtype)
    b[:a.shape[0]] = a
    return b


@nb.njit(cache=True)
def _next_stage(dst, rest, step, first_time, cap, cap_first, layers, layer_time, window):
    """``dst[l] = min(dst[l], step[n] + rest[l + n])`` over the middle stages of n layers
    (``1 <= n <= cap``, layers left after them), and ``step[L - l] + first_time`` where the
    next stage closes the plan as the first (``L - l <= cap_first``).

    ``step[n]`` is ``step[0] + n * layer_time``, so the middle stages' minimum is one over a
    sliding window: ``min(g[l + 1 .. l + cap]) - l * layer_time + step[0]`` with ``g[m] =
    rest[m] + m * layer_time``. Above ``DIRECT_WINDOW`` layers it is computed so, by
    doubling (``log2 cap`` passes over the row instead of ``cap``); the sums then round
    differently: the error grows with ``l * layer_time``, not with the entry, so up to
    about ``layers`` units in its last place (1.5e-15 relative on a K = 20 70B front).
    ``window`` is scratch of at least ``2 * layers`` entries, those from ``layers`` on
    ``INF`` (the plan's last layer is the first stage's)."""
    for lo in range(max(layers - cap_first, 0), layers):
        dst[lo] = min(dst[lo], step[layers - lo] + first_time)
    most = min(cap, layers - 1)
    if most <= DIRECT_WINDOW:
        for n in range(1, most + 1):
            s = step[n]
            for lo in range(layers - n):
                dst[lo] = min(dst[lo], s + rest[lo + n])
        return
    g = window
    for m in range(layers):
        g[m] = rest[m] + m * layer_time
    span = 1  # g[m] is the least of g over [m, m + span)
    while 2 * span <= most:
        for m in range(1, layers - span):
            g[m] = min(g[m], g[m + span])
        span *= 2
    base = step[0]
    for lo in range(layers - 1):
        least = min(g[lo + 1], g[lo + most - span + 1])
        dst[lo] = min(dst[lo], least - lo * layer_time + base)


def _completion_kernel(parallel: bool):
    """:func:`completion`'s loops, compiled serial (``range``) or with each position's
    domains shared among numba's threads (``nb.prange``: a domain's rows at a position read
    only the next position's, so the threads write apart and the table is the same bit for
    bit; numba spreads the table's first fill too). One source, two compilations, cached
    apart (the loop is a closure variable, part of numba's cache key)."""
    loop = nb.prange if parallel else range

    @nb.njit(cache=True, parallel=parallel)
    def kernel(period, layers, positions, domains, options, dp, layer_time, first_time, gpus,
               cap, cap_first, free, delay, occupancy, units):
        """The tables of :func:`completion`."""
        f = np.full((positions, domains, units + 1, layers + 1), INF)
        f[:, :, :, layers] = 0.0
        most = gpus.max() if options > 0 else 0
        fresh = np.full((domains, layers + 1), INF)
        best_rows = np.empty((domains, layers))  # scratch, a row per domain
        windows = np.full((domains, 2 * layers + 2), INF)
        # n layers of option o: n c_o in a new segment, 2 delta_kk + n c_o staying in domain k
        step_new = np.empty((options, layers + 1))
        step_stay = np.empty((domains, options, layers + 1))
        for o in range(options):
            for n in range(layers + 1):
                step_new[o, n] = n * layer_time[o]
                for k in range(domains):
                    step_stay[k, o, n] = 2.0 * delay[k, k] + n * layer_time[o]
        # an option with no fewer GPUs, no faster layers, no cheaper embedding and no larger
        # caps than another at a position adds no smaller value there (the table grows with u)
        keep = np.ones((positions, options), np.bool_)
        for p in range(1, positions):
            for o in range(options):
                for o2 in range(options):
                    if o2 != o and gpus[o2] <= gpus[o] and layer_time[o2] <= layer_time[o] \
                            and first_time[o2] <= first_time[o] and cap[p, o2] >= cap[p, o] \
                            and cap_first[p, o2] >= cap_first[p, o] \
                            and (o2 < o or gpus[o2] < gpus[o] or layer_time[o2] < layer_time[o]
                                 or first_time[o2] < first_time[o] or cap[p, o2] > cap[p, o]
                                 or cap_first[p, o2] > cap_first[p, o]):
                        keep[p, o] = False
                        break
        for j in range(positions - 2, -1, -1):
            p = j + 1
            for kk in loop(domains):
                row = fresh[kk]
                window = windows[kk]
                for lo in range(layers):
                    row[lo] = INF
                for o in range(options):
                    if not keep[p, o] or gpus[o] > free[kk] or gpus[o] // dp > units:
                        continue
                    _next_stage(row, f[p, kk, gpus[o] // dp], step_new[o], first_time[o],
                                cap[p, o], cap_first[p, o], layers, layer_time[o], window)
            for k in loop(domains):
                best = best_rows[k]
                window = windows[k]
                top = min(free[k] // dp, units)
                room = min(free[k], units * dp) - (positions - 1 - j) * most
                low = min(room // dp, top) if room >= 0 else 0
                for lo in range(layers):
                    best[lo] = INF
                for kk in range(domains):  # layers innermost: contiguous rows
                    if kk != k and occupancy[kk, k] <= period:
                        hop, row = 2.0 * delay[kk, k], fresh[kk]
                        for lo in range(layers):
                            best[lo] = min(best[lo], hop + row[lo])
                for u in range(low, top + 1):
                    dst = f[j, k, u]
                    for lo in range(layers):
                        dst[lo] = best[lo]
                    for o in range(options):
                        if not keep[p, o] or u * dp + gpus[o] > free[k] \
                                or u + gpus[o] // dp > units:
                            continue
                        _next_stage(dst, f[p, k, u + gpus[o] // dp], step_stay[k, o],
                                    first_time[o], cap[p, o], cap_first[p, o], layers,
                                    layer_time[o], window)
                for u in range(low):
                    f[j, k, u] = f[j, k, low]
        return f

    return kernel


_COMPLETION = {False: _completion_kernel(False), True: _completion_kernel(True)}


@functools.cache  # numba picks its layer once per process
def _threading_layer() -> str:
    """numba's threading layer, or ``"none"`` where none loads (``NUMBA_THREADING_LAYER``
    names one not installed: the serial loops need none)."""
    try:
        nb.get_num_threads()  # launches numba's threads, which picks the layer
        return nb.threading_layer()
    except ValueError:
        return "none"


def threads_pay() -> bool:
    """Whether :func:`completion` shares a table's domains among threads: this thread may
    use more than one (``numba.set_num_threads``; a worker of a local pool gets its share of
    the cores, :mod:`solvers.parallel`), and numba's threading layer starts a loop in
    microseconds (OpenMP or TBB; under its own ``workqueue``, the fallback where neither
    is installed, 200 tables of a K = 20 70B front took twice the serial loops' time, even
    with one thread)."""
    return _threading_layer() not in ("workqueue", "none") and nb.get_num_threads() > 1


def table_threads() -> str:
    """How this thread's :func:`completion` runs, for a benchmark's report."""
    layer = _threading_layer()
    if threads_pay():
        return f"{nb.get_num_threads()} threads (numba's {layer} layer)"
    if layer == "none":
        return "serial (no numba threading layer loads)"
    if nb.get_num_threads() <= 1:
        return "serial (one thread)"
    return f"serial (numba's {layer} layer does not pay)"


def completion(period, layers, positions, domains, options, dp, layer_time, first_time, gpus,
               cap, cap_first, free, delay, occupancy, units):
    """``F[j, k, u, l]``: the least ``sum c + 2 sum delta`` still to come after a stage at
    position j in domain k, with l layers placed and ``u * dp`` GPUs in the current segment of
    k, where no segment takes more than ``units * dp`` GPUs (the most any plan's segment
    takes, its positions' or its domain's, or a run's GPU cap: a table for a cap is
    smaller, and tighter under it). Relaxed: no windows, and a domain entered again has
    all its GPUs free. ``F[j, ., ., L] = 0``; ``INF`` where no completion exists.

    Layers last, so that the inner loops over layers read one contiguous row. A segment
    whose domain keeps room for every stage still to come (``u * dp`` plus the most GPUs of
    the stages after j within its free GPUs and ``units * dp``) meets no GPU check, so its
    row is that of ``u = 0``: it is copied, not computed (a domain with twice the GPUs any
    plan holds has only such rows). Each position's domains are shared among threads where
    they pay (:func:`threads_pay`; the same table either way)."""
    return completion_kernel()(period, layers, positions, domains, options, dp, layer_time,
                               first_time, gpus, cap, cap_first, free, delay, occupancy,
                               units)


def completion_kernel():
    """The compiled loops :func:`completion` runs in this thread (:func:`threads_pay`)."""
    return _COMPLETION[threads_pay()]


@nb.njit(cache=True)
def least_gpus(layers, positions, options, gpus, cap, cap_first):
    """``G[j, l]``: the fewest GPUs the stages after position j need for the layers left
    (domains ignored; a large number where they cannot hold them)."""
    out = np.full((positions, layers + 1), 1 << 30, np.int64)
    out[:, layers] = 0
    for j in range(positions - 2, -1, -1):
        p = j + 1
        for lo in range(layers):
            for o in range(options):
                if 1 <= layers - lo <= cap_first[p, o]:
                    out[j, lo] = min(out[j, lo], gpus[o])
                for n in range(1, min(cap[p, o], layers - lo - 1) + 1):
                    out[j, lo] = min(out[j, lo], gpus[o] + out[p, lo + n])
    return out


@nb.njit(cache=True)
def label_dp(period, layers, positions, domains, options, dp, layer_time, first_time, last_time,
             gpus, cap, cap_first, free, delay, occupancy, wan_limit, cost, weights, gpu_cap,
             cost_cap,
             value_cap, completion_bound, units, gpus_left_min, gpus_left_max, cost_left_max,
             carry_floor, smallest_stage, critical, critical_count, label_budget, work_budget,
             deadline, feasibility):
    """The least ``w_T (sum c + 2 sum delta) + w_N N + w_C C`` over the plans whose 1F1B
    period is at most ``period`` and whose stages fit ``cap`` / ``cap_first`` (per position,
    domain and option: memory, period, all-reduce and optimizer caps folded into layer
    counts), under the GPU and cost caps, below ``value_cap``; a WAN boundary is busy at
    most ``wan_limit`` (the period, or less under a WAN share cap).

    A label is a partial plan: its stages at positions 0..j. Its fields: position j, layers
    placed, domain of stage j, GPUs of the current segment in that domain, GPUs ``N``, cost
    ``C``, value (the weighted sum above, so far), ``M`` the largest round-trip excess of a
    window ending at j (``sum (c - P) + 2 sum delta``; the 1F1B windows hold iff every
    ``M <= 0``; Kadane: ``M' = c' - P + max(0, M + 2 delta)``), and the GPUs used in each
    *critical* domain (a domain entered again is checked against what it gave before only if
    critical; :mod:`solvers.labels` makes a domain critical when a plan overuses it).
    A label dominates another of the same (layers, domain) if it is at a position no
    later and no worse in every field; fields that can no longer matter are clamped first
    (``M`` below ``carry_floor``; ``N`` and ``C`` when no completion can reach their caps; a
    segment with no room for another stage), so that such labels compare equal.
    ``feasibility``: ignore the value, return the first complete plan.

    It stops (status ``LABEL_LIMIT``) at ``label_budget`` labels (memory), past
    ``work_budget`` units of work (a candidate label, kept or pruned by a bound, and each
    label a dominance walk visits count one: a count, so the same run stops at the same
    label on any machine), or past ``deadline`` (``time.perf_counter()`` seconds, ``INF``:
    none; read every ``CLOCK_EVERY`` units, so a run uses all the time it is given, not
    the work a conservative rate converts it into).

    The dominance tests are most of the time (measured on the K = 20 full-space instance:
    a run of 250,000 labels made 2.8 million candidates). Labels are kept in one list per
    (layers, domain, position), newest first, with each list's least and largest fields, so
    that a list that cannot hold a dominating (dominated) label is skipped; a new label can
    only dominate labels at its own position (the earlier ones are complete); a label that
    dominates a candidate moves to the front of its list, where the next candidates, often
    of the same source, meet it first; the fields a walk reads lie in one row per label.
    Together, on that run: 1.8 s instead of 3.2 s with one list per (layers, domain).

    Returns (status, best value, labels, work, parent, option, layers, domain arrays, and the
    best plan's last label and its first stage's option, layers and domain); the best
    plan's option is -1 if none was found below ``value_cap``.
    """
    size = 1 << 14
    placed = np.empty(size, np.int32)
    dom = np.empty(size, np.int32)
    parent = np.empty(size, np.int32)
    option = np.empty(size, np.int32)
    count_l = np.empty(size, np.int32)
    # What the dominance walks read, one row (a cache line) per label: segment GPUs, GPUs,
    # cost, window excess, value, the next label of its list, alive (1.0) or not.
    rec = np.empty((size, 8), np.float64)
    width = max(critical_count, 1)
    crit_used = np.zeros((size, width), np.int32)
    used = np.zeros(width, np.int32)
    head = -np.ones((layers + 1, domains, positions), np.int32)
    # Per list, the least and the largest of each compared field over the labels it ever
    # held: a list whose least is above the new label's in some field cannot dominate it,
    # one whose largest is below cannot be dominated by it (so the walk is skipped).
    low = np.full((layers + 1, domains, positions, 5), INF)
    high = np.full((layers + 1, domains, positions, 5), -INF)
    w_t, w_n, w_c = weights[0], weights[1], weights[2]
    count = 0
    work = 0
    check_at = min(work_budget, CLOCK_EVERY)  # the work at which the limits are next read
    best = value_cap
    best_parent, best_option, best_layers, best_domain = -1, -1, -1, -1
    previous_start = 0
    for j in range(positions):
        start = count
        sources = start if j > 0 else 1
        for src in range(previous_start, sources):
            if j > 0 and rec[src, _ALIVE] == 0.0:
                continue
            if j == 0:
                l0, k0, g0, n0, c0, v0, m0 = 0, -1, 0, 0, 0.0, 0.0, -INF
                for q in range(width):
                    used[q] = 0
            else:
                l0, k0 = placed[src], dom[src]
                g0, n0 = int(rec[src, _SEG]), int(rec[src, _GPUS])
                c0, v0, m0 = rec[src, _COST], rec[src, _VALUE], rec[src, _EXCESS]
                for q in range(width):
                    used[q] = crit_used[src, q]
            for k in range(domains):
                ck = critical[k]
                if j == 0:
                    d2, price, base = 0.0, 0.0, 0
                elif k == k0:
                    d2, price, base = 2.0 * delay[k, k0], 0.0, g0
                else:
                    if occupancy[k, k0] > wan_limit:
                        continue
                    d2, price = 2.0 * delay[k, k0], cost[k, k0]
                    base = used[ck] if ck >= 0 else 0
                c1 = c0 + price
                if c1 > cost_cap:
                    continue
                carry = max(0.0, m0 + d2) if j > 0 else 0.0
                for o in range(options):
                    g1 = base + gpus[o]
                    n1 = n0 + gpus[o]
                    if g1 > free[k] or n1 > gpu_cap:
                        continue
                    edge = last_time[o] if j == 0 else 0.0
                    g_key = g1 if free[k] - g1 >= smallest_stage else free[k]
                    u_key = min(g_key // dp, units)
                    step_v = w_n * gpus[o] + w_c * price
                    if j < positions - 1:  # a stage that is not the first: more follow
                        for n in range(1, min(cap[j, k, o], layers - l0 - 1) + 1):
                            c = n * layer_time[o] + edge
                            m1 = c - period + carry
                            if m1 > 0.0:
                                break
                            l1 = l0 + n
                            # a candidate counts even where a bound prunes it: with an
                            # incumbent from the start most are pruned here, and their
                            # time would otherwise run uncounted
                            work += 1
                            if work > check_at:
                                if work > work_budget or (deadline < INF
                                                          and _now() > deadline):
                                    return (LABEL_LIMIT, best, count, work, parent, option,
                                            count_l, dom, best_parent, best_option,
                                            best_layers, best_domain)
                                check_at = min(work_budget, work + CLOCK_EVERY)
                            if n1 + gpus_left_min[j, l1] > gpu_cap:
                                continue
                            rest = completion_bound[j, k, u_key, l1]
                            if rest >= INF:
                                continue
                            v1 = v0 + w_t * (c + d2) + step_v
                            if not feasibility and v1 + w_t * rest \
                                    + w_n * gpus_left_min[j, l1] >= best:
                                continue
                            m_key = max(m1, carry_floor)
                            n_key = n1 if n1 + gpus_left_max[j, l1] > gpu_cap else 0
                            c_key = c1 if c1 + cost_left_max[j, l1] > cost_cap else 0.0
                            old = 0
                            if ck >= 0:
                                old = used[ck]
                                used[ck] = g_key
                            # Dominance, against the labels of the same (layers, domain) at
                            # positions up to j, newest first (a dominating label is most
                            # often a recent one, made from the same or a close source).
                            dominated = False
                            for jj in range(j, -1, -1):
                                least = low[l1, k, jj]
                                if least[_SEG] > g_key or least[_GPUS] > n_key \
                                        or least[_COST] > c_key or least[_EXCESS] > m_key \
                                        or (not feasibility and least[_VALUE] > v1):
                                    continue
                                e, before = head[l1, k, jj], -1
                                while e >= 0:
                                    work += 1
                                    after = int(rec[e, _NEXT])
                                    if rec[e, _ALIVE] == 0.0:  # unlink it: later walks skip it
                                        e = after
                                        if before < 0:
                                            head[l1, k, jj] = e
                                        else:
                                            rec[before, _NEXT] = e
                                        continue
                                    if rec[e, _SEG] <= g_key and rec[e, _GPUS] <= n_key \
                                            and rec[e, _COST] <= c_key \
                                            and rec[e, _EXCESS] <= m_key \
                                            and (feasibility or rec[e, _VALUE] <= v1):
                                        dominated = True
                                        for q in range(critical_count):
                                            if crit_used[e, q] > used[q]:
                                                dominated = False
                                                break
                                        if dominated:
                                            if before >= 0:  # to the front: it may again
                                                rec[before, _NEXT] = after
                                                rec[e, _NEXT] = head[l1, k, jj]
                                                head[l1, k, jj] = e
                                            break
                                    before, e = e, after
                                if dominated:
                                    break
                            if not dominated:
                                # The labels it dominates: at position j (those before are
                                # complete and at an earlier position).
                                most = high[l1, k, j]
                                e = head[l1, k, j]
                                if most[_SEG] < g_key or most[_GPUS] < n_key \
                                        or most[_COST] < c_key or most[_EXCESS] < m_key \
                                        or (not feasibility and most[_VALUE] < v1):
                                    e = -1
                                while e >= 0:
                                    work += 1
                                    if g_key <= rec[e, _SEG] and n_key <= rec[e, _GPUS] \
                                            and c_key <= rec[e, _COST] \
                                            and m_key <= rec[e, _EXCESS] \
                                            and (feasibility or v1 <= rec[e, _VALUE]):
                                        covers = True
                                        for q in range(critical_count):
                                            if used[q] > crit_used[e, q]:
                                                covers = False
                                                break
                                        if covers:
                                            rec[e, _ALIVE] = 0.0
                                    e = int(rec[e, _NEXT])
                                if count == placed.shape[0]:
                                    if count >= label_budget:
                                        return (LABEL_LIMIT, best, count, work, parent, option,
                                                count_l, dom, best_parent, best_option,
                                                best_layers, best_domain)
                                    grown = 2 * count
                                    placed, dom = _grow(placed, grown), _grow(dom, grown)
                                    parent, option = _grow(parent, grown), _grow(option, grown)
                                    count_l, rec = _grow(count_l, grown), _grow(rec, grown)
                                    crit_used = _grow(crit_used, grown)
                                i = count
                                count += 1
                                placed[i], dom[i] = l1, k
                                parent[i] = src if j > 0 else -1
                                option[i], count_l[i] = o, n
                                rec[i, _SEG], rec[i, _GPUS], rec[i, _COST] = g_key, n_key, c_key
                                rec[i, _EXCESS], rec[i, _VALUE] = m_key, v1
                                rec[i, _NEXT], rec[i, _ALIVE] = head[l1, k, j], 1.0
                                head[l1, k, j] = i
                                for f in range(5):
                                    low[l1, k, j, f] = min(low[l1, k, j, f], rec[i, f])
                                    high[l1, k, j, f] = max(high[l1, k, j, f], rec[i, f])
                                for q in range(width):
                                    crit_used[i, q] = used[q]
                            if ck >= 0:
                                used[ck] = old
                    n = layers - l0  # the first stage: it takes the layers left
                    if 1 <= n <= cap_first[j, k, o]:
                        c = n * layer_time[o] + edge + first_time[o]
                        if c - period + carry <= 0.0:
                            v1 = v0 + w_t * (c + d2) + step_v
                            if v1 < best:
                                best = v1
                                best_parent = src if j > 0 else -1
                                best_option, best_layers, best_domain = o, n, k
                                if feasibility:
                                    return (0, best, count, work, parent, option, count_l,
                                            dom, best_parent, best_option, best_layers,
                                            best_domain)
        previous_start = start
    return (0, best, count, work, parent, option, count_l, dom, best_parent, best_option,
            best_layers, best_domain)


@nb.njit(cache=True)
def probe(period, layers, positions, domains, options, dp, layer_time, first_time, last_time,
          gpus, cap, cap_first, free, delay, occupancy, wan_limit, cost, gpu_cap, cost_cap,
          completion_bound, units, gpus_left_min, work_budget):
    """A plan whose period is at most ``period``, by a depth-first dive, before
    :func:`label_dp` pays for a feasibility run: most such runs are asked of periods many
    plans meet, where the label DP still makes every label of every position before its
    first complete plan, and a dive finds one in a few thousand steps. Nothing is relaxed:
    the GPUs of every domain are counted over all its stages, so a plan found needs no
    repair. The same checks as :func:`label_dp` (stage caps, windows, WAN occupancy, the
    GPU and cost caps, a completion that exists). At each position the candidates are two
    per (domain, option): its most layers that pass, tried in the order of the relaxed
    ``sum c + 2 sum delta`` they lead to (the stage's compute and boundary delay plus
    ``completion_bound``: the relaxation's best completion, so the dive follows its plan
    where the windows allow), then its one-layer stage, after all of those (a thin stage
    next to a WAN boundary leaves its window to the boundary's delay: the fastest plans
    near the least period hold such stages, which the most layers never make); a candidate
    that closes the plan as its first stage is tried before any other. Ordered by layers
    per GPU instead, the descent's dives (:mod:`rl.lower`) stopped 36-43 % above the least
    period of three pairs of the full search space's 70B instances, against 4-9 % so
    (tests/test_lower.py).

    Gives up after ``work_budget`` candidates (a failed dive proves nothing; the label DP
    then decides). Returns (found, work, domain, option, layers): the stages at positions
    0..found-1 (found = 0: none).
    """
    width = 2 * domains * options  # the most layers and one layer, per (domain, option)
    cand_k = np.empty((positions, width), np.int64)
    cand_o = np.empty((positions, width), np.int64)
    cand_n = np.empty((positions, width), np.int64)
    cand_c = np.empty((positions, width), np.float64)  # the cost after the candidate
    cand_m = np.empty((positions, width), np.float64)  # its window excess
    score = np.empty(width, np.float64)
    order = np.empty((positions, width), np.int64)
    size = np.zeros(positions, np.int64)
    at = np.zeros(positions, np.int64)  # the next candidate to try, per position
    used = np.zeros(domains, np.int64)
    # the state before each position's stage: layers, GPUs, cost, window excess
    s_l = np.zeros(positions + 1, np.int64)
    s_n = np.zeros(positions + 1, np.int64)
    s_c = np.zeros(positions + 1, np.float64)
    s_m = np.zeros(positions + 1, np.float64)
    dom = -np.ones(positions, np.int64)
    opt = -np.ones(positions, np.int64)
    lay = np.zeros(positions, np.int64)
    work = 0
    j = 0
    fresh = True  # position j's candidates are still to be listed
    while j >= 0:
        if fresh:
            fresh = False
            at[j], size[j] = 0, 0
            l0, n0, c0, m0 = s_l[j], s_n[j], s_c[j], s_m[j]
            k0 = dom[j - 1] if j > 0 else -1
            for k in range(domains):
                if j == 0:
                    d2, price = 0.0, 0.0
                elif k == k0:
                    d2, price = 2.0 * delay[k, k], 0.0
                else:
                    if occupancy[k, k0] > wan_limit:
                        continue
                    d2, price = 2.0 * delay[k, k0], cost[k, k0]
                c1 = c0 + price
                if c1 > cost_cap:
                    continue
                carry = max(0.0, m0 + d2) if j > 0 else 0.0
                for o in range(options):
                    work += 1
                    g1 = used[k] + gpus[o]
                    n1 = n0 + gpus[o]
                    if g1 > free[k] or n1 > gpu_cap:
                        continue
                    edge = last_time[o] if j == 0 else 0.0
                    n = layers - l0  # the first stage: it takes the layers left
                    if 1 <= n <= cap_first[j, k, o] \
                            and n * layer_time[o] + edge + first_time[o] - period + carry <= 0.0:
                        dom[j], opt[j], lay[j] = k, o, n
                        return j + 1, work, dom, opt, lay
                    if j == positions - 1:
                        continue
                    u = min(g1 // dp, units)
                    room = (period - carry - edge) / layer_time[o]  # 1e30 at an open cap
                    most = min(cap[j, k, o], layers - l0 - 1, int(min(room, layers)))
                    for n in range(most, 0, -1):
                        work += 1
                        l1 = l0 + n
                        if n * layer_time[o] + edge - period + carry > 0.0:
                            continue
                        if n1 + gpus_left_min[j, l1] > gpu_cap \
                                or completion_bound[j, k, u, l1] >= INF:
                            continue
                        # the most layers, then the thin stage (ranked after every
                        # most-layers one), which passes the window where they do
                        for n_c, rank in ((n, 0.0), (1, THIN)):
                            l1 = l0 + n_c
                            if rank > 0.0 and (n == 1 or n1 + gpus_left_min[j, l1] > gpu_cap
                                               or completion_bound[j, k, u, l1] >= INF):
                                break
                            i = size[j]
                            cand_k[j, i], cand_o[j, i], cand_n[j, i] = k, o, n_c
                            cand_c[j, i] = c1
                            cand_m[j, i] = n_c * layer_time[o] + edge - period + carry
                            score[i] = rank + n_c * layer_time[o] + edge + d2 \
                                + completion_bound[j, k, u, l1]
                            size[j] += 1
                        break
            if size[j] > 0:
                order[j, :size[j]] = np.argsort(score[:size[j]], kind="mergesort")
        if work > work_budget:
            return 0, work, dom, opt, lay
        # undo the stage tried last at position j, if any
        if dom[j] >= 0:
            used[dom[j]] -= gpus[opt[j]]
            dom[j] = -1
        if at[j] >= size[j]:  # none left: back to the position before
            j -= 1
            continue
        i = order[j, at[j]]
        at[j] += 1
        k, o, n = cand_k[j, i], cand_o[j, i], cand_n[j, i]
        dom[j], opt[j], lay[j] = k, o, n
        used[k] += gpus[o]
        s_l[j + 1] = s_l[j] + n
        s_n[j + 1] = s_n[j] + gpus[o]
        s_c[j + 1] = cand_c[j, i]
        s_m[j + 1] = cand_m[j, i]
        j += 1
        fresh = True
    return 0, work, dom, opt, lay
