"""The one rule for a trace set in which no pipeline is found.

A run whose traces hold no pipeline stage (no ``PP:`` or ``Forward``/``Backward`` spans, no
forward/backward that could be told from the ops and the send/recv between ranks) gets one
line from every command, :func:`no_pipeline_error`: the files, ``no pipeline stages found``
and what was found instead. A command that needs stages stops there (exit 2); ``analyze`` and
``plot --kind memory``, whose per-rank figures stand without them, print it as a note and go
on (the audit's ``NO_PIPELINE`` finding, :meth:`pipeaudit.api.Run.audit`).
"""

from __future__ import annotations

from typing import Sequence

from pipeaudit.errors import TraceError, TraceErrorKind

#: The start of the problem every command reports for a run without a pipeline.
NO_PIPELINE = "no pipeline stages found"


def found_instead(tl) -> str:
    """What the traces of ``tl`` (a :class:`~pipeaudit.timeline.model.Timeline`) hold instead
    of a pipeline, e.g. ``1 trace, no PP: or Forward/Backward spans, no send/recv between
    ranks``."""
    ranks = len(tl.ranks)
    actions = sum(rt.actions.height for rt in tl.ranks)
    with_p2p = sum(1 for rt in tl.ranks if len(rt.p2p[0]))
    collectives = sum(rt.collectives.height for rt in tl.ranks)
    parts = [f"{ranks} trace{'s' if ranks != 1 else ''}"]
    parts.append("no PP: or Forward/Backward spans" if not actions
                 else f"{actions} action spans, none computing inside a step")
    if with_p2p:
        parts.append(f"send/recv on {with_p2p} rank(s) but no forward/backward told from them")
    else:
        parts.append("no send/recv between ranks"
                     + (f" ({collectives} collectives: data-parallel only?)" if collectives else ""))
    return ", ".join(parts)


def describe_paths(paths: Sequence[str]) -> str:
    """The inputs as a message names them: the first three, then a count."""
    paths = [str(p) for p in paths]
    return ", ".join(paths[:3]) + (f" and {len(paths) - 3} more" if len(paths) > 3 else "")


def no_pipeline_error(run, paths: Sequence[str], hint: str | None = None) -> TraceError | None:
    """The no-pipeline :class:`TraceError` of ``run`` (naming ``paths``, the run's own inputs
    when empty; ``hint``: what the caller can do about it), None when it holds a pipeline."""
    if any(rt.actions.height for rt in run.timeline.ranks) and run.audit().pipeline_found:
        return None
    problem = f"{NO_PIPELINE}: {found_instead(run.timeline)}"
    if hint:
        problem += f"; {hint}"
    return TraceError(describe_paths(paths or run.timeline.inputs), problem,
                      TraceErrorKind.NO_PIPELINE)


def require_pipeline(run, paths: Sequence[str], hint: str | None = None) -> None:
    """Raise :func:`no_pipeline_error` unless ``run`` holds a pipeline."""
    err = no_pipeline_error(run, paths, hint)
    if err is not None:
        raise err
