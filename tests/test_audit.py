"""The fast part of the exact-engine audit (the whole one: ``scripts/audit_exact.py``).

Each run draws its instances from a fresh seed, so that no run can be tuned to its cases;
a failure prints the seed, and ``XDSCHED_AUDIT_SEED=<seed>`` replays it. Every engine's
front labelled ``exact`` must equal brute force's, point for point.
"""

from __future__ import annotations

import os
import secrets

import numpy as np
import pytest

from instances.tiny import audit_instance
from solvers.audit import ENGINES, audit

COUNT = 6  # instances a run audits (about 2 s each for the three engines)


@pytest.fixture(scope="module")
def seed() -> int:
    value = os.environ.get("XDSCHED_AUDIT_SEED")
    return int(value) if value else secrets.randbits(32)


def test_every_exact_label_agrees_with_brute_force(seed):
    rng = np.random.default_rng(seed)
    wrong = []
    for _ in range(COUNT):
        row = audit(audit_instance(rng), ENGINES)
        wrong += [f"{row.instance} ({row.variant}): {r.engine}" for r in row.engines
                  if r.wrong_exact]
        assert all(r.status in ("exact", "best_known") for r in row.engines)
    assert not wrong, f"audit seed {seed}: fronts labelled exact differ from brute force: " \
                      f"{wrong}"


def test_asymmetric_links_agree_with_brute_force(seed):
    """Each direction of a link priced on its own (activations forward, gradients back):
    every engine's exact front is brute force's (``scripts/audit_exact.py --asymmetric``
    runs more)."""
    rng = np.random.default_rng(seed + 1)
    asymmetric = 0
    while asymmetric < 3:
        instance = audit_instance(rng)
        bandwidth = instance.links.bandwidth_gbps
        if not (bandwidth != bandwidth.T).any():
            continue
        asymmetric += 1
        row = audit(instance, ENGINES)
        assert not any(r.wrong_exact for r in row.engines), \
            f"audit seed {seed}: {row.instance} ({row.variant})"


def test_the_audit_draws_every_variant():
    """Over many draws the generator covers what the audit is for: every GPU preset,
    selective recompute, asymmetric links, a cost budget with dp = 2, a WAN share cap,
    scarce GPUs (one smallest stage per domain), every ZeRO stage, both attention kernels,
    overlapped communication and interleaving."""
    rng = np.random.default_rng(secrets.randbits(32))
    seen = set()
    for _ in range(200):
        instance = audit_instance(rng)
        seen.add(instance.gpu.name)
        seen.add("selective" if "selective" in instance.search.recompute else "")
        links = instance.links.bandwidth_gbps
        seen.add("asymmetric" if (links != links.T).any() else "")
        c = instance.constraints
        seen.add("budget" if c.cost_budget is not None and 2 in instance.search.dp else "")
        seen.add("share" if c.wan_share_cap is not None else "")
        training = instance.training
        seen |= {f"zero{training.zero_stage}", training.attention}
        seen.add("overlap" if training.tp_overlap and training.dp_overlap else "")
        seen.add("interleaved" if instance.search.virtual_stages != (1,) else "")
    assert {"A100-80GB", "H100-80GB", "Ascend-910B", "selective", "asymmetric", "budget",
            "share", "zero0", "zero1", "zero2", "zero3", "eager", "flash", "overlap",
            "interleaved"} <= seen
