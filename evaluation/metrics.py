"""Quality indicators of a method's front against an exact reference front.

All indicators work on the reference front's normalisation (ideal and nadir stored with it,
fixed once), so that the three objectives weigh alike and results compare across methods:

* ``hypervolume_ratio``: the method's hypervolume over the reference's (1 = as good);
* ``igd_plus``: mean distance from each reference point to the region the method
  dominates (0 = every reference point is matched or beaten; moocore);
* ``epsilon_additive``: the least shift that makes the method's front weakly dominate
  every reference point (0 = the same front; moocore);
* ``step_time_gaps``: for each method point, how much slower it is than the fastest
  reference plan that uses no more GPUs and costs no more (0 = on the front).
"""

from __future__ import annotations

import moocore
import numpy as np

from solvers.front import Front, normalised_hypervolume, scale_to_box


def hypervolume_ratio(objectives: np.ndarray, reference: Front) -> float:
    whole = normalised_hypervolume(reference.objectives, reference.normalisation)
    return normalised_hypervolume(objectives, reference.normalisation) / whole if whole else 0.0


def igd_plus(objectives: np.ndarray, reference: Front) -> float:
    if not len(objectives):
        return float("inf")
    return float(moocore.igd_plus(scale_to_box(objectives, reference.normalisation),
                                  ref=scale_to_box(reference.objectives, reference.normalisation)))


def epsilon_additive(objectives: np.ndarray, reference: Front) -> float:
    if not len(objectives):
        return float("inf")
    return float(moocore.epsilon_additive(
        scale_to_box(objectives, reference.normalisation),
        ref=scale_to_box(reference.objectives, reference.normalisation)))


def step_time_gaps(objectives: np.ndarray, reference: Front, rtol: float = 1e-9) -> np.ndarray:
    """Per method point ``T / T* - 1`` with ``T*`` the least reference step time among points
    with no more GPUs and no more cost; NaN where no reference point is that frugal."""
    objectives = np.asarray(objectives, dtype=float).reshape(-1, 3)
    ref = reference.objectives
    gaps = np.full(len(objectives), np.nan)
    for i, (step, gpus, cost) in enumerate(objectives):
        within = (ref[:, 1] <= gpus) & (ref[:, 2] <= cost * (1 + rtol) + 1e-12)
        if within.any():
            gaps[i] = step / ref[within, 0].min() - 1
    return gaps
