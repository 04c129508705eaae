"""The three WAN topologies a scenario can be built on: random, cn-hubs and aws-10.

Each builder places K sites and derives the K x K link matrices from them. Site choice and link
figures use separate random generators, so a topology's map does not shift when the way its
links are drawn changes (and vice versa).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from instances.geo import (
    distance_matrix_km,
    latency_from_distance,
    log_uniform_links,
    price_from_distance,
    read_data_csv,
)

# `random`: a Eurasia-scale map box, so latencies run from a few ms to about 100 ms.
RANDOM_LAT = (20.0, 55.0)
RANDOM_LON = (-10.0, 140.0)
RANDOM_BANDWIDTH_GBPS = (1.0, 10.0)
# Long links are slower: at this distance and beyond, the top of the log range shrinks by
# RANDOM_DISTANCE_SHRINK (10 Gbit/s becomes 10**0.7 ~ 5 Gbit/s).
RANDOM_SHRINK_KM = 10_000.0
RANDOM_DISTANCE_SHRINK = 0.3

# `cn-hubs`: the national backbone between computing clusters is faster than the links to the
# eastern demand cities.
CN_BACKBONE_GBPS = (4.0, 10.0)
CN_CITY_GBPS = (1.0, 5.0)

# `aws-10`: approximate locations (lat, lon) of the ten AWS regions measured by DT-FM, used for
# the map and the price bands only; delay and bandwidth come from the published table.
AWS_REGIONS: dict[str, tuple[float, float]] = {
    "Oregon": (45.84, -119.70),  # us-west-2, Boardman
    "Virginia": (39.04, -77.49),  # us-east-1, Ashburn
    "Ohio": (39.96, -83.00),  # us-east-2, Columbus
    "Tokyo": (35.68, 139.69),  # ap-northeast-1
    "Seoul": (37.57, 126.98),  # ap-northeast-2
    "Singapore": (1.35, 103.82),  # ap-southeast-1
    "Sydney": (-33.87, 151.21),  # ap-southeast-2
    "London": (51.51, -0.13),  # eu-west-2
    "Frankfurt": (50.11, 8.68),  # eu-central-1
    "Ireland": (53.35, -6.26),  # eu-west-1, Dublin
}


@dataclass(frozen=True, eq=False)
class Network:
    """K sites and their WAN links: Gbit/s, one-way ms, USD per GB (diagonals 0)."""

    names: tuple[str, ...]
    lat: np.ndarray
    lon: np.ndarray
    bandwidth_gbps: np.ndarray
    latency_ms: np.ndarray
    price_per_gb: np.ndarray


Builder = Callable[[int, np.random.Generator, np.random.Generator], Network]


@dataclass(frozen=True)
class Topology:
    name: str
    max_domains: int
    summary: str  # one phrase for the instance description
    build: Builder  # (K, site generator, link generator) -> Network


def _subset(rng: np.random.Generator, available: int, count: int) -> np.ndarray:
    """``count`` of ``available`` indices, kept in data-file order so files read naturally."""
    return np.sort(rng.choice(available, size=count, replace=False))


def _from_sites(names: list[str], lat: np.ndarray, lon: np.ndarray, bandwidth: np.ndarray,
                links_rng: np.random.Generator) -> Network:
    """Latency and price from the sites' great-circle distances; bandwidth as given."""
    distance = distance_matrix_km(lat, lon)
    return Network(names=tuple(names), lat=lat, lon=lon, bandwidth_gbps=bandwidth,
                   latency_ms=latency_from_distance(links_rng, distance),
                   price_per_gb=price_from_distance(distance))


def build_random(k: int, sites_rng: np.random.Generator,
                 links_rng: np.random.Generator) -> Network:
    """K sites uniform in the map box; bandwidth log-uniform, mildly lower on long links."""
    lat = np.round(sites_rng.uniform(*RANDOM_LAT, size=k), 2)
    lon = np.round(sites_rng.uniform(*RANDOM_LON, size=k), 2)
    shrink = RANDOM_DISTANCE_SHRINK * np.minimum(
        distance_matrix_km(lat, lon) / RANDOM_SHRINK_KM, 1.0)
    bandwidth = log_uniform_links(links_rng, k, *RANDOM_BANDWIDTH_GBPS, shrink=shrink)
    names = [f"site-{i:02d}" for i in range(k)]
    return _from_sites(names, lat, lon, bandwidth, links_rng)


def build_cn_hubs(k: int, sites_rng: np.random.Generator,
                  links_rng: np.random.Generator) -> Network:
    """East-Data-West-Computing clusters (a subset if K < 10), plus demand cities if K > 10."""
    rows = read_data_csv("cn_hubs.csv")
    clusters = [row for row in rows if row["kind"] == "cluster"]
    cities = [row for row in rows if row["kind"] == "city"]
    if k <= len(clusters):
        chosen = [clusters[i] for i in _subset(sites_rng, len(clusters), k)]
    else:
        chosen = clusters + [cities[i] for i in _subset(sites_rng, len(cities),
                                                       k - len(clusters))]
    lat = np.array([float(row["lat"]) for row in chosen])
    lon = np.array([float(row["lon"]) for row in chosen])
    is_cluster = np.array([row["kind"] == "cluster" for row in chosen])
    backbone = log_uniform_links(links_rng, k, *CN_BACKBONE_GBPS)
    access = log_uniform_links(links_rng, k, *CN_CITY_GBPS)
    bandwidth = np.where(is_cluster[:, None] & is_cluster[None, :], backbone, access)
    return _from_sites([row["name"] for row in chosen], lat, lon, bandwidth, links_rng)


def aws10_table() -> tuple[list[str], np.ndarray, np.ndarray]:
    """Region names and the full 10 x 10 published delay (ms) and bandwidth (Gbit/s) matrices."""
    names = list(AWS_REGIONS)
    index = {name: i for i, name in enumerate(names)}
    delay = np.zeros((len(names), len(names)))
    gbps = np.zeros((len(names), len(names)))
    for row in read_data_csv("aws10_wan.csv"):
        i, j = index[row["region_a"]], index[row["region_b"]]
        delay[i, j] = delay[j, i] = float(row["delay_ms"])
        gbps[i, j] = gbps[j, i] = float(row["gbps"])
    missing = [(names[i], names[j]) for i in range(len(names)) for j in range(i + 1, len(names))
               if gbps[i, j] <= 0]
    if missing:
        raise RuntimeError(f"aws10_wan.csv lacks the pairs {missing}")
    return names, delay, gbps


def build_aws10(k: int, sites_rng: np.random.Generator,
                links_rng: np.random.Generator) -> Network:
    """The DT-FM AWS regions (a subset if K < 10) with their measured delay and bandwidth."""
    del links_rng  # the published figures are used as they are
    names, delay, gbps = aws10_table()
    pick = _subset(sites_rng, len(names), k)
    lat = np.array([AWS_REGIONS[names[i]][0] for i in pick])
    lon = np.array([AWS_REGIONS[names[i]][1] for i in pick])
    return Network(names=tuple(names[i] for i in pick), lat=lat, lon=lon,
                   bandwidth_gbps=gbps[np.ix_(pick, pick)], latency_ms=delay[np.ix_(pick, pick)],
                   price_per_gb=price_from_distance(distance_matrix_km(lat, lon)))


TOPOLOGIES: dict[str, Topology] = {
    "random": Topology("random", 20, "sites placed uniformly at random on a Eurasia-scale map "
                       "(lat 20..55, lon -10..140); latency from great-circle distance, "
                       "bandwidth log-uniform in 1-10 Gbit/s", build_random),
    "cn-hubs": Topology("cn-hubs", 20, "China East-Data-West-Computing hub clusters (plus "
                        "eastern demand cities beyond 10 domains); latency from great-circle "
                        "distance, backbone 4-10 Gbit/s, city links 1-5 Gbit/s", build_cn_hubs),
    "aws-10": Topology("aws-10", len(AWS_REGIONS), "AWS regions with the inter-region delay and "
                       "bandwidth measured by DT-FM (NeurIPS'22)", build_aws10),
}
