"""Audit of the exact engines against brute force (SPEC 7): every ``exact`` front must equal
the enumeration of all plans, point for point.

:func:`audit` runs brute force and each engine's sweep on one instance and reports, per
engine, the front's status, its size, whether it agrees with brute force, and whether an
``exact`` label was wrong (the one thing that must never happen). ``scripts/audit_exact.py``
runs it on random instances of :func:`instances.tiny.audit_instance` and prints the table;
``tests/test_audit.py`` runs a few on seeds drawn afresh each run.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from formulation.instance import Instance
from solvers.bruteforce import brute_force_front
from solvers.exact import ExactSettings, exact_front
from solvers.front import Front, fronts_agree

ENGINES = ("highs", "cpsat", "portfolio", "labels")


@dataclass(frozen=True)
class EngineAudit:
    engine: str
    status: str
    points: int
    agrees: bool
    seconds: float
    solves: int

    @property
    def wrong_exact(self) -> bool:
        """Labelled exact, yet not brute force's front."""
        return self.status == "exact" and not self.agrees


@dataclass(frozen=True)
class InstanceAudit:
    instance: str
    variant: str
    brute_points: int
    cross_domain_points: int  # brute-force front points that cross the WAN (cost > 0)
    brute_seconds: float
    engines: list[EngineAudit] = field(default_factory=list)
    interleaved_points: int = 0  # brute-force front points with an interleaved schedule


def variant(instance: Instance) -> str:
    """A short description of what an audit instance exercises."""
    s, c = instance.search, instance.constraints
    parts = [f"K{instance.num_domains}", f"L{instance.model.layers}", instance.gpu.name,
             f"dp{'/'.join(map(str, s.dp))}", f"tp{'/'.join(map(str, s.tp))}",
             f"b{'/'.join(map(str, s.micro_batch))}",
             "/".join(m[:3] for m in s.recompute), f"S{s.max_stages}"]
    if s.virtual_stages != (1,):
        parts.append(f"v{'/'.join(map(str, s.virtual_stages))}")
    links = instance.links.bandwidth_gbps
    if (links != links.T).any():
        parts.append("asym")
    if c.cost_budget is not None:
        parts.append(f"budget={c.cost_budget:.3g}")
    if c.wan_share_cap is not None:
        parts.append(f"share={c.wan_share_cap:.2f}")
    training = instance.training
    parts.append(f"Z{training.zero_stage} {training.attention}")
    if training.tp_overlap or training.dp_overlap:
        parts.append(f"ov{training.tp_overlap:g}/{training.dp_overlap:g}")
    return " ".join(parts)


def audit(instance: Instance, engines: tuple[str, ...] = ENGINES, threads: int = 2,
          seeds: str = "baselines") -> InstanceAudit:
    """Brute force and every engine's front of ``instance``, compared."""
    start = time.perf_counter()
    brute = brute_force_front(instance)
    brute_seconds = time.perf_counter() - start
    rows = []
    for engine in engines:
        start = time.perf_counter()
        front: Front = exact_front(instance, settings=ExactSettings(engine=engine,
                                                                      threads=threads,
                                                                      seeds=seeds))
        rows.append(EngineAudit(engine, front.status, len(front.points),
                                fronts_agree(front, brute), time.perf_counter() - start,
                                front.provenance["sweep"]["solves"]))
    return InstanceAudit(instance.name, variant(instance), len(brute.points),
                         sum(p.objectives[2] > 0 for p in brute.points), brute_seconds, rows,
                         sum(p.plan.virtual_stages > 1 for p in brute.points))
