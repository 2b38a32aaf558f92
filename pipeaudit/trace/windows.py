"""Find the profiled windows in a folder of traces (any writer), as they land or as they lie.

A window is the set of trace files, one per rank, that cover the same profiled steps:

* :func:`pipeaudit.profiler.trace_handler`'s: its index (:mod:`.window_index`) names each
  rank's file and the world size; the folder given may be the run's, its ``pipeaudit/`` index
  or one window folder ``pipeaudit/step_N/``;
* any other writer (``tensorboard_trace_handler``'s ``{worker}.{ns}.pt.trace.json[.gz]``,
  torchtitan's ``profile_trace/iteration_N/rank{r}_trace.json``, Megatron-LM's
  ``--use-pytorch-profiler``, a folder per run): the files of one directory that start at the
  same ``ProfilerStep#N`` (a directory whose files have no ``ProfilerStep`` is one window).

A file is taken once it has not changed for ``settle_s`` seconds (writers do not rename into
place). A window is ready when every rank of its world size (``distributedInfo``, or the index)
has a settled file; one that stays short of ranks for ``rank_timeout_s`` after its newest file
is ready with the ranks that arrived. A window is reported once: a file that arrives after its
window was reported is not audited again.

``steps="when_needed"`` (a folder read once, :mod:`.window_select`) reads a file's first
``ProfilerStep`` (a pass over the whole file) only in a directory where a rank has more than
one file; ``"always"`` (``pipeaudit watch``) reads it for every file, so that a window keeps
its key while later cycles land beside it.
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Literal

from pipeaudit.trace.discover import is_iteration_dir, looks_like_trace
from pipeaudit.trace.naming import has_trace_suffix, natural_key, rank_from_name
from pipeaudit.trace.traceinfo import TraceInfo, read_head, read_info
from pipeaudit.trace.window_index import INDEX_DIR, read_entries, step_of_folder, window_folders

MAX_DEPTH = 4
_DIGITS = re.compile(r"(\d+)$")
Item = tuple[Path, os.stat_result, TraceInfo]  #: a trace file, its stat and what it says
Cycle = tuple[int | None, int]  #: (first ProfilerStep, k-th export of those steps, 0: the only)
_TORCH_NAME = re.compile(r"^(.+)\.(\d+)\.pt\.trace\.json(?:\.gz)?$")  #: {worker}.{ns}


@dataclass
class Window:
    """One profiled window: its files (one per rank present) and what is known of the job."""

    key: str  #: unique within the watched folder
    label: str  #: for people: ``step 12``, ``iteration_10``, ``run/ step 4``, the folder's name
    files: list[Path]
    world_size: int | None
    ranks: list[int]
    folder: Path  #: the handler's window folder, or the directory of the traces
    newest: float  #: mtime of its newest file
    step: int | None = None  #: the profiler step the window starts or ends at, when known
    missing: list[int] = field(default_factory=list)  #: ranks of the world size with no file
    cycle: int = 0  #: k when its files are each process's k-th export of the same steps

    @property
    def complete(self) -> bool:
        return not self.missing


def order_key(w: Window) -> tuple:
    """Windows in the order they were profiled: by step when known, else oldest first."""
    return (w.step is None, w.step or 0, w.cycle, w.newest, natural_key(w.key))


class WindowFinder:
    """Polls a folder and returns each window once, when it is ready."""

    def __init__(self, root: str | os.PathLike, *, settle_s: float = 2.0,
                 rank_timeout_s: float = 60.0, clock: Callable[[], float] = time.time,
                 steps: Literal["always", "when_needed"] = "always") -> None:
        root = Path(root)
        #: the one window folder, or every window of the index, when ``root`` is inside one
        self._only: Path | None = None
        if root.name == INDEX_DIR or step_of_folder(root) is not None and \
                root.parent.name == INDEX_DIR:
            self._only = root
            root = root.parent if root.name == INDEX_DIR else root.parent.parent
        self.root = root
        self.settle_s = settle_s
        self.rank_timeout_s = rank_timeout_s
        self.clock = clock
        self.steps = steps
        self.reported: set[str] = set()
        self._info: dict[tuple[str, int, int], TraceInfo] = {}
        self._claimed: set[str] = set()  #: trace files the handler's index names

    def poll(self, *, final: bool = False) -> list[Window]:
        """The windows ready now and not reported before, by profiler step when known, else
        oldest first. ``final``: take every file as it is and every window as ready (the writer
        is done)."""
        now = self.clock()
        found = self._handler_windows(now, final)
        if self._only is None:
            found += self._dir_windows(now, final)
        ready = sorted((w for w in found if w.key not in self.reported), key=order_key)
        self.reported.update(w.key for w in ready)
        return ready

    # ---- files

    def _settled(self, st: os.stat_result, now: float, final: bool) -> bool:
        return st.st_size > 0 and (final or now - st.st_mtime >= self.settle_s)

    def _info_of(self, p: Path, st: os.stat_result, *, whole: bool) -> TraceInfo:
        """:func:`file_info`, the whole file's kept while the file does not change."""
        if not whole:
            return file_info(p, st, whole=False)
        key = (str(p), st.st_size, st.st_mtime_ns)
        info = self._info.get(key)
        if info is None:
            info = self._info[key] = file_info(p, st, whole=True)
        return info

    # ---- the handler's index

    def _handler_windows(self, now: float, final: bool) -> list[Window]:
        out = []
        self._claimed = set()
        for folder in self._index_folders():
            entries = read_entries(folder)
            self._claimed.update(str(e.trace) for e in entries)
            key = str(folder.relative_to(self.root))
            if not entries or key in self.reported:
                continue
            stats = {}
            for e in entries:
                try:
                    stats[e.rank] = e.trace.stat()
                except OSError:
                    continue
            settled = {r: st for r, st in stats.items() if self._settled(st, now, final)}
            world = max((e.world_size or 0 for e in entries), default=0) or None
            newest = max((st.st_mtime for st in stats.values()), default=now)
            missing = [r for r in range(world or 0) if r not in settled]
            waited = now - newest >= self.rank_timeout_s
            if not settled or (missing and not (final or waited)) or \
                    len(settled) < len(stats) and not (final or waited):
                continue
            step = step_of_folder(folder)
            run_dir = folder.parent.parent
            where = "" if run_dir == self.root else f"{run_dir.relative_to(self.root)} "
            out.append(Window(key=key, label=f"{where}step {step}", step=step,
                              files=[e.trace for e in entries if e.rank in settled],
                              world_size=world, ranks=sorted(settled), folder=folder,
                              newest=newest, missing=missing))
        return out

    def _index_folders(self) -> list[Path]:
        if self._only is not None:
            return window_folders(self.root) if self._only.name == INDEX_DIR else [self._only]
        found = []
        for d in self._dirs():
            if (d / INDEX_DIR).is_dir():
                found += window_folders(d)
        return found

    # ---- any other writer

    def _dirs(self) -> list[Path]:
        """The root and its subdirectories (not the index, not symlinks), up to MAX_DEPTH."""
        out, stack = [], [(self.root, 0)]
        while stack:
            d, depth = stack.pop()
            out.append(d)
            if depth >= MAX_DEPTH:
                continue
            try:
                with os.scandir(d) as it:
                    subs = [Path(e.path) for e in it
                            if e.is_dir(follow_symlinks=False) and e.name != INDEX_DIR]
            except OSError:
                continue
            stack += [(s, depth + 1) for s in subs]
        return out

    def _dir_windows(self, now: float, final: bool) -> list[Window]:
        out = []
        for d in self._dirs():
            settled, busy = self._settled_traces(d, now, final)
            groups = self._groups(settled)
            rel = str(d.relative_to(self.root)) if d != self.root else "."
            for (first, cycle), items in groups.items():
                key = group_key(rel, first, cycle)
                if key in self.reported:
                    continue
                window = group_window(key, self._name(d, len(groups) > 1), first,
                                      len(groups) > 1, d, items, cycle)
                waited = now - window.newest >= self.rank_timeout_s
                if window.world_size is None:
                    if busy and not final:
                        continue
                elif window.missing and not (final or waited):
                    continue
                out.append(window)
        return out

    def _name(self, d: Path, several: bool) -> str:
        """A directory's name in labels: its path below the root; for the root, nothing when
        its windows are named by their steps, else its own name."""
        if d != self.root:
            return str(d.relative_to(self.root))
        return "" if several else (d.resolve().name or str(d.resolve()))

    def _settled_traces(self, d: Path, now: float,
                        final: bool) -> tuple[list[tuple[Path, os.stat_result]], bool]:
        """(the settled trace files of directory ``d`` the index does not claim, whether a
        trace-named file is still being written)."""
        out, busy = [], False
        try:
            names = sorted(os.listdir(d), key=natural_key)
        except OSError:
            return out, busy
        for name in names:
            p = d / name
            if not has_trace_suffix(name) or str(p) in self._claimed:
                continue
            try:
                st = p.stat()
            except OSError:
                continue
            if not p.is_file():
                continue
            if not self._settled(st, now, final):
                busy = True
                continue
            if looks_like_trace(p):
                out.append((p, st))
        return out, busy

    def _groups(self, files: list[tuple[Path, os.stat_result]]) -> dict[Cycle, list[Item]]:
        return cycles_of(files, self._info_of, always=self.steps == "always")


def file_info(p: Path, st: os.stat_result, *, whole: bool) -> TraceInfo:
    """A file's rank (``distributedInfo``, else its name) and world size; its first
    ``ProfilerStep`` too when ``whole`` (a pass over the file)."""
    info = read_info(p) if whole else TraceInfo(*read_head(p), None)
    return info if info.rank is not None else \
        TraceInfo(rank_from_name(p), info.world_size, info.first_step)


def cycles_of(files: list[tuple[Path, os.stat_result]], info_of=file_info, *,
              always: bool = False) -> dict[Cycle, list[Item]]:
    """One directory's files by profiling cycle, ``(first ProfilerStep, k)``: by their first
    ``ProfilerStep``, read for every file when ``always``, else only when a rank has several
    files (one group, ``(None, 0)``, otherwise). A group where a rank still has several files,
    each rank's all from one process (torch's ``{worker}.{ns}`` names), is that process's
    exports in turn (k = 1, 2, ... by ``ns``): cycles of ``profile`` objects whose step
    numbers start over. Files of one rank from several processes stay together (two runs:
    reading them says they conflict)."""
    items = [(p, st, info_of(p, st, whole=always)) for p, st in files]
    if not always and ranks_repeat([i.rank for _, _, i in items]):
        items = [(p, st, info_of(p, st, whole=True)) for p, st in files]
    by_step: dict[int | None, list[Item]] = {}
    for item in items:
        by_step.setdefault(item[2].first_step, []).append(item)
    groups: dict[Cycle, list[Item]] = {}
    for first, group in by_step.items():
        turns = _turns(group)
        for k, turn in enumerate(turns, 1):
            groups[(first, k if len(turns) > 1 else 0)] = turn
    return groups


def _turns(items: list[Item]) -> list[list[Item]]:
    """``items`` split into each process's k-th export (see :func:`cycles_of`)."""
    by_rank: dict[int | None, list[Item]] = {}
    for item in items:
        by_rank.setdefault(item[2].rank, []).append(item)
    if all(len(v) == 1 for v in by_rank.values()):
        return [items]
    ordered = []
    for its in by_rank.values():
        names = [_TORCH_NAME.match(p.name) for p, _, _ in its]
        if len(its) > 1 and (None in names or len({m.group(1) for m in names if m}) > 1):
            return [items]
        ordered.append(sorted(its, key=lambda i: (int(m.group(2)) if (m := _TORCH_NAME.match(
            i[0].name)) else 0, i[1].st_mtime)))
    return [[its[k] for its in ordered if k < len(its)] for k in range(max(map(len, ordered)))]


def group_key(rel: str, first: int | None, cycle: int) -> str:
    """A window's key among a watched folder's: its directory, first step and turn."""
    key = f"{rel}@{first}" if first is not None else rel
    return f"{key}#{cycle}" if cycle else key


def ranks_repeat(ranks: list[int | None]) -> bool:
    """Two files of one rank (or two without a rank): several cycles, or runs, in one folder."""
    return len(ranks) > 1 and (len(set(ranks)) < len(ranks) or ranks.count(None) > 1)


def group_window(key: str, name: str, first: int | None, several: bool, d: Path,
                 items: list[Item], cycle: int = 0) -> Window:
    """The window of one group of files of directory ``d`` (``name``: how labels call ``d``;
    ``several``: ``d`` holds other groups, so the label names the step and the turn)."""
    worlds = [i.world_size for _, _, i in items if i.world_size]
    world = max(worlds) if worlds else None
    ranks = sorted({i.rank for _, _, i in items if i.rank is not None})
    label = f"{name} step {first}".lstrip() if several and first is not None else name
    label = (f"{label} cycle {cycle}".lstrip() if cycle else label) or "."
    if first is None and is_iteration_dir(d):  # iteration_10/: its number orders the windows
        m = _DIGITS.search(d.name)
        first = int(m.group(1)) if m else None
    return Window(key=key, label=label, step=first, files=[p for p, _, _ in items],
                  world_size=world, ranks=ranks, folder=d,
                  newest=max(st.st_mtime for _, st, _ in items),
                  missing=[r for r in range(world or 0) if r not in ranks], cycle=cycle)
