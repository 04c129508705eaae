"""Event-level reference simulation of one 1F1B (PipeDream-Flush) step, plain or interleaved.

SPEC section 3.1 prices a pipeline with a closed form; this module is the reference execution the
closed form is checked against. It takes plain numbers only (per-stage compute times, per-boundary
bytes, bandwidth and latency, optional piecewise-constant factors), so it does not depend on plans.

Semantics
---------
* Stages are indexed 0..S-1 from the front (embedding) to the back (LM head); m micro-batches.
* Stage i runs its ops strictly in 1F1B order: ``w_i = min(S - i - 1, m)`` warm-up forwards, then
  one forward / one backward while forwards remain, then the remaining backwards.
* An op starts when its stage is free and its input has arrived. Forward(u) at stage i needs the
  activation of u from stage i-1 (stage 0: available at time 0). Backward(u) at stage i needs its
  own forward(u) (implied by the order) and the gradient of u from stage i+1 (the last stage only
  needs its own forward).
* When stage i ends forward(u) it sends ``transfer_bytes[i]`` to stage i+1; when stage i+1 ends
  backward(u) it sends ``transfer_bytes[i]`` back to stage i. Each direction of each boundary is
  its own FIFO channel: a message starts at max(ready, channel free), occupies the channel while
  its bytes drain at the current rate ``bandwidth_Bps[i] * bandwidth_factor[k, i]`` (the rate may
  change at interval boundaries; the gradients' direction has its own ``backward_*`` rate,
  latency and factors where the link is asymmetric), and arrives
  ``latency_s[i] * latency_factor[k', i]`` after the drain ends, k' being the interval
  holding the end time. Latency does not occupy the channel.
* Interval k covers trace time [k * interval_s, (k + 1) * interval_s), trace time being simulated
  time + ``start_time_s``; after the last interval the last factors hold. Bandwidth factors may be
  0 (an outage stalls the channel) except in the last interval, where they must be positive.
* The makespan runs from the first forward start (time 0) to the last backward end.

Interleaved 1F1B (Narayanan et al. SC'21, section 2.2; ``virtual_stages`` v > 1): stage i
holds v model chunks, chunk c of every stage forming round c of the model (chunk c of stage
S-1 feeds chunk c + 1 of stage 0 over a wrap-around boundary, the last entry of the boundary
arrays). A stage's ops follow Megatron-LM's order: forward number k is chunk
``(k // S) % v`` of micro-batch ``(k // (S v)) S + k % S`` (backwards take the chunks in
reverse), after ``min(2 (S - i - 1) + (v - 1) S, m v)`` warm-up forwards; m must be a
multiple of S. Forward (u, c) at stage 0 needs chunk c - 1 of u from stage S - 1 (c > 0);
backward (u, c) at stage S - 1 needs chunk c + 1's gradient from stage 0 (c < v - 1).
Per-chunk times are ``forward_s[i, c]`` when given as (S, v) arrays, else the stage's split
evenly.

All start times are max-plus functions of the durations, so with constant latency factors a
larger bandwidth never increases the makespan. Time-varying latency can break this: a faster drain
may end in a slower-latency interval.

The dependency structure is fixed, so a worklist over stages suffices: a stage advances along its
op list until it waits for a message; finishing an op wakes the neighbour it sends to. Each op is
visited once, so S = 20, m = 512 runs in tens of milliseconds.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

FORWARD = "F"
BACKWARD = "B"


@dataclass(frozen=True)
class PipelineSpec:
    """B boundaries: S - 1, plus the wrap-around (stage S-1 to 0) when interleaved."""

    forward_s: np.ndarray  # (S,) per-micro-batch forward time per stage, or (S, v) per chunk
    backward_s: np.ndarray  # (S,) or (S, v) backward time (including recompute)
    transfer_bytes: np.ndarray  # (B,) bytes across boundary i per message, each direction
    bandwidth_Bps: np.ndarray  # (B,) base bandwidth of boundary i, forward (activations)
    latency_s: np.ndarray  # (B,) base one-way latency of boundary i, forward
    num_micro_batches: int  # m
    bandwidth_factor: np.ndarray | None = None  # (T, B) multiplies bandwidth_Bps per interval
    latency_factor: np.ndarray | None = None  # (T, B) multiplies latency_s per interval
    interval_s: float = 1.0
    start_time_s: float = 0.0  # trace time at which the step starts
    # the backward direction (gradients), where the link is asymmetric; None: as forward
    backward_bandwidth_Bps: np.ndarray | None = None
    backward_latency_s: np.ndarray | None = None
    backward_bandwidth_factor: np.ndarray | None = None
    backward_latency_factor: np.ndarray | None = None
    virtual_stages: int = 1  # v: model chunks per stage (interleaved 1F1B when > 1)


class OpRecord(NamedTuple):
    stage: int
    micro_batch: int
    kind: str  # FORWARD or BACKWARD
    start: float
    end: float
    chunk: int = 0


@dataclass(frozen=True)
class SimulationResult:
    makespan_s: float  # first forward start to last backward end
    stage_busy_s: np.ndarray  # (S,) total compute time per stage
    link_busy_s: np.ndarray  # (B,) transmitting time of each forward-direction channel
    events: tuple[OpRecord, ...] | None = None  # per-op records when record=True


def _vector(name: str, value: object, length: int, minimum: float, strict: bool) -> np.ndarray:
    """A finite float vector of the given length whose entries are >= (or >) minimum."""
    arr = np.asarray(value, dtype=float)
    if arr.shape != (length,):
        raise ValueError(f"{name} must have shape ({length},), got {arr.shape}")
    bad = ~np.isfinite(arr) | ((arr <= minimum) if strict else (arr < minimum))
    if bad.any():
        relation = ">" if strict else ">="
        raise ValueError(f"{name} entries must be finite and {relation} {minimum}")
    return arr


def _factors(name: str, value: np.ndarray | None, links: int) -> np.ndarray | None:
    """A (T, S-1) array of finite non-negative factors, or None when absent."""
    if value is None:
        return None
    arr = np.asarray(value, dtype=float)
    if arr.ndim != 2 or arr.shape[0] < 1 or arr.shape[1] != links:
        raise ValueError(f"{name} must have shape (T, {links}) with T >= 1, got {arr.shape}")
    if not np.isfinite(arr).all() or (arr < 0).any():
        raise ValueError(f"{name} entries must be finite and >= 0")
    return arr


def _chunk_times(name: str, value: object, stages: int, chunks: int) -> np.ndarray:
    """(S, v) per-chunk times: given so, or a stage's (S,) time split evenly."""
    arr = np.asarray(value, dtype=float)
    if arr.shape == (stages,):
        arr = np.repeat(arr[:, None] / chunks, chunks, axis=1)
    if arr.shape != (stages, chunks):
        raise ValueError(f"{name} must have shape ({stages},) or ({stages}, {chunks}), "
                         f"got {arr.shape}")
    if not np.isfinite(arr).all() or (arr < 0).any():
        raise ValueError(f"{name} entries must be finite and >= 0")
    return arr


def _validate(spec: PipelineSpec) -> tuple[np.ndarray, ...]:
    """Check shapes and ranges up front, so errors name the field rather than fail mid-run."""
    m, v = spec.num_micro_batches, spec.virtual_stages
    if isinstance(m, bool) or not isinstance(m, int | np.integer) or m < 1:
        raise ValueError(f"num_micro_batches must be an integer >= 1, got {m!r}")
    if isinstance(v, bool) or not isinstance(v, int | np.integer) or v < 1:
        raise ValueError(f"virtual_stages must be an integer >= 1, got {v!r}")
    fwd = np.asarray(spec.forward_s, dtype=float)
    if fwd.ndim not in (1, 2) or fwd.size < 1:
        raise ValueError(f"forward_s must be a non-empty (S,) or (S, v) array, got shape "
                         f"{fwd.shape}")
    s = fwd.shape[0]
    if v > 1 and (s < 2 or m % s):
        raise ValueError(f"interleaving needs S >= 2 stages and micro-batches a multiple of "
                         f"S; got S = {s}, m = {m}")
    fwd = _chunk_times("forward_s", fwd, s, v)
    bwd = _chunk_times("backward_s", spec.backward_s, s, v)
    links = s - 1 + (v > 1)
    size = _vector("transfer_bytes", spec.transfer_bytes, links, 0.0, strict=False)
    directions = []
    for prefix in ("", "backward_"):
        def field(name: str, prefix: str = prefix):  # the backward one defaults to forward
            value = getattr(spec, prefix + name)
            return getattr(spec, name) if value is None else value
        bw = _vector(prefix + "bandwidth_Bps", field("bandwidth_Bps"), links, 0.0, strict=True)
        lat = _vector(prefix + "latency_s", field("latency_s"), links, 0.0, strict=False)
        bw_f = _factors(prefix + "bandwidth_factor", field("bandwidth_factor"), links)
        lat_f = _factors(prefix + "latency_factor", field("latency_factor"), links)
        if bw_f is not None and (bw_f[-1] <= 0).any():
            raise ValueError(f"{prefix}bandwidth_factor last row must be > 0 (it holds "
                             "forever)")
        directions.append((bw, lat, bw_f, lat_f))
    if not (math.isfinite(spec.interval_s) and spec.interval_s > 0):
        raise ValueError(f"interval_s must be finite and > 0, got {spec.interval_s!r}")
    if not (math.isfinite(spec.start_time_s) and spec.start_time_s >= 0):
        raise ValueError(f"start_time_s must be finite and >= 0, got {spec.start_time_s!r}")
    return fwd, bwd, size, directions[0], directions[1]


def stage_ops(stage: int, stages: int, m: int, chunks: int = 1) -> list[tuple[str, int, int]]:
    """The op order of one stage, (kind, micro-batch, chunk): warm-up forwards, the 1F1B steady
    state, cool-down backwards; with chunks > 1 Megatron-LM's interleaved order."""
    total = m * chunks
    if chunks == 1:
        warmup = min(stages - stage - 1, m)
    else:
        warmup = min(2 * (stages - stage - 1) + (chunks - 1) * stages, total)

    def op(kind: str, k: int) -> tuple[str, int, int]:
        chunk = (k // stages) % chunks
        if kind == BACKWARD:
            chunk = chunks - 1 - chunk
        return kind, (k // (stages * chunks)) * stages + k % stages, chunk

    ops = [op(FORWARD, k) for k in range(warmup)]
    for k in range(total - warmup):
        ops.append(op(FORWARD, warmup + k))
        ops.append(op(BACKWARD, k))
    ops.extend(op(BACKWARD, k) for k in range(total - warmup, total))
    return ops


class _Channel:
    """One direction of one boundary: a FIFO link with piecewise-constant rate and latency."""

    def __init__(self, link: int, size: float, bw: float, lat: float,
                 bw_f: np.ndarray | None, lat_f: np.ndarray | None, spec: PipelineSpec) -> None:
        self.size, self.bw, self.lat = size, bw, lat
        self.bw_f = None if bw_f is None else bw_f[:, link]
        self.lat_f = None if lat_f is None else lat_f[:, link]
        self.dt, self.t0 = spec.interval_s, spec.start_time_s
        self.free = 0.0  # time the channel finishes its current message
        self.busy = 0.0  # total serialisation time so far

    def _interval(self, t: float, length: int) -> int:
        return min(length - 1, max(0, int((t + self.t0) // self.dt)))

    def _drain_end(self, start: float) -> float:
        """End of serialisation of one message started at `start`, integrating the rate."""
        if self.bw_f is None:
            return start + self.size / self.bw
        remaining, t = self.size, start
        k = self._interval(t, len(self.bw_f))
        while remaining > 0:
            rate = self.bw * self.bw_f[k]
            if k == len(self.bw_f) - 1:
                return t + remaining / rate
            boundary = (k + 1) * self.dt - self.t0  # next change, in simulated time
            capacity = rate * (boundary - t)
            if capacity >= remaining:
                return t + remaining / rate
            remaining -= max(capacity, 0.0)
            t, k = max(t, boundary), k + 1
        return t

    def send(self, ready: float) -> float:
        """Transmit one message that is ready at `ready`; return its arrival time."""
        start = max(ready, self.free)
        end = self._drain_end(start)
        self.busy += end - start
        self.free = end
        lat = self.lat
        if self.lat_f is not None:
            lat *= self.lat_f[self._interval(end, len(self.lat_f))]
        return end + lat


def simulate_pipeline(spec: PipelineSpec, record: bool = False) -> SimulationResult:
    """Simulate one step; with `record`, also return per-op (stage, u, kind, start, end,
    chunk)."""
    fwd, bwd, size, forward, backward = _validate(spec)
    s, v = fwd.shape
    m = int(spec.num_micro_batches)
    links = s - 1 + (v > 1)
    fwd_ch = [_Channel(i, size[i], forward[0][i], forward[1][i], forward[2], forward[3], spec)
              for i in range(links)]
    bwd_ch = [_Channel(i, size[i], backward[0][i], backward[1][i], backward[2], backward[3],
                       spec) for i in range(links)]
    # act[i][c * m + u]: chunk c's input activation of u available at stage i; grad likewise
    nan = float("nan")
    act = [[0.0] * m + [nan] * (m * (v - 1))] + [[nan] * (m * v) for _ in range(s - 1)]
    grad = [[nan] * (m * v) for _ in range(s - 1)] + [[nan] * (m * (v - 1)) + [-math.inf] * m]
    ops = [stage_ops(i, s, m, v) for i in range(s)]
    cursor = [0] * s
    stage_free = [0.0] * s
    fwd_list, bwd_list = fwd.tolist(), bwd.tolist()
    events: list[OpRecord] = []
    queue, queued = deque(range(s)), [True] * s
    while queue:
        i = queue.popleft()
        queued[i] = False
        while cursor[i] < len(ops[i]):
            kind, u, c = ops[i][cursor[i]]
            ready = (act if kind == FORWARD else grad)[i][c * m + u]
            if ready != ready:  # NaN: the input has not been produced yet
                break
            start = max(stage_free[i], ready)
            end = start + (fwd_list[i][c] if kind == FORWARD else bwd_list[i][c])
            stage_free[i] = end
            cursor[i] += 1
            if record:
                events.append(OpRecord(i, u, kind, start, end, c))
            neighbour = None  # the stage this op's message wakes up, if any
            if kind == FORWARD and i + 1 < s:
                act[i + 1][c * m + u] = fwd_ch[i].send(end)
                neighbour = i + 1
            elif kind == FORWARD and c + 1 < v:  # round c + 1 starts at stage 0
                act[0][(c + 1) * m + u] = fwd_ch[s - 1].send(end)
                neighbour = 0
            elif kind == BACKWARD and i > 0:
                grad[i - 1][c * m + u] = bwd_ch[i - 1].send(end)
                neighbour = i - 1
            elif kind == BACKWARD and c > 0:  # round c - 1's backward ends at stage S-1
                grad[s - 1][(c - 1) * m + u] = bwd_ch[s - 1].send(end)
                neighbour = s - 1
            if neighbour is not None and not queued[neighbour]:
                queue.append(neighbour)
                queued[neighbour] = True
    if any(cursor[i] < len(ops[i]) for i in range(s)):  # cannot happen for a valid order
        raise RuntimeError("1F1B schedule deadlocked; op order is inconsistent")
    return SimulationResult(
        makespan_s=float(max(stage_free)),  # every stage ends on a backward
        stage_busy_s=m * (fwd + bwd).sum(axis=1),
        link_busy_s=np.array([ch.busy for ch in fwd_ch], dtype=float),
        events=tuple(sorted(events, key=lambda e: (e.start, e.stage))) if record else None,
    )
