"""Find the profiled windows in a folder of traces as they land (any writer).

A window is the set of trace files, one per rank, that cover the same profiled steps:

* this package's handler: its index (:mod:`.index`) names each rank's file and the world size;
* any other writer (``tensorboard_trace_handler``'s ``{worker}.{ns}.pt.trace.json[.gz]``,
  torchtitan's ``profile_trace/iteration_N/rank{r}_trace.json``, Megatron-LM's
  ``--use-pytorch-profiler``, a folder per run): the files of one directory that start at the
  same ``ProfilerStep#N`` (a directory whose files have no ``ProfilerStep`` is one window).

A file is taken once it has not changed for ``settle_s`` seconds (writers do not rename into
place). A window is ready when every rank of its world size (``distributedInfo``, or the index)
has a settled file; one that stays short of ranks for ``rank_timeout_s`` after its newest file
is ready with the ranks that arrived. A window is reported once: a file that arrives after its
window was reported is not audited again.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from pipeaudit.during.index import INDEX_DIR, read_entries, step_of_folder, window_folders
from pipeaudit.during.traceinfo import TraceInfo, read_info
from pipeaudit.trace.discover import looks_like_trace
from pipeaudit.trace.naming import has_trace_suffix, natural_key

MAX_DEPTH = 4


@dataclass
class Window:
    """One profiled window: its files (one per rank present) and what is known of the job."""

    key: str  #: unique within the watched folder
    label: str  #: for people: ``step 12``, ``iteration_10``, ``run/ step 4``
    files: list[Path]
    world_size: int | None
    ranks: list[int]
    folder: Path  #: the handler's window folder, or the directory of the traces
    newest: float  #: mtime of its newest file
    step: int | None = None  #: the profiler step the window starts or ends at, when known
    missing: list[int] = field(default_factory=list)  #: ranks of the world size with no file

    @property
    def complete(self) -> bool:
        return not self.missing


class WindowFinder:
    """Polls a folder and returns each window once, when it is ready."""

    def __init__(self, root: str | os.PathLike, *, settle_s: float = 2.0,
                 rank_timeout_s: float = 60.0, clock: Callable[[], float] = time.time) -> None:
        self.root = Path(root)
        self.settle_s = settle_s
        self.rank_timeout_s = rank_timeout_s
        self.clock = clock
        self.reported: set[str] = set()
        self._info: dict[tuple[str, int, int], TraceInfo] = {}
        self._claimed: set[str] = set()  #: trace files the handler's index names

    def poll(self, *, final: bool = False) -> list[Window]:
        """The windows ready now and not reported before, by profiler step when known, else
        oldest first. ``final``: take every file as it is and every window as ready (the writer
        is done)."""
        now = self.clock()
        ready = [w for w in self._handler_windows(now, final) + self._dir_windows(now, final)
                 if w.key not in self.reported]
        ready.sort(key=lambda w: (w.step is None, w.step or 0, w.newest, natural_key(w.key)))
        self.reported.update(w.key for w in ready)
        return ready

    # ---- files

    def _settled(self, st: os.stat_result, now: float, final: bool) -> bool:
        return st.st_size > 0 and (final or now - st.st_mtime >= self.settle_s)

    def _info_of(self, p: Path, st: os.stat_result) -> TraceInfo:
        key = (str(p), st.st_size, st.st_mtime_ns)
        info = self._info.get(key)
        if info is None:
            info = self._info[key] = read_info(p)
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
            groups: dict[int | None, list[tuple[Path, os.stat_result, TraceInfo]]] = {}
            busy = False
            try:
                names = sorted(os.listdir(d), key=natural_key)
            except OSError:
                continue
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
                if not looks_like_trace(p):
                    continue
                info = self._info_of(p, st)
                groups.setdefault(info.first_step, []).append((p, st, info))
            rel = str(d.relative_to(self.root)) if d != self.root else "."
            for first, items in groups.items():
                key = f"{rel}@{first}" if first is not None else rel
                if key in self.reported:
                    continue
                window = self._group_window(key, rel, first, len(groups) > 1, d, items)
                waited = now - window.newest >= self.rank_timeout_s
                if window.world_size is None:
                    if busy and not final:
                        continue
                elif window.missing and not (final or waited):
                    continue
                out.append(window)
        return out

    @staticmethod
    def _group_window(key: str, rel: str, first: int | None, several: bool, d: Path,
                      items: list[tuple[Path, os.stat_result, TraceInfo]]) -> Window:
        worlds = [i.world_size for _, _, i in items if i.world_size]
        world = max(worlds) if worlds else None
        ranks = sorted({i.rank for _, _, i in items if i.rank is not None})
        where = "" if rel == "." else rel + " "
        label = rel if not several or first is None else f"{where}step {first}"
        return Window(key=key, label=label, step=first, files=[p for p, _, _ in items],
                      world_size=world, ranks=ranks, folder=d,
                      newest=max(st.st_mtime for _, st, _ in items),
                      missing=[r for r in range(world or 0) if r not in ranks])
