"""The scenario generator: determinism, argument checks, matrix and trace properties."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from formulation.instance import Instance
from formulation.schema import InputError
from instances.generate import generate_instance, main
from instances.geo import DATA_DIR, PRICE_BANDS_KM_USD

ROOT = Path(__file__).resolve().parents[1]
TOPOLOGIES = ("random", "cn-hubs", "aws-10")


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "instances.generate", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)


def write(tmp_path: Path, name: str, *args: str) -> bytes:
    out = tmp_path / name
    assert main(["--out", str(out), *args]) == 0
    return out.read_bytes()


def off_diagonal(matrix: np.ndarray) -> np.ndarray:
    return matrix[~np.eye(len(matrix), dtype=bool)]


@pytest.mark.parametrize("topology", TOPOLOGIES)
@pytest.mark.parametrize("trace", [False, True])
def test_same_seed_gives_same_bytes(tmp_path: Path, topology: str, trace: bool) -> None:
    args = ["--domains", "7", "--model", "7b", "--seed", "11", "--topology", topology]
    args += ["--trace"] if trace else []
    assert write(tmp_path, "a.json", *args) == write(tmp_path, "b.json", *args)


def test_same_bytes_across_processes(tmp_path: Path) -> None:
    args = ["--domains", "12", "--model", "13b", "--seed", "5", "--topology", "cn-hubs",
            "--trace"]
    here = write(tmp_path, "here.json", *args)
    done = run_cli(*args, "--out", str(tmp_path / "there.json"))
    assert done.returncode == 0, done.stderr
    assert "cn-hubs-k12-llama2-13b-s5" in done.stdout
    assert (tmp_path / "there.json").read_bytes() == here


@pytest.mark.parametrize("topology", TOPOLOGIES)
def test_different_seeds_differ(topology: str) -> None:
    a, b = (generate_instance(8, "7b", seed, topology).to_dict() for seed in (1, 2))
    assert a["domains"] != b["domains"]
    if topology == "random":
        assert a["links"] != b["links"]


def test_trace_leaves_the_static_part_unchanged() -> None:
    static = generate_instance(9, "70b", 4, "random").to_dict()
    dynamic = generate_instance(9, "70b", 4, "random", trace=True).to_dict()
    assert dynamic.pop("trace")
    for key in static.keys() - {"description"}:
        assert static[key] == dynamic[key], key


@pytest.mark.parametrize("domains", ["0", "21"])
def test_domain_count_out_of_range_is_rejected(tmp_path: Path, domains: str) -> None:
    done = run_cli("--domains", domains, "--model", "7b", "--seed", "1",
                   "--out", str(tmp_path / "x.json"))
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "--domains" in done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "x.json").exists()


@pytest.mark.parametrize("domains", [1, 2])
def test_one_cluster_of_a_given_size(tmp_path: Path, domains: int) -> None:
    """``--domains 1 --domain-gpus N``: one cluster of exactly N GPUs, all free, no links,
    named for its size."""
    out = tmp_path / "cluster.json"
    done = run_cli("--domains", str(domains), "--model", "175b", "--seed", "1",
                   "--domain-gpus", "1020", "--out", str(out))
    assert done.returncode == 0, done.stderr
    instance = Instance.load(out)
    assert instance.num_domains == domains
    assert all(d.gpus == d.free_gpus == 1020 for d in instance.domains)  # not rounded to nodes
    assert instance.links.bandwidth_gbps.shape == (domains, domains)
    assert instance.name.endswith("-s1-g1020")


def test_aws10_rejects_more_than_ten_domains(tmp_path: Path) -> None:
    done = run_cli("--domains", "11", "--model", "7b", "--seed", "1", "--topology", "aws-10",
                   "--out", str(tmp_path / "x.json"))
    assert done.returncode == 2
    assert done.stderr.strip() == ("error: aws-10 has 10 regions; "
                                   "--domains must be 1..10 for this topology")


def test_unknown_model_exits_2(tmp_path: Path) -> None:
    done = run_cli("--domains", "6", "--model", "gpt-5", "--seed", "1",
                   "--out", str(tmp_path / "x.json"))
    assert done.returncode == 2
    assert done.stderr.startswith("error: unknown model") and done.stderr.count("\n") == 1


@pytest.mark.parametrize("kwargs", [dict(topology="mesh"), dict(gpu="V100"),
                                    dict(global_batch=0), dict(seed=-1),
                                    dict(gpu_range=(64, 8)), dict(domain_gpus=0)])
def test_bad_arguments_raise_input_error(kwargs: dict) -> None:
    arguments = {"domains": 6, "model": "7b", "seed": 1, **kwargs}
    with pytest.raises(InputError):
        generate_instance(**arguments)


@pytest.mark.parametrize(("topology", "domains"), [("random", 5), ("random", 20),
                                                   ("cn-hubs", 5), ("cn-hubs", 20),
                                                   ("cn-hubs", 13), ("aws-10", 5),
                                                   ("aws-10", 10)])
def test_matrices_and_domains(topology: str, domains: int) -> None:
    instance = generate_instance(domains, "7b", 3, topology)
    links = instance.links
    assert instance.num_domains == domains
    assert instance.name == f"{topology}-k{domains}-llama2-7b-s3"
    for matrix in (links.bandwidth_gbps, links.latency_ms, links.price_per_gb):
        assert matrix.shape == (domains, domains)
        assert np.array_equal(matrix, matrix.T) and not np.diag(matrix).any()
    assert (off_diagonal(links.latency_ms) > 0).all()
    assert (off_diagonal(links.bandwidth_gbps) > 0).all()
    assert set(off_diagonal(links.price_per_gb)) <= {usd for _, usd in PRICE_BANDS_KM_USD}
    if topology == "random":
        assert (off_diagonal(links.bandwidth_gbps) >= 1).all()
        assert (links.bandwidth_gbps <= 10).all()
    for d in instance.domains:
        assert d.gpus % 8 == 0 and d.free_gpus % 8 == 0 and 8 <= d.free_gpus <= d.gpus
        assert 16 <= d.gpus <= 1024 and d.intra_bandwidth_gbps in (100, 200, 400)
        assert 0.005 <= d.intra_latency_ms <= 0.5 and d.lat is not None


def test_cn_hubs_keeps_all_clusters_beyond_ten() -> None:
    with (DATA_DIR / "cn_hubs.csv").open() as handle:
        rows = list(csv.DictReader(line for line in handle if not line.startswith("#")))
    clusters = {row["name"] for row in rows if row["kind"] == "cluster"}
    small = generate_instance(6, "7b", 2, "cn-hubs")
    assert {d.name for d in small.domains} < clusters
    large = generate_instance(16, "7b", 2, "cn-hubs")
    names = [d.name for d in large.domains]
    assert set(names) >= clusters and len(set(names)) == 16
    backbone = large.links.bandwidth_gbps[:10, :10]
    assert (off_diagonal(backbone) >= 4).all() and (large.links.bandwidth_gbps <= 10).all()
    assert (large.links.bandwidth_gbps[10:, :] <= 5).all()


@pytest.mark.parametrize("seed", [0, 7])
def test_aws10_matrices_are_the_published_figures(seed: int) -> None:
    instance = generate_instance(10 - seed % 4, "7b", seed, "aws-10")
    with (DATA_DIR / "aws10_wan.csv").open() as handle:
        rows = list(csv.DictReader(line for line in handle if not line.startswith("#")))
    index = {d.name: k for k, d in enumerate(instance.domains)}
    checked = 0
    for row in rows:
        i, j = index.get(row["region_a"]), index.get(row["region_b"])
        if i is None or j is None:
            continue
        assert instance.links.latency_ms[i, j] == float(row["delay_ms"])
        assert instance.links.bandwidth_gbps[j, i] == float(row["gbps"])
        checked += 1
    k = instance.num_domains
    assert checked == k * (k - 1) // 2


@pytest.mark.parametrize(("topology", "seed", "eps"), [("random", 1, 0.3), ("cn-hubs", 2, 0.3),
                                                       ("aws-10", 3, 0.1)])
def test_trace_factors_stay_in_bounds(topology: str, seed: int, eps: float) -> None:
    trace = generate_instance(8, "7b", seed, topology, trace=True, eps=eps,
                              trace_length=96).trace
    assert trace is not None and trace.length == 96 and trace.interval_s == 300.0
    bandwidth, latency = trace.bandwidth_factor, trace.latency_factor
    assert bandwidth.shape == latency.shape == (96, 8, 8)
    assert np.array_equal(bandwidth, np.swapaxes(bandwidth, 1, 2))
    assert np.array_equal(latency, np.swapaxes(latency, 1, 2))
    assert bandwidth.min() >= 1 - eps - 1e-9 and bandwidth.max() <= 1 + eps + 1e-9
    assert bandwidth.std() > 0
    assert set(np.unique(latency)) <= {1.0, 1.5} and (latency == 1.5).any()
    assert trace.free_gpu_factor.min() >= 0.8 and trace.free_gpu_factor.max() <= 1.2
    assert (bandwidth[0] == 1).all() and (trace.free_gpu_factor[0] == 1).all()
    for failure in trace.failures:
        assert 0 <= failure.domain < 8 and 1 <= failure.start < failure.end <= 96
        assert failure.end - failure.start <= 4


def test_some_traces_have_a_failure() -> None:
    counts = [len(generate_instance(5, "7b", seed, trace=True).trace.failures)
              for seed in range(12)]
    assert set(counts) == {0, 1}


@pytest.mark.parametrize("topology", TOPOLOGIES)
def test_round_trip_through_json(tmp_path: Path, topology: str) -> None:
    instance = generate_instance(9, "405b", 8, topology, trace=True, gpu="h100-80gb")
    document = instance.to_dict()
    again = Instance.from_dict(json.loads(json.dumps(document))).to_dict()
    assert json.dumps(again) == json.dumps(document)
    instance.save(tmp_path / "i.json")
    assert json.dumps(Instance.load(tmp_path / "i.json").to_dict()) == json.dumps(document)


def test_training_defaults_and_override() -> None:
    assert generate_instance(5, "7b", 1).training.global_batch == 512  # seq_len 4096
    assert generate_instance(5, "gpt-1.7b", 1).training.global_batch == 1024  # seq_len 2048
    training = generate_instance(5, "llama2-13b", 1, global_batch=256).training
    assert (training.global_batch, training.zero_stage, training.steps) == (256, 1, 10_000)


def test_unwritable_output_gives_exit_2(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    done = subprocess.run([sys.executable, "-m", "instances.generate", "--domains", "5",
                           "--model", "7b", "--seed", "1", "--out", str(blocker / "x.json")],
                          capture_output=True, text=True)
    assert done.returncode == 2 and done.stderr.startswith("error: --out ")
    assert "does not exist" in done.stderr
    assert "Traceback" not in done.stderr


def test_failed_write_leaves_no_partial_file(tmp_path):
    from formulation.outputs import write_json

    with pytest.raises(ValueError):
        write_json(tmp_path / "out.json", {"good": 1, "bad": float("nan")})
    assert list(tmp_path.iterdir()) == []
