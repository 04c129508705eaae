"""Strict JSON reading: every error names the offending field by its path.

The instance and plan loaders read plain dicts through these helpers, so that a bad
document fails with one line such as ``links.bandwidth_gbps[3][7] must be > 0`` and never
with a traceback from deep inside the evaluator.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import re
import signal
import stat
import sys
import threading
import unicodedata
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, NoReturn

import yaml


class InputError(ValueError):
    """A document (instance, plan, trace) is malformed; the message names the field."""


MAX_INPUT_BYTES = 1 << 30  # an input file larger than this is refused before it is read


def read_text(path: str | Path, what: str) -> str:
    """A text file's content, UTF-8; an unreadable file (absent, a directory, a FIFO or
    device, larger than :data:`MAX_INPUT_BYTES`, not UTF-8) is one :class:`InputError`
    naming it."""
    try:
        mode = Path(path).stat()
        if stat.S_ISDIR(mode.st_mode):
            raise InputError(f"{what} file {str(path)!r} is a directory")
        if not stat.S_ISREG(mode.st_mode):  # a FIFO or device would block or never end
            raise InputError(f"{what} file {str(path)!r} is not a regular file")
        if mode.st_size > MAX_INPUT_BYTES:
            raise InputError(f"{what} file {str(path)!r} is larger than "
                             f"{MAX_INPUT_BYTES >> 20} MiB")
        data = Path(path).read_bytes()
    except OSError as err:
        raise InputError(f"{what} file {str(path)!r}: {err.strerror or err}") from None
    try:  # a byte-order mark (Windows editors write one) is not part of the text
        return data.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as err:
        raise InputError(f"{what} file {str(path)!r} is not UTF-8 text (byte {err.start})"
                         ) from None


def read_json(path: str | Path, what: str) -> Any:
    """Parse a JSON file strictly, turning every way it can be unreadable into one
    :class:`InputError` naming the file: I/O errors, a directory, text that is not UTF-8,
    syntax errors, the non-JSON constants ``NaN`` and ``Infinity``, nesting deeper than
    the parser's recursion allows."""
    text = read_text(path, what)
    try:
        return json.loads(text, parse_constant=_no_constant, object_pairs_hook=_unique_keys)
    except json.JSONDecodeError as err:
        raise InputError(
            f"{what} file {str(path)!r} is not valid JSON (line {err.lineno}: {err.msg})"
        ) from None
    except RecursionError:
        raise InputError(f"{what} file {str(path)!r} is nested deeper than "
                         f"{sys.getrecursionlimit()} levels") from None
    except ValueError as err:  # a constant, or an integer of too many digits
        raise InputError(f"{what} file {str(path)!r} is not valid JSON ({err})") from None


class _StrictYamlLoader(yaml.SafeLoader):
    """YAML as a configuration means it: a key given twice is refused, and ``1e-4`` is a
    number (YAML 1.1 reads an exponent without a dot as a string)."""

    def construct_mapping(self, node, deep=False):
        keys = [self.construct_object(key, deep=deep) for key, _ in node.value]
        twice = next((key for i, key in enumerate(keys) if key in keys[:i]), None)
        if twice is not None:
            raise yaml.constructor.ConstructorError(
                None, None, f"key {twice!r} appears twice in one mapping", node.start_mark)
        return super().construct_mapping(node, deep=deep)


_StrictYamlLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$"),
    list("-+0123456789."))


def read_yaml(path: str | Path, what: str) -> Any:
    """Parse a YAML file strictly (:class:`_StrictYamlLoader`), every way it can be
    unreadable one :class:`InputError` naming the file."""
    text = read_text(path, what)
    try:
        return yaml.load(text, Loader=_StrictYamlLoader)  # noqa: S506 (a safe loader)
    except yaml.YAMLError as err:  # one line: the parser's own message spans several
        raise InputError(f"{what} {str(path)!r}: not YAML ({' '.join(str(err).split())})"
                         ) from None
    except RecursionError:
        raise InputError(f"{what} {str(path)!r} is nested too deeply") from None


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object whose keys are all different: JSON readers disagree on which of two equal
    keys counts, so a document holding both is refused."""
    document = dict(pairs)
    if len(document) != len(pairs):
        seen: set[str] = set()
        twice = next(key for key, _ in pairs if key in seen or seen.add(key))
        raise ValueError(f"key {twice!r} appears twice in one object")
    return document


_NUMBER_LIST = re.compile(r"\[\s*(-?[\d.eE+-]+(?:,\s*-?[\d.eE+-]+)*)\s*\]")


def dumps(document: Any) -> str:
    """Indented strict JSON (no NaN or Infinity) with lists of numbers kept on one line
    (matrices stay readable)."""
    text = json.dumps(document, indent=1, allow_nan=False)
    return _NUMBER_LIST.sub(lambda m: "[" + ", ".join(x.strip() for x in m.group(1).split(","))
                            + "]", text) + "\n"


MAX_NAME = 200  # characters of a name


class Reader:
    """Reads one JSON object, remembering which keys were consumed.

    ``finish()`` rejects any key that was not read, so unknown fields never pass silently.
    """

    def __init__(self, value: Any, path: str):
        if not isinstance(value, Mapping):
            raise InputError(f"{path or 'document'} must be an object, got {_kind(value)}")
        self.value = value
        self.path = path
        self.seen: set[str] = set()

    def path_of(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key

    def has(self, key: str) -> bool:
        return key in self.value

    def raw(self, key: str, default: Any = ...) -> Any:
        self.seen.add(key)
        if key not in self.value:
            if default is ...:
                raise InputError(f"{self.path_of(key)} is missing")
            return default
        return self.value[key]

    def child(self, key: str) -> Reader:
        return Reader(self.raw(key), self.path_of(key))

    def string(self, key: str, default: Any = ..., choices: tuple[str, ...] | None = None) -> str:
        value = self.raw(key, default)
        if value is default and default is not ...:
            return value
        if not isinstance(value, str):
            raise InputError(f"{self.path_of(key)} must be a string, got {_kind(value)}")
        if choices is not None and value not in choices:
            raise InputError(f"{self.path_of(key)} must be one of {list(choices)}, got {value!r}")
        return value

    def name(self, key: str) -> str:
        """A name (of an instance, a domain, a preset): 1 to :data:`MAX_NAME` characters,
        any script, no control characters (a name appears in one-line messages)."""
        value = self.string(key)
        if not 1 <= len(value) <= MAX_NAME:
            raise InputError(f"{self.path_of(key)} must have 1 to {MAX_NAME} characters, got "
                             f"{len(value)}")
        bad = next((c for c in value if unicodedata.category(c) == "Cc"), None)
        if bad is not None:
            raise InputError(f"{self.path_of(key)} holds the control character {bad!r}")
        return value

    def number(self, key: str, default: Any = ..., *, low: float | None = None,
               high: float | None = None, low_open: bool = False) -> float:
        value = self.raw(key, default)
        if value is default and default is not ...:
            return value
        return check_number(value, self.path_of(key), low=low, high=high, low_open=low_open)

    def integer(self, key: str, default: Any = ..., *, low: int | None = None,
                high: int | None = None) -> int:
        value = self.raw(key, default)
        if value is default and default is not ...:
            return value
        return check_integer(value, self.path_of(key), low=low, high=high)

    def boolean(self, key: str, default: Any = ...) -> bool:
        value = self.raw(key, default)
        if not isinstance(value, bool):
            raise InputError(f"{self.path_of(key)} must be true or false, got {_kind(value)}")
        return value

    def items(self, key: str, check: Callable[[Any, str], Any], default: Any = ...,
              min_len: int = 0, max_len: int | None = None) -> list[Any]:
        value = self.raw(key, default)
        if value is default and default is not ...:
            return value
        field = self.path_of(key)
        if not isinstance(value, list):
            raise InputError(f"{field} must be a list, got {_kind(value)}")
        if len(value) < min_len:
            raise InputError(f"{field} must have at least {min_len} entries, got {len(value)}")
        if max_len is not None and len(value) > max_len:
            raise InputError(f"{field} must have at most {max_len:,} entries, got "
                             f"{len(value):,}")
        return [check(item, f"{field}[{i}]") for i, item in enumerate(value)]

    def finish(self) -> None:
        unknown = sorted(set(self.value) - self.seen)
        if unknown:  # (a key that would not print as one line is quoted)
            key = unknown[0] if unknown[0].isprintable() and unknown[0] else repr(unknown[0])
            raise InputError(f"{self.path_of(key)} is not a known field")


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    return {bool: "a boolean", int: "a number", float: "a number", str: "a string",
            list: "a list", dict: "an object"}.get(type(value), type(value).__name__)


def check_number(value: Any, field: str, *, low: float | None = None, high: float | None = None,
                 low_open: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InputError(f"{field} must be a number, got {_kind(value)}")
    try:
        value = float(value)
    except OverflowError:  # an integer beyond any float
        raise InputError(f"{field} must be finite") from None
    if not math.isfinite(value):
        raise InputError(f"{field} must be finite")
    if low is not None and (value <= low if low_open else value < low):
        raise InputError(f"{field} must be {'>' if low_open else '>='} {low:g}, got {value:g}")
    if high is not None and value > high:
        raise InputError(f"{field} must be <= {high:g}, got {value:g}")
    return value


INTEGER_LIMIT = 2 ** 53  # every integer field is exact as a float and fits int64


def check_ranges(settings: Any, ranges: Mapping[str, tuple[float, float]],
                 prefix: str = "") -> None:
    """Each field of a settings dataclass named in ``ranges`` within its (low, high): an
    integer where both bounds are ints, else a finite number; errors name
    ``prefix + field``."""
    for name, (low, high) in ranges.items():
        value = getattr(settings, name)
        if isinstance(low, int) and isinstance(high, int):  # 32.0 is the integer 32
            value = check_integer(value, prefix + name, low=low, high=high)
        else:
            value = check_number(value, prefix + name, low=low, high=high)
        object.__setattr__(settings, name, value)  # frozen dataclasses too


def check_integer(value: Any, field: str, *, low: int | None = None,
                  high: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        else:
            raise InputError(f"{field} must be an integer, got {_kind(value)}")
    if abs(value) > INTEGER_LIMIT:
        shown = f"{value:.3g}" if abs(value) < 10 ** 300 else f"{len(str(abs(value)))} digits"
        raise InputError(f"{field} must be within +-2^53, got {shown}")
    if low is not None and value < low:
        raise InputError(f"{field} must be >= {low}, got {value}")
    if high is not None and value > high:
        raise InputError(f"{field} must be <= {high}, got {value}")
    return value


def check_matrix(value: Any, field: str, size: int, *, positive_off_diagonal: bool,
                 non_negative: bool = True, high: float | None = None,
                 least: float | None = None) -> list[list[float]]:
    """A ``size`` x ``size`` matrix of finite numbers; the diagonal is not constrained.
    With ``positive_off_diagonal``, the off-diagonal ones are > 0, and >= ``least``."""
    if not isinstance(value, list) or len(value) != size:
        raise InputError(f"{field} must be a {size} x {size} matrix (list of {size} rows)")
    rows = []
    for i, row in enumerate(value):
        if not isinstance(row, list) or len(row) != size:
            raise InputError(f"{field}[{i}] must be a list of {size} numbers")
        out = []
        for j, item in enumerate(row):
            cell = check_number(item, f"{field}[{i}][{j}]", high=high)
            if i != j and positive_off_diagonal and cell <= 0:
                raise InputError(f"{field}[{i}][{j}] must be > 0, got {cell:g}")
            if i != j and positive_off_diagonal and least is not None and cell < least:
                raise InputError(f"{field}[{i}][{j}] must be >= {least:g}, got {cell:g}")
            if non_negative and cell < 0:
                raise InputError(f"{field}[{i}][{j}] must be >= 0, got {cell:g}")
            out.append(cell)
        rows.append(out)
    return rows


def integer_arg(low: int, high: int) -> Callable[[str], int]:
    """An argparse ``type``: an integer in [low, high] (argparse then reports a bad value
    as one line naming the flag)."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be an integer, got {text!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be in [{low}, {high}], got {text}")
        return value
    return parse


def number_arg(low: float, high: float = math.inf, low_open: bool = False
               ) -> Callable[[str], float]:
    """An argparse ``type``: a finite number in [low, high] ((low, high] with
    ``low_open``)."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a number, got {text!r}") from None
        if not math.isfinite(value) or value > high or value < low \
                or (low_open and value == low):
            if high == math.inf:
                wanted = f"{'>' if low_open else '>='} {low:g}"
            else:
                wanted = f"in {'(' if low_open else '['}{low:g}, {high:g}]"
            raise argparse.ArgumentTypeError(f"must be a finite number {wanted}, got {text}")
        return value
    return parse


MAX_WORKERS = 1024  # --workers: local processes
SEED_MAX = 2 ** 32 - 1
SEED = integer_arg(0, SEED_MAX)
"""``--seed``: one seed, an integer in [0, 2^32 - 1], for every command."""


class CliParser(argparse.ArgumentParser):
    """argparse with the project's error convention: one line on stderr, exit code 2."""

    def error(self, message: str) -> NoReturn:
        # "argument --seed: must be ..." (a bounded type's own message) as the project's
        # other errors read: "--seed must be ..."
        message = re.sub(r"^argument ([^:]+): (must be .*)$", r"\1 \2", message)
        self.exit(2, f"error: {message} (see {self.prog} --help)\n")


class Terminated(BaseException):
    """SIGTERM arrived: unwound like Ctrl-C, so that no partial output stays behind."""


def _terminate(signum, frame) -> NoReturn:
    raise Terminated


def _signal_behind(err: BaseException) -> BaseException | None:
    """The KeyboardInterrupt or :class:`Terminated` an error was raised while handling."""
    seen = err.__context__ or err.__cause__
    while seen is not None:
        if isinstance(seen, KeyboardInterrupt | Terminated):
            return seen
        seen = seen.__context__ or seen.__cause__
    return None


class _ClosedStream:
    """Standard output when the caller closed it (``cmd >&-``): a run that writes nothing
    there succeeds, one that writes fails as a write to a closed file does."""

    def write(self, text: str) -> int:
        raise InputError("standard output is closed, and this run writes there (give "
                         "--out FILE, or --quiet)")

    def flush(self) -> None:
        pass


def _printable_streams() -> None:
    """Reports and messages never fail on a character the terminal's encoding lacks (a
    domain named in Chinese on an ASCII terminal): it is written escaped instead."""
    if sys.stdout is None:
        sys.stdout = _ClosedStream()
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure"):
            with contextlib.suppress(ValueError, io.UnsupportedOperation):
                stream.reconfigure(errors="backslashreplace")


def run_cli(body: Callable[[], int | None]) -> int:
    """Run a command's body with the project's error convention: bad input (an
    :class:`InputError`, or a file that cannot be read or written) gives one line on stderr
    and exit code 2, an interrupt (Ctrl-C) one line and 130, a SIGTERM one line and 143,
    never a traceback. Both signals unwind the run, so temporary outputs are removed."""
    main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _terminate) if main else None
    _printable_streams()
    try:
        try:
            return body() or 0
        except SystemError as err:  # compiled code (numba) hands a signal on wrapped so
            signalled = _signal_behind(err)
            if signalled is None:
                raise
            raise signalled from None
    except InputError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # outputs are written whole or not at all: nothing to undo
        print("interrupted", file=sys.stderr)
        return 130
    except Terminated:
        print("terminated", file=sys.stderr)
        return 143
    except OSError as err:
        where = f"{str(err.filename)!r}: " if err.filename else ""
        print(f"error: cannot access {where}{err.strerror or err}", file=sys.stderr)
        return 2
    finally:
        if main:
            signal.signal(signal.SIGTERM, previous)
