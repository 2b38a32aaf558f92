"""pipeaudit.trace: Kineto / Chrome-trace files -> per-rank columnar event tables.

Modules, one job each:

* :mod:`~pipeaudit.trace.discover`   paths, directories, globs -> trace files
* :mod:`~pipeaudit.trace.source`     a file's bytes (gzip by magic bytes)
* :mod:`~pipeaudit.trace.schema`     msgspec Structs of the fields that are read
* :mod:`~pipeaudit.trace.timestamps` exact µs text -> integer ns
* :mod:`~pipeaudit.trace.decode`     one file -> :class:`RankTrace`
* :mod:`~pipeaudit.trace.stream`     the same in bounded memory, batch by batch (big files)
* :mod:`~pipeaudit.trace.model`      :class:`RankTrace`, :class:`TraceSet` and their schemas
* :mod:`~pipeaudit.trace.validate`   do the ranks form one run?
* :mod:`~pipeaudit.trace.clock`      one absolute ns axis for all ranks
* :mod:`~pipeaudit.trace.load`       many files, in parallel -> :class:`TraceSet`
* :mod:`~pipeaudit.trace.executor`   where per-rank work runs: in process, a process pool, Dask
* :mod:`~pipeaudit.trace.naming`     rank from a file name, natural sort
* :mod:`~pipeaudit.trace.synth`      tiny Kineto-like traces built in code (tests, examples)
* :mod:`~pipeaudit.trace.salvage`    the complete events of a truncated file (``salvage=True``)
* :mod:`~pipeaudit.trace.jsonscan`   where the events are in (cut) JSON bytes
* :mod:`~pipeaudit.trace.cut`        exclude steps a damaged or partial trace does not hold whole
* :mod:`~pipeaudit.trace.diagnose`   precise messages for files that do not parse
"""

from pipeaudit.trace.decode import DROPPED_CATEGORIES, read_trace
from pipeaudit.trace.discover import discover
from pipeaudit.trace.load import load_traces
from pipeaudit.trace.model import EVENT_SCHEMA, MEMORY_SCHEMA, RankTrace, TraceSet
from pipeaudit.trace.naming import rank_from_name

__all__ = [
    "DROPPED_CATEGORIES",
    "EVENT_SCHEMA",
    "MEMORY_SCHEMA",
    "RankTrace",
    "TraceSet",
    "discover",
    "load_traces",
    "rank_from_name",
    "read_trace",
]
