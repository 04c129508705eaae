"""Dynamic scenarios: timed events over a training run (issue 17, seeds/003 topics 3-4).

A :class:`Scenario` is a list of :class:`Event` over ``horizon_s`` seconds on one instance.
The instance is the nominal state at time 0; every event changes it from its ``time_s``:

==================  ===================================================================
kind                meaning (``domain``, ``peer``, ``value``, ``duration_s``)
==================  ===================================================================
``bandwidth``       link ``domain`` -> ``peer``: bandwidth = nominal x ``value`` (> 0), until
                    the link's next bandwidth event
``latency``         link ``domain`` -> ``peer``: latency = nominal x ``value`` (>= 1) for
                    ``duration_s`` (a spike), then nominal
``load``            ``domain``: free GPUs = nominal free x ``value`` (>= 0; at most all its
                    GPUs, so at most 1 where none is free at nominal), until the domain's
                    next load event (other tenants' load)
``node_failure``    ``domain`` has ``value`` fewer free GPUs (an integer >= 1: the failed
                    nodes' GPUs) for ``duration_s`` (its repair time)
``domain_failure``  ``domain`` has no GPU for ``duration_s``
``domain_join``     ``domain`` has no GPU before ``time_s`` (new hardware joining)
==================  ===================================================================

A link event names a direction: a symmetric change is two events. Unused fields are absent
(JSON) or empty (CSV).

Two formats hold the same scenario, so a measured trace can be replayed:

* JSON: ``{"schema": "xdsched.scenario/1", "horizon_s": H, "events": [{"time_s": ..,
  "kind": .., "domain": .., ...}], "provenance": {...}}``;
* CSV: a first line ``# horizon_s=H``, a header ``time_s,kind,domain,peer,value,duration_s``
  and one row per event.

:meth:`Scenario.to_trace` samples a scenario on a grid as the :class:`~formulation.trace.Trace`
the event-level simulator and the robustness measures read: sample i stands for the interval
[i dt, (i + 1) dt). A step change (bandwidth, load) holds from the first sample at or after
its time; an event with a duration (latency spike, failure) and a domain's absence before it
joins mark every interval they overlap (the worst state of the interval), so a spike shorter
than dt is not lost.
"""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

import numpy as np

from formulation.instance import LINK_LIMITS, PHYSICAL_LEAST, Instance
from formulation.schema import InputError, Reader, check_number, read_json, read_text
from formulation.trace import MAX_INTERVALS, Failure, Trace

SCHEMA = "xdsched.scenario/1"
CSV_FIELDS = ("time_s", "kind", "domain", "peer", "value", "duration_s")
MAX_EVENTS = 1_000_000


class EventKind(StrEnum):
    BANDWIDTH = "bandwidth"
    LATENCY = "latency"
    LOAD = "load"
    NODE_FAILURE = "node_failure"
    DOMAIN_FAILURE = "domain_failure"
    DOMAIN_JOIN = "domain_join"


LINK_KINDS = (EventKind.BANDWIDTH, EventKind.LATENCY)
TIMED_KINDS = (EventKind.LATENCY, EventKind.NODE_FAILURE, EventKind.DOMAIN_FAILURE)
VALUE_KINDS = (EventKind.BANDWIDTH, EventKind.LATENCY, EventKind.LOAD, EventKind.NODE_FAILURE)


@dataclass(frozen=True)
class Event:
    time_s: float
    kind: EventKind
    domain: int
    peer: int | None = None  # the link's other end (link kinds)
    value: float | None = None  # a factor, or GPUs lost (node_failure)
    duration_s: float | None = None  # how long it lasts (latency, failures)

    @property
    def end_s(self) -> float:
        return self.time_s + (self.duration_s or 0.0)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"time_s": self.time_s, "kind": str(self.kind),
                               "domain": self.domain}
        out.update({key: value for key in ("peer", "value", "duration_s")
                    if (value := getattr(self, key)) is not None})
        if self.kind is EventKind.NODE_FAILURE:
            out["value"] = int(self.value)  # GPUs
        return out


def _check_link(r: Reader, factor: float, nominal: float, key: str, unit: str) -> None:
    """A link event's factor keeps the link within what an instance may state
    (:data:`~formulation.instance.LINK_LIMITS`; a bandwidth of at least ``PHYSICAL_LEAST``)."""
    scaled = factor * nominal
    least = PHYSICAL_LEAST if key == "bandwidth_gbps" else 0.0
    slack = 1 + 1e-12  # the product's rounding: a factor at a limit's quotient is in
    if not least / slack <= scaled <= LINK_LIMITS[key] * slack:
        raise InputError(f"{r.path_of('value')}: {factor:g} x the link's {nominal:g} {unit} "
                         f"is {scaled:g} {unit}, outside [{least:g}, {LINK_LIMITS[key]:g}]")


def _event(raw: dict[str, Any], where: str, instance: Instance, horizon_s: float) -> Event:
    """One event read from its fields (JSON object or CSV row) and checked against the
    instance; raises InputError naming ``where`` and the field."""
    r = Reader(raw, where)
    size = instance.num_domains
    time_s = r.number("time_s", low=0, high=horizon_s)
    kind = EventKind(r.string("kind", choices=tuple(k.value for k in EventKind)))
    domain = r.integer("domain", low=0, high=size - 1)
    wants = {"peer": kind in LINK_KINDS, "value": kind in VALUE_KINDS,
             "duration_s": kind in TIMED_KINDS}
    for key, wanted in wants.items():
        if r.has(key) != wanted:
            raise InputError(f"{r.path_of(key)} is {'missing' if wanted else 'not used'} "
                             f"for a {kind} event")
    peer = value = duration = None
    if wants["peer"]:
        peer = r.integer("peer", low=0, high=size - 1)
        if peer == domain:
            raise InputError(f"{r.path_of('peer')}: there is no link {domain} -> {peer}")
    if kind is EventKind.NODE_FAILURE:
        value = float(r.integer("value", low=1, high=instance.domains[domain].gpus))
    elif kind is EventKind.LATENCY:
        value = r.number("value", low=1)
        _check_link(r, value, float(instance.links.latency_ms[domain, peer]), "latency_ms",
                    "ms")
    elif kind is EventKind.LOAD:
        value = r.number("value", low=0, high=float(load_ceiling(instance)[domain]))
    elif kind is EventKind.BANDWIDTH:
        value = r.number("value", low=0, low_open=True)
        _check_link(r, value, float(instance.links.bandwidth_gbps[domain, peer]),
                    "bandwidth_gbps", "Gbit/s")
    if wants["duration_s"]:
        duration = r.number("duration_s", low=0, low_open=True)
    r.finish()
    return Event(time_s, kind, domain, peer, value, duration)


@dataclass(frozen=True)
class Scenario:
    horizon_s: float
    events: tuple[Event, ...]  # in time order (stable for equal times)
    provenance: dict = field(default_factory=dict, compare=False)

    # ---- reading and writing --------------------------------------------------------------

    @staticmethod
    def from_dict(document: Any, instance: Instance, where: str = "scenario") -> Scenario:
        try:
            return Scenario._from_dict(document, instance)
        except InputError as err:
            raise InputError(f"{where}: {err}") from None

    @staticmethod
    def _from_dict(document: Any, instance: Instance) -> Scenario:
        r = Reader(document, "")
        schema = r.string("schema")
        if schema != SCHEMA:
            raise InputError(f"schema must be {SCHEMA!r}, got {schema!r}")
        horizon = r.number("horizon_s", low=0, low_open=True)
        events = r.items("events", lambda raw, path: _event(raw, path, instance, horizon),
                         max_len=MAX_EVENTS)
        provenance = r.raw("provenance", {})
        if not isinstance(provenance, dict):
            raise InputError("provenance must be an object")
        r.finish()
        return Scenario.of(horizon, events, provenance)

    @staticmethod
    def of(horizon_s: float, events: list[Event], provenance: dict | None = None) -> Scenario:
        ordered = sorted(events, key=lambda e: e.time_s)  # stable: equal times keep order
        return Scenario(float(horizon_s), tuple(ordered), dict(provenance or {}))

    def to_dict(self) -> dict[str, Any]:
        return {"schema": SCHEMA, "horizon_s": self.horizon_s,
                "events": [e.to_dict() for e in self.events], "provenance": self.provenance}

    @staticmethod
    def from_csv(text: str, instance: Instance, where: str = "scenario") -> Scenario:
        first, _, body = text.partition("\n")
        key, _, number = first.lstrip("# ").partition("=")
        try:
            horizon = float(number) if first.startswith("#") and key.strip() == "horizon_s" \
                else math.nan
        except ValueError:
            horizon = math.nan
        if not (math.isfinite(horizon) and horizon > 0):
            raise InputError(f"{where} line 1: expected '# horizon_s=SECONDS' (> 0)")
        reader = csv.reader(io.StringIO(body))
        if tuple(next(reader, ())) != CSV_FIELDS:
            raise InputError(f"{where} line 2: the header must be {','.join(CSV_FIELDS)}")
        events = []
        for cells in reader:
            line = reader.line_num + 1  # the horizon line comes first
            if not cells:
                continue
            if len(cells) != len(CSV_FIELDS):
                raise InputError(f"{where} line {line}: expected {len(CSV_FIELDS)} fields, got "
                                 f"{len(cells)}")
            if len(events) >= MAX_EVENTS:
                raise InputError(f"{where}: more than {MAX_EVENTS:,} events")
            row = {key: _csv_value(key, cell) for key, cell in zip(CSV_FIELDS, cells,
                                                                   strict=True) if cell != ""}
            try:
                events.append(_event(row, "", instance, horizon))
            except InputError as err:
                raise InputError(f"{where} line {line}: {err}") from None
        return Scenario.of(horizon, events)

    def to_csv(self) -> str:
        out = io.StringIO()
        out.write(f"# horizon_s={self.horizon_s!r}\n")
        writer = csv.DictWriter(out, CSV_FIELDS, lineterminator="\n")
        writer.writeheader()
        for event in self.events:
            writer.writerow({key: "" if value is None else value
                             for key, value in event.to_dict().items()})
        return out.getvalue()

    @staticmethod
    def load(path: str | Path, instance: Instance) -> Scenario:
        """A scenario file, JSON or (by its ``.csv`` suffix) CSV."""
        where = str(path)
        if str(path).lower().endswith(".csv"):
            return Scenario.from_csv(read_text(path, "scenario"), instance, where)
        return Scenario.from_dict(read_json(path, "scenario"), instance, where)

    # ---- the state over time --------------------------------------------------------------

    def samples(self, interval_s: float) -> int:
        """The samples of :meth:`to_trace` every ``interval_s`` seconds up to the horizon;
        raises :class:`InputError` where they are not 1 to ``MAX_INTERVALS``."""
        dt = check_number(interval_s, "interval_s", low=0, low_open=True)
        length = math.ceil(self.horizon_s / dt - 1e-9)  # 4.2 / 0.7 is 6.000000000000001
        if not 1 <= length <= MAX_INTERVALS:
            raise InputError(f"interval_s={dt:g}: horizon_s {self.horizon_s:g} needs 1 to "
                             f"{MAX_INTERVALS:,} samples of {dt:g} s, got {length}")
        return length

    def to_trace(self, instance: Instance, interval_s: float) -> Trace:
        """The scenario sampled every ``interval_s`` seconds up to its horizon (module doc)."""
        length = self.samples(interval_s)
        dt = float(interval_s)
        k = instance.num_domains

        def first_at_or_after(t: float) -> int:  # a tolerance: 2.1 / 0.7 is 3.0000000000000004
            return min(length, math.ceil(t / dt - 1e-9))

        def overlapped(a: float, b: float) -> slice:  # intervals [i dt, (i+1) dt) meeting [a, b)
            return slice(min(length, math.floor(a / dt + 1e-9)), first_at_or_after(b))

        bandwidth = np.ones((length, k, k))
        latency = np.ones((length, k, k))
        load = np.ones((length, k))
        lost = np.zeros((length, k))
        failures = []
        for e in self.events:
            if e.kind is EventKind.BANDWIDTH:
                bandwidth[first_at_or_after(e.time_s):, e.domain, e.peer] = e.value
            elif e.kind is EventKind.LOAD:
                load[first_at_or_after(e.time_s):, e.domain] = e.value
            elif e.kind is EventKind.LATENCY:
                window = overlapped(e.time_s, e.end_s)
                latency[window, e.domain, e.peer] = np.maximum(
                    latency[window, e.domain, e.peer], e.value)
            elif e.kind is EventKind.NODE_FAILURE:
                lost[overlapped(e.time_s, e.end_s), e.domain] += e.value
            else:  # down while failed, or before it joins
                window = overlapped(e.time_s, e.end_s) \
                    if e.kind is EventKind.DOMAIN_FAILURE else overlapped(0.0, e.time_s)
                if window.stop > window.start:
                    failures.append(Failure(e.domain, window.start, window.stop))
        nominal = instance.free_gpus.astype(float)
        free = np.clip(nominal * load - lost, 0, None)
        factor = np.divide(free, nominal, out=np.zeros_like(free), where=nominal > 0)
        return Trace(interval_s=float(dt), bandwidth_factor=bandwidth, latency_factor=latency,
                     free_gpu_factor=factor, failures=tuple(failures))


@dataclass(frozen=True, eq=False)
class StateSeries:
    """A scenario's exact state over time, piecewise constant: state ``i`` holds on
    ``[times[i], times[i + 1])`` (the last one up to the horizon). Free GPUs are whole GPUs:
    ``floor(nominal free x load) - GPUs of failed nodes``, none in a failed domain or one
    that has not joined yet."""

    instance: Instance
    times: np.ndarray  # (n,) starts of the states, times[0] = 0
    bandwidth_factor: np.ndarray  # (n, K, K)
    latency_factor: np.ndarray  # (n, K, K)
    free_gpus: np.ndarray  # (n, K) int64
    load_factor: np.ndarray  # (n, K): each domain's free GPUs against nominal, by load
    withheld: np.ndarray  # (n, K): GPUs of failed nodes (inf: the domain is down or absent)

    def index_at(self, time_s: float) -> int:
        return int(np.searchsorted(self.times, time_s, side="right") - 1)

    def next_change(self, time_s: float) -> float:
        """The first state change after ``time_s`` (inf: none before the horizon)."""
        index = self.index_at(time_s) + 1
        return float(self.times[index]) if index < len(self.times) else math.inf

    def instance_at(self, index: int) -> Instance:
        """The instance observed in state ``index``: its links' bandwidth and latency and
        its free GPUs then."""
        links = self.instance.links
        return self.instance.with_link_state(
            bandwidth_gbps=links.bandwidth_gbps * self.bandwidth_factor[index],
            latency_ms=links.latency_ms * self.latency_factor[index],
            free_gpus=self.free_gpus[index])

    def announced_free(self, now: int, then: int) -> np.ndarray:
        """(K,) int64: the free GPUs a notice in state ``now`` announces for state ``then``:
        the load of then (announced) less the failures and absences known now (failures
        are not announced)."""
        nominal = self.instance.free_gpus.astype(float)
        free = np.floor(nominal * self.load_factor[then] + 1e-9) - self.withheld[now]
        return np.maximum(free, 0).astype(np.int64)

    def announced(self, now: int, then: int) -> Instance:
        """The instance a notice in state ``now`` shows for state ``then``: the links as
        they are now, the free GPUs of :meth:`announced_free`."""
        return self.instance_at(now).with_link_state(free_gpus=self.announced_free(now, then))


def state_series(scenario: Scenario, instance: Instance) -> StateSeries:
    """The exact piecewise-constant state of ``scenario`` on ``instance`` (:class:`StateSeries`):
    a step change holds from its time; an event with a duration holds on [time, end)."""
    k = instance.num_domains
    cuts = {0.0}
    for e in scenario.events:
        cuts.add(e.time_s)
        if e.duration_s is not None:
            cuts.add(e.end_s)
    times = np.array(sorted(t for t in cuts if t < scenario.horizon_s))
    n = len(times)
    steps = [e for e in scenario.events if e.kind in (EventKind.BANDWIDTH, EventKind.LOAD)]
    timed = [e for e in scenario.events if e.kind in TIMED_KINDS]  # in time order
    joins = {}
    for e in scenario.events:
        if e.kind is EventKind.DOMAIN_JOIN:
            joins[e.domain] = max(joins.get(e.domain, 0.0), e.time_s)
    bandwidth, load = np.ones((k, k)), np.ones(k)
    bandwidth_out = np.ones((n, k, k))
    latency_out = np.ones((n, k, k))
    free_out = np.zeros((n, k), dtype=np.int64)
    load_out, withheld_out = np.ones((n, k)), np.zeros((n, k))
    nominal = instance.free_gpus.astype(float)
    applied = started = 0
    active: list[Event] = []  # the timed events holding at the current time
    for i, t in enumerate(times):
        while applied < len(steps) and steps[applied].time_s <= t:
            e = steps[applied]
            if e.kind is EventKind.BANDWIDTH:
                bandwidth[e.domain, e.peer] = e.value
            else:
                load[e.domain] = e.value
            applied += 1
        while started < len(timed) and timed[started].time_s <= t:
            active.append(timed[started])
            started += 1
        active = [e for e in active if e.end_s > t]
        bandwidth_out[i] = bandwidth
        lost = np.zeros(k)
        down = np.array([t < joins.get(d, 0.0) for d in range(k)])
        for e in active:
            if e.kind is EventKind.LATENCY:
                latency_out[i, e.domain, e.peer] = max(latency_out[i, e.domain, e.peer],
                                                       e.value)
            elif e.kind is EventKind.NODE_FAILURE:
                lost[e.domain] += e.value
            else:
                down[e.domain] = True
        free = np.maximum(np.floor(nominal * load + 1e-9) - lost, 0)
        free_out[i] = np.where(down, 0, free).astype(np.int64)
        load_out[i] = load
        withheld_out[i] = np.where(down, np.inf, lost)
    return StateSeries(instance, times, bandwidth_out, latency_out, free_out, load_out,
                       withheld_out)


def load_ceiling(instance: Instance) -> np.ndarray:
    """Per domain, the largest load factor: all its GPUs free (1 where none is free at
    nominal, whose factor has nothing to scale)."""
    nominal = instance.free_gpus.astype(float)
    gpus = instance.domain_gpus.astype(float)
    return np.divide(gpus, nominal, out=np.ones_like(gpus), where=nominal > 0)


def _csv_value(key: str, text: str) -> Any:
    """A CSV cell as the JSON value its field takes (left as text where it is not one, so
    the event reader names the field)."""
    if key == "kind":
        return text
    try:
        number = float(text)
    except ValueError:
        return text
    if key in ("domain", "peer"):
        return int(number) if number.is_integer() else number
    if key == "value" and number.is_integer():
        return int(number)
    return number
