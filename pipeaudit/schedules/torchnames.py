"""Turn torch's profiler annotation names into :class:`Action` orders.

torch's ``_PipelineScheduleRuntime`` wraps each action in ``record_function("PP:<action>")``:
``PP:2F0``, ``PP:1I3``, ``PP:0W3``, communication (``PP:1SEND_B3``, ``PP:0RECV_F1``), FSDP and
gradient-reduction bookkeeping (``PP:0UNSHARD``, ``PP:0RESHARD``, ``PP:0REDUCE_GRAD``), and
DualPipeV's overlapped pairs ``PP:(0F3;3B1)OVERLAP_F_B``, whose sub-actions run one after the
other (forward first). ``ScheduleGPipe`` writes ``Forward {i}`` / ``Backward {i}`` instead.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from pipeaudit.actions import Action
from pipeaudit.errors import ScheduleError

_COMPUTE_RE = re.compile(r"^(\d+)([FBIW])(\d+)$")
_OTHER_RE = re.compile(r"^(\d+)(UNSHARD|RESHARD|REDUCE_GRAD|SEND_F|RECV_F|SEND_B|RECV_B)(\d*)$")
_OVERLAP_RE = re.compile(r"^\(([^()]*)\)OVERLAP_F_B$")
_GPIPE_RE = re.compile(r"^(Forward|Backward) (\d+)$")


def parse_action_name(name: str, stage: int | None = None) -> list[Action]:
    """Compute actions named by one annotation (``[]`` for communication/bookkeeping).

    Accepts ``PP:``-prefixed or bare names; ``Forward i``/``Backward i`` need ``stage``.
    Raises :class:`ScheduleError` on anything else.
    """
    text = name.strip()
    if text.startswith("PP:"):
        text = text[3:]
    m = _COMPUTE_RE.match(text)
    if m:
        return [Action(int(m.group(1)), m.group(2), int(m.group(3)))]
    if _OTHER_RE.match(text):
        return []
    m = _OVERLAP_RE.match(text)
    if m:
        out: list[Action] = []
        for part in m.group(1).split(";"):
            if part.strip():
                out += parse_action_name(part)
        return out
    m = _GPIPE_RE.match(text)
    if m:
        if stage is None:
            raise ScheduleError(f"{name!r} does not name its stage; pass the rank's stage")
        return [Action(stage, "F" if m.group(1) == "Forward" else "B", int(m.group(2)))]
    raise ScheduleError(
        f"not a pipeline action name: {name!r} (expected e.g. PP:2F0, PP:1I3, "
        f"PP:(0F3;3B1)OVERLAP_F_B)"
    )


def actions_from_names(names: Iterable[str], stage: int | None = None) -> list[Action]:
    """The compute actions, in order, of a rank's annotation names."""
    out: list[Action] = []
    for n in names:
        out += parse_action_name(n, stage)
    return out


def orders_from_names(names_by_rank: Sequence[Iterable[str]]) -> tuple[tuple[Action, ...], ...]:
    """Per-rank compute orders from per-rank annotation names (single-stage GPipe names
    ``Forward i`` are taken to be on stage = rank)."""
    return tuple(tuple(actions_from_names(names, stage=r)) for r, names in enumerate(names_by_rank))
