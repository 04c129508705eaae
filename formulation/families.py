"""Both plan families behind one entry point: pipeline plans (:class:`Plan`) and DiLoCo
plans (:class:`~formulation.diloco.DilocoPlan`), told apart by their JSON schema.

Fronts, the evaluate command and the method comparison read and score plans through these
functions, so a DiLoCo baseline sits in a front beside the pipeline methods.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from formulation.diloco import DILOCO_SCHEMA, DilocoEvaluation, DilocoPlan, evaluate_diloco
from formulation.evaluator import evaluate_plans
from formulation.instance import Instance
from formulation.plan import Plan
from formulation.result import Evaluation, evaluate
from formulation.schema import InputError, read_json

AnyPlan = Plan | DilocoPlan


def plan_from_dict(document: Any, instance: Instance | None = None,
                   path: str = "") -> AnyPlan:
    if isinstance(document, dict) and document.get("schema") == DILOCO_SCHEMA:
        return DilocoPlan.from_dict(document, instance, path)
    return Plan.from_dict(document, instance, path)


def load_plan(path: str | Path, instance: Instance | None = None) -> AnyPlan:
    document = read_json(path, "plan")
    try:
        return plan_from_dict(document, instance)
    except InputError as err:
        raise InputError(f"plan {str(path)!r}: {err}") from None


def evaluate_any(instance: Instance, plan: AnyPlan) -> Evaluation | DilocoEvaluation:
    """One plan of either family, with detail and named violations."""
    if isinstance(plan, DilocoPlan):
        return evaluate_diloco(instance, plan)
    return evaluate(instance, plan)


def score(instance: Instance, plans: Sequence[AnyPlan]) -> tuple[np.ndarray, np.ndarray]:
    """(N, 3) objectives and (N,) feasibility of plans of either family; pipeline plans go
    through the batched evaluator in one pass."""
    objectives = np.zeros((len(plans), 3))
    feasible = np.zeros(len(plans), dtype=bool)
    pipeline = [i for i, plan in enumerate(plans) if isinstance(plan, Plan)]
    if pipeline:
        result = evaluate_plans(instance, [plans[i] for i in pipeline])
        objectives[pipeline] = result.objectives
        feasible[pipeline] = result.admissible
    for i, plan in enumerate(plans):
        if isinstance(plan, DilocoPlan):
            evaluation = evaluate_diloco(instance, plan)
            objectives[i] = evaluation.objectives
            feasible[i] = evaluation.admissible
    return objectives, feasible
