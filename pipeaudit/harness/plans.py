"""Action plans of the one-stage-per-rank schedules, and the single-process issue order. Torch-free.

Actions are written in torch's notation (``"2F0"``: stage 2, forward, microbatch 0).

* :func:`single_stage_rank_actions`: what each stage of ``naive``, ``gpipe`` or ``1f1b`` runs,
  in order (for 1F1B and GPipe read off torch's ``_step_microbatches``).
* :func:`single_process_order`: one process runs every stage (``pipeaudit profile
  --single-process``), so the per-stage plans must be merged into one issue order that respects
  the dependencies (F of stage s needs F of s-1; B of s needs B of s+1, and the last stage's B its
  own F). The merge is a list schedule with unit-time forwards and two-unit backwards: actions are
  issued by their start time in that schedule, so on GPUs, where kernels are launched ahead and
  every stage has its own device, consecutive stages overlap as the schedule intends.
"""

from __future__ import annotations

#: Schedules ``--single-process`` can run (hand-written loops; no process group).
SINGLE_PROCESS_SCHEDULES: tuple[str, ...] = ("naive", "gpipe", "1f1b")
_COST = {"F": 1, "B": 2}


def single_stage_rank_actions(name: str, num_ranks: int, num_microbatches: int) -> dict[int, list[str]]:
    """Execution order of each stage of ``naive``, ``gpipe`` or ``1f1b`` (one stage per rank).

    Not taken from torch's ``_get_pipeline_order``: in torch 2.13 that IR is only
    nominal, and for 1F1B it is wrong on the last rank (it starts with ``F1``).
    1F1B on stage s: ``min(M, P-s)`` forwards, then B/F alternating, then the
    remaining backwards. GPipe: all forwards, then all backwards. Naive:
    ``F0 B0 F1 B1 ...``.
    """
    m = num_microbatches
    out: dict[int, list[str]] = {}
    for s in range(num_ranks):
        acts: list[str] = []
        if name == "gpipe":
            acts = [f"{s}F{i}" for i in range(m)] + [f"{s}B{i}" for i in range(m)]
        elif name == "naive":
            for i in range(m):
                acts += [f"{s}F{i}", f"{s}B{i}"]
        elif name == "1f1b":
            fwd = bwd = 0
            for _ in range(min(m, num_ranks - s)):
                acts.append(f"{s}F{fwd}")
                fwd += 1
            while True:
                acts.append(f"{s}B{bwd}")
                bwd += 1
                if fwd == m:
                    break
                acts.append(f"{s}F{fwd}")
                fwd += 1
            while bwd < m:
                acts.append(f"{s}B{bwd}")
                bwd += 1
        else:
            raise ValueError(f"no one-stage plan for schedule {name!r}")
        out[s] = acts
    return out


def parse_action(action: str) -> tuple[int, str, int]:
    """``"2F0"`` -> ``(2, "F", 0)`` (compute actions F and B only)."""
    for i, ch in enumerate(action):
        if ch in _COST:
            return int(action[:i]), ch, int(action[i + 1:])
    raise ValueError(f"not a F/B action: {action!r}")


def single_process_order(name: str, num_stages: int, num_microbatches: int) -> list[str]:
    """Every stage's actions merged into one dependency-respecting issue order (see module doc)."""
    plans = {s: [parse_action(a) for a in acts]
             for s, acts in single_stage_rank_actions(name, num_stages, num_microbatches).items()}
    last = num_stages - 1
    done: dict[tuple[int, str, int], int] = {}  # action -> end time
    free = [0] * num_stages  # when each stage's device is free
    nxt = [0] * num_stages  # index of each stage's next action
    timed: list[tuple[int, int, str]] = []
    remaining = sum(len(p) for p in plans.values())
    while remaining:
        progressed = False
        for s in range(num_stages):
            if nxt[s] == len(plans[s]):
                continue
            stage, kind, mb = plans[s][nxt[s]]
            if kind == "F":
                dep = (s - 1, "F", mb) if s > 0 else None
            else:
                dep = (s + 1, "B", mb) if s < last else (s, "F", mb)
            if dep is not None and dep not in done:
                continue
            start = max(free[s], done[dep] if dep is not None else 0)
            done[(stage, kind, mb)] = free[s] = start + _COST[kind]
            timed.append((start, s, f"{stage}{kind}{mb}"))
            nxt[s] += 1
            remaining -= 1
            progressed = True
        if not progressed:  # pragma: no cover - the plans above are always feasible
            raise RuntimeError(f"{name}: per-stage plans deadlock")
    return [a for _, _, a in sorted(timed)]
