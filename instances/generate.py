"""Seeded scenario generator: ``python -m instances.generate --domains K --model M --seed S``.

One seed fixes the whole instance, byte for byte. The seed's generator is split into
independent children (sites, links, domains, trace), so switching the trace on, or changing how
one part is drawn, leaves the other parts of the instance unchanged.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Callable
from typing import TypeVar

import numpy as np

from formulation.instance import (
    ATTENTION_KERNELS,
    MAX_DOMAIN_GPUS,
    MAX_DOMAINS,
    MAX_GLOBAL_BATCH,
    MIN_DOMAINS,
    Domain,
    GpuSpec,
    Instance,
    Links,
    SearchSpace,
    Training,
)
from formulation.outputs import output_path, report_stream
from formulation.presets import gpu_preset, model_preset
from formulation.schema import SEED, CliParser, InputError, integer_arg, run_cli
from instances.topologies import TOPOLOGIES, Network
from instances.traces import generate_trace

# SPEC section 1 speaks of 5-20 domains; one domain is a single cluster (a published run
# expressed in the project's types), two to four a small federation: all are accepted.
DEFAULT_GPU = "A100-80GB"
INTRA_BANDWIDTH_GBPS = (100.0, 200.0, 400.0)  # SPEC section 1: 100-400 Gbit/s inside a domain
INTRA_LATENCY_MS = (0.005, 0.5)  # SPEC section 1: < 1 ms inside a domain
LONG_SEQUENCE = 4096  # from this sequence length on, the default global batch is halved
GLOBAL_BATCH_SHORT, GLOBAL_BATCH_LONG = 1024, 512  # sequences per step

T = TypeVar("T")


def _check_arguments(domains: int, topology: str, seed: int, gpu_range: tuple[int, int],
                     free_share_range: tuple[float, float]) -> None:
    if not MIN_DOMAINS <= domains <= MAX_DOMAINS:
        raise InputError(f"--domains must be between {MIN_DOMAINS} and {MAX_DOMAINS}, "
                         f"got {domains}")
    if topology not in TOPOLOGIES:
        raise InputError(f"unknown topology {topology!r}; known: {', '.join(TOPOLOGIES)}")
    limit = TOPOLOGIES[topology].max_domains
    if domains > limit:
        raise InputError(f"{topology} has {limit} regions; --domains must be "
                         f"{MIN_DOMAINS}..{limit} for this topology")
    if seed < 0:
        raise InputError(f"--seed must be >= 0, got {seed}")
    if not 1 <= gpu_range[0] <= gpu_range[1]:
        raise InputError(f"gpu_range must satisfy 1 <= low <= high, got {gpu_range}")
    if not 0 < free_share_range[0] <= free_share_range[1] <= 1:
        raise InputError(f"free_share_range must satisfy 0 < low <= high <= 1, "
                         f"got {free_share_range}")


def _preset(lookup: Callable[[str], T], name: str) -> T:
    """A preset by name; the presets' KeyError becomes the InputError the CLI reports."""
    try:
        return lookup(name)
    except KeyError as err:
        raise InputError(err.args[0]) from None


def make_domains(rng: np.random.Generator, network: Network, gpu: GpuSpec,
                 gpu_range: tuple[int, int],
                 free_share_range: tuple[float, float]) -> tuple[Domain, ...]:
    """Domain sizes log-uniform in ``gpu_range`` in whole nodes; a random share of them free."""
    node = gpu.gpus_per_node
    k = len(network.names)
    low = max(node, -(-gpu_range[0] // node) * node)  # smallest whole-node size in range
    high = max(low, gpu_range[1] // node * node)
    size = np.exp(rng.uniform(np.log(gpu_range[0]), np.log(gpu_range[1]), size=k))
    gpus = np.clip(np.round(size / node) * node, low, high).astype(int)
    free = np.round(gpus * rng.uniform(*free_share_range, size=k)) // node * node
    free = np.clip(free, node, gpus).astype(int)
    intra_bw = rng.choice(INTRA_BANDWIDTH_GBPS, size=k)
    intra_lat = np.round(rng.uniform(*INTRA_LATENCY_MS, size=k), 3)
    return tuple(
        Domain(name=network.names[i], gpus=int(gpus[i]), free_gpus=int(free[i]),
               intra_bandwidth_gbps=float(intra_bw[i]), intra_latency_ms=float(intra_lat[i]),
               lat=float(network.lat[i]), lon=float(network.lon[i]))
        for i in range(k))


def default_global_batch(seq_len: int) -> int:
    """Sequences per step: ~2-4M tokens, the usual pre-training batch of the preset models."""
    return GLOBAL_BATCH_LONG if seq_len >= LONG_SEQUENCE else GLOBAL_BATCH_SHORT


def generate_instance(domains: int, model: str, seed: int, topology: str = "random",
                      trace: bool = False, *, gpu: str = DEFAULT_GPU,
                      global_batch: int | None = None, gpu_range: tuple[int, int] = (16, 1024),
                      free_share_range: tuple[float, float] = (0.1, 0.6),
                      search: SearchSpace | None = None, domain_gpus: int | None = None,
                      attention: str = "flash",
                      trace_length: int = 48,
                      trace_interval_s: float = 300.0, eps: float = 0.3) -> Instance:
    """Build the instance for these arguments; the same arguments always give the same one.

    ``attention``: the training's attention kernel (``formulation.instance.Training``).
    ``domain_gpus``: every domain has exactly this many GPUs, all free (a one-domain
    instance with it is one cluster of that size); otherwise sizes are drawn from
    ``gpu_range`` and a share ``free_share_range`` of them is free.

    The result is re-read from its own JSON form, so it equals what ``Instance.load`` returns
    for the saved file (and every field has passed the loader's validation).
    """
    if domain_gpus is not None:
        if not 1 <= domain_gpus <= MAX_DOMAIN_GPUS:
            raise InputError(f"--domain-gpus must be between 1 and {MAX_DOMAIN_GPUS:,}, "
                             f"got {domain_gpus}")
        gpu_range, free_share_range = (domain_gpus, domain_gpus), (1.0, 1.0)
    _check_arguments(domains, topology, seed, gpu_range, free_share_range)
    model_spec = _preset(model_preset, model)
    gpu_spec = _preset(gpu_preset, gpu)
    if global_batch is not None and global_batch < 1:
        raise InputError(f"--global-batch must be >= 1, got {global_batch}")
    if not 0 <= eps <= 0.95:
        raise InputError(f"eps must be in [0, 0.95], got {eps}")

    sites_rng, links_rng, domains_rng, trace_rng = np.random.default_rng(seed).spawn(4)
    shape = TOPOLOGIES[topology]
    network = shape.build(domains, sites_rng, links_rng)
    links = Links(bandwidth_gbps=network.bandwidth_gbps, latency_ms=network.latency_ms,
                  price_per_gb=network.price_per_gb, eps=float(eps))
    dynamics = (generate_trace(trace_rng, links.bandwidth_gbps, domains, trace_length,
                               trace_interval_s, eps) if trace else None)

    name = f"{topology}-k{domains}-{model_spec.name}-s{seed}"
    if domain_gpus is not None:  # another size of the same draw
        name += f"-g{domain_gpus}"
    if gpu_spec.name != DEFAULT_GPU:
        name += f"-{gpu_spec.name.lower()}"
    sizes = (f"{domain_gpus} GPUs each, all free" if domain_gpus is not None else
             f"sizes log-uniform in {gpu_range[0]}-{gpu_range[1]} GPUs, free share "
             f"{free_share_range[0]:g}-{free_share_range[1]:g}")
    description = (f"{shape.summary}. Generated by instances.generate with seed {seed}: "
                   f"{domains} domain{'s' if domains > 1 else ''} of {gpu_spec.name}, {sizes}")
    if dynamics is not None:
        description += (f"; trace of {trace_length} intervals of {trace_interval_s:g} s "
                        f"(bandwidth within +-{eps:g}, latency spikes, load swings, failures)")
    sites = make_domains(domains_rng, network, gpu_spec, gpu_range, free_share_range)
    if domain_gpus is not None:  # exactly, not rounded to whole nodes
        sites = tuple(dataclasses.replace(d, gpus=domain_gpus, free_gpus=domain_gpus)
                      for d in sites)
    instance = Instance(
        name=name, description=description + ".", gpu=gpu_spec,
        domains=sites,
        links=links, model=model_spec,
        training=Training(global_batch=global_batch or default_global_batch(model_spec.seq_len),
                          steps=10_000, zero_stage=1, attention=attention),
        search=search or SearchSpace(), trace=dynamics)
    return Instance.from_dict(instance.to_dict())


def warm_up_instance() -> Instance:
    """The small instance (K = 5, 7B) a process decides on once, untimed, before its first
    timed decision: numba compiles or loads the DP kernels then, not within a deadline."""
    return generate_instance(5, "7b", 0, "random")


def _parser() -> argparse.ArgumentParser:
    parser = CliParser(
        prog="python -m instances.generate",
        description="Generate a seeded cross-domain training scenario (instance JSON).")
    parser.add_argument("--domains", type=int, required=True,
                        help=f"number of domains K ({MIN_DOMAINS}..{MAX_DOMAINS})")
    parser.add_argument("--model", required=True, help="model preset or alias, e.g. 7b, 70b")
    parser.add_argument("--seed", type=SEED, required=True,
                        help="one seed of the scenario, 0 to 2^32 - 1")
    parser.add_argument("--out", type=str, required=True,
                        help="instance JSON file to write (- for standard output)")
    parser.add_argument("--quiet", action="store_true", help="no report line")
    parser.add_argument("--topology", default="random", choices=list(TOPOLOGIES),
                        help="WAN topology (default %(default)s)")
    parser.add_argument("--trace", action="store_true", help="add a dynamic trace (SPEC 6)")
    parser.add_argument("--gpu", default=DEFAULT_GPU, help="GPU preset (default %(default)s)")
    parser.add_argument("--global-batch", type=integer_arg(1, MAX_GLOBAL_BATCH), default=None,
                        help="sequences per step (default 512 if seq_len >= 4096, else 1024)")
    parser.add_argument("--attention", choices=ATTENTION_KERNELS, default="flash",
                        help="attention kernel of the training (default %(default)s; eager: "
                             "the s x s scores in HBM, as in 2021)")
    parser.add_argument("--domain-gpus", type=integer_arg(1, MAX_DOMAIN_GPUS), default=None,
                        help="GPUs of every domain, all free (default: sizes log-uniform in "
                             "16-1024 GPUs, 10-60 %% free); with --domains 1, one cluster")
    return parser


def main(argv: list[str] | None = None) -> int:
    """CLI entry point; returns the exit status (2 for any bad argument, no traceback)."""
    args = _parser().parse_args(argv)
    return run_cli(lambda: _generate(args))


def _generate(args: argparse.Namespace) -> int:
    args.out = output_path(args.out)
    instance = generate_instance(args.domains, args.model, args.seed, args.topology,
                                 args.trace, gpu=args.gpu, global_batch=args.global_batch,
                                 domain_gpus=args.domain_gpus, attention=args.attention)
    instance.save(args.out)
    free = sum(d.free_gpus for d in instance.domains)
    total = sum(d.gpus for d in instance.domains)
    print(f"{instance.name}: K={instance.num_domains}, {free} free GPUs of {total}, "
          f"written to {args.out}", file=report_stream(args.out, args.quiet))
    return 0


if __name__ == "__main__":
    sys.exit(main())
