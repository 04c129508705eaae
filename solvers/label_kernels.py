"""The compiled loops of the ``labels`` engine (:mod:`solvers.labels`), in numba.

Two kernels, both over the positions of a pipeline counted from its end (0 = the last stage,
which holds the LM head), for one (dp, micro-batch) pair at a fixed period cap ``P``:

* :func:`completion`: a lower bound on what a partial plan still has to pay, by a backward
  DP over (position, layers placed, domain, GPUs of the current segment);
* :func:`label_dp`: the label-setting DP itself (labels, dominance, the least objective).

A label-setting DP is a sequence of small, data-dependent branches over lists of
non-dominated partial plans, which numpy cannot vectorise and CPython runs about 100x
slower than compiled code; numba compiles it (``cache=True``: once per machine, the compiled
code is kept beside this file).
"""

from __future__ import annotations

import numba as nb
import numpy as np

INF = 1e300
LABEL_LIMIT = 1  # label_dp's status when it stopped at its label budget


@nb.njit(cache=True)
def _grow(a, size):
    b = np.empty((size,) + a.shape[1:], a.dtype)
    b[:a.shape[0]] = a
    return b


@nb.njit(cache=True)
def completion(period, layers, positions, domains, options, dp, layer_time, first_time, gpus,
               cap, cap_first, free, delay, occupancy, units):
    """``F[j, l, k, u]``: the least ``sum c + 2 sum delta`` still to come after a stage at
    position j in domain k, with l layers placed and ``u * dp`` GPUs in the current segment of
    k (``u`` at most ``units``; more reads as ``units``, a smaller value: the bound stays
    valid). Relaxed: no windows, and a domain entered again has all its GPUs free.
    ``F[j, L, ., .] = 0``; ``INF`` where no completion exists."""
    f = np.full((positions, layers + 1, domains, units + 1), INF)
    f[:, layers, :, :] = 0.0
    fresh = np.full((layers + 1, domains), INF)  # best next stage in a new segment of k'
    for j in range(positions - 2, -1, -1):
        p = j + 1
        for kk in range(domains):
            for lo in range(layers):
                fresh[lo, kk] = INF
            for o in range(options):
                if gpus[o] > free[kk]:
                    continue
                u1 = min(gpus[o] // dp, units)
                for lo in range(layers):
                    n = layers - lo
                    if n <= cap_first[p, o]:
                        fresh[lo, kk] = min(fresh[lo, kk], n * layer_time[o] + first_time[o])
                    for n in range(1, min(cap[p, o], layers - lo - 1) + 1):
                        fresh[lo, kk] = min(fresh[lo, kk], n * layer_time[o] + f[p, lo + n, kk, u1])
        for k in range(domains):
            top = min(free[k] // dp, units)
            for lo in range(layers):
                best = INF
                for kk in range(domains):
                    if kk != k and occupancy[kk, k] <= period:
                        best = min(best, 2.0 * delay[kk, k] + fresh[lo, kk])
                for u in range(top + 1):
                    f[j, lo, k, u] = best
            stay = 2.0 * delay[k, k]
            for u in range(top + 1):
                for o in range(options):
                    if u * dp + gpus[o] > free[k]:
                        continue
                    u1 = min(u + gpus[o] // dp, units)
                    for lo in range(layers):
                        n = layers - lo
                        if n <= cap_first[p, o]:
                            f[j, lo, k, u] = min(f[j, lo, k, u],
                                                 stay + n * layer_time[o] + first_time[o])
                        for n in range(1, min(cap[p, o], layers - lo - 1) + 1):
                            f[j, lo, k, u] = min(f[j, lo, k, u],
                                                 stay + n * layer_time[o] + f[p, lo + n, k, u1])
    return f


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
             carry_floor, smallest_stage, critical, critical_count, label_budget, feasibility):
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

    Returns (status, best value, labels, parent, option, layers, domain arrays, and the
    best plan's last label and its first stage's option, layers and domain); the best
    plan's option is -1 if none was found below ``value_cap``.
    """
    size = 1 << 14
    pos = np.empty(size, np.int32)
    placed = np.empty(size, np.int32)
    dom = np.empty(size, np.int32)
    seg = np.empty(size, np.int32)
    used_n = np.empty(size, np.int32)
    used_c = np.empty(size, np.float64)
    value = np.empty(size, np.float64)
    excess = np.empty(size, np.float64)
    parent = np.empty(size, np.int32)
    option = np.empty(size, np.int32)
    count_l = np.empty(size, np.int32)
    alive = np.empty(size, np.bool_)
    chain = np.empty(size, np.int32)
    width = max(critical_count, 1)
    crit_used = np.zeros((size, width), np.int32)
    used = np.zeros(width, np.int32)
    head = -np.ones((layers + 1, domains), np.int32)
    w_t, w_n, w_c = weights[0], weights[1], weights[2]
    count = 0
    best = value_cap
    best_parent, best_option, best_layers, best_domain = -1, -1, -1, -1
    previous_start = 0
    for j in range(positions):
        start = count
        sources = start if j > 0 else 1
        for src in range(previous_start, sources):
            if j > 0 and not alive[src]:
                continue
            if j == 0:
                l0, k0, g0, n0, c0, v0, m0 = 0, -1, 0, 0, 0.0, 0.0, -INF
                for q in range(width):
                    used[q] = 0
            else:
                l0, k0, g0, n0 = placed[src], dom[src], seg[src], used_n[src]
                c0, v0, m0 = used_c[src], value[src], excess[src]
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
                            if n1 + gpus_left_min[j, l1] > gpu_cap:
                                continue
                            rest = completion_bound[j, l1, k, u_key]
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
                            dominated = False
                            e, before = head[l1, k], -1
                            while e >= 0:
                                if not alive[e]:  # unlink it: later walks skip it
                                    e = chain[e]
                                    if before < 0:
                                        head[l1, k] = e
                                    else:
                                        chain[before] = e
                                    continue
                                if pos[e] <= j and seg[e] <= g_key \
                                        and used_n[e] <= n_key and used_c[e] <= c_key \
                                        and excess[e] <= m_key \
                                        and (feasibility or value[e] <= v1):
                                    dominated = True
                                    for q in range(critical_count):
                                        if crit_used[e, q] > used[q]:
                                            dominated = False
                                            break
                                    if dominated:
                                        break
                                before, e = e, chain[e]
                            if not dominated:
                                e = head[l1, k]
                                while e >= 0:
                                    if pos[e] >= j and g_key <= seg[e] \
                                            and n_key <= used_n[e] and c_key <= used_c[e] \
                                            and m_key <= excess[e] \
                                            and (feasibility or v1 <= value[e]):
                                        covers = True
                                        for q in range(critical_count):
                                            if used[q] > crit_used[e, q]:
                                                covers = False
                                                break
                                        if covers:
                                            alive[e] = False
                                    e = chain[e]
                                if count == pos.shape[0]:
                                    if count >= label_budget:
                                        return (LABEL_LIMIT, best, count, parent, option, count_l,
                                                dom, best_parent, best_option, best_layers,
                                                best_domain)
                                    grown = 2 * count
                                    pos, placed = _grow(pos, grown), _grow(placed, grown)
                                    dom, seg = _grow(dom, grown), _grow(seg, grown)
                                    used_n, used_c = _grow(used_n, grown), _grow(used_c, grown)
                                    value, excess = _grow(value, grown), _grow(excess, grown)
                                    parent, option = _grow(parent, grown), _grow(option, grown)
                                    count_l, alive = _grow(count_l, grown), _grow(alive, grown)
                                    chain, crit_used = _grow(chain, grown), _grow(crit_used, grown)
                                i = count
                                count += 1
                                pos[i], placed[i], dom[i], seg[i] = j, l1, k, g_key
                                used_n[i], used_c[i], value[i], excess[i] = n_key, c_key, v1, m_key
                                parent[i] = src if j > 0 else -1
                                option[i], count_l[i], alive[i] = o, n, True
                                chain[i], head[l1, k] = head[l1, k], i
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
                                    return (0, best, count, parent, option, count_l, dom,
                                            best_parent, best_option, best_layers, best_domain)
        previous_start = start
    return (0, best, count, parent, option, count_l, dom, best_parent, best_option, best_layers,
            best_domain)
