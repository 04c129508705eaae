"""Tiny instances whose every plan can be enumerated (the brute-force ground truth).

The exact MILP front is tested against :mod:`solvers.bruteforce` on these, so they must be small
enough to enumerate in seconds (about 10^4-10^6 plans) yet not trivial: a LLaMA-2-7B cut down to
a few layers, on 3-5 domains of 8-32 A100s, with a search space of two values per knob. With
LLaMA-2-7B's 4096-token sequences the activations of a few layers take tens of GB, so memory
and recompute matter and some plans are infeasible; nearly all are feasible, cross-domain ones
included (a plan of dp 2 x tp 2 x 3 stages needs 12 GPUs, more than most domains have free).

Cross-domain plans reach the front only where domains are short of GPUs: see ``free_gpus``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from formulation.instance import Instance, Links, SearchSpace
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
                  max_stages: int = 3, free_gpus: Sequence[int] | None = None) -> Instance:
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
    """
    if not MIN_TINY_DOMAINS <= domains <= MAX_TINY_DOMAINS:
        raise InputError(f"tiny instances have {MIN_TINY_DOMAINS}..{MAX_TINY_DOMAINS} domains, "
                         f"got {domains}")
    if layers < 1:
        raise InputError(f"layers must be >= 1, got {layers}")
    if max_stages < 1:
        raise InputError(f"max_stages must be >= 1, got {max_stages}")
    base = generate_instance(BASE_DOMAINS, "7b", seed, "random", gpu_range=GPU_RANGE,
                             free_share_range=FREE_SHARE_RANGE)
    kept = base.domains[:domains]
    if free_gpus is not None:
        if len(free_gpus) != domains:
            raise InputError(f"free_gpus must have one count per domain ({domains}), "
                             f"got {len(free_gpus)}")
        kept = tuple(dataclasses.replace(d, free_gpus=int(a))
                     for d, a in zip(kept, free_gpus, strict=True))
    keep = slice(0, domains)
    links = Links(bandwidth_gbps=base.links.bandwidth_gbps[keep, keep].copy(),
                  latency_ms=base.links.latency_ms[keep, keep].copy(),
                  price_per_gb=base.links.price_per_gb[keep, keep].copy(),
                  eps=base.links.eps)
    search = SearchSpace(dp=tuple(sorted(set(dp))), tp=tuple(sorted(set(tp))),
                         micro_batch=tuple(sorted(set(micro_batch))),
                         recompute=tuple(dict.fromkeys(recompute)), max_stages=max_stages)
    name = f"tiny-k{domains}-l{layers}-s{seed}"
    if free_gpus is not None:
        name += "-f" + "-".join(str(int(a)) for a in free_gpus)
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
        search=search)
    return Instance.from_dict(instance.to_dict())
