"""How a trace file is read: the reader's options, explicit and in one place.

Every file goes through the same pipeline (:mod:`pipeaudit.trace.decode`): the byte reader
(:mod:`~pipeaudit.trace.source`), the document's structure (:mod:`~pipeaudit.trace.document`),
a tokenizer per batch of events (:mod:`~pipeaudit.trace.tokenizer`), the header checks
(:mod:`~pipeaudit.trace.header`) and the columns (:mod:`~pipeaudit.trace.columns`).
:class:`ReadOptions` says which tokenizer, how many bytes of events are decoded at once, the
largest event accepted and whether damaged files are salvaged; they follow from the memory
budget (:meth:`ReadOptions.for_budget`). ``PIPEAUDIT_TIMINGS=1`` prints them
(:meth:`ReadOptions.describe`).
"""

from __future__ import annotations

import enum
import os
from dataclasses import dataclass

from pipeaudit.trace import scanner

#: Memory budget of one file's decode when the caller gives none.
DEFAULT_BUDGET = 1 << 30
#: Share of the memory available at start that a run's ``max_memory=None`` allows.
DEFAULT_MEMORY_SHARE = 0.5
#: Bounds of the batch size (JSON bytes decoded at once); 4 MiB measured fastest.
MIN_BATCH = 1 << 20
MAX_BATCH = 4 << 20
#: The largest event (and the largest member of the header) a trace may hold: no profiler
#: writes one this big; past it the file is refused rather than buffered.
MAX_EVENT_BYTES = 64 << 20
#: With ``salvage``, a damaged file's whole JSON text is held at once (the complete events are
#: found by scanning it, which takes 3-4x the text): at most this share of the budget.
SALVAGE_SHARE = 8


class Tokenizer(enum.Enum):
    """What turns a batch of events into columns."""

    #: the compiled scanner (``pipeaudit/trace/_kscan.c``); a batch it does not answer goes
    #: to msgspec, so results never depend on it
    SCANNER = "scanner"
    #: msgspec Structs and a Python column build (``PIPEAUDIT_NO_SCANNER=1``, or no C compiler)
    MSGSPEC = "msgspec"


@dataclass(frozen=True)
class ReadOptions:
    """The reader's options for one file (see the module docstring)."""

    tokenizer: Tokenizer
    #: JSON bytes of events decoded at once
    batch_bytes: int
    #: the largest event or header member accepted (bytes of JSON)
    max_event_bytes: int
    #: read damaged files with :mod:`pipeaudit.trace.salvage`
    salvage: bool = False
    #: the memory budget these options were made for (bytes)
    budget: int = DEFAULT_BUDGET

    def __post_init__(self) -> None:
        if self.batch_bytes < 1 or self.max_event_bytes < 1 or self.budget < 1:
            raise ValueError(f"batch_bytes, max_event_bytes and budget must be >= 1: {self}")

    @classmethod
    def for_budget(cls, max_memory: int | None = None, *, salvage: bool = False,
                   tokenizer: Tokenizer | None = None) -> "ReadOptions":
        """Options for a decode allowed ``max_memory`` bytes (None: :data:`DEFAULT_BUDGET`):
        batches of 1/16 of it within 1-4 MiB, events up to 1/8 of it within 1-64 MiB, and
        the compiled scanner when it is built and not turned off."""
        budget = DEFAULT_BUDGET if max_memory is None else max(1, int(max_memory))
        if tokenizer is None:
            tokenizer = Tokenizer.SCANNER if scanner.available() else Tokenizer.MSGSPEC
        return cls(tokenizer=tokenizer,
                   batch_bytes=max(MIN_BATCH, min(MAX_BATCH, budget // 16)),
                   max_event_bytes=max(MIN_BATCH, min(MAX_EVENT_BYTES, budget // 8)),
                   salvage=salvage, budget=budget)

    @classmethod
    def for_share(cls, max_memory: int | str | None, shares: int, *,
                  salvage: bool = False) -> "ReadOptions":
        """Options for one of ``shares`` decodes running at once within a run's
        ``max_memory`` (bytes or text such as ``"4G"``; None: :func:`default_max_memory`)."""
        budget = default_max_memory() if max_memory is None else parse_size(max_memory)
        return cls.for_budget(max(1, budget // max(1, shares)), salvage=salvage)

    def reads_like(self, other: "ReadOptions") -> bool:
        """True when a file read with ``other`` gives what it gives with these options (the
        budget itself only words messages)."""
        return (self.effective_tokenizer(), self.batch_bytes, self.max_event_bytes, self.salvage) == \
            (other.effective_tokenizer(), other.batch_bytes, other.max_event_bytes, other.salvage)

    @property
    def salvage_limit(self) -> int:
        """Most JSON bytes a salvaged file may hold (it is read whole)."""
        return max(self.max_event_bytes, self.budget // SALVAGE_SHARE)

    def effective_tokenizer(self) -> Tokenizer:
        """The tokenizer this process uses: the scanner only where it is built and on."""
        if self.tokenizer is Tokenizer.SCANNER and not scanner.available():
            return Tokenizer.MSGSPEC
        return self.tokenizer

    def describe(self) -> str:
        """One phrase for ``PIPEAUDIT_TIMINGS``: ``scanner, 4 MiB batches``."""
        mib = self.batch_bytes / 2**20
        text = f"{self.tokenizer.value}, {mib:g} MiB batches"
        return text + ", salvage" if self.salvage else text


def available_memory() -> int:
    """Bytes of memory available to new allocations (Linux ``MemAvailable``), else the total."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # pragma: no cover
        return 8 << 30


def default_max_memory() -> int:
    """The default memory budget: half of the memory available now."""
    return int(available_memory() * DEFAULT_MEMORY_SHARE)


def parse_size(text: str | int) -> int:
    """``"4G"``, ``"512M"``, ``"2.5GB"``, ``"1e9"`` or an int -> bytes (ValueError if not)."""
    if isinstance(text, int):
        if text <= 0:
            raise ValueError(f"a memory size must be > 0, got {text}")
        return text
    t = text.strip().upper().removesuffix("B").removesuffix("I")
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}.get(t[-1:], 1)
    number = t[:-1] if t[-1:] in "KMGT" else t
    try:
        value = float(number)
    except ValueError:
        raise ValueError(f"not a memory size: {text!r} (e.g. 4G, 512M)") from None
    if not value > 0:
        raise ValueError(f"a memory size must be > 0, got {text!r}")
    return int(value * mult)
