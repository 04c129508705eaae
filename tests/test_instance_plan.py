"""Instance and plan documents: JSON round trips, strict validation with field paths, presets."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from formulation.calibration import read_set
from formulation.instance import INSTANCE_SCHEMA, Instance
from formulation.plan import PLAN_SCHEMA, Plan, Stage
from formulation.presets import GPUS, MODELS, gpu_preset, model_preset
from formulation.schema import InputError
from instances.generate import generate_instance


@pytest.fixture(scope="module")
def big() -> Instance:
    """K = 8, with a trace, so that every matrix index and optional section is exercised."""
    return generate_instance(8, "13b", 3, trace=True)


@pytest.fixture
def doc(big: Instance) -> dict[str, Any]:
    return big.to_dict()


def rejects(document: Any, message: str) -> None:
    with pytest.raises(InputError) as info:
        Instance.from_dict(document)
    assert message in str(info.value)


# -- round trips -----------------------------------------------------------------------------
@pytest.mark.parametrize("trace", [False, True])
def test_instance_round_trip(tmp_path: Path, trace: bool) -> None:
    instance = generate_instance(6, "7b", 11, trace=trace)
    instance.save(tmp_path / "instance.json")
    loaded = Instance.load(tmp_path / "instance.json")
    assert loaded.to_dict() == instance.to_dict()
    assert (loaded.trace is not None) is trace


@pytest.mark.parametrize("by_name", [True, False])
def test_plan_round_trip(tmp_path: Path, generated: Instance, sample_plans: list[Plan],
                         by_name: bool) -> None:
    plan = sample_plans[0]
    plan.save(tmp_path / "plan.json", generated if by_name else None)
    written = json.loads((tmp_path / "plan.json").read_text())
    assert all(isinstance(s["domain"], str if by_name else int) for s in written["stages"])
    loaded = Plan.load(tmp_path / "plan.json", generated)
    assert loaded == plan
    assert loaded.to_dict(generated) == plan.to_dict(generated)


def test_plan_domain_names_resolve_to_indices(generated: Instance) -> None:
    names = [d.name for d in generated.domains]
    document = {"schema": PLAN_SCHEMA, "dp": 2, "micro_batch": 1, "stages": [
        {"domain": names[4], "layers": 20, "tp": 4},
        {"domain": 1, "layers": 12, "recompute": "full"}]}
    plan = Plan.from_dict(document, generated)
    assert plan == Plan(dp=2, micro_batch=1, stages=(Stage(4, 20, 4, "none"),
                                                     Stage(1, 12, 1, "full")))
    assert plan.cuts == [20]


# -- instance validation ---------------------------------------------------------------------
def test_schema_version_is_checked(doc: dict[str, Any]) -> None:
    doc["schema"] = "xdsched.instance/2"
    rejects(doc, f"schema must be {INSTANCE_SCHEMA!r}")


@pytest.mark.parametrize(("where", "message"), [
    (lambda d: d["gpu"], "gpu.foo is not a known field"),
    (lambda d: d["domains"][2], "domains[2].foo is not a known field"),
    (lambda d: d["training"], "training.foo is not a known field"),
    (lambda d: d, "foo is not a known field"),
], ids=["gpu", "domain", "training", "top-level"])
def test_unknown_field_is_rejected_with_its_path(doc: dict[str, Any], where: Callable,
                                                 message: str) -> None:
    where(doc)["foo"] = 1
    rejects(doc, message)


def _set(doc: dict[str, Any], path: tuple, value: Any) -> None:
    *parents, key = path
    for part in parents:
        doc = doc[part]
    doc[key] = value


@pytest.mark.parametrize(("path", "value", "message"), [
    (("links", "bandwidth_gbps", 3, 7), 0.0, "links.bandwidth_gbps[3][7] must be > 0"),
    (("links", "bandwidth_gbps", 6, 1), -2.5, "links.bandwidth_gbps[6][1] must be > 0"),
    (("links", "latency_ms", 2, 5), -1.0, "links.latency_ms[2][5] must be >= 0"),
    (("links", "price_per_gb", 0, 7), "cheap", "links.price_per_gb[0][7] must be a number"),
    (("domains", 4, "intra_latency_ms"), -0.1, "domains[4].intra_latency_ms must be >= 0"),
    (("domains", 1, "free_gpus"), 10**6, "domains[1].free_gpus must be <= domains[1].gpus"),
    (("model", "layers"), "32", "model.layers must be an integer, got a string"),
    (("model", "layers"), 0, "model.layers must be >= 1"),
    (("gpu", "hbm_gb"), 0, "gpu.hbm_gb must be >= 0.001"),
    (("training", "zero_stage"), 4, "training.zero_stage must be <= 3"),
    (("training", "attention"), "fused", "training.attention must be one of ['eager', 'flash']"),
    (("training", "tp_overlap"), 1.5, "training.tp_overlap must be <= 1"),
    (("search", "recompute", 1), "some", "search.recompute[1] must be one of"),
    (("links", "eps"), 1.5, "links.eps must be <= 0.95"),
    (("trace", "bandwidth_factor", 2, 3, 4), "1.1",
     "trace.bandwidth_factor[2][3][4] must be a number, got a string"),
    (("trace", "free_gpu_factor", 0, 5), True,
     "trace.free_gpu_factor[0][5] must be a number, got a boolean"),
    (("domains", 2, "location"), [12.0, 181.0], "domains[2].location[1] (longitude) must be"),
    (("domains", 2, "name"), "", "domains[2].name must have 1 to 200 characters"),
    (("name",), "tab\there", "name holds the control character '\\t'"),
])
def test_bad_value_names_the_field(doc: dict[str, Any], path: tuple, value: Any,
                                   message: str) -> None:
    _set(doc, path, value)
    rejects(doc, message)


@pytest.mark.parametrize(("section", "key"), [("model", "hidden"), ("gpu", "peak_tflops"),
                                              ("training", "global_batch"), (None, "links")])
def test_missing_field_is_named(doc: dict[str, Any], section: str | None, key: str) -> None:
    del (doc[section] if section else doc)[key]
    rejects(doc, f"{section}.{key} is missing" if section else f"{key} is missing")


def test_wrong_matrix_shape(doc: dict[str, Any]) -> None:
    doc["links"]["latency_ms"] = doc["links"]["latency_ms"][:-1]
    rejects(doc, "links.latency_ms must be a 8 x 8 matrix")


def test_duplicate_domain_name(doc: dict[str, Any]) -> None:
    doc["domains"][3]["name"] = doc["domains"][0]["name"]
    rejects(doc, "domains[3].name")


def test_load_prefixes_the_file(tmp_path: Path, doc: dict[str, Any],
                                write_json: Callable[[str, Any], Path]) -> None:
    del doc["model"]["hidden"]
    path = write_json("bad.json", doc)
    with pytest.raises(InputError, match=r"^instance '.*bad\.json': model\.hidden is missing$"):
        Instance.load(path)


@pytest.mark.parametrize("load", [Instance.load, Plan.load], ids=["instance", "plan"])
def test_non_json_file(write_json: Callable[[str, Any], Path], load: Callable) -> None:
    path = write_json("garbage.json", "{ not json")
    with pytest.raises(InputError, match="is not valid JSON"):
        load(path)


@pytest.mark.parametrize("load", [Instance.load, Plan.load], ids=["instance", "plan"])
def test_missing_file(tmp_path: Path, load: Callable) -> None:
    with pytest.raises(InputError, match="No such file"):
        load(tmp_path / "absent.json")


# -- plan validation -------------------------------------------------------------------------
def _plan_doc(domain: Any) -> dict[str, Any]:
    return {"schema": PLAN_SCHEMA, "dp": 1, "micro_batch": 1,
            "stages": [{"domain": 0, "layers": 16}, {"domain": domain, "layers": 16}]}


@pytest.mark.parametrize(("domain", "message"), [
    ("atlantis", "stages[1].domain 'atlantis' is not a domain of the instance"),
    (6, "stages[1].domain 6 is not a domain of the instance (the instance has 6)"),
    (-1, "stages[1].domain -1 is not a domain of the instance"),
    (1.5, "stages[1].domain must be a domain name or index"),
])
def test_plan_bad_domain(generated: Instance, domain: Any, message: str) -> None:
    with pytest.raises(InputError) as info:
        Plan.from_dict(_plan_doc(domain), generated)
    assert message in str(info.value)


@pytest.mark.parametrize(("change", "message"), [
    ({"schema": "xdsched.plan/0"}, f"schema must be {PLAN_SCHEMA!r}"),
    ({"dp": 0}, "dp must be >= 1"),
    ({"schedule": "gpipe"}, "schedule must be one of ['1f1b', 'interleaved-1f1b']"),
    ({"virtual_stages": 2}, "virtual_stages needs schedule 'interleaved-1f1b'"),
    ({"schedule": "interleaved-1f1b"}, "virtual_stages is missing"),
    ({"schedule": "interleaved-1f1b", "virtual_stages": 1}, "virtual_stages must be >= 2"),
    ({"virtual_stages": True}, "virtual_stages must be an integer"),
    ({"stages": []}, "stages must have at least 1 entries"),
    ({"extra": True}, "extra is not a known field"),
])
def test_plan_bad_fields(generated: Instance, change: dict[str, Any], message: str) -> None:
    with pytest.raises(InputError) as info:
        Plan.from_dict({**_plan_doc(1), **change}, generated)
    assert message in str(info.value)


def test_interleaved_plan_round_trip(generated: Instance, sample_plans: list[Plan]) -> None:
    plan = dataclasses.replace(sample_plans[0], virtual_stages=3)
    document = plan.to_dict(generated)
    assert document["schedule"] == "interleaved-1f1b" and document["virtual_stages"] == 3
    assert Plan.from_dict(document, generated) == plan
    assert "virtual_stages" not in sample_plans[0].to_dict(generated)  # 1F1B as before


def test_plan_stage_field_path(generated: Instance) -> None:
    document = _plan_doc(1)
    document["stages"][1]["recompute"] = "sometimes"
    with pytest.raises(InputError, match=r"stages\[1\]\.recompute must be one of"):
        Plan.from_dict(document, generated)


# -- presets ---------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["A100-80GB", "H100-80GB", "Ascend-910B"])
def test_gpu_presets(name: str) -> None:
    gpu = gpu_preset(name.lower())
    assert gpu is GPUS[name]
    assert gpu.peak_tflops > 100 and gpu.hbm_gb >= 64 and gpu.gpus_per_node == 8


@pytest.mark.parametrize(("name", "params"), [
    ("llama2-7b", 6.7e9), ("llama2-13b", 13.0e9), ("llama2-70b", 69e9),
    ("gpt3-175b", 175e9), ("llama3-405b", 405e9),
])
def test_published_model_sizes(name: str, params: float) -> None:
    assert MODELS[name].total_params == pytest.approx(params, rel=0.03)


@pytest.mark.parametrize("alias", ["7b", "13b", "70b", "175b", "405b"])
def test_model_aliases(alias: str) -> None:
    assert model_preset(alias).name.endswith(alias)


SC21 = read_set("megatron_sc21_table1")


@pytest.mark.parametrize("row", SC21, ids=[r.label for r in SC21])
def test_gpt_family_matches_sc21_table1(row) -> None:
    """Same shapes as the paper's rows; sizes within 3 % of the table, which rounds to 0.1 B
    (1.7 B is 1.65 B: the paper also counts position embeddings and biases)."""
    (model,) = [m for m in MODELS.values() if m.name.startswith("gpt-")
                and (m.layers, m.hidden) == (row.model.layers, row.model.hidden)]
    assert model.heads == row.model.heads and model.ffn == 4 * row.model.hidden
    assert model.seq_len == 2048
    params_b = float(row.label.removeprefix("gpt-").removesuffix("b"))
    assert abs(model.total_params / 1e9 - params_b) <= 0.03 * params_b + 0.05


def test_presets_by_name_in_instance_json(doc: dict[str, Any]) -> None:
    """``"gpu": "H100-80GB"`` and ``"model": "gpt3-175b"`` read as the presets; an object with
    ``preset`` overrides some fields; what is written back states every field."""
    doc["gpu"], doc["model"] = "h100-80gb", "175b"
    instance = Instance.from_dict(doc)
    assert instance.gpu == GPUS["H100-80GB"] and instance.model == MODELS["gpt3-175b"]
    assert Instance.from_dict(instance.to_dict()).content_hash() == instance.content_hash()
    doc["model"] = {"preset": "llama2-70b", "seq_len": 8192}
    doc["gpu"] = {"preset": "A100-80GB", "nic_gbps": 100}
    instance = Instance.from_dict(doc)
    assert instance.model.seq_len == 8192 and instance.model.layers == 80
    assert instance.gpu.nic_gbps == 100 and instance.gpu.peak_tflops == 312.0


@pytest.mark.parametrize(("value", "message"), [
    ("TPU-v5", "gpu: unknown GPU 'TPU-v5'; known: A100-80GB"),
    ({"preset": "TPU-v5"}, "gpu.preset: unknown GPU 'TPU-v5'"),
    ({"preset": 3}, "gpu.preset must be a preset's name"),
    ({"preset": "H100-80GB", "hbm_gb": -1}, "gpu.hbm_gb must be >= 0.001"),
    ({"preset": "H100-80GB", "colour": "green"}, "gpu.colour is not a known field"),
    (7, "gpu must be an object, got a number"),
])
def test_bad_presets_name_the_field(doc: dict[str, Any], value: Any, message: str) -> None:
    doc["gpu"] = value
    rejects(doc, message)


def test_one_domain_instance_needs_no_links(doc: dict[str, Any]) -> None:
    """A single cluster: one domain, the links section may be left out."""
    doc["domains"] = doc["domains"][:1]
    del doc["links"], doc["trace"]
    instance = Instance.from_dict(doc)
    assert instance.num_domains == 1 and instance.links.bandwidth_gbps.shape == (1, 1)
    del doc["domains"][0]
    rejects(doc, "domains must have at least 1")


def test_unknown_preset_lists_the_known_ones() -> None:
    with pytest.raises(KeyError, match="llama2-7b"):
        model_preset("gpt-5")
    with pytest.raises(KeyError, match="A100-80GB"):
        gpu_preset("TPU")


def test_later_fields_keep_old_hashes_only_at_their_old_values(doc: dict[str, Any]) -> None:
    """A field added after instances were first hashed is left out of the hash while it has
    the value every instance had before it (so old fronts still match), and counts once it
    differs (so a front of the old meaning is refused)."""
    doc["training"]["attention"] = "eager"
    base = Instance.from_dict(doc).content_hash()
    for section, key in (("training", "attention"), ("training", "tp_overlap"),
                         ("search", "virtual_stages")):
        stated = json.loads(json.dumps(doc))
        stated.setdefault(section, {})[key] = {"attention": "eager", "tp_overlap": 0.0,
                                               "virtual_stages": [1]}[key]
        assert Instance.from_dict(stated).content_hash() == base, key
        stated[section][key] = {"attention": "flash", "tp_overlap": 0.5,
                                "virtual_stages": [1, 2]}[key]
        assert Instance.from_dict(stated).content_hash() != base, key
