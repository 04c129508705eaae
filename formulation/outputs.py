"""Where results go: one output layer for every command.

An output is checked before a run does its work (:func:`output_path`,
:func:`output_directory`), so that a run never spends minutes and then fails to save:

* ``-`` is standard output, where a command emits one document;
* an output that is one of the run's inputs (the same file once links are resolved, or a
  directory holding or held by an input directory) is refused: nothing a run reads is ever
  overwritten;
* an existing output that is not a regular file (a device such as ``/dev/null`` or
  ``/dev/full``, a FIFO, a socket, a directory, a broken link) is refused: renaming over
  it would replace it. A link to a regular file is followed: the file it names is replaced
  and the link kept;
* the directory an output goes into must exist (a typo never creates a tree) and take a
  new file.

Files are written beside their destination and renamed over it (:func:`write_atomic`), so
a reader sees the old file or the new one, never half of one. A results directory is
written as a fresh sibling and swapped in whole at the end (:class:`ResultsDirectory`);
while one run writes it, a second run into the same directory is refused.

Every result records how it was made: :func:`command_line` and :func:`versions` give its
provenance's command and package versions.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import platform
import shutil
import sys
import tempfile
import warnings
from collections.abc import Callable, Iterable
from importlib import metadata
from pathlib import Path

from formulation.schema import InputError, dumps

STDOUT = Path("-")
"""The output path meaning standard output (a file named ``-``: ``./-``). Commands keep
``--out`` as the string given, so that ``./-`` and a trailing slash are seen."""


def _describe(path: Path) -> str | None:
    """What kind of existing non-regular thing ``path`` is (None: absent or a regular file,
    links followed)."""
    if path.is_symlink() and not path.exists():
        return "a broken link"
    if not path.exists():
        return None
    if path.is_file():
        return None
    if path.is_dir():
        return "a directory"
    if path.is_fifo():
        return "a FIFO"
    if path.is_char_device() or path.is_block_device():
        return "a device"
    if path.is_socket():
        return "a socket"
    return "not a regular file"


def _same(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return a.resolve() == b.resolve()


def _in_a_directory(value: str | Path, flag: str) -> Path:
    """``value`` with links resolved, whose directory exists (nothing is created)."""
    target = Path(value).resolve()
    if not target.parent.is_dir():
        raise InputError(f"{flag} {str(value)!r}: directory {str(target.parent)!r} "
                         "does not exist")
    return target


def _takes_files(directory: Path, value: str | Path, flag: str) -> None:
    """Whether a new file can be made in ``directory``: one is made and removed, as the
    atomic write and the results directory's staging will."""
    try:
        handle, probe = tempfile.mkstemp(prefix=".probe.", dir=directory)
    except OSError as err:
        raise InputError(f"{flag} {str(value)!r}: cannot write in directory "
                         f"{str(directory)!r} ({err.strerror or err})") from None
    try:
        os.close(handle)
    finally:
        os.unlink(probe)


def output_path(value: str | Path | None, inputs: Iterable[str | Path | None] = (),
                flag: str = "--out", stdout: bool = True) -> Path | None:
    """The checked destination of an output file (module doc): None for None,
    :data:`STDOUT` for ``-`` (where ``stdout``), else the path with links resolved.
    Raises :class:`InputError` naming ``flag``."""
    if value is None:
        return None
    if str(value) == str(STDOUT):  # "-" itself: "./-" is a file of that name
        if not stdout:
            raise InputError(f"{flag} -: this command cannot write to standard output")
        return STDOUT
    if isinstance(value, str) and value.endswith(("/", os.sep)):
        raise InputError(f"{flag} {value!r} ends with a slash: it names a directory, not "
                         "the file to write")
    path = Path(value)
    kind = _describe(path)
    if kind is not None:
        raise InputError(f"{flag} {str(value)!r} is {kind}, not a regular file: "
                         "refusing to replace it")
    target = _in_a_directory(value, flag)
    for source in inputs:
        if source is not None and Path(source).exists() and _same(Path(source), target):
            raise InputError(f"{flag} {str(value)!r} is an input of this run: refusing to "
                             "overwrite it")
    _takes_files(target.parent, value, flag)
    return target


def output_directory(value: str | Path, inputs: Iterable[str | Path | None] = (),
                     flag: str = "--out", into: bool = False) -> Path:
    """The checked destination of a results directory (module doc), swapped in whole
    beside it; with ``into``, a directory the command writes its files into (made where
    absent), which then must take new files itself where it exists."""
    path = Path(value)
    if path.is_symlink() and not path.exists() or path.exists() and not path.is_dir():
        raise InputError(f"{flag} {str(value)!r} is {_describe(path) or 'a file'}, "
                         "not a directory")
    target = _in_a_directory(value, flag)
    for source in inputs:
        if source is None:
            continue
        source = Path(source).resolve()
        if source == target or target in source.parents or source in target.parents \
                and source.is_dir():
            raise InputError(f"{flag} {str(value)!r} holds or is held by an input of this "
                             f"run ({str(source)!r}): refusing to replace it")
    _takes_files(target if into and target.is_dir() else target.parent, value, flag)
    return target


def write_atomic(path: Path, write: Callable[[Path], None]) -> None:
    """``write(temporary path)`` beside ``path``, then rename it over ``path``: a reader
    never sees half a file, and a failed write leaves nothing behind. ``path`` must be a
    checked destination (:func:`output_path`); its directory is not created."""
    path = Path(path)
    kind = _describe(path)
    if kind is not None:  # the check before the run, made again at the moment of writing
        raise InputError(f"{str(path)!r} is {kind}, not a regular file: refusing to "
                         "replace it")
    path = path.resolve()
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp",
                                         dir=path.parent)
    os.close(handle)
    try:
        write(Path(temporary))
        os.chmod(temporary, 0o666 & ~_umask())  # mkstemp makes 0600; the usual open() mode
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def write_text(path: Path, text: str) -> None:
    """``text`` to ``path`` (atomically), or to standard output for :data:`STDOUT`."""
    if Path(path) == STDOUT:
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    write_atomic(path, lambda temporary: temporary.write_text(text, encoding="utf-8"))


def write_figure(path: Path, figure, **options) -> None:
    """A matplotlib figure laid out and saved as PNG to ``path`` (atomically). A name in a
    script the font lacks is drawn as boxes, and a name too long for the margins is cut,
    without a warning on stderr for either."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Glyph .* missing from font")
        warnings.filterwarnings("ignore", message="Tight layout not applied")
        figure.tight_layout()
        write_atomic(path, lambda p: figure.savefig(p, format="png", **options))


def write_json(path: Path, document) -> None:
    """Strict JSON (no NaN or Infinity) to ``path`` or standard output."""
    write_text(path, dumps(document))


def strict(document):
    """``document`` with every number that JSON cannot hold (NaN, infinities) as None,
    numpy scalars and arrays as Python ones: what a results file writes as ``null`` means
    "not defined" (e.g. a gap where a method gave no plan to compare)."""
    if isinstance(document, dict):
        return {key: strict(value) for key, value in document.items()}
    if isinstance(document, list | tuple):
        return [strict(value) for value in document]
    if hasattr(document, "tolist"):  # numpy scalars and arrays
        return strict(document.tolist())
    if isinstance(document, float) and not math.isfinite(document):
        return None
    return document


class _Discard:
    """A stream that keeps nothing (``--quiet``)."""

    def write(self, text: str) -> int:
        return len(text)

    def flush(self) -> None:
        pass


def report_stream(out: Path | None, quiet: bool = False):
    """Where a command's one-line report goes: nowhere with ``--quiet``, standard error
    when the output itself goes to standard output, else standard output."""
    if quiet:
        return _Discard()
    return sys.stderr if out == STDOUT else sys.stdout


def _umask() -> int:
    """The process umask (reading it means setting it; it is restored at once)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


class ResultsDirectory:
    """A results directory that appears whole or not at all::

        with ResultsDirectory(out) as staging:
            ...  # write every file into staging

    The files go into a fresh sibling directory; on success it replaces ``out`` (the old
    one removed), on failure or interrupt it is removed and ``out`` is left as it was. A
    lock file beside ``out`` (holding the writer's process id) refuses a second run into
    the same directory meanwhile; a lock whose process is gone is taken over. An existing
    ``out`` is replaced only if it holds nothing but ``names`` (what the command writes
    there: an earlier run's results), and never if it is the working directory: a
    directory of other files is refused before the run, not deleted after it."""

    def __init__(self, path: Path, names: Iterable[str] = ()):
        self.path = Path(path)
        self.names = frozenset(names)
        self.lock = self.path.parent / f".{self.path.name}.lock"
        self.staging: Path | None = None

    def check_replaceable(self) -> None:
        """Refuse an existing directory that is the working one or holds other files than
        ``names`` (done on entering; callable before a run's work too)."""
        if not self.path.is_dir():
            return
        if _same(self.path, Path.cwd()):
            raise InputError(f"--out {str(self.path)!r} is the working directory: refusing "
                             "to replace it (name a results directory)")
        foreign = sorted(set(os.listdir(self.path)) - self.names)
        if foreign:
            raise InputError(f"--out {str(self.path)!r} holds {foreign[0]!r}, which this "
                             "command does not write: refusing to replace the directory "
                             "(name a new or empty one)")

    def _acquire(self) -> None:
        for _ in range(2):
            try:
                fd = os.open(self.lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                owner = self._owner()
                if owner is not None and _alive(owner):
                    raise InputError(f"--out {str(self.path)!r}: another run (process "
                                     f"{owner}) is writing there") from None
                self.lock.unlink(missing_ok=True)  # stale: its process is gone
                continue
            with os.fdopen(fd, "w") as handle:
                handle.write(str(os.getpid()))
            return
        raise InputError(f"--out {str(self.path)!r}: cannot take the lock {str(self.lock)!r}")

    def _owner(self) -> int | None:
        try:
            return int(self.lock.read_text().strip())
        except (OSError, ValueError):
            return None

    def __enter__(self) -> Path:
        self.check_replaceable()
        self._acquire()
        try:
            self.staging = Path(tempfile.mkdtemp(prefix=f".{self.path.name}.",
                                                 dir=self.path.parent))
        except BaseException:
            self.lock.unlink(missing_ok=True)
            raise
        return self.staging

    def __exit__(self, kind, value, traceback) -> None:
        try:
            if kind is not None:
                shutil.rmtree(self.staging, ignore_errors=True)
                return
            os.chmod(self.staging, 0o777 & ~_umask())
            old = None
            if self.path.exists():
                old = Path(tempfile.mkdtemp(prefix=f".{self.path.name}.old.",
                                            dir=self.path.parent))
                os.rename(self.path, old / "previous")
            os.rename(self.staging, self.path)
            if old is not None:
                shutil.rmtree(old, ignore_errors=True)
        finally:
            self.lock.unlink(missing_ok=True)


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    with contextlib.suppress(ProcessLookupError):
        try:
            os.kill(pid, 0)
        except PermissionError:
            return True
        return True
    return False


def versions() -> dict[str, str]:
    """Versions of the interpreter and the packages that shape a result."""
    return dict(_versions())


@functools.cache  # a process's packages do not change; reading them takes milliseconds
def _versions() -> tuple[tuple[str, str], ...]:
    out = {"python": platform.python_version()}
    for package in ("xdsched", "numpy", "pyomo", "highspy", "ortools", "moocore", "pymoo"):
        try:
            out[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            continue
    return tuple(out.items())


def command_line(module: str) -> str:
    """The command that is running, as a user would type it."""
    return " ".join(["python -m", module, *sys.argv[1:]])
