"""Pareto fronts in the common format (ARCHITECTURE.md "File formats").

A front holds non-dominated points in (step_time_s, gpus, comm_cost), each with its plan, a
status (``exact``, ``best_known`` or ``heuristic``) and the provenance of how it was made.

A point of an exact sweep also says what is proven about it (``POINT_STATUSES``): ``optimal``
(its step time is the least under its caps, certified), ``unproven`` (a solver incumbent;
``bound`` is a certified lower bound on that least step time and ``gap`` the relative distance
to it) or ``heuristic`` (a plan from a heuristic, e.g. NSGA-II, that no solver point matched;
its ``bound`` comes from what the sweep certified).

A front also records the content hash of the instance it was computed for
(``instance_sha256``, :meth:`formulation.instance.Instance.content_hash`); read for an
instance, a front is refused unless it names that instance, its hash is that instance's
and every point's stored objectives are what its plan evaluates to.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import moocore
import numpy as np

from formulation.evaluator import OBJECTIVES
from formulation.families import AnyPlan, plan_from_dict, score
from formulation.instance import Instance
from formulation.outputs import command_line, versions, write_json  # noqa: F401 (re-exported)
from formulation.schema import InputError, Reader, check_number, read_json

FRONT_SCHEMA = "xdsched.front/3"
# /1: the gap was called "mip_gap"; /1 and /2 hold no instance hash
READABLE_SCHEMAS = ("xdsched.front/1", "xdsched.front/2", FRONT_SCHEMA)
OBJECTIVE_TOLERANCE = 1e-6  # relative: a stored objective against its plan's evaluation
STATUSES = ("exact", "best_known", "heuristic")
MAX_POINTS = 1_000_000  # points of one front: every one is re-evaluated when read
POINT_STATUSES = ("optimal", "unproven", "heuristic")


def nondominated_mask(points: np.ndarray) -> np.ndarray:
    """Rows not dominated by any other row (minimisation); of equal rows the first is kept."""
    points = np.asarray(points, dtype=float)
    if len(points) == 0:
        return np.zeros(0, dtype=bool)
    keep = moocore.is_nondominated(points, keep_weakly=True)
    _, first = np.unique(points, axis=0, return_index=True)
    unique = np.zeros(len(points), dtype=bool)
    unique[first] = True
    return keep & unique


def dominated_by(points: np.ndarray, others: np.ndarray, rtol: float = 1e-9) -> np.ndarray:
    """Which rows of ``points`` some row of ``others`` dominates by more than ``rtol``
    (relative, so that a solver's tolerance is not mistaken for a better plan)."""
    points = np.asarray(points, dtype=float).reshape(-1, 3)
    others = np.asarray(others, dtype=float).reshape(-1, 3)
    hit = np.zeros(len(points), dtype=bool)
    for start in range(0, len(others), 4096):  # bounded memory for big enumerations
        chunk = others[start:start + 4096, None, :]
        hit |= (np.all(chunk <= points[None] * (1 + rtol), axis=2)
                & np.any(chunk < points[None] * (1 - rtol), axis=2)).any(axis=0)
    return hit


HV_REFERENCE_MARGIN = 0.1  # reference point = nadir + 10 % of the range


def reference_box(objectives: np.ndarray, margin: float = HV_REFERENCE_MARGIN) -> dict:
    """Ideal, nadir and hypervolume reference point (nadir + margin * range; a flat
    objective gets margin * max(|nadir|, 1)) of a point set."""
    objectives = np.asarray(objectives, dtype=float).reshape(-1, 3)
    ideal, nadir = objectives.min(axis=0), objectives.max(axis=0)
    span = np.where(nadir > ideal, nadir - ideal, np.maximum(np.abs(nadir), 1.0))
    return {"ideal": ideal.tolist(), "nadir": nadir.tolist(),
            "hv_reference": (nadir + margin * span).tolist(),
            "hv_reference_rule": f"nadir + {margin:g} * range"}


def scale_to_box(objectives: np.ndarray, normalisation: dict) -> np.ndarray:
    """Objectives scaled per objective so that ideal -> 0 and nadir -> 1 (a flat objective
    is only shifted)."""
    ideal, nadir = (np.asarray(normalisation[key], dtype=float) for key in ("ideal", "nadir"))
    return (np.asarray(objectives, dtype=float).reshape(-1, 3) - ideal) / np.where(
        nadir > ideal, nadir - ideal, 1.0)


def normalised_hypervolume(objectives: np.ndarray, normalisation: dict | None) -> float:
    """Hypervolume of ``objectives`` scaled per objective by ideal and nadir (a flat
    objective by 1), against the normalisation's reference point; points outside the
    reference box add nothing."""
    objectives = np.asarray(objectives, dtype=float).reshape(-1, 3)
    if normalisation is None or not len(objectives):
        return 0.0
    scaled = scale_to_box(objectives, normalisation)
    ref = scale_to_box(np.asarray(normalisation["hv_reference"], dtype=float), normalisation)[0]
    inside = scaled[np.all(scaled < ref, axis=1)]
    return float(moocore.hypervolume(inside, ref=ref)) if len(inside) else 0.0


@dataclass(frozen=True)
class FrontPoint:
    objectives: tuple[float, float, float]
    plan: AnyPlan
    gap: float | None = None  # relative distance of the step time to ``bound``
    bound: float | None = None  # certified lower bound on the least step time at its caps
    status: str | None = None  # one of POINT_STATUSES, for points of an exact sweep

    def to_dict(self, instance: Instance | None = None) -> dict[str, Any]:
        extra = {key: getattr(self, key) for key in ("status", "bound", "gap")
                 if getattr(self, key) is not None}
        return {"objectives": list(self.objectives), "plan": self.plan.to_dict(instance),
                **extra}


@dataclass
class Front:
    instance: str
    status: str
    points: list[FrontPoint]
    provenance: dict[str, Any] = field(default_factory=dict)
    normalisation: dict[str, Any] | None = None  # ideal, nadir, hv reference (reference fronts)
    instance_sha256: str | None = None  # the instance's content hash, once read or written

    @property
    def objectives(self) -> np.ndarray:
        return np.array([p.objectives for p in self.points], dtype=float).reshape(-1, 3)

    def sorted(self) -> Front:
        order = sorted(range(len(self.points)), key=lambda i: self.points[i].objectives)
        self.points = [self.points[i] for i in order]
        return self

    @staticmethod
    def from_plans(instance: Instance, plans: list[AnyPlan], status: str,
                   provenance: dict[str, Any] | None = None,
                   proofs: list[tuple[str, float | None]] | None = None) -> Front:
        """The non-dominated feasible subset of ``plans``, scored by the evaluator;
        ``proofs`` gives each plan's (point status, bound). Of plans with equal objective
        vectors the first is kept, so list proven ones first."""
        if not plans:
            return Front(instance.name, status, [], provenance or {})
        objectives, ok = score(instance, plans)
        feasible = np.flatnonzero(ok)
        keep = feasible[nondominated_mask(objectives[feasible])]
        points = []
        for i in keep:
            values = tuple(float(x) for x in objectives[i])
            point_status, bound = proofs[i] if proofs else (None, None)
            gap = None if bound is None else max(0.0, values[0] - bound) / values[0]
            points.append(FrontPoint(values, plans[i], gap, bound, point_status))
        return Front(instance.name, status, points, provenance or {}).sorted()

    @property
    def largest_gap(self) -> float | None:
        gaps = [p.gap for p in self.points if p.gap is not None]
        return max(gaps) if gaps else None

    def to_dict(self, instance: Instance | None = None) -> dict[str, Any]:
        """The front's JSON document; with ``instance``, its content hash recorded."""
        digest = self.instance_sha256 if instance is None else instance.content_hash()
        out: dict[str, Any] = {
            "schema": FRONT_SCHEMA, "instance": self.instance}
        if digest is not None:
            out["instance_sha256"] = digest
        out.update({"objectives": list(OBJECTIVES), "status": self.status,
                    "provenance": self.provenance,
                    "points": [p.to_dict(instance) for p in self.points]})
        if self.normalisation is not None:
            out["normalisation"] = self.normalisation
        return out

    def save(self, path: str | Path, instance: Instance | None = None) -> None:
        write_json(Path(path), self.to_dict(instance))

    @staticmethod
    def load(path: str | Path, instance: Instance | None = None) -> Front:
        try:
            return Front.from_dict(read_json(path, "front"), instance)
        except InputError as err:
            raise InputError(f"front {str(path)!r}: {err}") from None

    @staticmethod
    def from_dict(document: Any, instance: Instance | None = None) -> Front:
        """A front from its JSON document (validated; plans checked against ``instance``)."""
        r = Reader(document, "")
        schema = r.string("schema")
        if schema not in READABLE_SCHEMAS:
            raise InputError(f"schema must be {FRONT_SCHEMA!r}")
        if r.raw("objectives") != list(OBJECTIVES):
            raise InputError(f"objectives must be {list(OBJECTIVES)}")

        def point(value: Any, where: str) -> FrontPoint:
            pr = Reader(value, where)
            objectives = pr.raw("objectives")
            if not (isinstance(objectives, list) and len(objectives) == 3):
                raise InputError(f"{where}.objectives must be a list of 3 numbers")
            objectives = [check_number(x, f"{where}.objectives[{i}]", low=0)
                          for i, x in enumerate(objectives)]
            gap = pr.number("mip_gap" if schema == READABLE_SCHEMAS[0] else "gap", None,
                            low=0, high=1)
            bound = pr.number("bound", None, low=0)
            status = pr.string("status", None, choices=POINT_STATUSES)
            plan = plan_from_dict(pr.raw("plan"), instance, f"{where}.plan")
            pr.finish()
            return FrontPoint(tuple(float(x) for x in objectives), plan, gap, bound, status)

        name = r.string("instance")
        if instance is not None and name != instance.name:
            raise InputError(f"instance is {name!r}, but the front is read for instance "
                             f"{instance.name!r}")
        digest = r.raw("instance_sha256", ... if schema == FRONT_SCHEMA else None)
        if digest is not None and not (isinstance(digest, str)
                                       and re.fullmatch(r"[0-9a-f]{64}", digest)):
            raise InputError("instance_sha256 must be 64 lowercase hex digits")
        if instance is not None and digest is not None and digest != instance.content_hash():
            raise InputError(f"instance_sha256 is not the content hash of instance {name!r}: "
                             "the front was computed for other data under that name")
        provenance = r.raw("provenance", {})
        if not isinstance(provenance, dict):
            raise InputError("provenance must be an object")
        front = Front(instance=name, status=r.string("status", choices=STATUSES),
                      points=r.items("points", point, max_len=MAX_POINTS),
                      provenance=provenance,
                      normalisation=_normalisation(r.raw("normalisation", None)),
                      instance_sha256=digest)
        r.finish()
        if instance is not None:  # the points first: the box is checked against them
            front.check_objectives(instance)
        if front.normalisation is not None:
            _check_box(front.normalisation, front.objectives)
        return front

    def check_objectives(self, instance: Instance) -> None:
        """Every point's stored objectives are its plan's, re-evaluated (to a relative
        ``OBJECTIVE_TOLERANCE``): a front is never scored on numbers its plans do not give."""
        if not self.points:
            return
        stored = np.array([p.objectives for p in self.points])
        evaluated, feasible = score(instance, [p.plan for p in self.points])
        if not feasible.all():
            raise InputError(f"points[{int(np.flatnonzero(~feasible)[0])}].plan is not "
                             "feasible on the instance, or lies outside its search space")
        wrong = ~np.isclose(stored, evaluated, rtol=OBJECTIVE_TOLERANCE, atol=0.0)
        if wrong.any():
            i, j = np.argwhere(wrong)[0]
            raise InputError(f"points[{i}].objectives[{j}] is {stored[i, j]:.9g}, but its plan "
                             f"evaluates to {evaluated[i, j]:.9g}")


def _normalisation(value: Any) -> Any:
    """The stored hypervolume normalisation, if any: ideal, nadir and reference points of
    three finite numbers each, and the rule that made the reference."""
    if value is None:
        return None
    r = Reader(value, "normalisation")
    for key in ("ideal", "nadir", "hv_reference"):
        point = r.raw(key)
        if not isinstance(point, list) or len(point) != 3:
            raise InputError(f"normalisation.{key} must be a list of 3 numbers")
        for i, x in enumerate(point):
            check_number(x, f"normalisation.{key}[{i}]")
    r.string("hv_reference_rule", "")
    r.finish()
    return value


def _check_box(normalisation: dict, objectives: np.ndarray) -> None:
    """The stored normalisation frames the front: ideal <= every point <= nadir <
    hypervolume reference, objective by objective (else every hypervolume scored against it
    would be silently wrong)."""
    ideal, nadir, reference = (np.asarray(normalisation[key], dtype=float)
                               for key in ("ideal", "nadir", "hv_reference"))
    slack = 1e-9 * np.maximum(np.abs(nadir), 1.0)
    for j, name in enumerate(OBJECTIVES):
        if ideal[j] > nadir[j]:
            raise InputError(f"normalisation.ideal[{j}] ({name}) is above "
                             f"normalisation.nadir[{j}]")
        if not reference[j] > nadir[j]:
            raise InputError(f"normalisation.hv_reference[{j}] ({name}) must be above "
                             f"normalisation.nadir[{j}]")
        if len(objectives) and (objectives[:, j].min() < ideal[j] - slack[j]
                                or objectives[:, j].max() > nadir[j] + slack[j]):
            raise InputError(f"normalisation: the points' {name} lie outside "
                             "[ideal, nadir]")


def fronts_agree(a: Front, b: Front, rtol: float = 1e-6) -> bool:
    """Whether two fronts have the same objective vectors, point for point (within rtol)."""
    x, y = a.objectives, b.objectives
    if x.shape != y.shape:
        return False
    x, y = x[np.lexsort(x.T[::-1])], y[np.lexsort(y.T[::-1])]
    return bool(np.all(np.abs(x - y) <= rtol * np.maximum(np.abs(y), 1e-3)))
