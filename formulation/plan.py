"""The training plan (SPEC section 2): dp degree, micro-batch and an ordered list of stages.

Stages are listed from the first pipeline stage (embedding) to the last (LM head). Each stage
names its domain, its number of layers (the cut points are the running sums), its
tensor-parallel degree and its recompute mode. Stage ``j`` occupies ``dp * tp_j`` GPUs of its
domain: all dp replicas of a stage sit in the same domain.

The schedule is 1F1B, plain (``virtual_stages == 1``) or interleaved (Narayanan et al.
SC'21, section 2.2): each stage then holds ``v = virtual_stages`` model chunks, its layers
split as evenly as they go (the first chunks take the extra ones), and chunk ``c`` of every
stage forms round ``c`` of the model, so that a micro-batch passes the pipeline v times
(:mod:`formulation.evaluator`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from formulation.feasibility import check_micro_batches
from formulation.instance import MAX_DOMAIN_GPUS, MAX_LAYERS, RECOMPUTE_MODES, Instance
from formulation.outputs import write_json
from formulation.schema import InputError, Reader, read_json

MAX_TP = 1024  # tensor-parallel degree: GPUs of one node at most (gpus_per_node <= 1024)

PLAN_SCHEMA = "xdsched.plan/1"
SCHEDULES = ("1f1b", "interleaved-1f1b")  # virtual_stages 1, and > 1
MAX_VIRTUAL_STAGES = 64


@dataclass(frozen=True)
class Stage:
    domain: int
    layers: int
    tp: int = 1
    recompute: str = "none"


@dataclass(frozen=True)
class Plan:
    dp: int
    micro_batch: int
    stages: tuple[Stage, ...]
    virtual_stages: int = 1  # model chunks per stage: 1 plain 1F1B, > 1 interleaved 1F1B

    @property
    def num_stages(self) -> int:
        return len(self.stages)

    @property
    def schedule(self) -> str:
        return SCHEDULES[self.virtual_stages > 1]

    @property
    def cuts(self) -> list[int]:
        """Cut points c_1 < ... < c_{S-1}: the first layer index of stages 2..S."""
        out, total = [], 0
        for stage in self.stages[:-1]:
            total += stage.layers
            out.append(total)
        return out

    def gpus(self) -> int:
        return sum(self.dp * s.tp for s in self.stages)

    def gpus_by_domain(self, num_domains: int) -> np.ndarray:
        """(num_domains,) int64: the GPUs the plan takes from each domain."""
        return np.bincount([s.domain for s in self.stages],
                           weights=[self.dp * s.tp for s in self.stages],
                           minlength=num_domains).astype(np.int64)

    def domains_used(self) -> list[int]:
        return sorted({s.domain for s in self.stages})

    # -- JSON -----------------------------------------------------------------------------
    @staticmethod
    def from_dict(document: Any, instance: Instance | None = None, path: str = "",
                  whole_batch: bool = True) -> Plan:
        """Read a plan; with an instance, domain names are resolved and indices checked, and
        (``whole_batch``) a dp x micro_batch that does not divide the global batch is
        refused. ``path`` prefixes the field names in error messages (a plan inside a
        document)."""
        r = Reader(document, path)
        schema = r.string("schema", PLAN_SCHEMA)
        if schema != PLAN_SCHEMA:
            raise InputError(f"schema must be {PLAN_SCHEMA!r}, got {schema!r}")

        def stage(value: Any, path: str) -> Stage:
            sr = Reader(value, path)
            domain = sr.raw("domain")
            if isinstance(domain, str):
                index = instance.domain_index(domain) if instance is not None else None
                if index is None:
                    raise InputError(f"{path}.domain {domain!r} is not a domain of the instance")
                domain = index
            elif isinstance(domain, float) and domain.is_integer():  # 0.0 is index 0
                domain = int(domain)
            if isinstance(domain, bool) or not isinstance(domain, int):
                raise InputError(f"{path}.domain must be a domain name or index")
            if domain < 0 or (instance is not None and domain >= instance.num_domains):
                limit = "" if instance is None else f" (the instance has {instance.num_domains})"
                raise InputError(f"{path}.domain {domain} is not a domain of the instance{limit}")
            out = Stage(domain=domain, layers=sr.integer("layers", low=1, high=MAX_LAYERS),
                        tp=sr.integer("tp", 1, low=1, high=MAX_TP),
                        recompute=sr.string("recompute", "none", choices=RECOMPUTE_MODES))
            sr.finish()
            return out

        # a stage holds at least one layer: more stages than layers is no plan
        most = MAX_LAYERS if instance is None else instance.model.layers
        schedule = r.string("schedule", SCHEDULES[0], choices=SCHEDULES)
        interleaved = schedule == SCHEDULES[1]
        where = f"{path}.virtual_stages" if path else "virtual_stages"
        if not interleaved and r.has("virtual_stages") \
                and r.integer("virtual_stages", low=1, high=MAX_VIRTUAL_STAGES) != 1:
            raise InputError(f"{where} needs schedule {SCHEDULES[1]!r}")
        plan = Plan(dp=r.integer("dp", low=1, high=MAX_DOMAIN_GPUS),
                    micro_batch=r.integer("micro_batch", low=1, high=MAX_DOMAIN_GPUS),
                    virtual_stages=r.integer("virtual_stages", low=2, high=MAX_VIRTUAL_STAGES)
                    if interleaved else 1,
                    stages=tuple(r.items("stages", stage, min_len=1, max_len=most)))
        r.finish()
        if instance is not None and whole_batch:
            check_micro_batches(instance, plan.dp, plan.micro_batch, path or "plan")
        return plan

    def to_dict(self, instance: Instance | None = None) -> dict[str, Any]:
        """JSON form; with an instance, domains are written by name (easier to read)."""
        def domain(k: int) -> int | str:
            return instance.domains[k].name if instance is not None else k

        return {"schema": PLAN_SCHEMA, "dp": self.dp, "micro_batch": self.micro_batch,
                "schedule": self.schedule,
                **({"virtual_stages": self.virtual_stages} if self.virtual_stages > 1 else {}),
                "stages": [{"domain": domain(s.domain), "layers": s.layers, "tp": s.tp,
                            "recompute": s.recompute} for s in self.stages]}

    @staticmethod
    def load(path: str | Path, instance: Instance | None = None) -> Plan:
        document = read_json(path, "plan")
        try:
            return Plan.from_dict(document, instance)
        except InputError as err:
            raise InputError(f"plan {str(path)!r}: {err}") from None

    def save(self, path: str | Path, instance: Instance | None = None) -> None:
        write_json(Path(path), self.to_dict(instance))
