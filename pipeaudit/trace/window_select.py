"""Which profiled window of a command's inputs to read: ``latest`` (the default), ``all`` or
one named by its label.

    sel = select_windows(["tb/"], "latest")
    sel.chosen[0].label, sel.note, sel.paths(sel.chosen[0])

The windows are :mod:`.windows`' (the same that ``pipeaudit watch`` audits, with the same
labels). A folder whose traces hold one file per rank is one window, read as given, with no
pass over its files beyond their first bytes; so are files named one by one.

* ``latest``: the last complete window (every rank of its world size), else the last one;
* ``all``: every window, in the order they were profiled;
* a LABEL: the window watch calls so (``step 4``, ``iteration_3``, ``profile_trace/iteration_3``);
  a handler window's folder name (``step_00000004``) and ``step_4`` name it too.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from pipeaudit.errors import ConfigError, TraceError, TraceErrorKind as Kind
from pipeaudit.trace.discover import discover, is_iteration_dir, trace_dirs
from pipeaudit.trace.window_index import INDEX_DIR, step_of_folder
from pipeaudit.trace.windows import (
    Window,
    WindowFinder,
    cycles_of,
    file_info,
    group_key,
    group_window,
    order_key,
    ranks_repeat,
)

LATEST = "latest"
ALL = "all"
_SEP = re.compile(r"[ _-]+")
_NUMBER = re.compile(r"\d+")
_SHOWN = 6  #: labels a note lists before it shortens the list


@dataclass
class Selection:
    """The windows of a command's inputs and the ones chosen."""

    windows: list[Window]  #: every window found, in the order they were profiled
    chosen: list[Window]
    given: list[str] | None  #: the inputs as given, when they are the one window
    note: str | None  #: which window was read and which others there are, when there are

    def paths(self, window: Window) -> list[str]:
        """What to read for ``window``: the inputs as given when they are the window."""
        return list(self.given) if self.given is not None else [str(f) for f in window.files]


def select_windows(paths: Sequence[str | os.PathLike[str]], spec: str = LATEST) -> Selection:
    """The windows of ``paths`` (files, directories, globs: what :func:`pipeaudit.load`
    takes) and the one(s) ``spec`` names (see the module docstring). Raises
    :class:`TraceError` for unreadable inputs and :class:`ConfigError` for a LABEL that names
    no window, or several."""
    given = [os.fspath(p) for p in paths]
    windows, as_given = find_windows(given)
    if len(windows) == 1 and not as_given:
        as_given = _are_the_inputs(windows[0], given)
    if spec == ALL:
        chosen = windows
    elif spec == LATEST:
        complete = [w for w in windows if w.complete]
        chosen = [(complete or windows)[-1]]
    else:
        chosen = [_named(windows, spec, _source(given))]
    note = _note(windows, chosen[0], spec, _source(given)) if len(windows) > 1 and \
        spec != ALL else None
    return Selection(windows, chosen, given if as_given else None, note)


def find_windows(paths: list[str]) -> tuple[list[Window], bool]:
    """(the windows of ``paths`` in profiled order, whether the inputs are one window as
    given)."""
    if len(paths) == 1 and os.path.isdir(paths[0]):
        root = Path(paths[0])
        if not _handler_folder(root):
            found = trace_dirs(root)
            files = [f for fs in found.values() for f in fs]
            if sum(is_iteration_dir(d) for d in found) < 2:
                one = _one_window(files, _name(root))
                if one is not None:
                    return [one], True
        windows = WindowFinder(root, settle_s=0.0, steps="when_needed").poll(final=True)
        if not windows:
            raise TraceError(root, "no trace file that exists is named in this window index",
                             Kind.PATH)
        return windows, False
    files = discover(paths)
    one = _one_window(files, _common_name(files))
    if one is not None:
        return [one], True
    return _windows_of_files(files), False


def _are_the_inputs(window: Window, given: list[str]) -> bool:
    """Whether the inputs as given name exactly the window's files (then they are read, and
    named in messages, as given)."""
    try:
        files = discover(given)
    except TraceError:
        return False
    return {os.path.realpath(f) for f in files} == {os.path.realpath(f) for f in window.files}


def _handler_folder(root: Path) -> bool:
    """The handler's run folder, its index, or one of its window folders."""
    return (root / INDEX_DIR).is_dir() or root.name == INDEX_DIR or \
        (step_of_folder(root) is not None and root.parent.name == INDEX_DIR)


def _one_window(files: list[Path], name: str) -> Window | None:
    """The window the files make when no rank has two of them, else None."""
    stats = [(p, p.stat()) for p in files]
    items = [(p, st, file_info(p, st, whole=False)) for p, st in stats]
    if ranks_repeat([i.rank for _, _, i in items]):
        return None
    dirs = {p.parent for p in files}
    folder = dirs.pop() if len(dirs) == 1 else Path(os.path.commonpath([str(d) for d in dirs]))
    return group_window(".", name, None, False, folder, items)


def _windows_of_files(files: list[Path]) -> list[Window]:
    """Files named one by one (or by a glob) where a rank has several: each directory's files
    by their first ``ProfilerStep``, as :class:`WindowFinder` groups a directory's."""
    by_dir: dict[Path, list[Path]] = {}
    for f in files:
        by_dir.setdefault(f.parent, []).append(f)
    out = []
    for d, fs in by_dir.items():
        groups = cycles_of([(p, p.stat()) for p in fs])
        name = str(d) if len(by_dir) > 1 else "" if len(groups) > 1 else _name(d)
        for (first, cycle), items in groups.items():
            out.append(group_window(group_key(str(d), first, cycle), name, first,
                                    len(groups) > 1, d, items, cycle))
    return sorted(out, key=order_key)


def _name(d: Path) -> str:
    resolved = d.resolve()
    return resolved.name or str(resolved)


def _common_name(files: list[Path]) -> str:
    dirs = {f.parent for f in files}
    return _name(dirs.pop()) if len(dirs) == 1 else \
        _name(Path(os.path.commonpath([str(d.resolve()) for d in dirs])))


def _source(given: list[str]) -> str:
    return given[0] if len(given) == 1 else f"{given[0]} (+{len(given) - 1} more)"


def canonical(label: str) -> str:
    """A label as a user may type it: ``step_00000004``, ``step-4`` -> ``step 4``;
    ``run/ step 4`` -> ``run/step 4``; ``step_0_cycle_2`` -> ``step 0 cycle 2``; trailing
    slashes and case ignored."""
    text = label.strip().replace(os.sep, "/").rstrip("/").lower()
    text = _SEP.sub(" ", text).replace("/ ", "/").replace(" /", "/")
    return _NUMBER.sub(lambda m: str(int(m.group(0))), text)


def _names(w: Window, shared_folder: bool) -> set[str]:
    names = {w.label, w.key}
    if not shared_folder:
        names |= {w.folder.name, str(w.folder)}
    return {canonical(n) for n in names}


def _named(windows: list[Window], spec: str, source: str) -> Window:
    want = canonical(spec)
    folders = [w.folder for w in windows]
    hits = [w for w in windows
            if any(n == want or n.endswith("/" + want)
                   for n in _names(w, folders.count(w.folder) > 1))]
    if len(hits) == 1:
        return hits[0]
    if not hits:
        raise ConfigError(f"--window {spec}: {source} holds no such window; its windows: "
                          f"{_labels(windows)}")
    raise ConfigError(f"--window {spec}: names {len(hits)} windows of {source} "
                      f"({_labels(hits)}); give the full label")


def _labels(windows: list[Window]) -> str:
    labels = [w.label for w in windows]
    if len(labels) > _SHOWN:
        labels = labels[:2] + [f"... ({len(labels) - 5} more)"] + labels[-3:]
    return ", ".join(labels)


def _note(windows: list[Window], chosen: Window, spec: str, source: str) -> str:
    """``tb/ holds 3 profiled windows (step 4, step 8, step 12); read step 12, the latest
    (--window LABEL for another, --window all for each)``."""
    which = "the latest" if spec == LATEST else "as asked"
    text = (f"{source} holds {len(windows)} profiled windows ({_labels(windows)}); read "
            f"{chosen.label}, {which}")
    if spec != LATEST:
        return text
    later = [w.label for w in windows if order_key(w) > order_key(chosen)]
    if later:
        text += f" complete one ({', '.join(later)} {'misses' if len(later) == 1 else 'miss'} ranks)"
    return text + " (--window LABEL for another, --window all for each)"


__all__ = ["ALL", "LATEST", "Selection", "canonical", "find_windows", "select_windows"]
