"""The observation's feature blocks: each named, with its columns, scale and meaning.

Every feature the environment shows the policy is declared once here, as a block of
columns in one of three tables: per domain (``NODE``), per ordered domain pair (``EDGE``)
and per decision (``CONTEXT``). The sizes of the observation arrays, the slices the
environment writes and the ones :mod:`rl.imitation` rewrites (the preference and the
budgets of a replayed demonstration) all come from these declarations, so adding a feature
touches this file and the line that computes it.

A block's ``scale`` is what the raw value is divided by (:meth:`FeatureLayout.put`): GPU
counts by 64, seconds and dollars by the instance's own bases (``T_base``, ``C_base``) so
that the features are O(1) on every instance.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class FeatureBlock:
    name: str
    columns: int
    scale: float
    meaning: str


class FeatureLayout:
    """Blocks laid side by side: ``layout[name]`` is the block's slice of the last axis."""

    def __init__(self, *blocks: FeatureBlock):
        self.blocks = blocks
        self.slices: dict[str, slice] = {}
        start = 0
        for block in blocks:
            if block.name in self.slices:
                raise ValueError(f"feature block {block.name!r} declared twice")
            self.slices[block.name] = slice(start, start + block.columns)
            start += block.columns
        self.size = start
        self._scale = {block.name: block.scale for block in blocks}

    def __getitem__(self, name: str) -> slice:
        return self.slices[name]

    def put(self, features: np.ndarray, name: str, value) -> None:
        """Write ``value / scale`` into block ``name`` (of the last axis of ``features``;
        a one-column block takes arrays of the leading shape)."""
        where = self.slices[name]
        value = np.asarray(value, dtype=np.float32) / self._scale[name]
        if where.stop - where.start == 1:
            features[..., where.start] = value
        else:
            features[..., where] = value

    def describe(self) -> list[str]:
        return [f"{b.name} [{self.slices[b.name].start}:{self.slices[b.name].stop}] "
                f"/ {b.scale:g}: {b.meaning}" for b in self.blocks]


NODE = FeatureLayout(
    FeatureBlock("free_gpus", 1, 64, "GPUs free in the domain now (this plan's taken off)"),
    FeatureBlock("free_share", 1, 1, "free share of the domain's GPUs before this plan"),
    FeatureBlock("background_load", 1, 1, "share of the domain's GPUs other tenants hold"),
    FeatureBlock("taken", 1, 64, "GPUs this plan takes in the domain so far"),
    FeatureBlock("hbm", 1, 100, "HBM per GPU, GB"),
    FeatureBlock("intra_bandwidth", 1, 400, "intra-domain bandwidth, Gbit/s"),
    FeatureBlock("current", 1, 1, "1 for the domain of the segment being placed"),
    FeatureBlock("behind", 1, 1, "1 for the domain of the segment placed last (the chain's "
                 "neighbour behind)"),
    FeatureBlock("link_behind", 3, 1, "the WAN link to the domain behind: log10 Gbit/s, "
                 "latency / 100 ms, price x 10 USD/GB (a pointer needs it per node)"),
    FeatureBlock("stage_room", 1, 8, "stages of the pair's smallest option the domain holds"),
    FeatureBlock("entry_cost", 1, 1, "cost of the boundary into the domain behind over the "
                 "cost budget left (0 without a budget or a domain behind)"),
    FeatureBlock("within_budget", 1, 1, "1 if one stage of the smallest option fits the GPU "
                 "and cost budgets left here"),
)

EDGE = FeatureLayout(
    FeatureBlock("bandwidth", 1, 1, "log10 of the WAN bandwidth, Gbit/s"),
    FeatureBlock("latency", 1, 100, "WAN latency, ms"),
    FeatureBlock("price", 1, 0.1, "WAN price, USD per GB"),
    FeatureBlock("real", 1, 1, "1 for a link between two distinct real domains"),
)

CONTEXT = FeatureLayout(
    FeatureBlock("phase", 5, 1, "one-hot phase of the decision (rl.env.PHASES)"),
    FeatureBlock("weights", 3, 1, "preference vector w (efficiency, utilisation, cost)"),
    FeatureBlock("model_layers", 1, 128, "the model's layers"),
    FeatureBlock("model_params", 1, 12, "log10 of the model's parameters"),
    FeatureBlock("domains", 1, 20, "real domains"),
    FeatureBlock("global_batch", 1, 12, "log2 of the global batch"),
    FeatureBlock("layers_left", 1, 1, "share of the model's layers still to place"),
    FeatureBlock("positions_used", 1, 1, "share of the pair's pipeline positions used"),
    FeatureBlock("dp", 1, 3, "log2 of the chosen dp"),
    FeatureBlock("micro_batch", 1, 3, "log2 of the chosen micro-batch"),
    FeatureBlock("micro_batches", 1, 10, "log2 of the micro-batches per step"),
    FeatureBlock("segments", 1, 1, "segments placed over the pair's positions"),
    FeatureBlock("segment_layers", 1, 1, "layers of the segment being placed over the "
                 "model's"),
    FeatureBlock("segment_tp", 1, 3, "log2 of the segment's tp"),
    FeatureBlock("segment_recompute", 1, 1, "1 if the segment recomputes"),
    FeatureBlock("gpu_budget", 2, 1, "1 if a GPU budget is set; GPUs left in it over the "
                 "free GPUs"),
    FeatureBlock("cost_budget", 2, 1, "1 if a cost budget is set; log10 of (budget left / "
                 "C_base + 1e-3) / 3"),
    FeatureBlock("step_cap", 2, 1, "1 if a step-time cap is set; cap over T_base"),
    FeatureBlock("multiplier", 1, 1, "Lagrange multiplier of the step-time cap"),
)
