"""Dynamic traces (SPEC section 6): bandwidth drift, latency spikes, load swings, failures.

Every trace starts in the instance's nominal state (all factors 1 at interval 0), so the static
instance is the state an online scheduler plans for first, and every later event is a change
it has to react to. Each kind of event draws from its own child generator, so tuning one of
them (say the spike probability) leaves the others' series unchanged.
"""

from __future__ import annotations

import numpy as np

from formulation.schema import InputError
from formulation.trace import Failure, Trace

LATENCY_SPIKE_PROBABILITY = 0.03  # per link and interval, when the link is not already spiking
LATENCY_SPIKE_FACTOR = 1.5  # SPEC section 6: spikes of +50 %
LATENCY_SPIKE_INTERVALS = (1, 3)  # duration, inclusive
FREE_GPU_SWING = 0.2  # SPEC section 6: +-20 % background load
FAILURE_PROBABILITY = 0.3  # per trace: one domain goes down once
FAILURE_INTERVALS = (1, 4)  # duration, inclusive
DECIMALS = 4  # what Trace.to_dict keeps; rounding here makes the object equal its JSON


def _bounded_walk(rng: np.random.Generator, length: int, shape: tuple[int, ...], low: float,
                  high: float, step_std: float) -> np.ndarray:
    """A random walk from 0 with normal steps, reflected at [low, high] (clipped as a backstop)."""
    walk = np.zeros((length, *shape))
    for t in range(1, length):
        x = walk[t - 1] + rng.normal(0.0, step_std, size=shape)
        x = np.where(x > high, 2 * high - x, x)
        x = np.where(x < low, 2 * low - x, x)
        walk[t] = np.clip(x, low, high)
    return walk


def factor_walk(rng: np.random.Generator, length: int, shape: tuple[int, ...],
                swing: float) -> np.ndarray:
    """A factor that walks from 1 within [1 - swing, 1 + swing] (reflected, normal steps of
    std swing / 4), rounded to DECIMALS."""
    walk = _bounded_walk(rng, length, shape, -swing, swing, swing / 4)
    return np.clip(np.round(1.0 + walk, DECIMALS), 1 - swing, 1 + swing)


def _mirror_upper(series: np.ndarray, diagonal: float) -> np.ndarray:
    """Make every (K, K) slice symmetric from its upper triangle and set its diagonal."""
    upper = np.triu(series, k=1)
    out = upper + np.swapaxes(upper, -1, -2)
    k = series.shape[-1]
    out[..., np.arange(k), np.arange(k)] = diagonal
    return out


def _latency_spikes(rng: np.random.Generator, length: int, k: int) -> np.ndarray:
    """Factor 1.5 for a spike's 1-3 intervals, else 1; spikes start independently per link."""
    factor = np.ones((length, k, k))
    remaining = np.zeros((k, k), dtype=int)  # intervals left in the current spike
    low, high = LATENCY_SPIKE_INTERVALS
    for t in range(1, length):
        starts = (remaining == 0) & (rng.random((k, k)) < LATENCY_SPIKE_PROBABILITY)
        remaining = np.where(starts, rng.integers(low, high + 1, size=(k, k)), remaining)
        factor[t][remaining > 0] = LATENCY_SPIKE_FACTOR
        remaining = np.maximum(remaining - 1, 0)
    return factor


def _failures(rng: np.random.Generator, length: int, k: int) -> tuple[Failure, ...]:
    """With probability FAILURE_PROBABILITY, one domain fails once, after interval 0."""
    if length < 2 or rng.random() >= FAILURE_PROBABILITY:
        return ()
    domain = int(rng.integers(k))
    start = int(rng.integers(1, length))
    duration = int(rng.integers(FAILURE_INTERVALS[0], FAILURE_INTERVALS[1] + 1))
    return (Failure(domain=domain, start=start, end=min(start + duration, length)),)


def generate_trace(rng: np.random.Generator, links_bandwidth: np.ndarray, num_domains: int,
                   length: int, interval_s: float, eps: float) -> Trace:
    """A seeded trace of ``length`` intervals for an instance with these base link bandwidths.

    Bandwidth: ``1 + e_ij`` with ``e_ij`` a symmetric random walk in [-eps, eps] (step std
    eps/4); links without base bandwidth (the diagonal) keep factor 1. Latency: spikes of 1.5x.
    Free GPUs: a walk of the factor in [0.8, 1.2] per domain. Failures: see ``_failures``.
    """
    links_bandwidth = np.asarray(links_bandwidth, dtype=float)
    if links_bandwidth.shape != (num_domains, num_domains):
        raise InputError(f"links_bandwidth must be {num_domains} x {num_domains}, "
                         f"got shape {links_bandwidth.shape}")
    if length < 1:
        raise InputError(f"trace length must be >= 1 interval, got {length}")
    if not interval_s > 0:
        raise InputError(f"trace interval must be > 0 s, got {interval_s}")
    if not 0 <= eps <= 0.95:
        raise InputError(f"eps must be in [0, 0.95], got {eps}")
    bandwidth_rng, latency_rng, load_rng, failure_rng = rng.spawn(4)
    k = num_domains

    bandwidth = _mirror_upper(factor_walk(bandwidth_rng, length, (k, k), eps), 1.0)
    bandwidth[:, links_bandwidth <= 0] = 1.0

    latency = _mirror_upper(_latency_spikes(latency_rng, length, k), 1.0)

    free = factor_walk(load_rng, length, (k,), FREE_GPU_SWING)

    return Trace(interval_s=float(interval_s), bandwidth_factor=bandwidth,
                 latency_factor=latency, free_gpu_factor=free,
                 failures=_failures(failure_rng, length, k))
