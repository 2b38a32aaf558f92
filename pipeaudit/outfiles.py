"""Writing output files safely: over an existing file as ``cp`` and ``cc -o`` do, never over an
input, never half-written.

Every file pipeaudit writes (reports, exports, plots, manifests, sweep results) goes through
:func:`atomic_path`: the content is written to a temporary file next to the target and renamed
over it only once complete, so a reader (or a crash) never sees half a file, and an existing
file is kept untouched when writing fails. :func:`check_outputs`, called by a command before
any work, refuses an output that is one of the command's inputs and two outputs of one path.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager

from pipeaudit.errors import ConfigError, TraceError

PathArg = str | os.PathLike[str]
_GLOB_CHARS = re.compile(r"[*?\[]")


def check_outputs(outputs: Mapping[str, PathArg | None], inputs: Sequence[PathArg | None] = ()) -> None:
    """Refuse, before anything is written, two outputs of one path and an output that is one of
    ``inputs`` (files, directories or globs of traces; a directory's traces count).
    ``outputs`` maps each output's flag (``-o``, ``--html`` ...) to its path or None."""
    named = [(flag, os.fspath(p)) for flag, p in outputs.items() if p]
    seen: dict[str, str] = {}
    for flag, path in named:
        key = os.path.realpath(path)
        if key in seen:
            raise ConfigError(f"{path}: named for both {seen[key]} and {flag}; give each output "
                              "its own file")
        seen[key] = flag
    given = [os.fspath(p) for p in inputs if p]
    for flag, path in named:
        if os.path.exists(path) and _is_input(path, given):
            raise ConfigError(f"{path}: is an input of this command: name another file for "
                              f"{flag} (an input is never overwritten)")


def _is_input(path: str, given: list[str]) -> bool:
    """Whether the existing file ``path`` is one of the files ``given`` names (a directory or a
    glob by the traces found in it)."""
    if any(_same(path, g) for g in given if os.path.isfile(g)):
        return True
    real = os.path.realpath(path)
    searched = [g for g in given if _may_find(real, g)]
    if not searched:
        return False
    from pipeaudit.trace.discover import discover

    try:
        found = discover(searched)
    except TraceError:  # the command itself says what is wrong with its inputs
        return False
    return any(_same(path, f) for f in found)


def _may_find(real: str, arg: str) -> bool:
    """Whether discovering ``arg`` (a directory or glob) could yield the file at ``real``."""
    if not os.path.lexists(arg) and _GLOB_CHARS.search(arg):
        return True
    if not os.path.isdir(arg):
        return False
    from pipeaudit.trace.naming import has_trace_suffix

    return real.startswith(os.path.realpath(arg) + os.sep) and has_trace_suffix(os.path.basename(real))


def _same(a: PathArg, b: PathArg) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _reason(exc: OSError) -> str:
    from pipeaudit.trace.source import os_problem

    return os_problem(exc).removeprefix("cannot read: ")


@contextmanager
def atomic_path(path: str | os.PathLike, *, what: str = "the output",
                suffix: str = "") -> Iterator[str]:
    """Yield a temporary path next to ``path``; when the block ends normally it replaces
    ``path`` (an existing file included). An OSError becomes one ConfigError line naming
    ``path`` and ``what``; the temporary file is removed on every exit. ``suffix`` keeps an
    extension for writers that choose the format from the name."""
    target = os.fspath(path)
    directory, name = os.path.split(target)
    tmp = os.path.join(directory, f".{name}.tmp-{os.getpid()}{suffix}")
    try:
        yield tmp
        os.replace(tmp, target)
    except OSError as exc:
        raise ConfigError(f"{target}: cannot write {what}: {_reason(exc)}") from None
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def write_text_atomic(path: str | os.PathLike, text: str, *, what: str = "the output") -> None:
    """Write ``text`` (UTF-8) to ``path`` through :func:`atomic_path`."""
    with atomic_path(path, what=what) as tmp:
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)
