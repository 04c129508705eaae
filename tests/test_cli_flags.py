"""One convention for every command's flags: each option documented in ``--help``, one name
for parallel workers (``--workers``), ``--seed`` always one seed and ``--seeds`` always a
count, ``--quiet`` wherever a command reports a line besides its output."""

from __future__ import annotations

import contextlib
import importlib
import io
import re
import sys
from pathlib import Path

import pytest

COMMANDS = ["instances.generate", "instances.sample", "instances.suites",
            "formulation.evaluate", "solvers.exact", "solvers.bruteforce", "solvers.nsga2",
            "solvers.baselines", "rl.decide", "rl.train", "evaluation.pareto_coverage",
            "formulation.calibration", "rl.validate", "instances.scenarios",
            "evaluation.online"]
# their output is their only print
REPORTING = set(COMMANDS) - {"formulation.evaluate", "formulation.calibration",
                             "rl.validate"}
RETIRED = {"--jobs", "--threads-per-job", "--processes", "--verbose-level"}


def _help(command: str) -> str:
    module = importlib.import_module(command if command != "solvers.baselines"
                                     else "solvers.baselines.__main__")
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as done:
        module.main(["--help"])
    assert done.value.code == 0
    return out.getvalue()


def _options(text: str) -> dict[str, str]:
    """Each option of a help text (its long name) and its help, argparse's layout read
    back: an option line, then its help on the same line or on indented lines below."""
    body = text.split("options:", 1)[1]
    options: dict[str, str] = {}
    name = None
    for line in body.splitlines():
        head = re.match(r"^  (-\w, )?(--[\w-]+)(.*)$", line)
        if head:
            name = head.group(2)
            rest = re.split(r"\s{2,}", head.group(3).rstrip(), maxsplit=1)
            options[name] = rest[1] if len(rest) > 1 else ""
        elif name and line.startswith(" " * 8):
            options[name] = (options[name] + " " + line.strip()).strip()
    return options


@pytest.mark.parametrize("command", COMMANDS)
def test_every_option_is_documented(command: str) -> None:
    options = _options(_help(command))
    undocumented = [name for name, text in options.items() if name != "--help" and not text]
    assert not undocumented, f"{command}: {undocumented} have no help"
    assert not RETIRED & set(options)
    if "--seed" in options:
        assert "one seed" in options["--seed"], options["--seed"]
    if "--seeds" in options:
        assert "a count" in options["--seeds"], options["--seeds"]
    if command in REPORTING:
        assert "--quiet" in options, f"{command} has no --quiet"


def test_a_closed_standard_output_is_one_line_unless_nothing_goes_there(tmp_path: Path,
                                                                       monkeypatch) -> None:
    from formulation.schema import run_cli

    monkeypatch.setattr(sys, "stdout", None)
    errors = io.StringIO()
    monkeypatch.setattr(sys, "stderr", errors)
    assert run_cli(lambda: print("a result")) == 2
    assert errors.getvalue().strip() == ("error: standard output is closed, and this run "
                                         "writes there (give --out FILE, or --quiet)")
    monkeypatch.setattr(sys, "stdout", None)
    assert run_cli(lambda: None) == 0


def test_yaml_configurations_are_read_strictly(tmp_path: Path) -> None:
    from formulation.schema import InputError, read_yaml

    path = tmp_path / "c.yaml"
    path.write_text("learning_rate: 1e-4\nsteps: 1_000\nname: '1e-4'\n")
    assert read_yaml(path, "config") == {"learning_rate": 1e-4, "steps": 1000,
                                         "name": "1e-4"}
    path.write_text("a: 1\nb: {c: 2, c: 3}\n")
    with pytest.raises(InputError, match="key 'c' appears twice"):
        read_yaml(path, "config")
