"""The seeds' scalar reward (SPEC section 4), computed from objective vectors alone.

    R = w1 R_eff + w2 R_util - w3 R_cost
    R_eff = (T_base - T) / T_base,   R_util = MFU,   R_cost = C / C_base

``T_base`` and ``C_base`` come from the single-domain and the network-oblivious baselines
(:func:`solvers.baselines.baseline_references`). MFU = W / (N peak T) with W the model FLOPs
of one step, so it follows from the objectives (T, N, C) and the instance: every function
here takes (N, 3) objective arrays and works for either plan family.

For optimality gaps the reward is written as a cost that is never negative,

    J = w1 + w2 - R = w1 T / T_base + w2 (1 - MFU) + w3 C / C_base,

which orders plans exactly as -R does. With w1 or w2 > 0 it is 0 only at the unreachable
ideal (T = 0, MFU = 1, C = 0), so ``J / J* - 1`` is a relative gap (with w1 = w2 = 0, J is
the cost ratio alone and a plan without WAN traffic reaches 0). J rises with T, N and C
alike, so its minimum over all plans lies on the exact Pareto front (SPEC section 4).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from formulation.evaluator import cost_model
from formulation.instance import Instance


@dataclass(frozen=True)
class RewardScale:
    """The per-instance constants that turn objectives into the seeds' reward."""

    t_base: float  # s per step of the single-domain baseline's fastest plan
    c_base: float  # USD per step of the network-oblivious baseline's plan
    model_flops: float  # useful FLOPs of one training step (W)
    peak_flops: float  # peak FLOP/s of one GPU

    @staticmethod
    def of(instance: Instance, t_base: float, c_base: float) -> RewardScale:
        if not (t_base > 0 and c_base > 0):
            raise ValueError(f"t_base and c_base must be > 0, got {t_base}, {c_base}")
        return RewardScale(float(t_base), float(c_base),
                           float(cost_model(instance).model_flops_per_step()),
                           instance.gpu.peak_tflops * 1e12)


def _columns(objectives: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    objectives = np.asarray(objectives, dtype=float).reshape(-1, 3)
    return objectives[:, 0], objectives[:, 1], objectives[:, 2]


def mfu(objectives: np.ndarray, scale: RewardScale) -> np.ndarray:
    step_time, gpus, _ = _columns(objectives)
    return scale.model_flops / (gpus * scale.peak_flops * step_time)


def mfu_space(objectives: np.ndarray, scale: RewardScale) -> np.ndarray:
    """Objectives mapped to (step_time_s, 1/MFU, comm_cost), all minimised."""
    step_time, _, cost = _columns(objectives)
    return np.stack([step_time, 1.0 / mfu(objectives, scale), cost], axis=1)


def reward_terms(objectives: np.ndarray, scale: RewardScale) -> np.ndarray:
    """(N, 3) columns R_eff, R_util, R_cost."""
    step_time, _, cost = _columns(objectives)
    return np.stack([(scale.t_base - step_time) / scale.t_base, mfu(objectives, scale),
                     cost / scale.c_base], axis=1)


def check_weights(weights: tuple[float, float, float] | np.ndarray) -> np.ndarray:
    w = np.asarray(weights, dtype=float)
    if w.shape != (3,) or not np.all(np.isfinite(w)) or np.any(w < 0) or not w.max() > 0:
        raise ValueError(f"weights must be three finite numbers >= 0, not all 0; got {weights}")
    return w


def preference(weights) -> np.ndarray:
    """A preference vector as the agent and the evaluation read it: three finite weights
    >= 0, not all 0, scaled to sum 1 (``100,60,40`` is ``0.5,0.3,0.2``)."""
    w = check_weights(weights)
    w = w / w.max()  # first, so that the sum of finite weights is finite
    return w / w.sum()


def reward(objectives: np.ndarray, weights, scale: RewardScale) -> np.ndarray:
    w = check_weights(weights)
    return reward_terms(objectives, scale) @ (w * np.array([1.0, 1.0, -1.0]))


def scalarised_cost(objectives: np.ndarray, weights, scale: RewardScale) -> np.ndarray:
    """J = w1 + w2 - R (module doc): >= 0, lower is better."""
    w = check_weights(weights)
    return w[0] + w[1] - reward(objectives, w, scale)
