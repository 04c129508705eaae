"""The scripts under ``scripts/`` follow the commands' input convention: each one's
``main(argv)`` run in this process (as ``python scripts/NAME.py`` would, without paying
the imports per case) refuses bad input with exit status 2 and exactly one line on stderr
naming the flag, argument or file, never a traceback; an interrupt is one line and 130; a
tiny valid run of each script that takes well under 2 s exits 0.

Scripts are not a package: each is imported from its file."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
from pathlib import Path
from types import ModuleType

import pytest
from clitools import run_main

from formulation.schema import CliParser

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "scripts"
NAMES = sorted(path.stem for path in SCRIPTS.glob("*.py") if not path.stem.startswith("_"))
QUICK_FRONTS = ROOT / "instances" / "fronts" / "quick"
QUICK_NAME = "cn-hubs-k5-llama2-13b-s100"
_MODULES: dict[str, ModuleType] = {}


def _script(name: str) -> ModuleType:
    if name not in _MODULES:
        spec = importlib.util.spec_from_file_location(f"scripts_cli_{name}",
                                                      SCRIPTS / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        _MODULES[name] = module
    return _MODULES[name]


def _run(name: str, argv: list[str]) -> tuple[int, str, str]:
    return run_main(_script(name), argv)


def _record(method: str, instance: str, domains: int) -> dict:
    return {"method": method, "instance": instance, "domains": domains, "seed": 0,
            "coverage_0.02": 0.5, "coverage_0.05": 0.75, "hv_ratio": 0.9, "median_gap": 0.01,
            "feasibility": 1.0, "front_decisions": 3, "latency_s": [0.004, 0.006],
            "front_wall_s": [0.02]}


def _places(tmp: Path) -> dict[str, str]:
    """The files and directories the cases name, made in ``tmp``."""
    (tmp / "empty").mkdir()
    (tmp / "garbled.json").write_text("{not json", encoding="utf-8")
    (tmp / "garbled.pt").write_text("not a checkpoint", encoding="utf-8")
    bad = tmp / "bad-fronts"
    bad.mkdir()
    (bad / f"{QUICK_NAME}.front.json").write_text("{", encoding="utf-8")
    foreign = tmp / "foreign-fronts"
    foreign.mkdir()
    (foreign / "x.front.json").write_text(json.dumps({"instance": "nope"}), encoding="utf-8")
    other = tmp / "other-fronts"  # a front no quick front shares a name with
    other.mkdir()
    shutil.copy(QUICK_FRONTS / f"{QUICK_NAME}.front.json", other / "elsewhere.front.json")
    for name, document in (("res", {"records": [_record("greedy", "a", 5),
                                                _record("greedy", "b", 12),
                                                _record("exact", "a", 5)]}),
                           ("res-shape", {"records": [{"method": "greedy"}]}),
                           ("res-list", [1, 2])):
        (tmp / name).mkdir()
        (tmp / name / "records.json").write_text(json.dumps(document), encoding="utf-8")
    (tmp / "record-other.json").write_text(json.dumps(  # bench_hippo's, another protocol
        {"protocol": {"domains": 99}, "settings": {}, "decisions": []}), encoding="utf-8")
    (tmp / "record-list.json").write_text("[]", encoding="utf-8")
    (tmp / "res-garbled").mkdir()
    (tmp / "res-garbled" / "records.json").write_text("[", encoding="utf-8")
    return {"tmp": str(tmp), "missing": str(tmp / "missing.json"),
            "missing_dir": str(tmp / "no-such-dir"), "quick_fronts": str(QUICK_FRONTS)}


# (script, arguments, what the one line on stderr must say)
BAD = [
    ("audit_exact", ["--count", "x"], r"--count must be an integer"),
    ("audit_exact", ["--count", "-1"], r"--count must be in \[1, 1000000\]"),
    ("audit_exact", ["--count", "2000000"], r"--count must be in"),
    ("audit_exact", ["--seed", "-1"], r"--seed must be in"),
    ("audit_exact", ["--engines", "nosuch"], r"--engines: unknown engine 'nosuch'"),
    ("audit_exact", ["--engines", "labels,labels"], r"--engines names an engine twice"),
    ("audit_exact", ["--threads", "0"], r"--threads must be in"),
    ("audit_exact", ["--seed-plans", "zzz"], r"--seed-plans: invalid choice"),
    ("bench_evaluator", ["--plans", "abc"], r"--plans must be an integer"),
    ("bench_evaluator", ["--attention", "fused"], r"--attention: invalid choice: 'fused'"),
    ("bench_evaluator", ["--plans", "-5"], r"--plans must be in"),
    ("bench_evaluator", ["--plans", "10000000"], r"--plans must be in \[1, 200000\]"),
    ("bench_evaluator", ["--repeat", "0"], r"--repeat must be in"),
    ("bench_exact", ["--suite", "zzz"], r"--suite: invalid choice: 'zzz'"),
    ("bench_exact", ["--k", "0"], r"--k must be in \[1, 20\]"),
    ("bench_exact", ["--k", "99"], r"--k must be in"),
    ("bench_exact", ["--time-limit", "-1"], r"--time-limit must be a finite number"),
    ("bench_exact", ["--time-limit", "nan"], r"--time-limit must be a finite number"),
    ("bench_exact", ["--units", "0"], r"--units must be in"),
    ("bench_exact", ["--engines", "nosuch"], r"--engines: 'nosuch' is not an engine"),
    ("bench_exact", ["--engines", "labels"], r"--engines: 'labels'"),
    ("bench_exact", ["--suite", "quick", "--k", "19"], r"--k: suite 'quick' has no instance"),
    ("bench_exact", ["--fronts", "{missing_dir}"], r"--fronts '.*no-such-dir': no such dir"),
    ("bench_exact", ["--fronts", "{tmp}/empty"], r"--fronts '.*empty' holds no \*.front.json"),
    ("bench_exact", ["--fronts", "{tmp}/bad-fronts"], r"front file '.*' is not valid JSON"),
    ("bench_exact", ["--fronts", "{tmp}/foreign-fronts"], r"instance 'nope' is not an instance"),
    ("bench_exact", ["--scaleout", "{missing}"], r"instance file '.*missing.json'"),
    ("bench_exact", ["--scaleout", "{tmp}/garbled.json"], r"instance file .* not valid JSON"),
    ("bench_heuristics", ["--suite", "zzz"], r"--suite: invalid choice"),
    ("bench_heuristics", ["--seeds", "-1"], r"--seeds must be in"),
    ("bench_heuristics", ["--seeds", "1.5"], r"--seeds must be an integer"),
    ("bench_heuristics", ["--islands", "0"], r"--islands must be in"),
    ("bench_heuristics", ["--population", "1"], r"--population must be in"),
    ("bench_heuristics", ["--methods", "nsga2,nosuch"], r"--methods: unknown method 'nosuch'"),
    ("bench_heuristics", ["--match", "zzz-no-such"], r"--match: no instance of suite 'quick'"),
    ("bench_hippo", ["--domains", "0"], r"--domains must be in \[1, 20\]"),
    ("bench_hippo", ["--domains", "x"], r"--domains must be an integer"),
    ("bench_hippo", ["--repeats", "-1"], r"--repeats must be in"),
    ("bench_hippo", ["--instance-seeds", "-2"], r"--instance-seeds must be in"),
    ("bench_hippo", ["--lower-time", "0"], r"--lower-time must be a finite number"),
    ("bench_hippo", ["--pairs", "-1"], r"--pairs must be in"),
    ("bench_hippo", ["--model", "nosuch"], r"--model: unknown model 'nosuch'"),
    ("bench_hippo", ["--checkpoint", "{missing}"], r"checkpoint '.*missing.json': no such"),
    ("bench_hippo", ["--checkpoint", "{tmp}/garbled.pt"], r"not a Hi-PPO checkpoint"),
    ("bench_hippo", ["--against", "{tmp}/garbled.json"], r"--against.*garbled.json"),
    ("bench_hippo", ["--against", "{missing}"], r"--against.*missing.json"),
    ("bench_hippo", ["--against", "{tmp}/record-other.json"],
     r"--against .*record-other.json: protocol.checkpoint_sha256 is not this run's"),
    ("bench_hippo", ["--record", "{tmp}/empty"], r"--record .*empty.* is a directory"),
    ("bench_hippo", ["--against", "{tmp}/record-other.json", "--record",
                     "{tmp}/record-other.json"], r"--record .* is an input of this run"),
    ("bench_hippo", ["--against", "{tmp}/record-list.json"],
     r"--against .*record-list.json: document must be an object"),
    ("closed_form_vs_simulation", ["--suite", "zzz"], r"--suite: invalid choice"),
    ("closed_form_vs_simulation", ["--plans", "-1"], r"--plans must be in"),
    ("closed_form_vs_simulation", ["--chains", "x"], r"--chains must be an integer"),
    ("closed_form_vs_simulation", ["--plans", "0", "--chains", "0"], r"both 0"),
    ("closed_form_vs_simulation", ["--seed", str(2 ** 32)], r"--seed must be in"),
    ("compare_fronts", ["{missing_dir}", "{quick_fronts}"], r"DIR_A '.*': no such directory"),
    ("compare_fronts", ["{quick_fronts}", "{missing_dir}"], r"DIR_B '.*': no such directory"),
    ("compare_fronts", ["{tmp}/empty", "{quick_fronts}"], r"DIR_A .* holds no \*.front.json"),
    ("compare_fronts", ["{quick_fronts}", "{tmp}/empty"], r"no front of DIR_A .* in DIR_B"),
    ("compare_fronts", ["{tmp}/other-fronts", "{quick_fronts}"], r"no front of DIR_A"),
    ("compare_fronts", ["{tmp}/bad-fronts", "{quick_fronts}", "--suite", "quick"],
     r"front file '.*bad-fronts.*' is not valid JSON"),
    ("compare_fronts", ["{quick_fronts}", "{quick_fronts}", "--suite", "zzz"],
     r"--suite: invalid choice"),
    ("compare_fronts", ["{quick_fronts}"], r"the following arguments are required: DIR_B"),
    ("dp_work_rate", ["--suites", "quick", "zzz"], r"--suites: invalid choice: 'zzz'"),
    ("dp_work_rate", ["--points", "0"], r"--points must be in"),
    ("dp_work_rate", ["--points", "x"], r"--points must be an integer"),
    ("dp_work_rate", ["--cap", "0"], r"--cap must be a finite number"),
    ("dp_work_rate", ["--cap", "inf"], r"--cap must be a finite number"),
    ("expert_gaps", ["--suite", "zzz"], r"--suite: invalid choice"),
    ("expert_gaps", ["--polish", "-1"], r"--polish must be in"),
    ("expert_gaps", ["--suite", "quick", "--match", "zzz"], r"--match: no instance of suite"),
    ("hippo_masks", ["--episodes", "0"], r"--episodes must be in"),
    ("hippo_masks", ["--episodes", "x"], r"--episodes must be an integer"),
    ("hippo_masks", ["--seed", "-1"], r"--seed must be in"),
    ("hippo_pair_ranking", ["--suite", "zzz"], r"--suite: invalid choice"),
    ("hippo_pair_ranking", ["--pairs", "0"], r"--pairs must be in"),
    ("hippo_pair_ranking", ["--seed", "x"], r"--seed must be an integer"),
    ("hippo_pair_ranking", ["--suite", "quick", "--checkpoint", "{missing}"],
     r"checkpoint '.*missing.json': no such file"),
    ("results_by_domains", ["{missing_dir}"], r"RESULTS_DIR '.*no-such-dir': no such dir"),
    ("results_by_domains", ["{tmp}/empty"], r"records file '.*records.json': No such file"),
    ("results_by_domains", ["{tmp}/res-garbled"], r"records file .* is not valid JSON"),
    ("results_by_domains", ["{tmp}/res-list"], r"is not an evaluation's records"),
    ("results_by_domains", ["{tmp}/res-shape"], r"records\[0\].instance must be a string"),
    ("results_by_domains", ["{tmp}/res", "--method", "nosuch"],
     r"--method: no record of method 'nosuch'"),
    ("results_by_domains", [], r"the following arguments are required: RESULTS_DIR"),
]

# tiny valid runs (each well under 2 s once its imports are paid) and a line they print
GOOD = [
    ("audit_exact", ["--count", "1", "--seed", "1", "--engines", "labels"],
     r"labels +exact +1/1, wrong exact 0"),
    ("bench_evaluator", ["--plans", "20", "--repeat", "5"], r"single plan, evaluate"),
    ("bench_exact", ["--fronts", "{quick_fronts}"], rf"5 {QUICK_NAME} +12 +exact"),
    ("bench_heuristics", ["--methods", "single-domain", "--match", "k5-llama2-13b"],
     r"mean over instances"),
    ("closed_form_vs_simulation", ["--suite", "quick", "--plans", "1", "--chains", "0"],
     r"6 plans on 6 instances of 'quick'"),
    ("compare_fronts", ["{quick_fronts}", "{quick_fronts}", "--suite", "quick"],
     r"6/6 fronts agree point for point"),
    ("dp_work_rate", ["--suites", "quick", "--points", "1", "--cap", "1e5"], r"^all +\d+ runs"),
    ("expert_gaps", ["--suite", "quick", "--match", "k5-llama2-13b", "--polish", "0"],
     r"median gap over 7"),
    ("hippo_masks", ["--episodes", "1"], r"bench: 300/300 exact-front plans buildable"),
    ("results_by_domains", ["{tmp}/res"],
     r"greedy K = 12-20 \(1 instances\): coverage 2 % 50.0 %.* decision p50 5 ms"),
]


def _fill(argv: list[str], places: dict[str, str]) -> list[str]:
    return [re.sub(r"\{(\w+)\}", lambda m: places[m.group(1)], a) for a in argv]


@pytest.mark.parametrize(("name", "argv", "message"), BAD,
                         ids=[f"{n}-{i}" for i, (n, _, _) in enumerate(BAD)])
def test_bad_input_is_one_line_and_exit_2(name: str, argv: list[str], message: str,
                                          tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    places = _places(tmp_path)
    monkeypatch.chdir(tmp_path)
    status, _, stderr = _run(name, _fill(argv, places))
    assert "Traceback" not in stderr, stderr
    assert status == 2, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("error: "), lines[0]
    assert re.search(message, lines[0]), lines[0]


@pytest.mark.parametrize(("name", "argv", "expected"), GOOD, ids=[n for n, _, _ in GOOD])
def test_tiny_valid_run_exits_0(name: str, argv: list[str], expected: str, tmp_path: Path,
                                monkeypatch: pytest.MonkeyPatch) -> None:
    places = _places(tmp_path)
    monkeypatch.chdir(tmp_path)
    before = sorted(p.name for p in tmp_path.iterdir())
    status, stdout, stderr = _run(name, _fill(argv, places))
    assert "Traceback" not in stderr, stderr
    assert status == 0, stderr
    assert re.search(expected, stdout, re.MULTILINE), stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing written


def test_an_interrupt_is_one_line_and_exit_130(monkeypatch: pytest.MonkeyPatch) -> None:
    module = _script("closed_form_vs_simulation")

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(module, "compare_suite", interrupted)
    status, _, stderr = _run("closed_form_vs_simulation", [])
    assert status == 130
    assert stderr.strip().splitlines() == ["interrupted"]


class _Parsed(Exception):
    pass


@pytest.mark.parametrize("name", NAMES)
def test_every_flag_is_bounded_and_explained(name: str,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """The script's parser is a CliParser named as the docstring's usage line names the
    script, every argument has a help string, and no numeric one is a bare int or float."""
    parsers = []

    def capture(self, argv=None, namespace=None):
        parsers.append(self)
        raise _Parsed

    monkeypatch.setattr(CliParser, "parse_args", capture)
    with pytest.raises(_Parsed):
        _script(name).main([])
    (parser,) = parsers
    assert parser.prog == f"python scripts/{name}.py"
    assert f"    python scripts/{name}.py" in _script(name).__doc__
    for action in parser._actions:
        assert action.help, f"{name}: {action.option_strings or action.dest} has no help"
        assert action.type not in (int, float), f"{name}: {action.dest} is unbounded"
    seeds = [a for a in parser._actions if "--seed" in a.option_strings]
    for action in seeds:  # one seed, said so
        assert "one seed" in action.help, action.help


def test_every_script_is_covered() -> None:
    assert {n for n, _, _ in BAD} == set(NAMES)
    assert len(NAMES) == 12  # the calibration is python -m formulation.calibration


def test_bench_hippo_counts_the_collections_inside_timed_decisions_only():
    """bench_hippo's garbage-collection count: the collections while it times, each once,
    the full ones apart; none while it does not; its callback removed when closed."""
    import gc

    collections = _script("bench_hippo").Collections()
    try:
        gc.collect()  # not timing: not counted
        assert collections.seconds == [] and collections.full == 0
        collections.timing = True
        gc.collect(0)
        gc.collect()
        collections.timing = False
        assert len(collections.seconds) == 2 and collections.full == 1
        assert all(t >= 0 for t in collections.seconds)
        assert "2 (1 full)" in collections.summary()
    finally:
        collections.close()
    assert collections._callback not in gc.callbacks


def test_bench_hippo_breakdown_counts_the_lower_levels_kernels_inside_its_blocks():
    """bench_hippo's breakdown: a block that makes a chain's inputs, dives and runs its DP
    has those parts of its time, together below the block's own; a block that only dives
    has no DP-run time, one that only runs the DP of least S no dive time, one without
    either none of the three; the process's counters moved by what the blocks counted,
    each part once; the shares it prints are of the block's time."""
    import math

    from formulation.instance import Instance
    from instances.suites import SUITES_DIR
    from solvers.chain import KERNEL_SECONDS, OPEN, Chain
    from solvers.tables import all_pair_tables

    instance = Instance.load(SUITES_DIR / "quick" / "cn-hubs-k5-llama2-13b-s100.json")
    chain = Chain(all_pair_tables(instance)[0])
    breakdown = _script("bench_hippo").Breakdown()
    before = KERNEL_SECONDS.reading()
    caps = chain.caps(None, None)
    with breakdown.timing("dived"):
        plan = chain.dive(caps, OPEN)
    assert plan is not None
    with breakdown.timing("ran"):  # a run of least S: no dive first
        chain.run(caps, plan.period * 1.5, value_cap=math.inf)
    with breakdown.timing("decided"):
        chain.dive(caps, plan.period * 0.99)
        chain.run(caps, plan.period, value_cap=math.inf)
    total, (inputs, runs, dives) = sum(breakdown.calls["decided"]), breakdown.kernels["decided"]
    assert min(inputs, runs, dives) > 0
    assert inputs + runs + dives <= total
    assert breakdown.kernels["dived"][1] == 0.0 and breakdown.kernels["dived"][2] > 0
    assert breakdown.kernels["ran"][1] > 0 and breakdown.kernels["ran"][2] == 0.0
    timed = sum(breakdown.kernels[kind] for kind in ("dived", "ran", "decided"))
    assert [a - b for a, b in zip(KERNEL_SECONDS.reading(), before, strict=True)] \
        == pytest.approx(list(timed), abs=1e-12)
    with breakdown.timing("read"):
        sum(range(1000))
    assert list(breakdown.kernels["read"]) == [0.0, 0.0, 0.0]
    assert breakdown.summary("read").endswith("dives 0%, the rest 100%")
    line = breakdown.summary("decided")
    assert line.startswith(f"decided: layer caps and bound tables {inputs / total:.0%}, "
                           f"DP runs {runs / total:.0%}, dives {dives / total:.0%}")
    assert breakdown.summary("never timed") == ""


def test_bench_hippo_records_its_decisions_and_compares_a_run_with_a_record(tmp_path: Path):
    """``--record`` writes each timed decision's kind, instance, latency and J with the
    run's protocol; ``--against`` that record compares a run of the same protocol decision
    by decision, per kind, with ``--resume`` the resumed decisions' J too (the same
    requests, and with the lower level's memory forgotten at each instance the same J for
    the cold decisions once resumed); a record of other requests is refused before the run."""
    record = tmp_path / "record.json"
    tiny = ["--domains", "5", "--instance-seeds", "1", "--repeats", "1", "--unfreeze"]
    status, stdout, stderr = _run("bench_hippo", tiny + ["--record", str(record)])
    assert status == 0, stderr
    # a cold front on each instance as the evaluation builds it, and one after the decisions
    for kind in ("cold front", "front"):
        assert re.search(rf"^{kind} +p50 .*\(n = 3\)$", stdout, re.M), stdout
        assert re.search(rf"^decisions per {kind}: median \d+", stdout, re.M), stdout
    document = json.loads(record.read_text(encoding="utf-8"))
    assert document["protocol"]["domains"] == 5 and document["settings"]["fallback"]
    decisions = document["decisions"]
    kinds = [kind for kind, *_ in decisions]
    assert kinds.count("cold decision") == 3 and kinds.count("bandwidth change") == 3
    assert all(len(request) == 16 and latency >= 0 and j > 0 and resumed is None
               for _, _, request, latency, j, resumed in decisions)
    again = tmp_path / "again.json"
    status, stdout, stderr = _run("bench_hippo", tiny + [
        "--deadlines", "--no-fallback", "--resume", "--against", str(record),
        "--record", str(again)])
    assert status == 0, stderr
    settings = json.loads(again.read_text(encoding="utf-8"))["settings"]
    assert not settings["fallback"] and settings["deadlines"]["known_state"] > 0
    assert f"J against {record}'s J" in stdout and f"J resumed against {record}'s J" in stdout
    cold = re.findall(r"cold decision \(n = 3\): the same ([\d.]+)%", stdout)
    # the answers within the 90 ms deadline depend on the machine's speed; resumed, they
    # are the default decision's plans
    assert len(cold) == 2 and cold[1] == "100.0", stdout
    for kind in ("warm, new budget", "bandwidth change", "load change"):
        assert re.search(rf"  {kind} \(n = \d+\)", stdout), stdout
    status, _, stderr = _run("bench_hippo", ["--domains", "6", "--instance-seeds", "1",
                                             "--repeats", "1", "--against", str(record)])
    assert status == 2 and "protocol.domains is not this run's" in stderr
    document["decisions"][-1][2] = "0" * 16  # another request's digest: refused at the end
    record.write_text(json.dumps(document), encoding="utf-8")
    status, _, stderr = _run("bench_hippo", tiny + ["--against", str(record)])
    assert status == 2 and "their states or budgets differ" in stderr, stderr
