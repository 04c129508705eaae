"""Tiny instances whose every plan can be enumerated (the brute-force ground truth).

The exact MILP front is tested against :mod:`solvers.bruteforce` on these, so they must be small
enough to enumerate in seconds (about 10^4-10^6 plans) yet not trivial: a LLaMA-2-7B cut down to
a few layers, on 3-5 domains of 8-32 A100s, with a search space of two values per knob. With
LLaMA-2-7B's 4096-token sequences the activations of a few layers take tens of GB, so memory
and recompute matter and some plans are infeasible; nearly all are feasible, cross-domain ones
included (a plan of dp 2 x tp 2 x 3 stages needs 12 GPUs, more than most domains have free).

Cross-domain plans reach the front only where domains are short of GPUs: see ``free_gpus``.

:func:`audit_instance` draws a random tiny instance of many variants (GPU presets, search
spaces with selective recompute, scarce GPUs, asymmetric links, a traffic-cost budget, a
WAN share cap) from a generator: the exact engines are audited against brute force on them
(``scripts/audit_exact.py``, ``tests/test_audit.py``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from formulation.instance import Constraints, Instance, Links, SearchSpace, Training
from formulation.schema import InputError
from instances.generate import generate_instance

MIN_TINY_DOMAINS, MAX_TINY_DOMAINS = 3, 5
TINY_GLOBAL_BATCH = 16  # sequences per step: few micro-batches, so short pipelines matter
BASE_DOMAINS = 5  # the generator's smallest scenario; tiny instances keep a prefix of it
GPU_RANGE = (8, 32)  # one to four nodes per domain
FREE_SHARE_RANGE = (0.25, 0.75)


def tiny_instance(seed: int, domains: int = 3, layers: int = 6, *,
                  dp: tuple[int, ...] = (1, 2), micro_batch: tuple[int, ...] = (1, 2),
                  tp: tuple[int, ...] = (1, 2), recompute: tuple[str, ...] = ("none", "full"),
                  max_stages: int = 3, free_gpus: Sequence[int] | None = None,
                  gpu: str = "A100-80GB", asymmetry: float = 0.0,
                  constraints: Constraints | None = None, attention: str = "eager",
                  virtual_stages: tuple[int, ...] = (1,)) -> Instance:
    """A tiny scenario, deterministic in its arguments, named like ``tiny-k3-l6-s4``
    (``tiny-k3-l6-s4-f1-1-2`` with ``free_gpus=(1, 1, 2)``).

    Built from ``generate_instance(5, "7b", seed, "random", ...)`` so that its domains and
    links follow the same generator as the benchmark: the first ``domains`` domains and the
    matching sub-matrices of the links are kept, and the model is LLaMA-2-7B with ``layers``
    layers. The result is re-read from its JSON form, like every generated instance.

    ``free_gpus`` overrides the free GPUs of the kept domains (one count per domain, at most
    its installed GPUs). The generator frees whole nodes, so every domain has >= 8 free GPUs
    and the fastest plans of a model this small all fit inside one domain: over the WAN a
    boundary costs more time than the compute it offloads (about 0.09 s per micro-batch
    against 0.04 s per layer). With one or two free GPUs per domain a plan that needs more GPUs
    must cross the WAN, and cross-domain plans reach the front: e.g. ``domains=4, layers=12,
    free_gpus=(1, 1, 1, 1)`` (58k plans) gives fronts of 2-5 points, most of them cross-domain.

    ``attention`` is the training's attention kernel: eager by default, as the committed
    suites (the figures tests hold for tiny instances were measured so); ``gpu`` names a GPU
    preset; ``asymmetry`` > 0 scales each direction of every WAN link's
    bandwidth, latency and price by its own factor in ``[1/(1+a), 1+a]`` (seeded by
    ``seed``), so that ``B_ij != B_ji``; ``constraints`` are SPEC 5's optional WAN share cap
    and cost budget; ``virtual_stages`` the search space's schedules (1: plain 1F1B, v > 1
    interleaved with v chunks a stage).
    """
    if not MIN_TINY_DOMAINS <= domains <= MAX_TINY_DOMAINS:
        raise InputError(f"tiny instances have {MIN_TINY_DOMAINS}..{MAX_TINY_DOMAINS} domains, "
                         f"got {domains}")
    if layers < 1:
        raise InputError(f"layers must be >= 1, got {layers}")
    if max_stages < 1:
        raise InputError(f"max_stages must be >= 1, got {max_stages}")
    if asymmetry < 0:
        raise InputError(f"asymmetry must be >= 0, got {asymmetry}")
    base = generate_instance(BASE_DOMAINS, "7b", seed, "random", gpu=gpu, gpu_range=GPU_RANGE,
                             free_share_range=FREE_SHARE_RANGE, attention=attention)
    kept = base.domains[:domains]
    if free_gpus is not None:
        if len(free_gpus) != domains:
            raise InputError(f"free_gpus must have one count per domain ({domains}), "
                             f"got {len(free_gpus)}")
        kept = tuple(dataclasses.replace(d, free_gpus=int(a))
                     for d, a in zip(kept, free_gpus, strict=True))
    keep = slice(0, domains)
    matrices = [base.links.bandwidth_gbps[keep, keep].copy(),
                base.links.latency_ms[keep, keep].copy(),
                base.links.price_per_gb[keep, keep].copy()]
    if asymmetry > 0:
        rng = np.random.default_rng([seed, domains, 7])
        low, high = np.log(1 / (1 + asymmetry)), np.log(1 + asymmetry)
        matrices = [np.round(m * np.exp(rng.uniform(low, high, m.shape)), 6) for m in matrices]
    links = Links(bandwidth_gbps=matrices[0], latency_ms=matrices[1], price_per_gb=matrices[2],
                  eps=base.links.eps)
    search = SearchSpace(dp=tuple(sorted(set(dp))), tp=tuple(sorted(set(tp))),
                         micro_batch=tuple(sorted(set(micro_batch))),
                         recompute=tuple(dict.fromkeys(recompute)), max_stages=max_stages,
                         virtual_stages=tuple(sorted(set(virtual_stages))))
    name = f"tiny-k{domains}-l{layers}-s{seed}"
    if search.virtual_stages != (1,):
        name += "-v" + "-".join(map(str, search.virtual_stages))
    if free_gpus is not None:
        name += "-f" + "-".join(str(int(a)) for a in free_gpus)
    if gpu != "A100-80GB":
        name += f"-{gpu.lower()}"
    if asymmetry > 0:
        name += f"-a{asymmetry:g}"
    description = (f"Tiny scenario for brute-force enumeration: the first {domains} domains of "
                   f"{base.name} (sizes {GPU_RANGE[0]}-{GPU_RANGE[1]} GPUs, free share "
                   f"{FREE_SHARE_RANGE[0]:g}-{FREE_SHARE_RANGE[1]:g}), LLaMA-2-7B cut to "
                   f"{layers} layers, global batch {TINY_GLOBAL_BATCH}"
                   + ("" if free_gpus is None else
                      f", free GPUs set to {[int(a) for a in free_gpus]}") + ".")
    instance = base.replace(
        name=name, description=description, domains=kept, links=links,
        model=dataclasses.replace(base.model, name=f"{base.model.name}-l{layers}",
                                  layers=layers),
        training=dataclasses.replace(base.training, global_batch=TINY_GLOBAL_BATCH),
        search=search, constraints=constraints or Constraints())
    return Instance.from_dict(instance.to_dict())


GPU_PRESETS = ("A100-80GB", "H100-80GB", "Ascend-910B")
AUDIT_PLAN_LIMIT = 250_000  # plans brute force enumerates per audit instance, at most
AUDIT_MIN_PLANS = 200


def training_variant(rng: np.random.Generator, training: Training) -> Training:
    """A training configuration drawn for an audit: the ZeRO stage (0-3), the attention kernel
    and the overlap of tensor- and data-parallel communication (none or half), each the
    default's in about half of the draws."""
    return dataclasses.replace(
        training, zero_stage=int(rng.choice([training.zero_stage, 0, 2, 3])),
        attention=str(rng.choice([training.attention, "eager", "flash"])),
        tp_overlap=float(rng.choice([training.tp_overlap, 0.5])),
        dp_overlap=float(rng.choice([training.dp_overlap, 0.5])))


def audit_instance(rng: np.random.Generator, plan_limit: int = AUDIT_PLAN_LIMIT) -> Instance:
    """A random tiny instance for auditing the exact engines, drawn from ``rng``.

    Its variant is drawn too:

    - the GPU preset;
    - the search space: dp and tp subsets of {1, 2, 4} (tp = 1 in most), micro-batches
      {1, 2}, two recompute modes (selective often among them), 2-4 stages; or the default
      tiny space, whose fronts are larger;
    - the free GPUs: mostly scarce, room for one of the smallest stages per domain, so that
      plans must cross the WAN to use more GPUs and about half the fronts hold cross-domain
      points; else room for one to four, or the generator's;
    - asymmetric links (half of them);
    - a traffic-cost budget (with dp = 2 in the space, near the median WAN boundary cost of
      a dp = 2 pipeline, so that it binds) or a WAN share cap, or neither;
    - interleaving in the search space (v in {1, 2} or {1, 2, 3}) in about a third of the
      instances without a WAN share cap (the exact sweep refuses the two together);
    - the training configuration (:func:`training_variant`).

    Redrawn until brute force has between ``AUDIT_MIN_PLANS`` and ``plan_limit`` plans.
    """
    from solvers.bruteforce import count_plans

    while True:
        domains = int(rng.integers(MIN_TINY_DOMAINS, MAX_TINY_DOMAINS + 1))
        layers = int(rng.integers(6, 13))
        seed = int(rng.integers(2 ** 31))
        dp = tuple(sorted(int(x) for x in rng.choice([1, 2, 4], replace=False,
                                                     size=int(rng.integers(1, 3)))))
        # Over the WAN a boundary costs about as much as a few layers of tp = 1: pipelines
        # across domains pay mostly with thin stages, so tp = 1 is in most spaces.
        tp = (1, *((int(rng.choice([2, 4])),) if rng.random() < 0.5 else ())) \
            if rng.random() < 0.75 else (int(rng.choice([2, 4])),)
        stage = dp[0] * tp[0]  # GPUs of the smallest stage
        kind = rng.choice(["scarce", "moderate", "generated"], p=[0.75, 0.15, 0.1])
        free = None if kind == "generated" else [
            stage * int(x) for x in (np.ones(domains, dtype=int) if kind == "scarce"
                                     else rng.integers(1, 5, size=domains))]
        modes = ("none", "selective", "full")
        recompute = tuple(str(m) for m in rng.choice(modes, size=2, replace=False)) \
            if rng.random() < 0.5 \
            else ("selective", str(rng.choice(["none", "full"])))
        constraint = rng.choice(["none", "budget", "share"], p=[0.25, 0.5, 0.25])
        if constraint == "budget" and 2 not in dp:
            dp = tuple(sorted((*dp, 2)))
        space = dict(dp=dp, micro_batch=(1, 2) if rng.random() < 0.6 else (1,), tp=tp,
                     recompute=recompute, max_stages=int(rng.integers(2, 5)))
        if rng.random() < 0.3:  # the default tiny space, whose fronts are larger
            space = dict(recompute=(str(rng.choice(["none", "selective"])), "full"))
            free = None if free is None else [int(x) // stage for x in free]
        if constraint != "share" and rng.random() < 0.35:  # interleaving (no WAN cap there)
            space["virtual_stages"] = (1, 2) if rng.random() < 0.7 else (1, 2, 3)
        try:
            instance = tiny_instance(seed, domains, layers, free_gpus=free,
                                     gpu=str(rng.choice(GPU_PRESETS)),
                                     asymmetry=float(rng.choice([0.0, 0.5])), **space)
        except InputError:  # more free GPUs drawn than a domain has
            continue
        if constraint == "budget":
            from solvers.tables import pair_tables

            tables = pair_tables(instance, 2, 1)
            if tables is not None:
                wan = tables.cost[~np.eye(domains, dtype=bool)]
                budget = float(rng.uniform(0.0, 2.0)) * float(np.median(wan))
                instance = instance.replace(constraints=Constraints(cost_budget=budget))
        elif constraint == "share":
            instance = instance.replace(constraints=Constraints(
                wan_share_cap=float(rng.uniform(0.1, 0.6))))
        instance = instance.replace(training=training_variant(
            np.random.default_rng(seed), instance.training))
        if AUDIT_MIN_PLANS <= count_plans(instance) <= plan_limit:
            return instance
