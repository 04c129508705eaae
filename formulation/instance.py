"""The problem instance (SPEC section 1): GPUs, domains, WAN links, model, training, search space.

Units used throughout: bandwidth in Gbit/s, latency in milliseconds, HBM in GB (1e9 bytes),
HBM / NVLink bandwidth in GB/s, prices in USD per GB (traffic) and per GPU-hour.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from formulation.schema import (
    InputError,
    Reader,
    check_integer,
    check_matrix,
    check_number,
    read_json,
)
from formulation.trace import Trace

INSTANCE_SCHEMA = "xdsched.instance/1"
RECOMPUTE_MODES = ("none", "selective", "full")
MIN_DOMAINS, MAX_DOMAINS = 1, 20  # one domain: a single cluster; the suites use 5..20


# Physical ranges, far beyond any real system, that keep every computation finite (a
# finite 1e308 price would overflow to infinity) and every model small enough to build.
MAX_LAYERS = 1024
MAX_DOMAIN_GPUS = 10_000_000
MAX_GLOBAL_BATCH = 10_000_000  # sequences per step
PHYSICAL_LEAST = 1e-3  # the least rate (TFLOP/s, GB, GB/s, Gbit/s) a field may state: below
# it the times of a step overflow
# the search space's size: every exact solve, NSGA-II genome and agent decision grows with it
MAX_SEARCH_VALUES = 32  # values of one of dp, tp, micro_batch
MAX_PAIRS = 256  # (dp, micro-batch) pairs: one exact model each
MAX_STAGES = 64  # pipeline stages of a plan (GPT-3 1T on 3,072 GPUs used 64)
LINK_LIMITS = {"bandwidth_gbps": 1e6, "latency_ms": 1e6, "price_per_gb": 1e3}

@dataclass(frozen=True)
class GpuSpec:
    name: str
    peak_tflops: float  # dense bf16 tensor-core peak
    hbm_gb: float
    hbm_gbps: float  # HBM bandwidth, GB/s
    nvlink_gbps: float  # per GPU, per direction, GB/s
    gpus_per_node: int
    nic_gbps: float  # inter-node network per GPU, Gbit/s

    @staticmethod
    def from_dict(r: Reader) -> GpuSpec:
        spec = GpuSpec(
            name=r.name("name"),
            peak_tflops=r.number("peak_tflops", low=PHYSICAL_LEAST, high=1e5),
            hbm_gb=r.number("hbm_gb", low=PHYSICAL_LEAST, high=1e5),
            hbm_gbps=r.number("hbm_gbps", low=PHYSICAL_LEAST, high=1e6),
            nvlink_gbps=r.number("nvlink_gbps", low=PHYSICAL_LEAST, high=1e6),
            gpus_per_node=r.integer("gpus_per_node", low=1, high=1024),
            nic_gbps=r.number("nic_gbps", low=PHYSICAL_LEAST, high=1e6),
        )
        r.finish()
        return spec


@dataclass(frozen=True)
class ModelSpec:
    name: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    ffn: int
    vocab: int
    seq_len: int
    gated_mlp: bool = True  # SwiGLU (three FFN matrices) vs GeLU (two)
    tied_embeddings: bool = False

    @property
    def kv_hidden(self) -> int:
        return self.hidden * self.kv_heads // self.heads

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @property
    def layer_params(self) -> int:
        """Weights of one transformer layer (attention, MLP, two norms)."""
        h = self.hidden
        attention = h * (h + 2 * self.kv_hidden) + h * h
        mlp = (3 if self.gated_mlp else 2) * h * self.ffn
        return attention + mlp + 2 * h

    @property
    def embedding_params(self) -> int:
        return self.vocab * self.hidden

    @property
    def total_params(self) -> int:
        head = 0 if self.tied_embeddings else self.vocab * self.hidden
        return self.layers * self.layer_params + self.embedding_params + head + self.hidden

    @staticmethod
    def from_dict(r: Reader) -> ModelSpec:
        spec = ModelSpec(
            name=r.name("name"),
            layers=r.integer("layers", low=1, high=MAX_LAYERS),
            hidden=r.integer("hidden", low=1, high=1_000_000),
            heads=r.integer("heads", low=1, high=100_000),
            kv_heads=r.integer("kv_heads", low=1, high=100_000),
            ffn=r.integer("ffn", low=1, high=10_000_000),
            vocab=r.integer("vocab", low=1, high=10_000_000),
            seq_len=r.integer("seq_len", low=1, high=10_000_000),
            gated_mlp=r.boolean("gated_mlp", True),
            tied_embeddings=r.boolean("tied_embeddings", False),
        )
        r.finish()
        if spec.hidden % spec.heads:
            raise InputError(f"{r.path}.hidden must be divisible by {r.path}.heads")
        if spec.heads % spec.kv_heads:
            raise InputError(f"{r.path}.heads must be divisible by {r.path}.kv_heads")
        return spec


@dataclass(frozen=True)
class Domain:
    name: str
    gpus: int  # installed GPUs n_k
    free_gpus: int  # GPUs free now a_k (the rest is background load)
    intra_bandwidth_gbps: float  # per-GPU bandwidth inside the domain, Gbit/s
    intra_latency_ms: float
    lat: float | None = None
    lon: float | None = None

    @staticmethod
    def from_dict(value: Any, path: str) -> Domain:
        r = Reader(value, path)
        location = r.raw("location", None)
        lat = lon = None
        if location is not None:
            if not isinstance(location, list) or len(location) != 2:
                raise InputError(f"{path}.location must be [latitude, longitude]")
            lat = check_number(location[0], f"{path}.location[0] (latitude)", low=-90,
                               high=90)
            lon = check_number(location[1], f"{path}.location[1] (longitude)", low=-180,
                               high=180)
        domain = Domain(
            name=r.name("name"),
            gpus=r.integer("gpus", low=0, high=MAX_DOMAIN_GPUS),
            free_gpus=r.integer("free_gpus", low=0, high=MAX_DOMAIN_GPUS),
            intra_bandwidth_gbps=r.number("intra_bandwidth_gbps", low=PHYSICAL_LEAST,
                                           high=1e6),
            intra_latency_ms=r.number("intra_latency_ms", low=0, high=1e6),
            lat=lat,
            lon=lon,
        )
        r.finish()
        if domain.free_gpus > domain.gpus:
            raise InputError(f"{path}.free_gpus must be <= {path}.gpus ({domain.gpus}), "
                             f"got {domain.free_gpus}")
        return domain

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name, "gpus": self.gpus, "free_gpus": self.free_gpus,
            "intra_bandwidth_gbps": self.intra_bandwidth_gbps,
            "intra_latency_ms": self.intra_latency_ms,
        }
        if self.lat is not None:
            out["location"] = [self.lat, self.lon]
        return out


@dataclass(frozen=True, eq=False)
class Links:
    """K x K inter-domain matrices; the diagonal is unused (intra-domain values live on Domain)."""

    bandwidth_gbps: np.ndarray
    latency_ms: np.ndarray
    price_per_gb: np.ndarray
    eps: float = 0.3  # bandwidth fluctuation bound: B(t) = B (1 + e), |e| <= eps

    @staticmethod
    def from_dict(r: Reader, size: int) -> Links:
        def matrix(key: str, positive: bool) -> np.ndarray:
            return np.array(check_matrix(r.raw(key), f"{r.path}.{key}", size,
                                         positive_off_diagonal=positive,
                                         high=LINK_LIMITS[key],
                                         least=PHYSICAL_LEAST if positive else None))

        links = Links(
            bandwidth_gbps=matrix("bandwidth_gbps", True),
            latency_ms=matrix("latency_ms", False),
            price_per_gb=matrix("price_per_gb", False),
            eps=r.number("eps", 0.3, low=0, high=0.95),
        )
        r.finish()
        return links

    @staticmethod
    def none(eps: float = 0.3) -> Links:
        """The links of a one-domain instance: it has none (1 x 1 matrices, unused)."""
        zero = np.zeros((1, 1))
        return Links(bandwidth_gbps=zero, latency_ms=zero, price_per_gb=zero, eps=eps)

    def to_dict(self) -> dict[str, Any]:
        return {"bandwidth_gbps": self.bandwidth_gbps.tolist(),
                "latency_ms": self.latency_ms.tolist(),
                "price_per_gb": self.price_per_gb.tolist(), "eps": self.eps}


ATTENTION_KERNELS = ("eager", "flash")
# Fields added after instances were first hashed (Instance.content_hash), with the value every
# instance had before they existed: the hash leaves a field out while it holds that value, so
# a front computed before the field existed still matches its instance. When a default
# changes, an instance that does not state the field now means the new value, its hash
# changes with it, and fronts computed for the old meaning are refused.
LATER_FIELDS: dict[str, dict[str, Any]] = {
    "training": {"attention": "eager", "tp_overlap": 0.0, "dp_overlap": 0.0},
    "search": {"virtual_stages": [1]}}


@dataclass(frozen=True)
class Training:
    """How the run trains: batch, optimizer state sharding, kernels and overlap.

    ``attention``: ``eager`` materialises the s x s scores (memory and HBM traffic grow with
    s^2; the kernels of Megatron-LM SC'21), ``flash`` is a fused kernel that keeps them on
    chip (FlashAttention, Dao et al. 2022; FlashAttention-2, Dao 2023): see
    :mod:`formulation.costmodel`. ``zero_stage``: ZeRO (Rajbhandari et al. 2020) shards the
    optimizer states (1), also the gradients (2), also the weights (3, FSDP-style) over the dp
    replicas of a stage. ``tp_overlap`` and ``dp_overlap``: the share of the tensor-parallel
    collectives hidden behind the GEMMs they feed, and of the data-parallel gradient
    collectives (ZeRO-3: also its parameter gathers) hidden behind the backward pass.
    """

    global_batch: int  # sequences per optimizer step (G)
    steps: int = 10_000  # optimizer steps of the whole run
    precision: str = "bf16"
    optimizer: str = "adam"  # mixed-precision Adam: 16 bytes of model state per parameter
    zero_stage: int = 1  # 0 replicate, 1 shard optimizer states, 2 + gradients, 3 + weights
    memory_margin: float = 0.1  # share of HBM kept free as safety margin
    gpu_hour_usd: float = 2.0  # price of one GPU-hour, for the whole-run cost
    attention: str = "flash"  # attention kernel: "flash" (today's practice) or "eager" (2021)
    tp_overlap: float = 0.0  # share of tensor-parallel communication hidden by compute
    dp_overlap: float = 0.0  # share of data-parallel communication hidden by the backward

    @staticmethod
    def from_dict(r: Reader) -> Training:
        training = Training(
            global_batch=r.integer("global_batch", low=1, high=MAX_GLOBAL_BATCH),
            steps=r.integer("steps", 10_000, low=1, high=10**12),
            precision=r.string("precision", "bf16", choices=("bf16", "fp16")),
            optimizer=r.string("optimizer", "adam", choices=("adam",)),
            zero_stage=r.integer("zero_stage", 1, low=0, high=3),
            memory_margin=r.number("memory_margin", 0.1, low=0, high=0.9),
            gpu_hour_usd=r.number("gpu_hour_usd", 2.0, low=0, high=1e4),
            attention=r.string("attention", "flash", choices=ATTENTION_KERNELS),
            tp_overlap=r.number("tp_overlap", 0.0, low=0, high=1),
            dp_overlap=r.number("dp_overlap", 0.0, low=0, high=1),
        )
        r.finish()
        return training


@dataclass(frozen=True)
class SearchSpace:
    dp: tuple[int, ...] = (1, 2, 4, 8)
    tp: tuple[int, ...] = (1, 2, 4, 8)
    micro_batch: tuple[int, ...] = (1, 2, 4)
    recompute: tuple[str, ...] = RECOMPUTE_MODES
    max_stages: int = 8
    # model chunks per stage: 1 is plain 1F1B, v > 1 interleaved 1F1B. The evaluators score
    # any v; the solvers and the agent search 1F1B only, so the space must list 1.
    virtual_stages: tuple[int, ...] = (1,)

    @staticmethod
    def from_dict(r: Reader) -> SearchSpace:
        def positive_ints(key: str, default: tuple[int, ...]) -> tuple[int, ...]:
            values = r.items(key, lambda v, p: check_integer(v, p, low=1, high=1_000_000),
                             list(default), min_len=1, max_len=MAX_SEARCH_VALUES)
            return tuple(sorted(set(values)))

        def mode(value: Any, path: str) -> str:
            if value not in RECOMPUTE_MODES:
                raise InputError(f"{path} must be one of {list(RECOMPUTE_MODES)}, got {value!r}")
            return value

        space = SearchSpace(
            dp=positive_ints("dp", SearchSpace.dp),
            tp=positive_ints("tp", SearchSpace.tp),
            micro_batch=positive_ints("micro_batch", SearchSpace.micro_batch),
            recompute=tuple(r.items("recompute", mode, list(RECOMPUTE_MODES), min_len=1)),
            max_stages=r.integer("max_stages", 8, low=1, high=MAX_STAGES),
            virtual_stages=positive_ints("virtual_stages", SearchSpace.virtual_stages),
        )
        r.finish()
        if 1 not in space.virtual_stages:
            raise InputError(f"{r.path}.virtual_stages must list 1 (plain 1F1B, which "
                             f"NSGA-II, the baselines and the agent search), got "
                             f"{list(space.virtual_stages)}")
        if len(space.dp) * len(space.micro_batch) > MAX_PAIRS:
            raise InputError(f"{r.path}: {len(space.dp)} dp x {len(space.micro_batch)} "
                             f"micro_batch values are more than {MAX_PAIRS} pairs")
        return space


@dataclass(frozen=True)
class Constraints:
    """Optional soft constraints (SPEC section 5)."""

    wan_share_cap: float | None = None  # a plan may occupy at most this share of any WAN link
    cost_budget: float | None = None  # upper bound on comm_cost (USD per step)

    @staticmethod
    def from_dict(r: Reader) -> Constraints:
        cap = r.raw("wan_share_cap", None)
        budget = r.raw("cost_budget", None)
        out = Constraints(
            wan_share_cap=None if cap is None else r.number("wan_share_cap", low=0, high=1,
                                                            low_open=True),
            cost_budget=None if budget is None else r.number("cost_budget", low=0, high=1e12),
        )
        r.finish()
        return out


@dataclass(frozen=True, eq=False)
class Instance:
    name: str
    gpu: GpuSpec
    domains: tuple[Domain, ...]
    links: Links
    model: ModelSpec
    training: Training
    search: SearchSpace = field(default_factory=SearchSpace)
    constraints: Constraints = field(default_factory=Constraints)
    trace: Trace | None = None
    description: str = ""

    @property
    def num_domains(self) -> int:
        return len(self.domains)

    @functools.cached_property
    def domain_gpus(self) -> np.ndarray:
        """(K,) int64, read-only: each domain's GPUs, free or not."""
        gpus = np.array([d.gpus for d in self.domains], dtype=np.int64)
        gpus.flags.writeable = False
        return gpus

    @functools.cached_property
    def free_gpus(self) -> np.ndarray:
        """(K,) int64, read-only: each domain's free GPUs (computed once: the evaluators
        read it on every plan)."""
        free = np.array([d.free_gpus for d in self.domains], dtype=np.int64)
        free.flags.writeable = False
        return free

    def domain_index(self, name: str) -> int | None:
        for k, domain in enumerate(self.domains):
            if domain.name == name:
                return k
        return None

    def replace(self, **changes: Any) -> Instance:
        return dataclasses.replace(self, **changes)

    def with_link_state(self, bandwidth_gbps: np.ndarray | None = None,
                        latency_ms: np.ndarray | None = None,
                        free_gpus: np.ndarray | None = None) -> Instance:
        """The same instance observed in another network / load state (current B, L, a_k)."""
        links = dataclasses.replace(
            self.links,
            bandwidth_gbps=self.links.bandwidth_gbps if bandwidth_gbps is None
            else np.asarray(bandwidth_gbps, dtype=float),
            latency_ms=self.links.latency_ms if latency_ms is None
            else np.asarray(latency_ms, dtype=float))
        domains = self.domains
        if free_gpus is not None:
            domains = tuple(dataclasses.replace(d, free_gpus=int(min(d.gpus, max(0, a))))
                            for d, a in zip(self.domains, free_gpus, strict=True))
        return dataclasses.replace(self, links=links, domains=domains)

    # -- JSON -----------------------------------------------------------------------------
    @staticmethod
    def from_dict(document: Any) -> Instance:
        r = Reader(document, "")
        schema = r.string("schema")
        if schema != INSTANCE_SCHEMA:
            raise InputError(f"schema must be {INSTANCE_SCHEMA!r}, got {schema!r}")
        domains = tuple(r.items("domains", Domain.from_dict, min_len=MIN_DOMAINS))
        if len(domains) > MAX_DOMAINS:
            raise InputError(f"domains must have at most {MAX_DOMAINS} entries, "
                             f"got {len(domains)}")
        names = [d.name for d in domains]
        for k, name in enumerate(names):
            if names.index(name) != k:
                raise InputError(f"domains[{k}].name {name!r} is used twice")
        gpu = GpuSpec.from_dict(_preset_reader(r, "gpu"))
        search = SearchSpace.from_dict(r.child("search")) if r.has("search") else SearchSpace()
        constraints = (Constraints.from_dict(r.child("constraints"))
                       if r.has("constraints") else Constraints())
        trace = None
        if r.raw("trace", None) is not None:
            trace = Trace.from_dict(r.child("trace"), len(domains))
        instance = Instance(
            name=r.name("name"),
            description=r.string("description", ""),
            gpu=gpu,
            domains=domains,
            links=(Links.from_dict(r.child("links"), len(domains))
                   if len(domains) > 1 or r.has("links") else Links.none()),
            model=ModelSpec.from_dict(_preset_reader(r, "model")),
            training=Training.from_dict(r.child("training")),
            search=search,
            constraints=constraints,
            trace=trace,
        )
        r.finish()
        _check_search_space(instance)
        return instance

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "schema": INSTANCE_SCHEMA,
            "name": self.name,
            "description": self.description,
            "gpu": dataclasses.asdict(self.gpu),
            "model": dataclasses.asdict(self.model),
            "training": dataclasses.asdict(self.training),
            "search": {**dataclasses.asdict(self.search)},
            "constraints": dataclasses.asdict(self.constraints),
            "domains": [d.to_dict() for d in self.domains],
            "links": self.links.to_dict(),
        }
        out["search"] = {k: list(v) if isinstance(v, tuple) else v
                         for k, v in out["search"].items()}
        if self.trace is not None:
            out["trace"] = self.trace.to_dict()
        return out

    def content_hash(self) -> str:
        """SHA-256 (hex) of what the instance states, its description aside: the canonical
        JSON of :meth:`to_dict` (sorted keys, no spaces), so two files that read to the same
        instance hash alike however they are laid out. A reference front records the hash
        of the instance it was computed for (:class:`solvers.front.Front`)."""
        document = self.to_dict()
        document.pop("description")
        for section, legacy in LATER_FIELDS.items():  # see LATER_FIELDS
            for key, value in legacy.items():
                if document[section][key] == value:
                    del document[section][key]
        text = json.dumps(document, sort_keys=True, separators=(",", ":"), allow_nan=False)
        return hashlib.sha256(text.encode("utf-8")).hexdigest()

    @staticmethod
    def load(path: str | Path) -> Instance:
        document = read_json(path, "instance")
        try:
            return Instance.from_dict(document)
        except InputError as err:
            raise InputError(f"instance {str(path)!r}: {err}") from None

    def save(self, path: str | Path) -> None:
        from formulation.outputs import write_json

        write_json(Path(path), self.to_dict())


def _preset_reader(r: Reader, key: str) -> Reader:
    """The reader of ``gpu`` or ``model``: an object stating every field, a preset's name
    (``"gpu": "H100-80GB"``, ``"model": "gpt3-175b"``: :mod:`formulation.presets`), or an
    object naming a preset and overriding some of its fields
    (``{"preset": "llama2-70b", "seq_len": 8192}``)."""
    from formulation import presets  # the presets are built from this module's types

    lookup = presets.gpu_preset if key == "gpu" else presets.model_preset
    value, where = r.raw(key), r.path_of(key)
    if isinstance(value, str):
        name, overrides = value, {}
    elif isinstance(value, dict) and "preset" in value:
        name, overrides = value["preset"], {k: v for k, v in value.items() if k != "preset"}
        where += ".preset"
        if not isinstance(name, str):
            raise InputError(f"{where} must be a preset's name (a string)")
    else:
        return Reader(value, r.path_of(key))
    try:
        spec = lookup(name)
    except KeyError as err:
        raise InputError(f"{where}: {err.args[0]}") from None
    return Reader({**dataclasses.asdict(spec), **overrides}, r.path_of(key))


def _check_search_space(instance: Instance) -> None:
    """A search space that admits no plan at all is refused when read, naming its fields:
    no dp x micro-batch dividing the global batch, or no tp that divides the heads and
    fits a node."""
    search, batch = instance.search, instance.training.global_batch
    if not any(batch % (dp * b) == 0 for dp in search.dp for b in search.micro_batch):
        raise InputError(f"search: no dp {list(search.dp)} x micro_batch "
                         f"{list(search.micro_batch)} divides training.global_batch {batch}")
    heads, node = instance.model.heads, instance.gpu.gpus_per_node
    if not any(heads % t == 0 and t <= node for t in search.tp):
        raise InputError(f"search.tp: no value of {list(search.tp)} divides model.heads "
                         f"{heads} and fits gpu.gpus_per_node {node}")
