"""Paths, directories and globs -> the trace files to read.

Rules
    * A **file** given by name is always taken (whatever its name), even if it is not a
      trace: reading it then says what is wrong. It must be a regular file: a FIFO, a
      device (a link to ``/dev/zero``) or a socket is refused by name (reading it would
      block or never end).
    * A **glob** (``*``, ``?``, ``[``; ``**`` recurses) is expanded when no file of that exact
      name exists; it must match at least one file. ``**`` does not follow symbolic links
      to directories (a link to ``.`` would make the walk endless), and what a glob matches
      must be a regular file too.
    * A **directory** is scanned for trace files: names ending in ``.json``, ``.json.gz``
      or ``.json.gzip`` (not ``manifest.json``) whose first bytes look like a Chrome trace
      (an object with ``traceEvents``, ``schemaVersion``, ``distributedInfo`` ... in its
      first 64 KiB, gzip or not); entries that are not regular files (FIFOs, devices,
      sockets) are skipped unread. First the directory itself; if it holds no trace, its
      subdirectories, recursively (up to 4 levels, symlinked directories not followed).
      This covers a run directory of ``rank*.json.gz``, a ``tensorboard_trace_handler``
      directory of ``{worker}.{ns}.pt.trace.json[.gz]`` and torchtitan's
      ``profile_trace/iteration_10/rank0_trace.json``. When traces are found in several
      directories named like iterations (``iteration_10``, ``step_20`` ...), the choice is
      the user's: that is an error naming them.
    * Files are returned in natural order (rank2 before rank10), each once.

Errors (:class:`TraceError`): no such path, a symlink loop, permission denied, an empty
directory, a directory without traces (naming each trace-named file it could not take, and
why: not gzip, not JSON, JSON without ``traceEvents``, empty ...), a glob without matches.
"""

from __future__ import annotations

import errno
import fnmatch
import glob
import os
import re
import stat
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

from pipeaudit.errors import TraceError, TraceErrorKind as Kind
from pipeaudit.trace.naming import NOT_TRACES, has_trace_suffix, natural_key
from pipeaudit.trace.sniff import Sniff, Verdict, sniff
from pipeaudit.trace.source import not_regular_problem, os_problem

MAX_DEPTH = 4
_GLOB_CHARS = re.compile(r"[*?\[]")
_ITERATION_DIR = re.compile(r"^(iteration|iter|step|epoch|cycle)[_-]?\d+$", re.IGNORECASE)


def looks_like_trace(path: Path) -> bool:
    """Cheap check of a file's first bytes (decompressed when gzip, by the trace reader's own
    byte reader): a JSON object that mentions a Chrome-trace key. Files that cannot be read
    count as traces so that reading them reports the problem (:mod:`pipeaudit.trace.sniff`)."""
    return sniff(path).verdict is not Verdict.OTHER


def _stat_or_raise(path: Path) -> os.stat_result:
    try:
        return os.stat(path)
    except OSError as exc:
        if exc.errno == errno.ENOENT and os.path.islink(path):
            raise TraceError(path, "broken symlink (its target does not exist)", Kind.PATH) from None
        raise TraceError(path, os_problem(exc), Kind.PATH) from None


def _list_dir(d: Path) -> list[os.DirEntry]:
    try:
        with os.scandir(d) as it:
            return sorted(it, key=lambda e: natural_key(e.name))
    except OSError as exc:
        raise TraceError(d, os_problem(exc), Kind.PATH) from None


def _traces_in(d: Path, unread: list[tuple[Path, Sniff]] | None = None
               ) -> tuple[list[Path], list[Path], bool]:
    """(trace files, subdirectories, dir had any entry) of one directory level. The files are
    those that look like traces, with those that cannot be read when one of them looks like a
    trace or may be salvaged; the other trace-named files go to ``unread`` with why."""
    files: list[Path] = []
    maybe: list[tuple[Path, Sniff]] = []
    subdirs: list[Path] = []
    entries = _list_dir(d)
    for entry in entries:
        p = Path(entry.path)
        try:
            is_dir = entry.is_dir(follow_symlinks=False)
            is_file = entry.is_file(follow_symlinks=True)
        except OSError:  # pragma: no cover - DirEntry caches most of this
            is_dir = is_file = False
        if is_dir:
            subdirs.append(p)
        elif has_trace_suffix(entry.name):
            if not is_file:
                # a trace-named entry that is not a regular file: a dangling link or a loop
                # is an error; a FIFO, device or socket named *.json is not a trace
                _stat_or_raise(p)
                continue
            verdict = sniff(p)
            if verdict.verdict is Verdict.TRACE:
                files.append(p)
            elif verdict.verdict is Verdict.UNREADABLE:
                maybe.append((p, verdict))
            elif unread is not None:
                unread.append((p, verdict))
    if files or any(v.salvageable for _, v in maybe):  # reading them says what is wrong
        files = sorted(files + [p for p, _ in maybe], key=lambda p: natural_key(p.name))
    elif unread is not None:
        unread.extend(maybe)
    return files, subdirs, bool(entries)


def is_iteration_dir(path: Path) -> bool:
    """A directory named like one profiling cycle: ``iteration_10``, ``step_20``, ``epoch-3``."""
    return _ITERATION_DIR.match(path.name) is not None


def trace_dirs(d: Path) -> dict[Path, list[Path]]:
    """The trace files under directory ``d``, by the directory that holds them: ``d`` alone when
    it holds traces itself, else its subdirectories that do (see the module docstring).
    Raises :class:`TraceError` for an empty directory and one with no trace below it (naming
    every trace-named file there that could not be taken, and why)."""
    unread: list[tuple[Path, Sniff]] = []
    files, subdirs, any_entry = _traces_in(d, unread)
    if files:
        return {d: files}
    if not any_entry:
        raise TraceError(d, "empty directory", Kind.PATH)
    found: dict[Path, list[Path]] = {}
    stack = [(s, 1) for s in sorted(subdirs, key=natural_key)]
    while stack:
        sub, depth = stack.pop(0)
        sub_files, sub_dirs, _ = _traces_in(sub, unread)
        if sub_files:
            found[sub] = sub_files
        if depth < MAX_DEPTH:
            stack.extend((s, depth + 1) for s in sorted(sub_dirs, key=natural_key))
    if not found:
        taken = f"; not taken: {_unread_text(d, unread)}" if unread else ""
        raise TraceError(
            d, "no trace files in this directory or below (looked for *.json and *.json.gz "
               f"files holding a Chrome/Kineto trace){taken}", Kind.PATH
        )
    return found


def _unread_text(d: Path, unread: list[tuple[Path, Sniff]]) -> str:
    """``rank0.json.gz, rank1.json.gz (not gzip, nor JSON); x.json (...)``: every file named
    (relative to ``d``), grouped by why."""
    by_reason: dict[str, list[str]] = {}
    for p, verdict in unread:
        by_reason.setdefault(verdict.reason or "unreadable", []).append(str(p.relative_to(d)))
    return "; ".join(f"{', '.join(names)} ({reason})" for reason, names in by_reason.items())


def _scan_dir(d: Path) -> list[Path]:
    found = trace_dirs(d)
    iteration_dirs = [p for p in found if is_iteration_dir(p)]
    if len(iteration_dirs) > 1:
        names = ", ".join(p.name for p in iteration_dirs[:6])
        more = f" and {len(iteration_dirs) - 6} more" if len(iteration_dirs) > 6 else ""
        raise TraceError(
            d, f"holds traces of several iterations ({names}{more}); pass one of them, "
               f"e.g. {iteration_dirs[-1]}", Kind.PATH
        )
    return [f for files_ in found.values() for f in files_]


def _glob(pattern: str) -> Iterator[str]:
    """The paths matching ``pattern``, as :func:`glob.glob` with ``recursive=True`` finds
    them, except that ``**`` does not enter symbolic links to directories (nor a directory
    twice), so that a link to ``.`` or to a parent cannot make the walk endless."""
    parts = pattern.split(os.sep)
    if "**" not in parts:
        yield from glob.glob(pattern)
        return
    root = os.sep if pattern.startswith(os.sep) else ""
    yield from _walk(root, [p for p in parts if p], set())


def _walk(base: str, parts: list[str], seen: set[tuple[int, int, int]]) -> Iterator[str]:
    if not parts:
        yield base
        return
    part, rest = parts[0], parts[1:]
    if part == "**":
        yield from _walk(base, rest, seen)  # zero directories
        try:
            st = os.stat(base or ".")
            key = (st.st_dev, st.st_ino, len(parts))
            if key in seen:
                return
            seen.add(key)
            entries = sorted(os.scandir(base or "."), key=lambda e: e.name)
        except OSError:
            return
        for entry in entries:
            if entry.name.startswith("."):
                continue
            if entry.is_dir(follow_symlinks=False):
                yield from _walk(os.path.join(base, entry.name), parts, seen)
            elif not rest:  # a trailing "**" matches the files too
                yield os.path.join(base, entry.name)
        return
    if not glob.has_magic(part):
        path = os.path.join(base, part) if base else part
        if os.path.lexists(path) if not rest else os.path.isdir(path):
            yield from _walk(path, rest, seen)
        return
    try:
        entries = sorted(os.scandir(base or "."), key=lambda e: e.name)
    except OSError:
        return
    for entry in entries:
        if entry.name.startswith(".") and not part.startswith("."):
            continue
        if not fnmatch.fnmatchcase(entry.name, part):
            continue
        if rest and not entry.is_dir():
            continue
        yield from _walk(os.path.join(base, entry.name), rest, seen)


def _regular(path: Path) -> Path:
    """``path`` if it is a regular file (following links); TraceError naming it otherwise."""
    problem = not_regular_problem(_stat_or_raise(path).st_mode)
    if problem is not None:
        raise TraceError(path, problem, Kind.PATH)
    return path


def _expand(arg: str | os.PathLike[str]) -> Iterable[Path]:
    text = os.fspath(arg)
    path = Path(text)
    if not os.path.lexists(path) and _GLOB_CHARS.search(text):
        matches = sorted(_glob(os.path.expanduser(text)), key=natural_key)
        if not matches:
            raise TraceError(text, "no files match this pattern", Kind.PATH)
        out: list[Path] = []
        for m in matches:
            mp = Path(m)
            if mp.is_dir():
                out.extend(_scan_dir(mp))
            elif mp.name not in NOT_TRACES:
                out.append(_regular(mp))
        if not out:
            raise TraceError(text, "no trace files match this pattern", Kind.PATH)
        return out
    path = Path(os.path.expanduser(text))
    st = _stat_or_raise(path)
    if stat.S_ISDIR(st.st_mode):
        return _scan_dir(path)
    return [_regular(path)]


def discover(paths: Sequence[str | os.PathLike[str]] | str | os.PathLike[str]) -> list[Path]:
    """Resolve files, directories and globs to trace files (see the module docstring)."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    if not paths:
        raise TraceError(None, "no trace files given", Kind.PATH)
    seen: set[str] = set()
    out: list[Path] = []
    for arg in paths:
        found = list(_expand(arg))
        for p in sorted(found, key=natural_key) if len(found) > 1 else found:
            key = os.path.realpath(p)
            if key not in seen:
                seen.add(key)
                out.append(p)
    return out
