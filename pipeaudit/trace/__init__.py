"""pipeaudit.trace: Kineto / Chrome-trace files -> per-rank columnar event tables.

Modules, one job each:

* :mod:`~pipeaudit.trace.discover`   paths, directories, globs -> trace files
* :mod:`~pipeaudit.trace.decode`     one file -> :class:`RankTrace`: the reading pipeline,
  which is, in order:

  - :mod:`~pipeaudit.trace.source`     the one byte reader: regular files, gzip, BOM,
    invalid UTF-8 repaired, a tolerant mode for salvage
  - :mod:`~pipeaudit.trace.document`   the document's structure: header members, the
    events cut into batches of whole events, in bounded memory
  - :mod:`~pipeaudit.trace.tokenizer`  a batch of events -> columns: the compiled
    :mod:`~pipeaudit.trace.scanner` or msgspec (:mod:`~pipeaudit.trace.schema`)
  - :mod:`~pipeaudit.trace.header`     header checks, rank, base time
  - :mod:`~pipeaudit.trace.columns`    drop rules, exact ns (:mod:`~pipeaudit.trace.timestamps`), sort
  - :mod:`~pipeaudit.trace.options`    the reader's options (:class:`ReadOptions`), explicit
  - :mod:`~pipeaudit.trace.diagnose`   the wording of every problem found in the bytes
* :mod:`~pipeaudit.trace.model`      :class:`RankTrace`, :class:`TraceSet` and their schemas
* :mod:`~pipeaudit.trace.validate`   do the ranks form one run?
* :mod:`~pipeaudit.trace.clock`      one absolute ns axis for all ranks
* :mod:`~pipeaudit.trace.load`       many files, in parallel -> :class:`TraceSet`
* :mod:`~pipeaudit.trace.executor`   where per-rank work runs: in process, a process pool, Dask
* :mod:`~pipeaudit.trace.naming`     rank from a file name, natural sort
* :mod:`~pipeaudit.trace.windows`    the profiled windows of a folder (``watch``, ``--window``):
  :mod:`~pipeaudit.trace.window_select` picks one, :mod:`~pipeaudit.trace.window_index` is the
  handler's index, :mod:`~pipeaudit.trace.traceinfo` a file's rank and first step, read cheaply
* :mod:`~pipeaudit.trace.salvage`    the complete events of a truncated file (``salvage=True``)
* :mod:`~pipeaudit.trace.jsonscan`   where the events are in (cut) JSON bytes
* :mod:`~pipeaudit.trace.cut`        exclude steps a damaged or partial trace does not hold whole
"""

from importlib import import_module
from typing import TYPE_CHECKING, Any

# ``discover`` is also a submodule's name: bound here, to the function, before anything
# imports the submodule (which would bind the module). Both import no polars.
from pipeaudit.trace.discover import discover
from pipeaudit.trace.naming import rank_from_name

# The other names load on first use (PEP 562): importing one light module of the package
# (the byte reader, the document, the scanner) must not import polars, so that a command can
# start reading a file while polars loads (see :mod:`pipeaudit.trace.readahead`).
_LAZY = {
    "DROPPED_CATEGORIES": "pipeaudit.trace.decode",
    "read_trace": "pipeaudit.trace.decode",
    "load_traces": "pipeaudit.trace.load",
    "map_ranks": "pipeaudit.trace.load",
    "EVENT_SCHEMA": "pipeaudit.trace.model",
    "MEMORY_SCHEMA": "pipeaudit.trace.model",
    "RankInfo": "pipeaudit.trace.model",
    "RankTrace": "pipeaudit.trace.model",
    "TraceSet": "pipeaudit.trace.model",
    "ReadOptions": "pipeaudit.trace.options",
    "Tokenizer": "pipeaudit.trace.options",
}

if TYPE_CHECKING:  # pragma: no cover
    from pipeaudit.trace.decode import DROPPED_CATEGORIES, read_trace
    from pipeaudit.trace.load import load_traces, map_ranks
    from pipeaudit.trace.model import EVENT_SCHEMA, MEMORY_SCHEMA, RankInfo, RankTrace, TraceSet
    from pipeaudit.trace.options import ReadOptions, Tokenizer


def __getattr__(name: str) -> Any:
    """The package's public names, imported when first used."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value


__all__ = [
    "DROPPED_CATEGORIES",
    "EVENT_SCHEMA",
    "MEMORY_SCHEMA",
    "RankInfo",
    "RankTrace",
    "ReadOptions",
    "Tokenizer",
    "TraceSet",
    "discover",
    "load_traces",
    "map_ranks",
    "rank_from_name",
    "read_trace",
]
