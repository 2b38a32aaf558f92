"""Worker -> launcher status channel: one JSON-lines file per rank. Torch-free.

Each worker appends events to ``STATUS_DIR/rank{r}.status``:
``{"t": unix_time, "event": "phase"|"step"|"note"|"error", ...}``. The launcher
reads them to show progress, to name the rank that failed or hung, and to say
where it was.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ENV_STATUS_DIR = "PIPEAUDIT_HARNESS_STATUS_DIR"


def status_path(status_dir: str | Path, rank: int) -> Path:
    return Path(status_dir) / f"rank{rank}.status"


class Reporter:
    """Appends events for one rank; a no-op without a status directory."""

    def __init__(self, status_dir: str | None, rank: int) -> None:
        self.rank = rank
        self._path = status_path(status_dir, rank) if status_dir else None

    def emit(self, event: str, **data: Any) -> None:
        if self._path is None:
            return
        line = json.dumps({"t": time.time(), "event": event, **data})
        # One write per line, O_APPEND: lines never interleave or tear.
        fd = os.open(self._path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(fd, (line + "\n").encode())
        finally:
            os.close(fd)

    def phase(self, name: str, **data: Any) -> None:
        self.emit("phase", phase=name, **data)

    def step_done(self, step: int, profiled: bool, wall_s: float) -> None:
        self.emit("step", step=step, profiled=profiled, wall_s=wall_s)

    def note(self, text: str) -> None:
        self.emit("note", text=text)

    def error(self, **data: Any) -> None:
        self.emit("error", **data)


@dataclass
class RankStatus:
    """What the launcher knows about one rank."""

    rank: int
    phase: str = "starting"
    steps_done: int = 0
    notes: list[str] = field(default_factory=list)
    error: dict[str, Any] | None = None
    _offset: int = 0

    def refresh(self, status_dir: str | Path) -> None:
        path = status_path(status_dir, self.rank)
        try:
            with open(path, "rb") as f:
                f.seek(self._offset)
                data = f.read()
        except FileNotFoundError:
            return
        end = data.rfind(b"\n")
        if end < 0:
            return
        self._offset += end + 1
        for raw in data[: end + 1].splitlines():
            try:
                ev = json.loads(raw)
            except ValueError:
                continue
            kind = ev.get("event")
            if kind == "phase":
                self.phase = ev.get("phase", self.phase)
                if "step" in ev:
                    self.phase = f"{self.phase} step {ev['step']}"
            elif kind == "step":
                self.steps_done = ev["step"] + 1
            elif kind == "note":
                self.notes.append(ev.get("text", ""))
            elif kind == "error":
                self.error = ev
