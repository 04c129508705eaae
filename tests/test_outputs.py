"""The output layer: nothing a run reads is overwritten, nothing but a regular file is
replaced, results appear whole."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from formulation.outputs import (
    STDOUT,
    ResultsDirectory,
    output_directory,
    output_path,
    write_json,
)
from formulation.schema import InputError


def test_an_input_is_never_an_output(tmp_path):
    source = tmp_path / "instance.json"
    source.write_text("{}")
    link = tmp_path / "link.json"
    link.symlink_to(source)
    for value in (source, link, tmp_path / "." / "instance.json"):
        with pytest.raises(InputError, match="is an input of this run"):
            output_path(value, inputs=[source])
    assert output_path(tmp_path / "other.json", inputs=[source]) == tmp_path / "other.json"


def test_only_regular_files_are_replaced(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    broken = tmp_path / "broken"
    broken.symlink_to(tmp_path / "absent")
    for value, kind in (("/dev/null", "a device"), ("/dev/full", "a device"),
                        (fifo, "a FIFO"), (tmp_path, "a directory"),
                        (broken, "a broken link")):
        with pytest.raises(InputError, match=f"is {kind}, not a regular file"):
            output_path(value)
    # a link to a regular file: the file is replaced, the link kept
    target = tmp_path / "target.json"
    target.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(target)
    write_json(output_path(link), {"a": 1})
    assert link.is_symlink() and target.read_text() == '{\n "a": 1\n}\n'


def test_a_missing_directory_is_not_created(tmp_path):
    with pytest.raises(InputError, match="does not exist"):
        output_path(tmp_path / "no" / "such" / "out.json")
    with pytest.raises(InputError, match="does not exist"):
        output_path("/no-such-directory-xdsched/out.json")
    assert not (tmp_path / "no").exists()


def test_a_directory_that_takes_no_new_file_is_refused_before_the_run(tmp_path):
    """Checked by making (and removing) a file there, as the atomic write will: /proc
    refuses one even to root, a read-only directory to anyone else."""
    places = [Path("/proc")] if Path("/proc/self").is_dir() else []
    if os.geteuid() != 0:
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o555)
        places.append(locked)
    if not places:
        pytest.skip("no directory here refuses a new file")
    for place in places:
        for check in (output_path, output_directory):
            with pytest.raises(InputError, match=f"--out .*cannot write in directory "
                                                 f"'{place}'"):
                check(place / "out.json")
    assert not list(tmp_path.glob("**/.probe.*"))
    assert output_path(tmp_path / "out.json") == tmp_path / "out.json"
    assert not list(tmp_path.glob(".probe.*"))  # the probe is removed


def test_a_directory_written_into_must_take_files_itself(tmp_path, monkeypatch):
    """A results directory is staged beside ``--out`` (its parent must take files); a
    directory a command writes into (``into``) must take them itself where it exists."""
    import tempfile

    real = tempfile.mkstemp
    refused = tmp_path / "locked"
    refused.mkdir()

    def mkstemp(*args, dir=None, **kwargs):  # root ignores modes: refuse by name instead
        if dir is not None and Path(dir) == refused:
            raise PermissionError(13, "Permission denied")
        return real(*args, dir=dir, **kwargs)

    monkeypatch.setattr(tempfile, "mkstemp", mkstemp)
    assert output_directory(refused) == refused  # swapped in from its parent
    with pytest.raises(InputError, match="cannot write in directory .*locked"):
        output_directory(refused, into=True)
    assert output_directory(tmp_path / "new", into=True) == tmp_path / "new"
    with pytest.raises(InputError, match="cannot write in directory .*locked"):
        output_directory(refused / "inner")


def test_dash_is_standard_output(tmp_path, capsys):
    assert output_path("-") == STDOUT
    write_json(STDOUT, {"x": [1, 2]})
    assert capsys.readouterr().out == '{\n "x": [1, 2]\n}\n'
    with pytest.raises(InputError, match="cannot write to standard output"):
        output_path("-", stdout=False)


def test_strict_json(tmp_path):
    out = tmp_path / "out.json"
    with pytest.raises(ValueError):
        write_json(output_path(out), {"x": float("nan")})
    assert list(tmp_path.iterdir()) == []  # nothing half-written


NAMES = ("a.csv", "b.csv")  # what the runs below write


def test_results_directory_appears_whole(tmp_path):
    out = output_directory(tmp_path / "results")
    with ResultsDirectory(out, NAMES) as staging:
        (staging / "a.csv").write_text("first")
    assert (out / "a.csv").read_text() == "first"
    # a failing run leaves the earlier results as they were, and no staging behind
    with pytest.raises(RuntimeError), ResultsDirectory(out, NAMES) as staging:
        (staging / "a.csv").write_text("second")
        (staging / "b.csv").write_text("second")
        raise RuntimeError("half-way")
    assert sorted(p.name for p in out.iterdir()) == ["a.csv"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results"]
    # a second run replaces the whole directory
    with ResultsDirectory(out, NAMES) as staging:
        (staging / "b.csv").write_text("third")
    assert sorted(p.name for p in out.iterdir()) == ["b.csv"]


def test_a_directory_of_other_files_is_never_replaced(tmp_path, monkeypatch):
    out = tmp_path / "results"
    out.mkdir()
    (out / "thesis.tex").write_text("years of work")
    with pytest.raises(InputError, match="holds 'thesis.tex'"), ResultsDirectory(out, NAMES):
        pass
    assert (out / "thesis.tex").read_text() == "years of work"
    monkeypatch.chdir(out)
    (out / "thesis.tex").unlink()  # even empty, the working directory is not replaced
    with pytest.raises(InputError, match="working directory"), ResultsDirectory(out, NAMES):
        pass
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results"]  # no lock left


def test_a_second_run_into_the_same_directory_is_refused(tmp_path):
    out = tmp_path / "results"
    with ResultsDirectory(out), pytest.raises(InputError, match="another run"), \
            ResultsDirectory(out):
        pass
    # a lock left by a process that is gone is taken over
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True).stdout.strip()
    (tmp_path / ".results.lock").write_text(dead)
    with ResultsDirectory(out) as staging:
        (staging / "x").write_text("x")
    assert (out / "x").exists() and not (tmp_path / ".results.lock").exists()


def test_an_output_directory_never_holds_an_input(tmp_path):
    suite = tmp_path / "suite"
    suite.mkdir()
    for value in (suite, tmp_path, suite / "results"):
        with pytest.raises(InputError, match="input of this run"):
            output_directory(value, inputs=[suite])
    (tmp_path / "file").write_text("")
    with pytest.raises(InputError, match="not a directory"):
        output_directory(tmp_path / "file")
