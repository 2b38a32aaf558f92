"""msgspec Structs of the event fields that pipeaudit reads (the msgspec tokenizer's types).

Only the fields the analysis uses are declared; msgspec skips every other key while parsing,
without building Python objects for it. ``ts`` and ``dur`` are kept as :class:`msgspec.Raw`
(the decimal text as written in the file) so that they can be converted to integer
nanoseconds exactly (see :mod:`pipeaudit.trace.timestamps`).

The few ``args`` keys are typed ``Any`` on purpose: real traces disagree on their types
(ROCm runtime events write ``"stream": "0x0"``), and a strange value in one of them must not
make a whole trace unreadable; the decoder turns them into nullable integers.

All Structs are ``gc=False``: a decoded trace holds hundreds of thousands of them and they
never form reference cycles, so keeping them out of the cyclic garbage collector makes
decoding about twice as fast.
"""

from __future__ import annotations

from typing import Any

import msgspec

#: Top-level keys kept in :attr:`RankTrace.header` (all small). Other top-level keys
#: (``INFO`` log lines, site-specific job metadata, ...) are skipped while parsing.
HEADER_KEYS: tuple[str, ...] = (
    "schemaVersion",
    "distributedInfo",
    "deviceProperties",
    "baseTimeNanoseconds",
    "traceName",
    "displayTimeUnit",
    "trace_id",
    "host_name",
    "record_shapes",
    "profile_memory",
    "with_stack",
    "with_flops",
    "with_modules",
    "cuda_runtime_version",
    "cuda_driver_version",
    "hip_runtime_version",
    "pipeaudit_incomplete_step",  # written by the pipeaudit harness into a failed rank's partial trace
)

#: Columns that are always built (the sort and the drop rules need them).
REQUIRED_COLUMNS: frozenset[str] = frozenset({"name", "cat", "ph", "ts", "dur"})

#: Complete-event categories that are not kept (see :mod:`pipeaudit.trace.columns`).
DROPPED_CATEGORIES: frozenset[str] = frozenset({"python_function"})

#: ``Raw`` value of a missing ``ts`` / ``dur``.
MISSING = msgspec.Raw(b"")


class LeanArgs(msgspec.Struct, gc=False, frozen=True):
    """The ``args`` keys the analysis reads (all others are skipped unread)."""

    correlation: Any = None
    total_allocated: Any = msgspec.field(default=None, name="Total Allocated")
    device_id: Any = msgspec.field(default=None, name="Device Id")
    device_type: Any = msgspec.field(default=None, name="Device Type")


class Args(LeanArgs, frozen=True):
    """Every ``args`` key pipeaudit uses: :class:`LeanArgs` and the ones only some event
    columns need."""

    external_id: Any = msgspec.field(default=None, name="External id")
    stream: Any = None
    device: Any = None
    src_rank: Any = msgspec.field(default=None, name="Src Rank")
    dst_rank: Any = msgspec.field(default=None, name="Dst Rank")
    seq: Any = msgspec.field(default=None, name="Seq")


#: Shared defaults of a missing ``args`` (never mutated).
NO_ARGS = Args()
NO_LEAN_ARGS = LeanArgs()


class LeanEvent(msgspec.Struct, gc=False):
    """One element of ``traceEvents``, with the fields the analysis reads."""

    ph: str = ""
    name: str = ""
    cat: str = ""
    ts: msgspec.Raw = MISSING
    dur: msgspec.Raw = MISSING
    tid: msgspec.Raw = MISSING
    args: LeanArgs | None = NO_LEAN_ARGS


class Event(LeanEvent):
    """One element of ``traceEvents``: :class:`LeanEvent`, ``pid`` and the full ``args``."""

    pid: msgspec.Raw = MISSING
    args: Args | None = NO_ARGS  # type: ignore[assignment]


#: Event columns that need the full :class:`Event` (the lean one skips their keys unread).
FULL_ONLY_COLUMNS: frozenset[str] = frozenset({"pid", "external_id", "stream", "device",
                                               "src_rank", "dst_rank", "seq"})
_BATCH_DECODER = msgspec.json.Decoder(list[Event])
_LEAN_BATCH_DECODER = msgspec.json.Decoder(list[LeanEvent])


def is_lean(columns: frozenset[str]) -> bool:
    """True when ``columns`` can be built from :class:`LeanEvent` (about 10% less decode time
    on a 110 MB trace: no pid, and three fewer ``args`` keys, are turned into objects)."""
    return not (columns & FULL_ONLY_COLUMNS)


def batch_decoder(columns: frozenset[str]) -> msgspec.json.Decoder:
    """The decoder of a ``[...]`` batch of events for a set of event columns."""
    return _LEAN_BATCH_DECODER if is_lean(columns) else _BATCH_DECODER
