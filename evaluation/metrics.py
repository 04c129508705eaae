"""Quality indicators of a method's points against an exact reference front (minimisation).

A :class:`ReferenceSet` is the exact front in one objective space with its fixed
normalisation (ideal, nadir, hypervolume reference point; stored with the committed front
for (step_time_s, gpus, comm_cost), derived from the front for (step_time_s, 1/MFU,
comm_cost)). An :class:`Indicator` scores a method's (N, 3) objective array in the same
space. As in pymoo's ``Indicator``, the base :meth:`Indicator.do` handles a method without
points (the indicator's ``empty`` value) and, for an indicator that declares itself
``normalised``, scales both sets to the reference's box before its formula sees them; a
subclass states only its formula (the hypervolume ratio normalises through the committed
hypervolume reference point itself; the multiplicative epsilon is raw by definition). The
evaluation records, summarises and reports the indicators of :data:`INDICATORS`, so a new
one is a subclass and an entry there (and its test):

* ``coverage(eps)``: share of reference points z for which the method has a point a with
  a_i <= (1 + eps) z_i in every objective (the sponsor's "Pareto coverage");
* ``hypervolume_ratio``: the method's hypervolume over the reference's, both normalised;
* ``igd_plus``: mean distance from each reference point to the region the method dominates
  (normalised; 0 = every reference point matched or beaten; moocore);
* ``epsilon_additive``: least shift (normalised) that makes the method weakly dominate every
  reference point (moocore);
* ``epsilon_multiplicative``: least factor e with, for every z, some a_i <= e z_i (raw
  objectives; a zero objective is matched only by zero). Coverage at eps is 100 % exactly
  when this is <= 1 + eps (up to the rounding tolerance RTOL);
* ``c_metric(A, B)``: share of B weakly dominated by some point of A (Zitzler's C), both
  ways between the method and the reference;
* ``preference_gap``: ``J(best method point) / J* - 1`` for the seeds' scalarised cost J
  (:mod:`formulation.reward`), J* its minimum over the reference front.

A method with no points scores coverage 0, hypervolume 0, C-metric 0 both ways, and
infinite distances.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import moocore
import numpy as np

from formulation.reward import RewardScale, mfu_space, scalarised_cost
from solvers.front import (
    Front,
    nondominated_mask,
    normalised_hypervolume,
    reference_box,
    scale_to_box,
)

RTOL = 1e-9  # a solver's rounding is not a difference between plans


@dataclass(frozen=True)
class ReferenceSet:
    """Non-dominated reference points in one objective space and their normalisation."""

    objectives: np.ndarray  # (M, 3)
    normalisation: dict

    @staticmethod
    def of_front(front: Front) -> ReferenceSet:
        if not front.points:
            raise ValueError(f"reference front of {front.instance} has no points")
        return ReferenceSet(front.objectives, front.normalisation
                            or reference_box(front.objectives))

    @staticmethod
    def in_mfu_space(front: Front, scale: RewardScale) -> ReferenceSet:
        """The front mapped to (step_time_s, 1/MFU, comm_cost): its non-dominated part there,
        with a box derived the same way as the committed one."""
        mapped = mfu_space(front.objectives, scale)
        mapped = mapped[nondominated_mask(mapped)]
        return ReferenceSet(mapped, reference_box(mapped))

    @property
    def hypervolume(self) -> float:
        return normalised_hypervolume(self.objectives, self.normalisation)


def _points(objectives: np.ndarray) -> np.ndarray:
    return np.asarray(objectives, dtype=float).reshape(-1, 3)


def c_metric(a: np.ndarray, b: np.ndarray) -> float:
    """Share of the points of ``b`` that some point of ``a`` weakly dominates."""
    a, b = _points(a), _points(b)
    if not len(a) or not len(b):
        return 0.0
    weakly = np.all(a[:, None, :] <= b[None] * (1 + RTOL) + 1e-12, axis=2).any(axis=0)
    return float(weakly.mean())


class Indicator:
    """A quality indicator of a method's points against a :class:`ReferenceSet`."""

    name: str  # its record column (``mfu_`` prefixed in MFU space)
    label: str  # its column header in the report
    share: bool = False  # a share of points (reported in percent)
    empty: float = math.inf  # its value for a method without points
    normalised: bool = False  # the formula sees both point sets scaled to the reference box

    def do(self, objectives: np.ndarray, reference: ReferenceSet) -> float:
        method = _points(objectives)
        if not len(method):
            return self.empty
        ref = reference.objectives
        if self.normalised:
            method = scale_to_box(method, reference.normalisation)
            ref = scale_to_box(ref, reference.normalisation)
        return float(self._do(method, ref, reference))

    __call__ = do

    def _do(self, method: np.ndarray, ref: np.ndarray, reference: ReferenceSet) -> float:
        """The formula, on a non-empty method set (normalised if ``normalised``)."""
        raise NotImplementedError


class Coverage(Indicator):
    share, empty = True, 0.0

    def __init__(self, eps: float):
        self.eps = eps
        self.name = f"coverage_{eps:g}"
        self.label = f"cov {100 * eps:g}%" if eps else "cov 0"

    def _do(self, method, ref, reference):
        bound = ref * (1 + self.eps) * (1 + RTOL) + 1e-12
        return np.all(method[:, None, :] <= bound[None], axis=2).any(axis=0).mean()


class HypervolumeRatio(Indicator):
    name, label, empty = "hv_ratio", "HV ratio", 0.0

    def _do(self, method, ref, reference):
        whole = reference.hypervolume
        return normalised_hypervolume(method, reference.normalisation) / whole if whole \
            else 0.0


class IgdPlus(Indicator):
    name, label, normalised = "igd_plus", "IGD+", True

    def _do(self, method, ref, reference):
        return moocore.igd_plus(method, ref=ref)


class EpsilonAdditive(Indicator):
    name, label, normalised = "eps_additive", "eps+", True

    def _do(self, method, ref, reference):
        return moocore.epsilon_additive(method, ref=ref)


class EpsilonMultiplicative(Indicator):
    name, label = "eps_multiplicative", "eps x"

    def _do(self, method, ref, reference):
        a, z = method[:, None, :], ref[None]
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(z > 0, a / np.where(z > 0, z, 1.0),
                             np.where(a <= 1e-12, 1.0, np.inf))
        return ratio.max(axis=2).min(axis=0).max()


class Dominance(Indicator):
    """Zitzler's C between the method (M) and the reference (E), one way."""

    share, empty = True, 0.0

    def __init__(self, method_dominates: bool):
        self.method_dominates = method_dominates
        self.name = "c_method_exact" if method_dominates else "c_exact_method"
        self.label = "C(M,E)" if method_dominates else "C(E,M)"

    def _do(self, method, ref, reference):
        return c_metric(method, ref) if self.method_dominates else c_metric(ref, method)


hypervolume_ratio = HypervolumeRatio()
igd_plus = IgdPlus()
epsilon_additive = EpsilonAdditive()
epsilon_multiplicative = EpsilonMultiplicative()

EPS_LEVELS = (0.0, 0.01, 0.02, 0.05)  # the coverage levels every table reports
INDICATORS: tuple[Indicator, ...] = (
    *(Coverage(eps) for eps in EPS_LEVELS), hypervolume_ratio, igd_plus, epsilon_additive,
    epsilon_multiplicative, Dominance(True), Dominance(False))
"""The indicators every unit records and every quality table shows, in column order."""


def coverage(objectives: np.ndarray, reference: ReferenceSet, eps: float) -> float:
    return Coverage(eps).do(objectives, reference)


def preference_gap(objectives: np.ndarray, reference: np.ndarray, weights,
                   scale: RewardScale) -> float:
    """``min J(method) / min J(reference) - 1`` in (step_time_s, gpus, comm_cost); inf
    without points. Negative only for a method outside the reference's plan space. With
    w1 = w2 = 0 the optimum J* can be 0 (a plan with no WAN traffic): then the gap is 0 for
    a method that reaches 0 too and inf otherwise."""
    method = _points(objectives)
    if not len(method):
        return float("inf")
    best = float(scalarised_cost(reference, weights, scale).min())
    mine = float(scalarised_cost(method, weights, scale).min())
    if best <= 0:
        return 0.0 if mine <= 1e-12 else float("inf")
    return mine / best - 1


def chosen_point(objectives: np.ndarray, weights, scale: RewardScale) -> int:
    """Index of the point a method deploys for a preference: the least J."""
    return int(np.argmin(scalarised_cost(_points(objectives), weights, scale)))


def step_time_gaps(objectives: np.ndarray, reference: ReferenceSet,
                   rtol: float = RTOL) -> np.ndarray:
    """Per method point ``T / T* - 1`` with ``T*`` the least reference step time among points
    with no more GPUs and no more cost; NaN where no reference point is that frugal."""
    method = _points(objectives)
    ref = reference.objectives
    gaps = np.full(len(method), np.nan)
    for i, (step, gpus, cost) in enumerate(method):
        within = (ref[:, 1] <= gpus) & (ref[:, 2] <= cost * (1 + rtol) + 1e-12)
        if within.any():
            gaps[i] = step / ref[within, 0].min() - 1
    return gaps
