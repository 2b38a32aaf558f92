"""Test-only fault injection: ``PIPEAUDIT_HARNESS_FAULT=RANK:STEP:raise|kill|hang``.

Hidden on purpose (no CLI option): tests use it to check that a rank that raises,
dies (SIGKILL) or hangs makes the whole run fail cleanly. ``STEP`` counts every
training step from 0, warm-up steps first; the fault fires at the start of that
step on that rank. Several faults may be given separated by commas.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass

ENV_VAR = "PIPEAUDIT_HARNESS_FAULT"
KINDS = ("raise", "kill", "hang")


class InjectedFault(RuntimeError):
    """The exception a ``raise`` fault throws."""


@dataclass(frozen=True)
class Fault:
    rank: int
    step: int
    kind: str


def parse_faults(text: str | None) -> list[Fault]:
    """Parse the env var's value; malformed entries raise ValueError."""
    if not text:
        return []
    faults = []
    for item in text.split(","):
        parts = item.strip().split(":")
        if len(parts) != 3 or parts[2] not in KINDS:
            raise ValueError(f"{ENV_VAR}: expected RANK:STEP:raise|kill|hang, got {item!r}")
        faults.append(Fault(int(parts[0]), int(parts[1]), parts[2]))
    return faults


def faults_from_env() -> list[Fault]:
    return parse_faults(os.environ.get(ENV_VAR))


def maybe_inject(faults: list[Fault], rank: int, step: int, note=None) -> None:
    """Fire the fault for (rank, step) if one is configured.

    ``note(text)`` is called first so the launcher can name the rank even when
    the fault is a hang or a SIGKILL.
    """
    for f in faults:
        if f.rank != rank or f.step != step:
            continue
        if note is not None:
            note(f"injected fault: {f.kind} at step {step}")
        if f.kind == "raise":
            raise InjectedFault(f"injected fault on rank {rank} at step {step}")
        if f.kind == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        if f.kind == "hang":
            while True:
                time.sleep(3600)
