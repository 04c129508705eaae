"""The resumable state of an exact run (``python -m solvers.exact --resume``): a run stopped
at ``--time-limit`` writes its sweep's position beside the front (``FRONT.json.state``), with
a checksum of itself, and a later run checks it belongs to the same instance and engine and
reads every counter it carries on with its type checked."""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from pathlib import Path

from formulation.instance import Instance
from formulation.plan import Plan
from formulation.schema import InputError, Reader
from solvers.engine import EngineStatistics
from solvers.epsilon import SweepState, SweepStats

STATE_SCHEMA = "xdsched.exact-state/1"


def resumed_counters(resume: dict) -> dict:
    """The run counters of a state document, each field checked (a state's checksum holds
    for any content its writer signed)."""
    r = Reader(resume, "")
    counts = {"low": 0, "high": 2 ** 62}

    def tally(reader: Reader, key: str) -> dict[str, int]:
        table = reader.child(key)
        return {name: table.integer(name, **counts) for name in list(table.value)}

    stats = r.child("stats")
    sweep = SweepStats(**{name: stats.integer(name, **counts)
                          for name in ("solves", "reused", "floored", "unproven")},
                       solve_time_s=stats.number("solve_time_s", low=0),
                       proofs=tally(stats, "proofs"))
    stats.finish()
    engines = r.child("engines")
    engine = EngineStatistics(engines.integer("solves", **counts),
                              engines.number("wall_time_s", low=0),
                              Counter(tally(engines, "statuses")),
                              engines.integer("handed_over", **counts))
    engines.finish()
    return {"wall_time_s": r.number("wall_time_s", low=0),
            "runs": r.integer("runs", **counts), "stats": sweep, "engines": engine}


def engine_statistics(document: dict) -> EngineStatistics:
    return EngineStatistics(document["solves"], document["wall_time_s"],
                            Counter(document["statuses"]), document["handed_over"])


def state_document(instance: Instance, engine: str, seeds: list[Plan],
                   states: list[SweepState], stats: SweepStats, engines: EngineStatistics,
                   wall_time_s: float, runs: int) -> dict:
    """Everything a later run needs to continue this one (``--resume``), with a checksum
    of itself: a state is the run's own record, never edited."""
    document = {"schema": STATE_SCHEMA, "instance": instance.name,
                "fingerprint": instance.content_hash(), "engine": engine,
                "seeds": [p.to_dict() for p in seeds], "states": [s.to_dict() for s in states],
                "stats": stats.to_dict(), "engines": engines.to_dict(),
                "wall_time_s": wall_time_s, "runs": runs}
    return {**document, "checksum": checksum(document)}


def checksum(document: dict) -> str:
    text = json.dumps(document, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def check_resumable(document: dict, instance: Instance, engine: str) -> None:
    if not isinstance(document, dict) or document.get("schema") != STATE_SCHEMA:
        raise InputError(f"--resume: the state is not a {STATE_SCHEMA} document")
    rest = {key: value for key, value in document.items() if key != "checksum"}
    if document.get("checksum") != checksum(rest):  # claims ("proven") are not re-proven
        raise InputError("--resume: the state does not match its checksum (it was changed "
                         "after the run wrote it)")
    if document.get("fingerprint") != instance.content_hash():
        raise InputError(f"--resume: the state belongs to another instance "
                         f"({document.get('instance')!r})")
    if document.get("engine") != engine:
        raise InputError(f"--resume: the state was made with --engine {document.get('engine')}, "
                         f"not {engine}")


def state_path(out: Path) -> Path:
    return out.with_name(out.name + ".state")
