"""The cross-domain training-plan problem, stated once (SPEC.md).

Types: :class:`Instance`, :class:`Plan`, :class:`Stage`; scoring: :func:`evaluate` (one plan,
with detail) and :func:`evaluate_batch` (many plans as arrays); coefficients for solvers:
:class:`CostModel` via :func:`cost_model`.
"""

from formulation.batch import PlanBatch
from formulation.costmodel import CostModel
from formulation.diloco import DilocoEvaluation, DilocoPlan, evaluate_diloco
from formulation.evaluator import (
    OBJECTIVES,
    VIOLATIONS,
    BatchEvaluation,
    cost_model,
    evaluate_batch,
    evaluate_plans,
    robust_instance,
)
from formulation.families import AnyPlan, evaluate_any, load_plan, plan_from_dict, score
from formulation.instance import Domain, GpuSpec, Instance, Links, ModelSpec, SearchSpace, Training
from formulation.plan import Plan, Stage
from formulation.result import Evaluation, evaluate
from formulation.schema import InputError

__all__ = [
    "OBJECTIVES", "VIOLATIONS", "AnyPlan", "BatchEvaluation", "CostModel", "DilocoEvaluation",
    "DilocoPlan", "Domain", "Evaluation", "GpuSpec", "InputError", "Instance", "Links",
    "ModelSpec", "Plan", "PlanBatch", "SearchSpace", "Stage", "Training", "cost_model",
    "evaluate", "evaluate_any", "evaluate_batch", "evaluate_diloco", "evaluate_plans",
    "load_plan", "plan_from_dict", "robust_instance", "score",
]
