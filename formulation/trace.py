"""Time series of the network and load state (SPEC section 6).

A trace is sampled every ``interval_s`` seconds. Factors multiply the instance's base values:
``B_ij(t) = B_ij * bandwidth_factor[t][i][j]``, likewise latency and free GPUs. A failed domain
has no free GPUs while the failure lasts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from formulation.schema import InputError, Reader, check_number

MAX_INTERVALS = 100_000  # a trace's length: a day at about one sample a second


def _numbers_only(value: Any, field: str) -> None:
    """Every leaf of a nested list is a number (not a string or a boolean, which numpy
    would convert)."""
    stack = [(value, field)]
    while stack:
        item, where = stack.pop()
        if isinstance(item, list):
            stack.extend((x, f"{where}[{i}]") for i, x in enumerate(item))
        else:
            check_number(item, where)


@dataclass(frozen=True)
class Failure:
    domain: int
    start: int  # first interval index of the outage
    end: int  # first interval index after it


@dataclass(frozen=True, eq=False)
class Trace:
    interval_s: float
    bandwidth_factor: np.ndarray  # (T, K, K)
    latency_factor: np.ndarray  # (T, K, K)
    free_gpu_factor: np.ndarray  # (T, K)
    failures: tuple[Failure, ...] = ()

    @property
    def length(self) -> int:
        return int(self.bandwidth_factor.shape[0])

    def index_at(self, time_s: float) -> int:
        """Interval index at a time; the trace holds its last state after its end."""
        return int(min(self.length - 1, max(0, time_s // self.interval_s)))

    def free_gpu_factor_at(self, index: int) -> np.ndarray:
        factor = self.free_gpu_factor[index].copy()
        for failure in self.failures:
            if failure.start <= index < failure.end:
                factor[failure.domain] = 0.0
        return factor

    @staticmethod
    def from_dict(r: Reader, size: int) -> Trace:
        interval = r.number("interval_s", low=0, low_open=True)

        def series(key: str, shape: tuple[int, ...]) -> np.ndarray:
            field = f"{r.path}.{key}"
            value = r.raw(key)
            if not isinstance(value, list) or len(value) > MAX_INTERVALS:
                raise InputError(f"{field} must be a list of at most {MAX_INTERVALS:,} "
                                 "intervals")
            _numbers_only(value, field)
            try:
                array = np.array(value, dtype=float)
            except (TypeError, ValueError):
                raise InputError(f"{field} must be a nested list of numbers") from None
            if array.ndim != len(shape) + 1 or array.shape[1:] != shape or len(array) == 0:
                raise InputError(f"{field} must have shape (T, {', '.join(map(str, shape))})")
            bad = np.argwhere(~np.isfinite(array) | (array < 0))
            if len(bad):
                where = "".join(f"[{i}]" for i in bad[0])
                raise InputError(f"{field}{where} must be a finite number >= 0")
            return array

        bandwidth = series("bandwidth_factor", (size, size))
        latency = series("latency_factor", (size, size))
        free = series("free_gpu_factor", (size,))
        if not len(bandwidth) == len(latency) == len(free):
            raise InputError(f"{r.path}: bandwidth_factor, latency_factor and free_gpu_factor "
                             "must have the same length")

        def failure(value: Any, path: str) -> Failure:
            fr = Reader(value, path)
            item = Failure(domain=fr.integer("domain", low=0, high=size - 1),
                           start=fr.integer("start", low=0), end=fr.integer("end", low=0))
            fr.finish()
            if item.end <= item.start:
                raise InputError(f"{path}.end must be > {path}.start")
            return item

        trace = Trace(interval_s=interval, bandwidth_factor=bandwidth, latency_factor=latency,
                      free_gpu_factor=free, failures=tuple(r.items("failures", failure, [])))
        r.finish()
        return trace

    def to_dict(self) -> dict[str, Any]:
        return {
            "interval_s": self.interval_s,
            "bandwidth_factor": np.round(self.bandwidth_factor, 4).tolist(),
            "latency_factor": np.round(self.latency_factor, 4).tolist(),
            "free_gpu_factor": np.round(self.free_gpu_factor, 4).tolist(),
            "failures": [{"domain": f.domain, "start": f.start, "end": f.end}
                         for f in self.failures],
        }
