"""Reading one rank's file on a thread while the command is still importing.

Before ``pipeaudit analyze`` builds its first table it imports polars, numpy and the
analysis (about 0.3-0.4 s of CPU). Reading a trace needs none of them: the byte reader
(:mod:`~pipeaudit.trace.source`), the document (:mod:`~pipeaudit.trace.document`) and the
tokenizer (:mod:`~pipeaudit.trace.tokenizer`, whose compiled scanner releases the GIL)
import only msgspec. So the CLI starts reading the file this process will decode first, on a
thread, as soon as it knows the files (:func:`maybe_start`), and the imports run meanwhile;
gzip (isal, zlib) and the scanner run outside the GIL.

The thread does exactly what :func:`pipeaudit.trace.decode.decode_file` does up to the
tables: it tokenizes the batches into :class:`~pipeaudit.trace.tokenizer.Piece` s, in file
order (the scanner's batches pile up on its buffers and leave as one piece at the end), and
reads the header's members. ``decode_file`` takes them (:func:`take`) when the file and the
reading options are the ones it was started with, turns the pieces into columns as they
come, then goes on as usual; an error the thread met is raised there, after
the pieces before it, as the file's own read would have raised it. Otherwise (another file,
other options) the read is dropped and the file read again: the result never depends on it.
One read ahead exists at a time, or, for a run whose ranks threads of this process read
(:func:`pipeaudit.trace.pool.use_threads`), one per thread; the library
(``pipeaudit.load``) never starts one.
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeaudit import timings
from pipeaudit.trace.options import ReadOptions
from pipeaudit.trace.source import TraceBytes
from pipeaudit.trace.tokenizer import Piece, tokenize_document


class _Cancelled(Exception):
    """Raised inside the thread when nobody will take its read."""


@dataclass
class ReadDone:
    """The end of a read: what :class:`~pipeaudit.trace.decode` needs after the pieces."""

    text: TraceBytes
    members: dict[str, bytes]
    n_events: int


class ReadAhead:
    """One file read on a thread into pieces (see the module docstring)."""

    def __init__(self, path: str | os.PathLike[str], options: ReadOptions,
                 columns: frozenset[str]) -> None:
        self.path = Path(path)
        self.options = options
        self.columns = columns
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._cancelled = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pipeaudit-read-ahead",
                                        daemon=True)
        #: set by :meth:`pieces` once the thread has read the whole document
        self.done: ReadDone | None = None

    def start(self) -> None:
        timings.mark_once("start")  # the run's first byte is read now
        self._thread.start()

    def _run(self) -> None:
        try:
            text = TraceBytes(self.path)
            members, n_events = tokenize_document(text, self.options, self.columns, self._put)
            self._queue.put(ReadDone(text, members, n_events))
        except _Cancelled:
            pass
        except BaseException as exc:  # noqa: BLE001 - raised again by the taker, in order
            self._queue.put(exc)

    def _put(self, piece: Piece) -> None:
        if self._cancelled.is_set():
            raise _Cancelled
        self._queue.put(piece)

    def matches(self, path: str | os.PathLike[str], options: ReadOptions,
                columns: frozenset[str]) -> bool:
        """True when this read is the read of ``path`` with these options and columns."""
        return (same_file(self.path, Path(path)) and columns == self.columns
                and options.reads_like(self.options))

    def pieces(self) -> Iterator[Piece]:
        """The pieces in file order, as the thread makes them; then :attr:`done` is set, or
        the thread's error is raised."""
        while True:
            item = self._queue.get()
            if isinstance(item, Piece):
                yield item
            elif isinstance(item, ReadDone):
                self.done = item
                return
            else:
                raise item

    def cancel(self) -> None:
        """Stop the thread at its next batch (its pieces are dropped)."""
        self._cancelled.set()


def same_file(a: str | os.PathLike[str], b: str | os.PathLike[str]) -> bool:
    """True when ``a`` and ``b`` name the same file."""
    a, b = Path(a), Path(b)
    if a == b:
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


_pending: list[ReadAhead] = []
_lock = threading.Lock()


def start(path: str | os.PathLike[str], options: ReadOptions,
          columns: frozenset[str], *, keep: bool = False) -> ReadAhead:
    """Start reading ``path`` ahead; the reads already pending are dropped, unless ``keep``
    (a run whose ranks several threads of this process read: one read ahead per thread)."""
    global _pending
    ahead = ReadAhead(path, options, columns)
    with _lock:
        old = [] if keep else _pending
        _pending = [*_pending, ahead] if keep else [ahead]
    for o in old:
        o.cancel()
    ahead.start()
    return ahead


def pending_path() -> Path | None:
    """The (first) file being read ahead, if any."""
    paths = pending_paths()
    return paths[0] if paths else None


def pending_paths() -> list[Path]:
    """The files being read ahead, in the order they were started."""
    return [a.path for a in _pending]


def take(path: str | os.PathLike[str], options: ReadOptions,
         columns: frozenset[str]) -> ReadAhead | None:
    """The read ahead of ``path`` if it was made with these options and columns (it is
    then no longer pending); a read of ``path`` made otherwise is dropped."""
    global _pending
    with _lock:
        ahead = next((a for a in _pending if same_file(a.path, Path(path))), None)
        if ahead is None:
            return None
        _pending = [a for a in _pending if a is not ahead]
    if ahead.matches(path, options, columns):
        return ahead
    ahead.cancel()
    return None


def drop() -> None:
    """Drop the pending reads, if any (the files they were for are not read after all)."""
    global _pending
    with _lock:
        old, _pending = _pending, []
    for ahead in old:
        ahead.cancel()


def biggest(files: Sequence[tuple[str, int]], n: int) -> list[str]:
    """The ``n`` files to read ahead among ``(path, JSON bytes)``: the biggest, biggest first
    (the decode takes the biggest files first)."""
    return [f for f, _ in sorted(files, key=lambda f: -f[1])[:n]]
