"""Event-level reference simulation of one 1F1B (PipeDream-Flush, non-interleaved) step.

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
    forward_s: np.ndarray  # (S,) per-micro-batch forward time per stage, front to back
    backward_s: np.ndarray  # (S,) per-micro-batch backward time (including recompute)
    transfer_bytes: np.ndarray  # (S-1,) bytes across boundary i per micro-batch, each direction
    bandwidth_Bps: np.ndarray  # (S-1,) base bandwidth of boundary i, forward (activations)
    latency_s: np.ndarray  # (S-1,) base one-way latency of boundary i, forward
    num_micro_batches: int  # m
    bandwidth_factor: np.ndarray | None = None  # (T, S-1) multiplies bandwidth_Bps per interval
    latency_factor: np.ndarray | None = None  # (T, S-1) multiplies latency_s per interval
    interval_s: float = 1.0
    start_time_s: float = 0.0  # trace time at which the step starts
    # the backward direction (gradients), where the link is asymmetric; None: as forward
    backward_bandwidth_Bps: np.ndarray | None = None
    backward_latency_s: np.ndarray | None = None
    backward_bandwidth_factor: np.ndarray | None = None
    backward_latency_factor: np.ndarray | None = None


class OpRecord(NamedTuple):
    stage: int
    micro_batch: int
    kind: str  # FORWARD or BACKWARD
    start: float
    end: float


@dataclass(frozen=True)
class SimulationResult:
    makespan_s: float  # first forward start to last backward end
    stage_busy_s: np.ndarray  # (S,) total compute time per stage
    link_busy_s: np.ndarray  # (S-1,) transmitting time of each forward-direction channel
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


def _validate(spec: PipelineSpec) -> tuple[np.ndarray, ...]:
    """Check shapes and ranges up front, so errors name the field rather than fail mid-run."""
    m = spec.num_micro_batches
    if isinstance(m, bool) or not isinstance(m, int | np.integer) or m < 1:
        raise ValueError(f"num_micro_batches must be an integer >= 1, got {m!r}")
    fwd = np.asarray(spec.forward_s, dtype=float)
    if fwd.ndim != 1 or fwd.size < 1:
        raise ValueError(f"forward_s must be a non-empty 1-D array, got shape {fwd.shape}")
    s = fwd.size
    fwd = _vector("forward_s", fwd, s, 0.0, strict=False)
    bwd = _vector("backward_s", spec.backward_s, s, 0.0, strict=False)
    size = _vector("transfer_bytes", spec.transfer_bytes, s - 1, 0.0, strict=False)
    directions = []
    for prefix in ("", "backward_"):
        def field(name: str, prefix: str = prefix):  # the backward one defaults to forward
            value = getattr(spec, prefix + name)
            return getattr(spec, name) if value is None else value
        bw = _vector(prefix + "bandwidth_Bps", field("bandwidth_Bps"), s - 1, 0.0, strict=True)
        lat = _vector(prefix + "latency_s", field("latency_s"), s - 1, 0.0, strict=False)
        bw_f = _factors(prefix + "bandwidth_factor", field("bandwidth_factor"), s - 1)
        lat_f = _factors(prefix + "latency_factor", field("latency_factor"), s - 1)
        if bw_f is not None and (bw_f[-1] <= 0).any():
            raise ValueError(f"{prefix}bandwidth_factor last row must be > 0 (it holds "
                             "forever)")
        directions.append((bw, lat, bw_f, lat_f))
    if not (math.isfinite(spec.interval_s) and spec.interval_s > 0):
        raise ValueError(f"interval_s must be finite and > 0, got {spec.interval_s!r}")
    if not (math.isfinite(spec.start_time_s) and spec.start_time_s >= 0):
        raise ValueError(f"start_time_s must be finite and >= 0, got {spec.start_time_s!r}")
    return fwd, bwd, size, directions[0], directions[1]


def _stage_ops(stage: int, stages: int, m: int) -> list[tuple[str, int]]:
    """The 1F1B op order of one stage: warm-up forwards, 1F1B steady state, cool-down backwards."""
    warmup = min(stages - stage - 1, m)
    ops = [(FORWARD, u) for u in range(warmup)]
    for k in range(m - warmup):
        ops.append((FORWARD, warmup + k))
        ops.append((BACKWARD, k))
    ops.extend((BACKWARD, u) for u in range(m - warmup, m))
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
    """Simulate one 1F1B step; with `record`, also return per-op (stage, u, kind, start, end)."""
    fwd, bwd, size, forward, backward = _validate(spec)
    s, m = fwd.size, int(spec.num_micro_batches)
    fwd_ch = [_Channel(i, size[i], forward[0][i], forward[1][i], forward[2], forward[3], spec)
              for i in range(s - 1)]
    bwd_ch = [_Channel(i, size[i], backward[0][i], backward[1][i], backward[2], backward[3],
                       spec) for i in range(s - 1)]
    # act_arrival[i][u]: activation of u available at stage i; grad_arrival likewise for gradients.
    nan = float("nan")
    act_arrival = [[0.0] * m] + [[nan] * m for _ in range(s - 1)]
    grad_arrival = [[nan] * m for _ in range(s - 1)] + [[-math.inf] * m]
    ops = [_stage_ops(i, s, m) for i in range(s)]
    cursor = [0] * s
    stage_free = [0.0] * s
    fwd_list, bwd_list = fwd.tolist(), bwd.tolist()
    events: list[OpRecord] = []
    queue, queued = deque(range(s)), [True] * s
    while queue:
        i = queue.popleft()
        queued[i] = False
        while cursor[i] < len(ops[i]):
            kind, u = ops[i][cursor[i]]
            ready = (act_arrival if kind == FORWARD else grad_arrival)[i][u]
            if ready != ready:  # NaN: the input has not been produced yet
                break
            start = max(stage_free[i], ready)
            end = start + (fwd_list[i] if kind == FORWARD else bwd_list[i])
            stage_free[i] = end
            cursor[i] += 1
            if record:
                events.append(OpRecord(i, u, kind, start, end))
            neighbour = None  # the stage this op's message wakes up, if any
            if kind == FORWARD and i + 1 < s:
                act_arrival[i + 1][u] = fwd_ch[i].send(end)
                neighbour = i + 1
            elif kind == BACKWARD and i > 0:
                grad_arrival[i - 1][u] = bwd_ch[i - 1].send(end)
                neighbour = i - 1
            if neighbour is not None and not queued[neighbour]:
                queue.append(neighbour)
                queued[neighbour] = True
    if any(cursor[i] < len(ops[i]) for i in range(s)):  # cannot happen for a valid 1F1B order
        raise RuntimeError("1F1B schedule deadlocked; op order is inconsistent")
    return SimulationResult(
        makespan_s=float(max(stage_free)),  # every stage ends on a backward
        stage_busy_s=m * (fwd + bwd),
        link_busy_s=np.array([ch.busy for ch in fwd_ch], dtype=float),
        events=tuple(sorted(events, key=lambda e: (e.start, e.stage))) if record else None,
    )
