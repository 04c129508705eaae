"""The steady state of interleaved 1F1B as an event graph, and its period.

Plain 1F1B's period is a closed form (:mod:`formulation.evaluator`): every micro-batch takes
the same path, so a window of consecutive stages is a cycle of the schedule. Interleaved, it
is not. In Megatron-LM's order a stage runs the chunks of a group of S micro-batches round
by round, so a dependency across the wrap-around boundary (the last stage's chunk c feeding
the first stage's chunk c + 1) lines up with the schedule for some ops of a group only, and
a link carries v messages a period that may queue. A window bound overestimated the
simulated step by up to 20 % over the WAN; dropping it for exact cycles without the queues
underestimated by up to 18 % (bench suite, v = 2).

The schedule repeats every group of S micro-batches: each stage runs S v forward and S v
backward chunk ops per group. Its steady state is an event graph with one node per op of a
group (stage, direction, op number mod S v) and one per message of a group (channel, the
sending op's number mod S v), and one edge per "cannot start before" of the event simulation
(:mod:`formulation.simulator`), with the number of groups between its ends (its tokens):

* a stage's own order in the steady state (forward ``k + w_i``, backward ``k``, forward
  ``k + w_i + 1``, ...), weighted by the op's time;
* an op to the message it sends (the op's time); a message to the next one on its channel,
  FIFO (the drain); a message to the op that consumes it (drain + latency);
* the last stage's forward of the last chunk to its own backward (the forward's time).

The period per group is the largest ratio weight / tokens over the graph's cycles (max-plus
spectral theory: Baccelli, Cohen, Olsder and Quadrat 1992, *Synchronization and Linearity*,
ch. 3), found by Howard's policy iteration (Cochet-Terrasson, Cohen, Gaubert, McGettrick and
Quadrat 1998); per micro-batch it is that over S. It includes every stage's compute and every
channel's occupancy. The graph depends on (S, v) only and is built once; its weights are
linear in the stages' forward and backward times and the links' drains and latencies
(``Terms``), each chunk taking ``1 / v`` of its stage. Against the event simulation of the
bench suite it is within 3 % (README, ``scripts/closed_form_vs_simulation.py``).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numba as nb
import numpy as np

from formulation.simulator import BACKWARD, FORWARD, stage_ops

# The weight terms, each a block of S entries (stage i, or link j: the boundary from stage j
# to j + 1, the wrap-around from stage S - 1 to stage 0 at j = S - 1).
TERMS = ("forward", "backward", "drain_forward", "drain_backward", "latency_forward",
         "latency_backward")


@dataclass(frozen=True)
class ScheduleGraph:
    """The steady-state event graph of interleaved 1F1B with ``stages`` S and ``chunks`` v.

    Edge e runs ``source[e] -> target[e]`` over ``tokens[e]`` groups and weighs
    ``sum_q coefficient[e, q] * x[term[e, q]]`` (``term`` -1: no term), x being the terms of
    :data:`TERMS` concatenated (6 S entries). Edges are sorted by source (``offsets`` CSR)."""

    stages: int
    chunks: int
    nodes: int
    source: np.ndarray
    target: np.ndarray
    tokens: np.ndarray
    term: np.ndarray  # (E, 2) int
    coefficient: np.ndarray  # (E, 2)
    offsets: np.ndarray

    def weights(self, terms: np.ndarray) -> np.ndarray:
        """Edge weights for one term vector (6 S,)."""
        padded = np.append(np.asarray(terms, dtype=float), 0.0)  # term -1 reads the 0
        return (self.coefficient * padded[self.term]).sum(axis=1)


def term_index(name: str, entry: int, stages: int) -> int:
    return TERMS.index(name) * stages + entry


@functools.lru_cache(maxsize=64)
def schedule_graph(stages: int, chunks: int) -> ScheduleGraph:
    """The graph of (S, v), read off the simulator's op order of a run long enough that its
    steady state covers whole groups (each edge of a group is met at least once)."""
    s, v = stages, chunks
    if s < 2 or v < 2:
        raise ValueError(f"an interleaved schedule needs S >= 2 and v >= 2, got {s}, {v}")
    group = s * v
    m = s * (v + 4)  # warm-up and cool-down take fewer than (v + 2) S ops of a stage
    ids: dict[tuple, int] = {}
    edges: dict[tuple[int, int, int], tuple[tuple[int, float], ...]] = {}

    def node(*key) -> int:
        return ids.setdefault(key, len(ids))

    def number(kind: str, u: int, c: int) -> int:  # the op's number among its kind
        round_ = c if kind == FORWARD else v - 1 - c
        return (u // s) * group + round_ * s + u % s

    def add(a: tuple, b: tuple, n_a: int, n_b: int, *terms: tuple[int, float]) -> None:
        edges[(node(*a[:-1], a[-1] % group), node(*b[:-1], b[-1] % group),
               n_b // group - n_a // group)] = terms

    def op_term(kind: str, i: int) -> tuple[int, float]:
        return term_index("forward" if kind == FORWARD else "backward", i, s), 1.0 / v

    for i in range(s):
        ops = stage_ops(i, s, m, v)
        warmup = min(2 * (s - i - 1) + (v - 1) * s, m * v)
        steady_end = warmup + 2 * (m * v - warmup)  # the 1F1B pairs end here
        sent: dict[int, int] = {}  # channel -> number of the last op that sent on it
        for p, (kind, u, c) in enumerate(ops):
            n = number(kind, u, c)
            here = ("op", i, kind, n)
            if warmup <= p < steady_end - 1:
                kind2, u2, c2 = ops[p + 1]
                n2 = number(kind2, u2, c2)
                add(here, ("op", i, kind2, n2), n, n2, op_term(kind, i))
            link = direction = consumer = None
            if kind == FORWARD and i + 1 < s:
                link, direction, consumer = i, "forward", ("op", i + 1, FORWARD, n)
            elif kind == FORWARD and c + 1 < v:
                link, direction = s - 1, "forward"
                consumer = ("op", 0, FORWARD, number(FORWARD, u, c + 1))
            elif kind == FORWARD:  # the model's last chunk turns round on the last stage
                n2 = number(BACKWARD, u, c)
                add(here, ("op", i, BACKWARD, n2), n, n2, op_term(kind, i))
            elif i > 0:
                link, direction, consumer = i - 1, "backward", ("op", i - 1, BACKWARD, n)
            elif c > 0:
                link, direction = s - 1, "backward"
                consumer = ("op", s - 1, BACKWARD, number(BACKWARD, u, c - 1))
            if link is None:
                continue
            channel = link if direction == "forward" else s + link
            drain = (term_index("drain_" + direction, link, s), 1.0)
            message = ("message", channel, n)
            add(here, message, n, n, op_term(kind, i))
            add(message, consumer, n, consumer[-1], drain,
                (term_index("latency_" + direction, link, s), 1.0))
            if channel in sent and warmup <= p < steady_end:
                add(("message", channel, sent[channel]), message, sent[channel], n, drain)
            sent[channel] = n
    keys = sorted(edges, key=lambda k: k[0])
    source = np.array([k[0] for k in keys], dtype=np.int64)
    term = np.full((len(keys), 2), -1, dtype=np.int64)
    coefficient = np.zeros((len(keys), 2))
    for e, key in enumerate(keys):
        for q, (index, factor) in enumerate(edges[key]):
            term[e, q], coefficient[e, q] = index, factor
    offsets = np.searchsorted(source, np.arange(len(ids) + 1)).astype(np.int64)
    if np.any(np.diff(offsets) == 0):  # every event of a steady state has a successor
        raise RuntimeError(f"schedule graph of S={s}, v={v} has a node without successor")
    return ScheduleGraph(s, v, len(ids), source, np.array([k[1] for k in keys], np.int64),
                         np.array([k[2] for k in keys], np.int64), term, coefficient, offsets)


def steady_period(stages: int, chunks: int, terms: np.ndarray) -> float:
    """The steady-state period per micro-batch: the largest cycle ratio of the schedule
    graph over the group's S micro-batches. ``terms``: the 6 S entries of :data:`TERMS`."""
    graph = schedule_graph(stages, chunks)
    ratio = _max_cycle_ratio(graph.offsets, graph.target, graph.weights(terms),
                             graph.tokens.astype(float))
    if not np.isfinite(ratio):
        raise RuntimeError(f"policy iteration did not settle on S={stages}, v={chunks}")
    return float(ratio) / stages


@nb.njit(cache=True)
def _max_cycle_ratio(offsets, target, weight, tokens):  # pragma: no cover - compiled
    """Howard's policy iteration for the largest cycle ratio sum(weight) / sum(tokens) of a
    graph whose every node has a successor and every cycle positive tokens. A policy keeps
    one successor per node; its cycles give each node a ratio ``eta`` and a bias ``value``;
    a node switches to a successor of larger ratio, or, ratios equal, of larger bias, until
    none does. NaN if it does not settle."""
    n = len(offsets) - 1
    eps = 1e-12 * (1.0 + np.abs(weight).sum())
    policy = np.empty(n, np.int64)
    for x in range(n):
        best = offsets[x]
        for e in range(offsets[x], offsets[x + 1]):
            if weight[e] > weight[best]:
                best = e
        policy[x] = best
    eta, value = np.zeros(n), np.zeros(n)
    state, stack = np.zeros(n, np.int64), np.empty(n, np.int64)
    for _ in range(100 * n + 100):
        state[:] = 0  # 0 unseen, 1 on the current path, 2 evaluated
        for start in range(n):
            depth, x = 0, start
            while state[x] == 0:
                state[x] = 1
                stack[depth] = x
                depth += 1
                x = target[policy[x]]
            if state[x] == 1:  # the path closed a cycle of the policy through x
                j = depth - 1
                while stack[j] != x:
                    j -= 1
                w, t = 0.0, 0.0
                for q in range(j, depth):
                    w += weight[policy[stack[q]]]
                    t += tokens[policy[stack[q]]]
                if t <= 0:
                    return np.nan
                eta[x], value[x], state[x] = w / t, 0.0, 2
            for q in range(depth - 1, -1, -1):
                y = stack[q]
                if state[y] != 2:
                    e = policy[y]
                    z = target[e]
                    eta[y] = eta[z]
                    value[y] = weight[e] - eta[z] * tokens[e] + value[z]
                    state[y] = 2
        changed = False
        for x in range(n):  # first a larger ratio
            best, top = -1, eta[x] + eps
            for e in range(offsets[x], offsets[x + 1]):
                if eta[target[e]] > top:
                    best, top = e, eta[target[e]]
            if best >= 0:
                policy[x] = best
                changed = True
        if not changed:
            for x in range(n):  # then, ratios equal, a larger bias
                best, top = -1, value[x] + eps
                for e in range(offsets[x], offsets[x + 1]):
                    z = target[e]
                    if abs(eta[z] - eta[x]) <= eps:
                        candidate = weight[e] - eta[x] * tokens[e] + value[z]
                        if candidate > top:
                            best, top = e, candidate
                if best >= 0:
                    policy[x] = best
                    changed = True
        if not changed:
            return eta.max()
    return np.nan
