"""Progress of the per-rank work (decode + reduce), for whoever wants to show it.

The loader calls the active reporter as each rank is done: ``report(done, total)``, from
this process's threads (a reporter must be thread-safe). None is active by default; the
CLI installs one that draws a progress bar on a terminal's stderr (``pipeaudit.cli.main``).
In Python::

    from pipeaudit.progress import reporting

    with reporting(lambda done, total: print(f"{done}/{total} ranks")):
        run = pipeaudit.load("big_run/")
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

Reporter = Callable[[int, int], None]

_ACTIVE: ContextVar[Reporter | None] = ContextVar("pipeaudit_rank_progress", default=None)


def active() -> Reporter | None:
    """The reporter installed by :func:`reporting`, if any."""
    return _ACTIVE.get()


@contextmanager
def reporting(report: Reporter | None) -> Iterator[None]:
    """Call ``report(done, total)`` as ranks are done while the block runs."""
    token = _ACTIVE.set(report)
    try:
        yield
    finally:
        _ACTIVE.reset(token)
