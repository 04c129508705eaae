"""The bad-input and fault corpus (``tests/bad_inputs/cases.yaml``): every command, run as a
user runs it, on input it must refuse (or unusual input it must accept).

Each case runs the command's ``main(argv)`` in this process (as ``python -m`` would, but
without paying the imports per case) in a fresh directory, and asserts:

* the exit status (2: bad input; 0: accepted; 130: interrupted; 143: terminated);
* for a refusal: exactly one line on stderr, matching the case's ``message`` (it names the
  field, flag or file), and no traceback;
* every input unchanged (every file in the case's directory and the corpus' own files,
  compared by content) and, on a refusal, no output left behind (the directory holds
  exactly what it held before).

A case's ``args`` may use placeholders, made in the case's directory before it runs:
``{instance}`` (a copy of a quick-suite instance), ``{plan}`` (a valid plan of it),
``{bad}`` (the case's own input: ``text`` verbatim, ``repeat: [text, n]`` n times,
``bytes`` as a Python bytes literal, or the instance with ``mutate`` applied, each
``path: value`` with ``path`` dotted through objects and list indices, ``null`` meaning
"remove", after a byte-order mark with ``bom``), ``{out}`` (an absent file),
``{fifo}``, ``{dangling}`` (a link to nothing), ``{missing}`` (a file in a directory that
does not exist), ``{tmp}`` (the directory itself), ``{suites}`` (the committed suites'
directory, read only), ``{suite}`` (a suite directory of that
instance and its committed front, with ``suite_instance_mutate`` applied to the instance,
``front_mutate`` to the front and ``manifest`` written as its manifest). ``files``
writes further inputs into the case's directory (name: text, or a document as JSON),
after the ``directories`` it lists;
``copy_instance_to`` copies the instance to that name; ``suite_twin`` adds the suite's
instance again under another file name; ``checkpoint_mutate`` writes ``ck.pt``, the
shipped checkpoint with those changes. A case with
``commands`` instead of ``command`` is run once per listed command, with that command's
``usual`` arguments (:data:`USUAL`) and its ``args`` appended. A case with ``interrupt``
(a dotted ``module.function``) has Ctrl-C pressed when the command calls that function;
one with ``terminate``, SIGTERM.
"""

from __future__ import annotations

import ast
import copy
import hashlib
import importlib
import json
import os
import re
from pathlib import Path

import pytest
import yaml
from clitools import run_main

from formulation.plan import PLAN_SCHEMA
from formulation.schema import Terminated

HERE = Path(__file__).resolve().parent
CORPUS = HERE / "bad_inputs"
QUICK = HERE.parent / "instances" / "suites" / "quick" / "cn-hubs-k6-llama2-7b-s130.json"
QUICK_FRONT = HERE.parent / "instances" / "fronts" / "quick" / f"{QUICK.stem}.front.json"
CHECKPOINT = HERE.parent / "rl" / "checkpoints" / "hi_ppo.pt"

# the arguments a command needs besides the case's; {input} is the case's instance input
USUAL: dict[str, list[str]] = {
    "instances.sample": ["{input}", "--out", "{out}"],
    "formulation.evaluate": ["{input}", "{plan}"],
    "solvers.bruteforce": ["{input}", "--out", "{out}"],
    "solvers.baselines": ["{input}", "--method", "greedy", "--out", "{out}"],
    "solvers.nsga2": ["{input}", "--out", "{out}", "--generations", "1", "--population", "4"],
    "solvers.exact": ["{input}", "--out", "{out}", "--time-limit", "5"],
    "rl.decide": ["{input}", "--weights", "1,0,0", "--out", "{out}"],
}
GROUPS = {"reads-instance": list(USUAL),
          "writes-file": [c for c in USUAL if c != "formulation.evaluate"]}


def _cases() -> list[dict]:
    out = []
    for case in yaml.safe_load((CORPUS / "cases.yaml").read_text(encoding="utf-8")):
        commands = case.get("commands")
        if commands is None:
            out.append(case)
            continue
        names = GROUPS.get(commands, commands) if isinstance(commands, str) else commands
        for name in names:
            usual = USUAL[name]
            args = [a.replace("{input}", case.get("input", "{instance}")) for a in usual]
            if "out" in case:  # the case's own output in place of {out}
                args = [case["out"] if a == "{out}" else a for a in args]
            out.append({**case, "id": f"{case['id']}[{name}]", "command": name,
                        "args": args + list(case.get("args", []))})
    return out


CASES = _cases()


def _set(document, path: str, value) -> None:
    keys = [int(k) if k.lstrip("-").isdigit() else k for k in path.split(".")]
    for key in keys[:-1]:
        document = document[key]
    if value is None and isinstance(document, dict):
        document.pop(keys[-1], None)
    else:
        document[keys[-1]] = value


def _prepare(case: dict, tmp: Path) -> dict[str, str]:
    instance = tmp / "instance.json"
    instance.write_bytes(QUICK.read_bytes())
    plan = tmp / "plan.json"
    plan.write_text(json.dumps({"schema": PLAN_SCHEMA, "dp": 1, "micro_batch": 1,
                                "stages": [{"domain": "Zhangjiakou", "layers": 32, "tp": 8,
                                            "recompute": "full"}]}))
    places = {"tmp": str(tmp), "instance": str(instance), "plan": str(plan),
              "suites": str(QUICK.parent.parent),
              "out": str(tmp / "out.json"), "missing": str(tmp / "no" / "such" / "out.json")}
    if {"text", "bytes", "repeat", "mutate"} & set(case):
        bad = tmp / "bad.json"
        if "repeat" in case:
            text, times = case["repeat"]
            bad.write_text(text * times, encoding="utf-8")
        elif "text" in case:
            bad.write_text(case["text"], encoding="utf-8")
        elif "bytes" in case:
            bad.write_bytes(ast.literal_eval(case["bytes"]))
        else:
            document = json.loads(QUICK.read_text())
            for path, value in case["mutate"].items():
                _set(document, path, copy.deepcopy(value))
            bom = b"\xef\xbb\xbf" if case.get("bom") else b""  # as Windows editors write
            bad.write_bytes(bom + json.dumps(document).encode("utf-8"))
        places["bad"] = str(bad)
    if any("{suite}" in a for a in case["args"]):  # a suite directory of one instance
        suite = tmp / "suite"
        (suite / "fronts").mkdir(parents=True)
        document = json.loads(QUICK.read_text())
        for path, value in case.get("suite_instance_mutate", {}).items():
            _set(document, path, copy.deepcopy(value))
        (suite / QUICK.name).write_text(json.dumps(document))
        front = json.loads(QUICK_FRONT.read_text())
        for path, value in case.get("front_mutate", {}).items():
            _set(front, path, copy.deepcopy(value))
        (suite / "fronts" / QUICK_FRONT.name).write_text(json.dumps(front))
        if "manifest" in case:
            (suite / "manifest.json").write_text(json.dumps(case["manifest"]))
        if case.get("suite_twin"):  # the same instance again, under another file name
            (suite / "twin.json").write_bytes((suite / QUICK.name).read_bytes())
            (suite / "fronts" / "twin.front.json").write_bytes(
                (suite / "fronts" / QUICK_FRONT.name).read_bytes())
        places["suite"] = str(suite)
    for name in case.get("directories", []):
        (tmp / name).mkdir(parents=True)
    if "copy_instance_to" in case:  # the instance under another name
        (tmp / case["copy_instance_to"]).write_bytes(QUICK.read_bytes())
    for name, content in case.get("files", {}).items():  # further inputs, by name
        text = content if isinstance(content, str) else json.dumps(content)
        (tmp / name).write_text(text, encoding="utf-8")
    if "checkpoint_mutate" in case:  # the shipped checkpoint, altered
        import torch

        payload = torch.load(CHECKPOINT, weights_only=True)
        for path, value in case["checkpoint_mutate"].items():
            _set(payload, path, copy.deepcopy(value))
        torch.save(payload, tmp / "ck.pt")
    if any("{fifo}" in a for a in case["args"]):
        os.mkfifo(tmp / "fifo")
        places["fifo"] = str(tmp / "fifo")
    if any("{dangling}" in a for a in case["args"]):
        (tmp / "dangling").symlink_to(tmp / "nothing")
        places["dangling"] = str(tmp / "dangling")
    return places


def _contents(root: Path) -> dict[str, str]:
    """Every entry under ``root``: a file's content hash, or its kind."""
    out = {}
    for path in sorted(root.rglob("*")):
        if path.is_symlink() or path.is_fifo():
            out[str(path)] = "link" if path.is_symlink() else "fifo"
        elif path.is_file():
            out[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
        else:
            out[str(path)] = "directory"
    return out


def _run(command: str, argv: list[str]) -> tuple[int, str, str]:
    return run_main(importlib.import_module(command if command != "solvers.baselines"
                                            else "solvers.baselines.__main__"), argv)


def _interrupt(*args, **kwargs):
    raise KeyboardInterrupt


def _terminate(*args, **kwargs):
    raise Terminated  # what run_cli's SIGTERM handler raises


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_case(case: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    places = _prepare(case, tmp_path)
    argv = [re.sub(r"\{(\w+)\}", lambda m: places[m.group(1)], a) for a in case["args"]]
    before, corpus = _contents(tmp_path), _contents(CORPUS)
    signal = next((key for key in ("interrupt", "terminate") if key in case), None)
    if signal is not None:  # Ctrl-C or SIGTERM when the command reaches this function
        where, name = case[signal].rsplit(".", 1)
        owner, *attributes = where.split(".")
        for cut in range(len(attributes), -1, -1):  # the longest importable module
            try:
                owner = importlib.import_module(".".join([owner, *attributes[:cut]]))
            except ModuleNotFoundError:
                continue
            for attribute in attributes[cut:]:
                owner = getattr(owner, attribute)
            break
        monkeypatch.setattr(owner, name, _interrupt if signal == "interrupt" else _terminate)
    status, _, stderr = _run(case["command"], argv)
    assert "Traceback" not in stderr, stderr
    assert status == case["exit"], stderr
    after = _contents(tmp_path)
    unchanged = {k: v for k, v in before.items() if after.get(k) != v}
    assert not unchanged, f"inputs changed or removed: {sorted(unchanged)}"
    assert _contents(CORPUS) == corpus
    if case["exit"] != 0:
        lines = stderr.strip().splitlines()
        assert len(lines) == 1, stderr
        assert re.search(case["message"], lines[0]), lines[0]
        assert after == before, f"left behind: {sorted(set(after) - set(before))}"


def test_the_corpus_covers_every_command_and_class() -> None:
    commands = {c["command"] for c in CASES}
    assert {*USUAL, "instances.generate", "rl.train", "evaluation.pareto_coverage"} <= commands
    assert len(CASES) >= 200
    # the seven classes, and accepted unusual input
    assert {"data-loss", "garbage", "asymmetric", "mixed-results", "unbounded", "traceback",
            "options", "valid", "interrupt"} <= {c["class"] for c in CASES}
