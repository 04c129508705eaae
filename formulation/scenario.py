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
``load``            ``domain``: free GPUs = nominal free x ``value`` (>= 0, at most all its
                    GPUs), until the domain's next load event (other tenants' load)
``node_failure``    ``domain`` loses ``value`` GPUs (an integer >= 1) for ``duration_s``
                    (its repair time)
``domain_failure``  ``domain`` has no GPU for ``duration_s``
``domain_join``     ``domain`` has no GPU before ``time_s`` (new hardware joining)
==================  ===================================================================

A link event names a direction: a symmetric change is two events. Unused fields are absent
(JSON) or empty (CSV).

Two formats hold the same scenario, so a measured trace can be replayed:

* JSON: ``{"schema": "xdsched.scenario/1", "horizon_s": H, "events": [{"time_s": ..,
  "kind": .., "domain": .., ...}], "provenance": {...}}``;
* CSV: a header ``time_s,kind,domain,peer,value,duration_s`` and one row per event (the
  horizon is the last event's time unless a ``# horizon_s=H`` first line gives it).

:meth:`Scenario.to_trace` samples a scenario on a grid as the :class:`~formulation.trace.Trace`
the event-level simulator and the robustness measures read.
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

from formulation.instance import Instance
from formulation.schema import InputError, Reader, read_json, read_text
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


def _event(raw: dict[str, Any], where: str, instance: Instance, horizon_s: float) -> Event:
    """One event read from its fields (JSON object or CSV row) and checked against the
    instance; raises InputError naming ``where`` and the field."""
    r = Reader(raw, where)
    k = instance.num_domains
    time_s = r.number("time_s", low=0, high=horizon_s)
    kind = EventKind(r.string("kind", choices=tuple(k.value for k in EventKind)))
    domain = r.integer("domain", low=0, high=k - 1)
    wants = {"peer": kind in LINK_KINDS, "value": kind in VALUE_KINDS,
             "duration_s": kind in TIMED_KINDS}
    for key, wanted in wants.items():
        if r.has(key) != wanted:
            raise InputError(f"{r.path_of(key)} is {'missing' if wanted else 'not used'} "
                             f"for a {kind} event")
    peer = value = duration = None
    if wants["peer"]:
        peer = r.integer("peer", low=0, high=k - 1)
        if peer == domain or instance.links.bandwidth_gbps[domain, peer] <= 0:
            raise InputError(f"{r.path_of('peer')}: there is no link {domain} -> {peer}")
    if kind is EventKind.NODE_FAILURE:
        value = float(r.integer("value", low=1, high=instance.domains[domain].gpus))
    elif kind is EventKind.LATENCY:
        value = r.number("value", low=1)
    elif kind is EventKind.LOAD:
        nominal = instance.domains[domain].free_gpus
        most = instance.domains[domain].gpus / nominal if nominal else 1.0
        value = r.number("value", low=0, high=most)
    elif kind is EventKind.BANDWIDTH:
        value = r.number("value", low=0, low_open=True)
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
        r = Reader(document, "")
        schema = r.string("schema")
        if schema != SCHEMA:
            raise InputError(f"{where}: schema must be {SCHEMA!r}, got {schema!r}")
        horizon = r.number("horizon_s", low=0, low_open=True)
        events = r.items("events", lambda raw, path: _event(raw, f"{where}: {path}", instance,
                                                              horizon), max_len=MAX_EVENTS)
        provenance = r.raw("provenance", {})
        if not isinstance(provenance, dict):
            raise InputError(f"{where}: provenance must be an object")
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
        lines = text.splitlines()
        horizon = None
        if lines and lines[0].startswith("#"):
            key, _, number = lines[0].lstrip("# ").partition("=")
            try:
                horizon = float(number) if key.strip() == "horizon_s" else None
            except ValueError:
                horizon = None
            if horizon is None or not math.isfinite(horizon) or horizon <= 0:
                raise InputError(f"{where} line 1: expected '# horizon_s=SECONDS' (> 0)")
            lines = lines[1:]
        reader = csv.DictReader(lines)
        if tuple(reader.fieldnames or ()) != CSV_FIELDS:
            raise InputError(f"{where}: the header must be {','.join(CSV_FIELDS)}")
        rows = []
        for number, row in enumerate(reader, start=2 + (horizon is not None)):
            if None in row or any(v is None for v in row.values()):
                raise InputError(f"{where} line {number}: expected {len(CSV_FIELDS)} fields")
            rows.append((number, {key: _csv_value(key, text)
                                  for key, text in row.items() if text != ""}))
            if len(rows) > MAX_EVENTS:
                raise InputError(f"{where}: more than {MAX_EVENTS:,} events")
        if horizon is None:
            horizon = max((row.get("time_s", 0) for _, row in rows
                           if isinstance(row.get("time_s"), float)), default=0.0) or 1.0
        events = [_event(row, f"{where} line {number}", instance, horizon)
                  for number, row in rows]
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

    def to_trace(self, instance: Instance, interval_s: float) -> Trace:
        """The scenario sampled at ``0, interval_s, 2 interval_s, ...`` up to its horizon:
        each sample holds the state at its start time."""
        length = int(math.ceil(self.horizon_s / interval_s))
        if not 1 <= length <= MAX_INTERVALS:
            raise InputError(f"interval_s={interval_s}: the horizon {self.horizon_s} s needs "
                             f"1 to {MAX_INTERVALS:,} intervals, got {length}")
        k = instance.num_domains
        times = np.arange(length) * interval_s
        bandwidth = np.ones((length, k, k))
        latency = np.ones((length, k, k))
        load = np.ones((length, k))
        lost = np.zeros((length, k))
        failures = []
        nominal = instance.free_gpus.astype(float)
        for e in self.events:
            since = times >= e.time_s
            during = since & (times < e.end_s)
            if e.kind is EventKind.BANDWIDTH:
                bandwidth[since, e.domain, e.peer] = e.value
            elif e.kind is EventKind.LATENCY:
                latency[during, e.domain, e.peer] = np.maximum(
                    latency[during, e.domain, e.peer], e.value)
            elif e.kind is EventKind.LOAD:
                load[since, e.domain] = e.value
            elif e.kind is EventKind.NODE_FAILURE:
                lost[during, e.domain] += e.value
            else:  # down while failed, or before it joins
                window = (e.time_s, e.end_s) if e.kind is EventKind.DOMAIN_FAILURE \
                    else (0.0, e.time_s)
                start, end = (int(i) for i in np.searchsorted(times, window))
                if end > start:
                    failures.append(Failure(e.domain, start, end))
        gpus = np.array([d.gpus for d in instance.domains], dtype=float)
        free = np.clip(np.minimum(nominal * load, gpus - lost), 0, None)
        with np.errstate(divide="ignore", invalid="ignore"):
            factor = np.where(nominal > 0, free / np.where(nominal > 0, nominal, 1), 0.0)
        return Trace(interval_s=float(interval_s), bandwidth_factor=bandwidth,
                     latency_factor=latency, free_gpu_factor=factor,
                     failures=tuple(failures))


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
