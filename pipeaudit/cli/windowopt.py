"""``--window latest|all|LABEL`` of every command that reads a run, declared once.

A folder of several profiling cycles (torch's ``{worker}.{ns}.pt.trace.json`` names, the
handler's ``pipeaudit/step_N/`` windows, torchtitan's ``iteration_N/``, Megatron-LM's) holds
several windows (:mod:`pipeaudit.trace.window_select`): a command reads the latest, with a note
on stderr naming the others; ``all`` audits each as ``pipeaudit watch`` does (the same numbers)
and prints one row per window, in text and JSON.
"""

from __future__ import annotations

from typing import Any, Sequence

import click

WINDOW_HELP = ("Which profiled window of a folder of several to read: latest (with a note naming "
               "the others), all (one row per window, as `pipeaudit watch` prints) or a LABEL "
               "(step_00000004, iteration_3: as watch names it).")


def window_option(fn):
    """The ``--window`` flag."""
    return click.option("--window", "window", default="latest", show_default=True,
                        metavar="latest|all|LABEL", help=WINDOW_HELP)(fn)


def choose(paths: Sequence[str], spec: str, *, documents: bool = False):
    """The windows of a command's inputs (:class:`~pipeaudit.trace.window_select.Selection`);
    the note naming the others on stderr. ``documents``: a saved pipeaudit document (a
    baseline, an analyze report) may be given, and is read as it is."""
    from pipeaudit.trace.window_select import select_windows

    paths = [str(p) for p in paths]
    if documents and len(paths) == 1:
        from pipeaudit.gate.snapshot import is_document

        if is_document(paths[0]):
            refuse_all(spec, f"{paths[0]} is a saved document of one run")
            spec = "latest"  # one run, nothing to choose
    sel = select_windows(paths, spec)
    if sel.note:
        click.echo(f"pipeaudit: note: {sel.note}", err=True)
    return sel


def refuse_all(spec: str, why: str) -> None:
    """A usage error when ``--window all`` meets an option that reads one window."""
    if spec == "all":
        from pipeaudit.errors import ConfigError

        raise ConfigError(f"--window all: {why}; give --window LABEL for one window")


def audited(done: list) -> list:
    """``done``, when at least one window could be read; else the first one's error (exit 2)."""
    if done and all(w.audit is None for w in done):
        from pipeaudit.errors import ConfigError

        raise ConfigError(f"{done[0].label}: {done[0].error}")
    return done


def options_for(window, options):
    """``options`` with ``allow_missing`` where the window's index or world size says a rank
    wrote no trace: how ``--window all`` reads each window, as ``pipeaudit watch`` does (one
    window read alone needs ``--allow-missing``, as any set of ranks with a hole)."""
    from dataclasses import replace

    return replace(options, allow_missing=True) if window.missing else options


def audit_each(sel, options, *, baseline: str | None = None, thresholds: Any = None,
               allow_config_change: bool = False) -> list:
    """Every chosen window audited as ``pipeaudit watch`` audits it (gated when a baseline or
    budgets are given): :class:`pipeaudit.during.watch.WatchedWindow` each."""
    from pipeaudit.during.watch import audit

    return [audit(w, baseline=baseline, thresholds=thresholds, options=options,
                  allow_config_change=allow_config_change, files=sel.paths(w))
            for w in sel.chosen]


def windows_text(done: list, source: str) -> str:
    """Watch's text: a line per window, then :func:`windows_summary`."""
    from pipeaudit.during.lines import window_line

    return "".join(window_line(w) + "\n" for w in done) + windows_summary(done, source)


def windows_summary(done: list, source: str) -> str:
    """The table of the windows' numbers after a blank line, then the regressions."""
    from pipeaudit.during.lines import series_table
    from pipeaudit.report.fit import hanging

    lines = ["", f"{len(done)} window(s) in {source}", series_table(done)]
    lines += [hanging(f"regression in {w.label}: " + "; ".join(c.name for c in w.audit.failed_checks))
              for w in done if w.regressed]
    return "\n".join(lines) + "\n"


def windows_json(done: list, kind: str, source: str, *, baseline: str | None = None,
                 full: str | None = None) -> str:
    """Watch's JSON document (``kind``: the command); ``full``: also each window's whole
    audit document under that key."""
    from pipeaudit import SCHEMA_VERSION
    from pipeaudit.jsontext import to_json

    rows = []
    for w in done:
        row = w.to_dict()
        if full and w.audit is not None:
            row[full] = w.audit.doc if full == "baseline" else w.audit.doc["audit"]
        rows.append(row)
    return to_json({"schema_version": SCHEMA_VERSION, "tool": "pipeaudit", "kind": kind,
                    "directory": source, "baseline": baseline,
                    "regressed": [w.label for w in done if w.regressed],
                    "windows": rows}) + "\n"


def each_window(sel, read) -> list[tuple[Any, Any, str | None]]:
    """``(window, read(paths, window), None)`` for every chosen window, or ``(window, None,
    the error)`` for one that cannot be read (a row of its own, as watch shows it); the first
    error when no window could be read (exit 2)."""
    from pipeaudit.errors import ConfigError, PipeauditError

    rows = []
    for w in sel.chosen:
        try:
            rows.append((w, read(sel.paths(w), w), None))
        except PipeauditError as exc:
            rows.append((w, None, str(exc)))
    if rows and all(r is None for _, r, _ in rows):
        raise ConfigError(f"{rows[0][0].label}: {rows[0][2]}")
    return rows


def rows_text(rows: list[tuple[Any, Any, str | None]], line) -> str:
    """A line per window: ``label: line(result)``, or why it could not be read; past 120
    columns, its parts (``; ``) go on indented lines."""
    out = []
    for w, r, err in rows:
        text = f"{w.label}: {line(r) if r is not None else 'not read: ' + str(err)}"
        out.append(text if len(text) <= 120 else text.replace("; ", ";\n  "))
    return "".join(t + "\n" for t in out)


def rows_json(rows: list[tuple[Any, Any, str | None]], kind: str, source: str, doc) -> str:
    """Watch's JSON document, each window's ``doc(result)`` under ``kind``."""
    from pipeaudit import SCHEMA_VERSION
    from pipeaudit.jsontext import to_json

    windows = [{"label": w.label, "step": w.step, "folder": str(w.folder),
                "files": [str(f) for f in w.files], "world_size": w.world_size,
                "ranks_present": w.ranks, "ranks_missing": w.missing, "error": err,
                kind: doc(r) if r is not None else None} for w, r, err in rows]
    return to_json({"schema_version": SCHEMA_VERSION, "tool": "pipeaudit", "kind": kind,
                    "directory": source, "windows": windows}) + "\n"
