"""``pipeaudit watch``'s loop: audit each window of a folder as it lands, optionally gated.

    for w in watch("tb/", baseline="baseline.json", once=True):
        w.label, w.audit.scalars, w.regressed

Polls every ``poll_s`` seconds (bounded: ``timeout_s``, ``max_windows``); ``once`` audits what
is there now, complete or not, and stops. Ctrl-C stops the loop and keeps what was audited.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

from pipeaudit.during.audit_window import WindowAudit, audit_window
from pipeaudit.during.skips import skipped_reason
from pipeaudit.trace.windows import Window, WindowFinder


@dataclass
class WatchedWindow:
    """One window as watch saw it: its audit, or why there is none."""

    window: Window
    audit: WindowAudit | None
    error: str | None = None
    skipped: str | None = None  #: why the handler's worker skipped it (then not audited)

    @property
    def label(self) -> str:
        return self.window.label

    @property
    def regressed(self) -> bool:
        return self.audit is not None and self.audit.regressed

    def to_dict(self) -> dict[str, Any]:
        w = self.window
        d: dict[str, Any] = {"label": w.label, "step": w.step, "folder": str(w.folder),
                             "files": [str(f) for f in w.files], "world_size": w.world_size,
                             "ranks_present": w.ranks, "ranks_missing": w.missing,
                             "error": self.error, "skipped": self.skipped}
        if self.audit is not None:
            d["scalars"] = self.audit.scalars
            d["notes"] = self.audit.notes
            if self.audit.gate is not None:
                d["gate"] = {"verdict": self.audit.gate.verdict,
                             "failed": [c.to_dict() for c in self.audit.failed_checks]}
        return d


def watch(root: str | os.PathLike, *, baseline: str | None = None, thresholds: Any = None,
          once: bool = False, poll_s: float = 1.0, settle_s: float = 2.0,
          rank_timeout_s: float = 60.0, timeout_s: float | None = None,
          max_windows: int | None = None,
          sleep: Callable[[float], None] = time.sleep) -> Iterator[WatchedWindow]:
    """Yield each window of ``root`` audited, as it becomes ready (see :mod:`.windows`)."""
    finder = WindowFinder(root, settle_s=settle_s, rank_timeout_s=rank_timeout_s)
    start = time.monotonic()
    seen = 0
    try:
        while True:
            for window in finder.poll(final=once):
                reason = skipped_reason(window.folder)  # the handler's worker skipped it
                yield WatchedWindow(window, None, skipped=reason) if reason else \
                    audit(window, baseline=baseline, thresholds=thresholds)
                seen += 1
                if max_windows is not None and seen >= max_windows:
                    return
            if once or (timeout_s is not None and time.monotonic() - start >= timeout_s):
                return
            sleep(poll_s)
    except KeyboardInterrupt:
        return


def audit(window: Window, *, baseline: str | None = None, thresholds: Any = None,
          options: Any = None, allow_config_change: bool = False,
          files: Sequence[str] | None = None) -> WatchedWindow:
    """One window audited as watch audits it (every command's ``--window all`` too): its
    ``files`` (default: the window's), gated when a baseline or budgets are given; a window
    that cannot be read is kept with the reason."""
    from pipeaudit.errors import PipeauditError

    try:
        result = audit_window(files or window.files, label=window.label, step=window.step,
                              world_size=window.world_size, missing=window.missing,
                              baseline=baseline, thresholds=thresholds, options=options,
                              allow_config_change=allow_config_change)
    except PipeauditError as exc:
        return WatchedWindow(window, None, str(exc))
    return WatchedWindow(window, result)
