"""Command-line errors: every bad value ends as one line ``<prog>: error: <flag>: <why>``, exit 2.

Two paths lead there. argparse's own findings (a missing value, ``int("x")``, a
bad choice) go through :class:`CliParser`, whose ``error`` prints one line
instead of the usage block and raises ``SystemExit(2)``. What the validation
layer finds after parsing is a :class:`UsageError` naming the flag;
:func:`run_command` prints it as one line and returns 2. Validators here check a
value and name the flag; :func:`blame` turns an error raised by library code for
a flag's value into a :class:`UsageError` for that flag.
"""

from __future__ import annotations

import argparse
import json
import re
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NoReturn, TypeVar

from budgetmix._validate import (
    check_between,
    check_choice,
    check_int,
    check_ints,
    check_number,
)
from budgetmix.exceptions import BudgetmixError, ConfigError

__all__ = [
    "CliParser",
    "UsageError",
    "blame",
    "choice",
    "integer",
    "integers",
    "json_object",
    "mapping",
    "model_dir",
    "number",
    "one_line",
    "output_dir",
    "output_file",
    "readable_file",
    "resume_command",
    "run_command",
]

T = TypeVar("T")

# argparse says "argument --turns: invalid int value"; the flag alone is enough
_ARGUMENT_PREFIX = re.compile(r"^argument ([^:]+): ")
#: What library code raises for a bad value; :func:`blame` re-raises these for the flag.
VALUE_ERRORS: tuple[type[Exception], ...] = (BudgetmixError, ValueError, TypeError)
_NOT = {
    "missing": "does not exist",
    "dir": "is a directory",
    "file": "is a file",
    "other": "is not a regular file",
}


class UsageError(ConfigError):
    """A command-line value is invalid; ``flag`` names the option (or positional)."""

    def __init__(self, flag: str, message: str) -> None:
        super().__init__(f"{flag}: {message}")
        self.flag = flag


def one_line(text: str) -> str:
    """``text`` with every run of whitespace (line breaks included) made one space."""
    return " ".join(text.split())


class CliParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors are one line on stderr and exit status 2."""

    def error(self, message: str) -> NoReturn:
        """Print ``<prog>: error: <flag>: <why>`` (no usage block) and exit 2."""
        why = one_line(_ARGUMENT_PREFIX.sub(r"\1: ", message))
        self.exit(2, f"{self.prog}: error: {why}\n")


#: What an interrupted command without its own account says it saved.
_NOTHING_SAVED = "nothing saved to resume from; rerun the command to start again"


def resume_command(prog: str, argv: Sequence[str], *extra: str) -> str:
    """The shell command that reruns ``prog argv`` (plus ``extra`` flags not already in it)."""
    import shlex

    words = [*prog.split(), *argv, *(flag for flag in extra if flag not in argv)]
    return shlex.join(words)


@contextmanager
def _terminate_as_interrupt(caught: list[int]) -> Iterator[None]:
    """SIGTERM raises KeyboardInterrupt as SIGINT does; ``caught`` gets the signal's number."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_signal(signum: int, frame: object) -> None:
        caught.append(signum)
        raise KeyboardInterrupt

    before_term = signal.signal(signal.SIGTERM, on_signal)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, before_term)


def _interrupted(prog: str, signum: int, on_interrupt: Callable[[], str] | None) -> int:
    """Print the one line of an interrupted command; returns 128 + the signal's number."""
    # a second Ctrl-C while the account is written must not end in a traceback
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        said = on_interrupt() if on_interrupt is not None else _NOTHING_SAVED
    except Exception as exc:  # the account must not hide the interrupt
        said = f"{_NOTHING_SAVED} (could not read what was saved: {one_line(str(exc))})"
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    name = signal.Signals(signum).name
    print(f"{prog}: interrupted ({name}); {one_line(said)}", file=sys.stderr, flush=True)
    return 128 + signum


def run_command(
    prog: str,
    body: Callable[[], int],
    *,
    errors: tuple[type[Exception], ...] = (UsageError,),
    on_interrupt: Callable[[], str] | None = None,
) -> int:
    """``body()``, or 2 after printing what it raised of ``errors`` (by default a
    :class:`UsageError`) as one stderr line.

    Ctrl-C (SIGINT) and SIGTERM end the command with one stderr line and no
    traceback, ``<prog>: interrupted (SIGINT); <account>``, and exit status 130
    (SIGINT) or 143 (SIGTERM). ``on_interrupt()`` gives the account: what was saved
    and the command that resumes (by default, that nothing was).
    """
    caught: list[int] = []
    try:
        with _terminate_as_interrupt(caught):
            return body()
    except errors as exc:
        print(f"{prog}: error: {one_line(str(exc))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return _interrupted(prog, caught[0] if caught else signal.SIGINT, on_interrupt)


@contextmanager
def blame(flag: str, *errors: type[Exception]) -> Iterator[None]:
    """Re-raise an error of ``errors`` (default :data:`VALUE_ERRORS`) as a UsageError for ``flag``.

    Used around library calls that validate a flag's value (a policy config, an
    environment's arguments, a checkpoint load), so their message reaches the user
    as one line that names the flag.
    """
    caught = errors or VALUE_ERRORS
    try:
        yield
    except UsageError:
        raise
    except caught as exc:
        message = str(exc) or type(exc).__name__
        # "--preset: preset: unknown preset 'x'" says the name twice
        message = message.removeprefix(f"{flag.lstrip('-').replace('-', '_')}: ")
        message = message.removeprefix(f"{flag}: ")
        raise UsageError(flag, message) from exc


def _as_usage(flag: str, check: Callable[[], T]) -> T:
    """``check()``, a check of :mod:`budgetmix._validate` on ``flag``'s value; its
    :class:`ConfigError` becomes a :class:`UsageError` for ``flag``."""
    try:
        return check()
    except ConfigError as exc:
        raise UsageError(flag, str(exc).removeprefix(flag).lstrip()) from None


def integer(flag: str, value: Any, *, low: int) -> int:
    """``value`` if it is an integer ``>= low`` (not a bool)."""
    return _as_usage(flag, lambda: check_int(flag, value, minimum=low))


def integers(flag: str, value: Any, *, low: int) -> list[int]:
    """``value`` if it is a non-empty list of integers ``>= low``."""
    return list(_as_usage(flag, lambda: check_ints(flag, value, minimum=low)))


def number(flag: str, value: Any, *, low: float, high: float | None = None) -> float:
    """``value`` as a float if it is a finite number in ``[low, high]``."""
    if high is None:
        return _as_usage(flag, lambda: check_number(flag, value, minimum=low))
    return _as_usage(flag, lambda: check_between(flag, value, low, high))


def choice(flag: str, value: Any, choices: Sequence[str]) -> str:
    """``value`` if it is one of ``choices``."""
    return _as_usage(flag, lambda: check_choice(flag, value, choices))


def mapping(flag: str, value: Any) -> dict[str, Any]:
    """``value`` as a dict if it is a mapping with string keys (a JSON object)."""
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        raise UsageError(flag, f"expected a JSON object, got {type(value).__name__}")
    return dict(value)


def json_object(flag: str, text: str) -> dict[str, Any]:
    """The JSON object ``text`` holds."""
    try:
        value = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise UsageError(flag, f"not valid JSON: {exc}") from None
    return mapping(flag, value)


def _path(flag: str, value: Any) -> Path:
    if not isinstance(value, str | Path) or not str(value) or "\x00" in str(value):
        raise UsageError(flag, f"expected a path, got {value!r}")
    return Path(value)


def _kind(flag: str, path: Path) -> str:
    """``"dir"``, ``"file"``, ``"other"`` or ``"missing"``; an unusable name is a UsageError."""
    try:
        if path.is_dir():
            return "dir"
        if path.is_file():
            return "file"
        return "other" if path.exists() else "missing"
    except OSError as exc:  # e.g. a name longer than the file system allows
        raise UsageError(flag, f"unusable path: {exc.strerror or exc}") from None


def readable_file(flag: str, value: Any) -> Path:
    """``value`` as a path if it names an existing file."""
    path = _path(flag, value)
    kind = _kind(flag, path)
    if kind != "file":
        raise UsageError(flag, f"{str(path)!r} {_NOT[kind]}; expected a file")
    return path


def model_dir(flag: str, value: Any) -> Path:
    """``value`` as a path if it is a local model directory (with ``config.json``).

    Checked before any loading, so a missing path never reaches the model hub's code.
    """
    path = _path(flag, value)
    kind = _kind(flag, path)
    if kind != "dir":
        raise UsageError(flag, f"{str(path)!r} {_NOT[kind]}; expected a local model directory")
    if _kind(flag, path / "config.json") != "file":
        raise UsageError(flag, f"{str(path)!r} is not a model directory (no config.json)")
    return path


def output_dir(flag: str, value: Any) -> Path:
    """``value`` as a path if it is a directory or could be created as one."""
    path = _path(flag, value)
    for existing in (path, *path.parents):
        kind = _kind(flag, existing)
        if kind == "missing":
            continue
        if kind != "dir":
            raise UsageError(flag, f"{str(existing)!r} exists and is not a directory")
        break
    return path


def output_file(flag: str, value: Any) -> Path:
    """``value`` as a path if a file could be written there (its folder may not exist yet)."""
    path = _path(flag, value)
    if _kind(flag, path) == "dir":
        raise UsageError(flag, f"{str(path)!r} is a directory; expected a file name")
    output_dir(flag, path.parent)
    return path
