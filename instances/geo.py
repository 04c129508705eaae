"""Geography shared by all topologies: distances, latency and price from distance, data files.

Every topology derives its WAN figures from where its sites are, so that a scenario's map and
its matrices tell the same story. The physical constants live here, once.
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

EARTH_RADIUS_KM = 6371.0
# Fibre rarely follows the great circle; 1.5 is a common route-inflation factor for WAN paths.
ROUTE_FACTOR = 1.5
# Light in fibre covers about 200 km per millisecond (refractive index ~1.5).
FIBRE_KM_PER_MS = 200.0
# Fixed per-message overhead on a WAN link (switching, protocol stacks), drawn per link.
LATENCY_OVERHEAD_MS = (2.0, 5.0)

# Cloud inter-region egress tiers, USD per GB, by great-circle distance (upper bound in km).
# They follow the shape of public price lists: same-continent neighbours are cheap,
# cross-continent traffic costs several times more.
PRICE_BANDS_KM_USD: tuple[tuple[float, float], ...] = (
    (1000.0, 0.02),
    (3000.0, 0.04),
    (6000.0, 0.08),
    (float("inf"), 0.12),
)

DATA_DIR = Path(__file__).parent / "data"


def read_data_csv(name: str) -> list[dict[str, str]]:
    """Rows of a CSV in ``instances/data``; lines starting with '#' are provenance comments."""
    with (DATA_DIR / name).open(encoding="utf-8") as handle:
        lines = [line for line in handle if line.strip() and not line.startswith("#")]
    return list(csv.DictReader(lines))


def distance_matrix_km(lat: np.ndarray, lon: np.ndarray) -> np.ndarray:
    """Pairwise great-circle distances (haversine), in km; symmetric with a zero diagonal."""
    phi, lam = np.radians(lat), np.radians(lon)
    dphi = phi[:, None] - phi[None, :]
    dlam = lam[:, None] - lam[None, :]
    a = np.sin(dphi / 2) ** 2 + np.cos(phi)[:, None] * np.cos(phi)[None, :] * np.sin(dlam / 2) ** 2
    return 2 * EARTH_RADIUS_KM * np.arcsin(np.sqrt(np.clip(a, 0.0, 1.0)))


def symmetric(upper: np.ndarray) -> np.ndarray:
    """Mirror the strict upper triangle of a square matrix and zero the diagonal."""
    triangle = np.triu(upper, k=1)
    return triangle + triangle.T


def random_link_values(rng: np.random.Generator, size: int, low: float,
                       high: float) -> np.ndarray:
    """A symmetric matrix of values drawn uniformly in [low, high] per link (diagonal 0)."""
    return symmetric(rng.uniform(low, high, size=(size, size)))


def latency_from_distance(rng: np.random.Generator, distance_km: np.ndarray) -> np.ndarray:
    """One-way latency in ms: propagation along an inflated route plus a random fixed overhead."""
    overhead = random_link_values(rng, len(distance_km), *LATENCY_OVERHEAD_MS)
    latency = distance_km * ROUTE_FACTOR / FIBRE_KM_PER_MS + overhead
    np.fill_diagonal(latency, 0.0)
    return np.round(latency, 2)


def log_uniform_links(rng: np.random.Generator, size: int, low: float, high: float,
                      shrink: np.ndarray | None = None) -> np.ndarray:
    """Symmetric link bandwidths, uniform on a log scale in [low, high] (diagonal 0).

    ``shrink`` (per link, in [0, 1]) narrows the upper end towards ``low``: 0 keeps the full
    range, 1 pins the link at ``low``. It lets long links be slower without leaving the range.
    """
    u = rng.uniform(0.0, 1.0, size=(size, size))
    if shrink is not None:
        u = u * (1.0 - np.clip(shrink, 0.0, 1.0))
    values = np.exp(np.log(low) + u * (np.log(high) - np.log(low)))
    return np.round(symmetric(np.clip(values, low, high)), 3)


def price_from_distance(distance_km: np.ndarray) -> np.ndarray:
    """USD per GB for each link by distance band (diagonal 0: intra-domain traffic is free)."""
    price = np.full(distance_km.shape, PRICE_BANDS_KM_USD[-1][1])
    for limit, usd in reversed(PRICE_BANDS_KM_USD[:-1]):
        price[distance_km < limit] = usd
    np.fill_diagonal(price, 0.0)
    return np.round(price, 4)
