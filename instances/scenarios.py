"""Seeded dynamic scenarios with the sponsor's dynamics (seeds/003 topics 3-4).

    python -m instances.scenarios INSTANCE --out FILE.json|FILE.csv [--hours 6] [--seed 0]
        [--joins 0] [--quiet]

:func:`generate_scenario` draws the events of :mod:`formulation.scenario` over ``hours`` on an
instance: every link's bandwidth walks within +-30 % (one value every ``tick_s``), latency
spikes of +50 % to +200 % lasting seconds to minutes, each domain's free GPUs walk within
+-20 % of nominal, nodes and whole domains fail and are repaired, and ``joins`` domains join
during the first half of the run. Each kind draws from its own child generator, so tuning one
leaves the others' events unchanged; the same seed gives the same bytes.
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import asdict, dataclass

import numpy as np

from formulation.instance import LINK_LIMITS, PHYSICAL_LEAST, Instance
from formulation.outputs import (
    command_line,
    output_path,
    report_stream,
    versions,
    write_atomic,
    write_json,
)
from formulation.scenario import Event, EventKind, Scenario, load_ceiling
from formulation.schema import (
    SEED,
    CliParser,
    InputError,
    check_ranges,
    integer_arg,
    number_arg,
    run_cli,
)
from instances.traces import DECIMALS, factor_walk

MAX_HOURS = 24 * 7


@dataclass(frozen=True)
class ScenarioSettings:
    """The dynamics a scenario draws (defaults: the sponsor's, seeds/003 topics 3-4)."""

    hours: float = 6.0
    tick_s: float = 300.0
    """Bandwidth and load take a new value every tick."""
    bandwidth_swing: float = 0.3
    """Bandwidth factor within [1 - swing, 1 + swing] (+-30 %), a reflected walk."""
    load_swing: float = 0.2
    """Free-GPU factor within [1 - swing, 1 + swing] of nominal (+-20 %), a reflected walk."""
    spikes_per_link_hour: float = 0.5
    spike_factor: tuple[float, float] = (1.5, 3.0)
    """Latency x this during a spike (>= +50 %), uniform."""
    spike_seconds: tuple[float, float] = (5.0, 300.0)
    """A spike's duration, log-uniform: seconds to minutes."""
    node_failures_per_domain_hour: float = 0.1
    node_repair_seconds: tuple[float, float] = (600.0, 3600.0)
    domain_failures_per_domain_hour: float = 0.02
    domain_repair_seconds: tuple[float, float] = (1800.0, 7200.0)
    joins: int = 0
    """Domains that join during the first half of the run (absent before)."""


RANGES = {"hours": (1e-3, MAX_HOURS), "tick_s": (1.0, 86_400.0),
          "bandwidth_swing": (0.0, 0.95), "load_swing": (0.0, 0.95),
          "spikes_per_link_hour": (0.0, 1e3), "node_failures_per_domain_hour": (0.0, 1e3),
          "domain_failures_per_domain_hour": (0.0, 1e3)}


def _arrivals(rng: np.random.Generator, rate_per_hour: float, horizon_s: float) -> list[float]:
    """Poisson arrival times in (0, horizon), in milliseconds."""
    times, t = [], 0.0
    if rate_per_hour <= 0:
        return times
    while True:
        t += rng.exponential(3600.0 / rate_per_hour)
        stamp = round(t, 3)
        if stamp >= horizon_s:
            return times
        if stamp > 0:
            times.append(stamp)


def _walk_events(rng: np.random.Generator, ticks: int, tick_s: float, swing: float,
                 targets: list[tuple[int, int | None]], kind: EventKind,
                 high: np.ndarray | None = None, low: np.ndarray | None = None
                 ) -> list[Event]:
    """A reflected walk of a factor per target from 1 (tick 0 is nominal), one event per
    later tick and target, within [``low``, ``high``] per target; a link target (i, j)
    gives its walk to both directions."""
    walk = factor_walk(rng, ticks, (len(targets),), swing)
    if high is not None:
        walk = np.minimum(walk, high[None, :])
    if low is not None:
        walk = np.maximum(walk, low[None, :])
    events = []
    for tick in range(1, ticks):
        for index, (domain, peer) in enumerate(targets):
            value = float(walk[tick, index])
            if peer is None:
                events.append(Event(tick * tick_s, kind, domain, value=value))
            else:
                events += [Event(tick * tick_s, kind, domain, peer, value),
                           Event(tick * tick_s, kind, peer, domain, value)]
    return events


def generate_scenario(instance: Instance, seed: int,
                      settings: ScenarioSettings = ScenarioSettings()) -> Scenario:
    check_ranges(settings, RANGES)
    k = instance.num_domains
    if not 0 <= settings.joins < k:
        raise InputError(f"joins must be in [0, {k - 1}] (one domain at least is there from "
                         f"the start), got {settings.joins}")
    horizon = settings.hours * 3600.0
    ticks = max(1, math.ceil(horizon / settings.tick_s))  # every tick before the horizon
    bandwidth_rng, latency_rng, load_rng, node_rng, domain_rng, join_rng = \
        np.random.default_rng(seed).spawn(6)
    pairs = [(i, j) for i in range(k) for j in range(i + 1, k)]  # every pair has a link
    # link factors keep both directions within what an instance may state (a scenario
    # reads back only so): no bound but on an instance at those limits
    bandwidth = instance.links.bandwidth_gbps
    both = np.array([[bandwidth[i, j], bandwidth[j, i]] for i, j in pairs]).reshape(-1, 2)
    scale = 10 ** DECIMALS
    events = _walk_events(bandwidth_rng, ticks, settings.tick_s, settings.bandwidth_swing,
                          pairs, EventKind.BANDWIDTH,
                          high=np.floor(LINK_LIMITS["bandwidth_gbps"] / both.max(axis=1)
                                        * scale) / scale,
                          low=np.ceil(PHYSICAL_LEAST / both.min(axis=1) * scale) / scale)
    events += _walk_events(load_rng, ticks, settings.tick_s, settings.load_swing,
                           [(d, None) for d in range(k)], EventKind.LOAD,
                           high=np.floor(load_ceiling(instance) * 10**DECIMALS) / 10**DECIMALS)

    low_s, high_s = settings.spike_seconds
    latency = instance.links.latency_ms
    for i, j in pairs:
        nominal = max(latency[i, j], latency[j, i])
        most = math.inf if nominal <= 0 else \
            math.floor(LINK_LIMITS["latency_ms"] / nominal * scale) / scale
        for t in _arrivals(latency_rng, settings.spikes_per_link_hour, horizon):
            factor = min(round(float(latency_rng.uniform(*settings.spike_factor)), DECIMALS),
                         most)
            seconds = round(float(np.exp(latency_rng.uniform(np.log(low_s), np.log(high_s)))),
                            3)
            events += [Event(t, EventKind.LATENCY, i, j, factor, seconds),
                       Event(t, EventKind.LATENCY, j, i, factor, seconds)]

    node = instance.gpu.gpus_per_node
    for domain in range(k):
        for t in _arrivals(node_rng, settings.node_failures_per_domain_hour, horizon):
            lost = float(min(node, instance.domains[domain].gpus))
            events.append(Event(t, EventKind.NODE_FAILURE, domain, value=lost,
                                duration_s=round(float(node_rng.uniform(
                                    *settings.node_repair_seconds)), 3)))
        for t in _arrivals(domain_rng, settings.domain_failures_per_domain_hour, horizon):
            events.append(Event(t, EventKind.DOMAIN_FAILURE, domain,
                                duration_s=round(float(domain_rng.uniform(
                                    *settings.domain_repair_seconds)), 3)))
    joining = join_rng.choice(k, size=settings.joins, replace=False)
    events += [Event(max(0.001, round(float(join_rng.uniform(0, horizon / 2)), 3)),
                     EventKind.DOMAIN_JOIN, int(d)) for d in sorted(joining)]
    provenance = {"generator": "instances.scenarios.generate_scenario",
                  "instance": instance.name, "seed": seed,
                  "settings": {key: list(value) if isinstance(value, tuple) else value
                               for key, value in asdict(settings).items()},
                  "versions": versions()}
    return Scenario.of(horizon, events, provenance)


def _parser() -> argparse.ArgumentParser:
    parser = CliParser(prog="python -m instances.scenarios",
                       description="Draw a dynamic scenario (timed events) for an instance.")
    parser.add_argument("instance", help="instance JSON")
    parser.add_argument("--out", required=True,
                        help="scenario file to write: .json, or .csv for the CSV format")
    parser.add_argument("--hours", type=number_arg(1e-3, MAX_HOURS), default=6.0,
                        help="length of the run the events cover (default 6)")
    parser.add_argument("--seed", type=SEED, default=0,
                        help="one seed of the draws (default 0): the same seed, the same "
                        "bytes")
    parser.add_argument("--joins", type=integer_arg(0, 19), default=0,
                        help="domains that join during the first half (absent before)")
    parser.add_argument("--quiet", action="store_true", help="no report line")
    return parser


def _generate(args: argparse.Namespace) -> int:
    if not str(args.out).lower().endswith((".json", ".csv")):
        raise InputError(f"--out {args.out!r}: name a .json or .csv file (the format)")
    out = output_path(args.out, inputs=[args.instance], stdout=False)
    instance = Instance.load(args.instance)
    scenario = generate_scenario(instance, args.seed,
                                 ScenarioSettings(hours=args.hours, joins=args.joins))
    scenario.provenance["command"] = command_line("instances.scenarios")
    if out.suffix.lower() == ".csv":
        write_atomic(out, lambda path: path.write_text(scenario.to_csv()))
    else:
        write_json(out, scenario.to_dict())
    kinds = {kind: sum(e.kind is kind for e in scenario.events) for kind in EventKind}
    print(f"{instance.name}: {len(scenario.events)} events over {args.hours:g} h ("
          + ", ".join(f"{n} {kind}" for kind, n in kinds.items() if n) + f") -> {out}",
          file=report_stream(out, args.quiet))
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    return run_cli(lambda: _generate(args))


if __name__ == "__main__":
    sys.exit(main())
