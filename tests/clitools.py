"""Running the project's commands as a user does, and checking the error convention."""

from __future__ import annotations

import contextlib
import io
import subprocess
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


def run_module(module: str, *args: object, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", module, *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)


def assert_usage_error(done: subprocess.CompletedProcess, out: Path) -> None:
    """Bad input: exit code 2, one line on stderr, no output file left behind."""
    assert done.returncode == 2, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert not out.exists()


def run_main(module: ModuleType, argv: list[str]) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of a command's ``main(argv)`` run in this process, as
    ``python -m`` would run it but without paying the imports again."""
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        try:
            status = module.main(argv)
        except SystemExit as done:
            status = done.code if isinstance(done.code, int) else 2
    return int(status or 0), stdout.getvalue(), stderr.getvalue()


def kernels_compiled_by(statement: str) -> tuple[list[bool], list[bool]]:
    """In a fresh process: whether the lower level's numba kernels have compiled (or loaded)
    code, before and after ``statement`` (what warms a process up before its first timed
    decision)."""
    code = ("import solvers.label_kernels as k\n"
            "kernels = (k.label_dp, k.probe, k.completion_kernel(), k.least_gpus)\n"
            "before = [bool(f.signatures) for f in kernels]\n"
            f"{statement}\n"
            "print([int(b) for b in before], [int(bool(f.signatures)) for f in kernels])\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    before, after = done.stdout.strip().splitlines()[-1].split("] [")
    return ([bool(int(x)) for x in before.strip("[]").split(",")],
            [bool(int(x)) for x in after.strip("[]").split(",")])
