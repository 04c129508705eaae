"""The committed benchmark suites: loadable, reproducible, and cross-domain by construction."""

from __future__ import annotations

import numpy as np
import pytest

from formulation.instance import Instance, SearchSpace
from formulation.schema import InputError, read_json
from instances.suites import (
    MAX_DOMAIN_SHARE,
    MIN_SINGLE_DOMAIN_SLOWDOWN,
    SUITES_DIR,
    SuiteEntry,
    admission,
    suite_paths,
)

QUICK = suite_paths("quick")
BENCH = suite_paths("bench")
FULL = suite_paths("full")


def _suite_entry(entry: dict) -> tuple[SuiteEntry, int]:
    generator = dict(entry["generator"])
    seed = generator.pop("seed")
    generator["search"] = SearchSpace(**{k: tuple(v) if isinstance(v, list) else v
                                         for k, v in generator["search"].items()})
    generator["gpu_range"] = tuple(generator["gpu_range"])
    generator["free_share_range"] = tuple(generator["free_share_range"])
    generator.pop("base_seed")
    return SuiteEntry(**generator, base_seed=seed), seed


def test_suite_sizes_and_domain_counts():
    assert len(QUICK) == 6 and len(BENCH) == 24
    quick = [Instance.load(p) for p in QUICK]
    bench = [Instance.load(p) for p in BENCH]
    assert all(5 <= i.num_domains <= 8 for i in quick)
    assert sorted({i.num_domains for i in bench}) == [5, 8, 10, 12, 16, 20]
    assert {i.model.name for i in bench} == {"llama2-7b", "llama2-13b", "llama2-70b"}
    assert {i.name.split("-k")[0] for i in bench} == {"random", "cn-hubs", "aws-10"}


def test_the_full_suite_spans_the_generators_whole_space():
    full = [Instance.load(p) for p in FULL]
    assert len(full) == 12
    assert min(i.num_domains for i in full) == 5 and max(i.num_domains for i in full) == 20
    assert {i.model.name for i in full} == {"llama2-7b", "llama2-13b", "llama2-70b"}
    assert {i.name.split("-k")[0] for i in full} == {"random", "cn-hubs", "aws-10"}
    assert all(i.search == SearchSpace() for i in full)


@pytest.mark.parametrize("suite", ["quick", "bench", "full"])
def test_manifest_regenerates_the_same_bytes(suite):
    """Each committed instance is exactly what the generator makes from its manifest entry."""
    manifest = read_json(SUITES_DIR / suite / "manifest.json", "manifest")
    for entry in manifest["instances"][:3]:
        suite_entry, seed = _suite_entry(entry)
        regenerated = suite_entry.generate(seed)
        committed = Instance.load(SUITES_DIR / suite / entry["file"])
        assert regenerated.to_dict() == committed.to_dict()


@pytest.mark.parametrize("entry", read_json(SUITES_DIR / "quick" / "manifest.json",
                                             "manifest")["instances"],
                         ids=lambda e: e["file"])
def test_quick_instances_need_cross_domain_plans(entry):
    """No domain holds much of the free GPUs, and the best sampled cross-domain plan beats the
    best one-domain plan by the admission margin (or no one-domain plan fits at all): the
    admission's figures, recomputed, are the manifest's."""
    instance = Instance.load(SUITES_DIR / "quick" / entry["file"])
    free = np.array([d.free_gpus for d in instance.domains])
    assert free.max() / free.sum() <= MAX_DOMAIN_SHARE
    figures = admission(instance, entry["seed"])
    assert figures is not None
    assert figures == {key: entry[key] for key in figures}
    single = figures["best_single_domain_step_s"]
    assert single is None or single >= MIN_SINGLE_DOMAIN_SLOWDOWN * figures[
        "best_sampled_cross_domain_step_s"] * (1 - 1e-4)  # the figures are rounded


def test_a_rebuilt_suite_appears_whole_and_an_interrupted_one_leaves_the_last(tmp_path,
                                                                            monkeypatch):
    """A build writes beside the suite and swaps it in: interrupted, it leaves the earlier
    suite byte for byte and nothing else; a suite directory holding other files is never
    replaced; a missing --out is one line, exit status 2."""
    import io

    import instances.suites as suites

    suites.build_suite("quick", tmp_path, io.StringIO())
    target = tmp_path / "quick"
    def files():  # each file's bytes and inode: a file rewritten with the same bytes shows
        return {p.name: (p.read_bytes(), p.stat().st_ino) for p in target.iterdir()}

    before = files()
    assert before.keys() == {p.name for p in QUICK} | {"manifest.json"}
    made = []
    real = suites.admission

    def interrupted(instance, seed):
        if len(made) == 2:
            raise KeyboardInterrupt
        made.append(instance.name)
        return real(instance, seed)

    monkeypatch.setattr(suites, "admission", interrupted)
    with pytest.raises(KeyboardInterrupt):
        suites.build_suite("quick", tmp_path, io.StringIO())
    assert files() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["quick"]  # no staging left
    monkeypatch.setattr(suites, "admission", real)
    (target / "notes.txt").write_text("mine")
    with pytest.raises(InputError, match="holds 'notes.txt'"):
        suites.build_suite("quick", tmp_path, io.StringIO())
    assert (target / "notes.txt").read_text() == "mine"
    assert suites.main(["--suite", "quick", "--out", str(tmp_path / "absent"),
                        "--quiet"]) == 2
    assert not (tmp_path / "absent").exists()


def test_every_suite_directory_is_checked_before_any_is_built(tmp_path):
    """A file where a suite's directory goes is never replaced, and with --suite all a
    suite directory that may not be replaced stops the run before the first build."""
    import instances.suites as suites

    (tmp_path / "quick").write_text("notes")
    assert suites.main(["--suite", "quick", "--out", str(tmp_path), "--quiet"]) == 2
    assert (tmp_path / "quick").read_text() == "notes"
    (tmp_path / "quick").unlink()
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "notes.txt").write_text("mine")
    assert suites.main(["--suite", "all", "--out", str(tmp_path), "--quiet"]) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["full"]
