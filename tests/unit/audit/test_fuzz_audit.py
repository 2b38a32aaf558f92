"""Fuzz the whole analysis: ``pipeaudit.load(...).audit()`` and every report on hostile traces.

Property: whatever the traces hold, loading, auditing and rendering either succeed or raise a
:class:`PipeauditError` (one clear line in the CLI); never any other exception, never a hang.
Three generators (tests/support/fuzz_traces.py):

* random runs: events of every kind with names that look like pipeline actions, steps and
  ops, garbage that looks like them (``PP:99999999999999999999F0``, ``PP:(0F;x)OVERLAP_F_B``),
  times that overlap, nest, repeat or run backwards, junk args, odd manifests, options;
* mutated pipelines: a valid P-rank 1F1B run (so the deep audit code runs: replay, theory,
  schedule detection, stragglers) with events dropped, duplicated, shifted, stretched, renamed,
  re-tagged, moved between steps or ranks;
* the same random runs drawn field by field by hypothesis (fewer examples: slower to draw,
  but a failure shrinks to a minimal trace).

The seeded generators keep each case to a few hypothesis draws (thousands of cases in CI).
``PIPEAUDIT_FUZZ_SCALE=10`` multiplies the example counts.
"""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import pipeaudit
from tests.support.fuzz_traces import mutated_pipeline, random_run, runs, write_run
from pipeaudit.errors import PipeauditError

SCALE = float(os.environ.get("PIPEAUDIT_FUZZ_SCALE", "1"))
pytestmark = pytest.mark.slow


def fuzz_settings(n: int):
    return settings(max_examples=max(1, int(n * SCALE)), deadline=None, database=None,
                    suppress_health_check=list(HealthCheck))


def analyse(folder: Path, docs, manifest, kwargs, render: bool = False) -> None:
    """Load, audit (and render) one generated run: only PipeauditError may escape."""
    d = write_run(folder / "run", docs, manifest)
    try:
        run = pipeaudit.load(d, jobs=1, **kwargs)
        res = run.audit()
        doc = res.to_dict()
    except PipeauditError as exc:
        assert "\n" not in str(exc) and str(exc)
        return
    assert doc["schema_version"] == 1
    for r in res.ranks:
        assert r.bubble is None or -1e-9 <= r.bubble <= 1 + 1e-9
    if render:
        from pipeaudit.report.json_doc import to_json
        from pipeaudit.report.markdown import render_markdown
        from pipeaudit.report.step_view import step_timeline_text
        from pipeaudit.report.terminal import render_terminal

        to_json(res)
        step, tl = step_timeline_text(run.timeline, res) if res.pipeline_found else (None, "")
        render_markdown(res, timeline_text=tl, timeline_step=step)
        render_terminal(res, io.StringIO(), timeline_text=tl, timeline_step=step, color=False)
        run.actions(), run.ranks(), run.stages(), run.steps(), run.findings()


@fuzz_settings(500)
@given(seed=st.integers(0, 2**32), n_ranks=st.sampled_from([1, 1, 2, 2, 3]), n_events=st.integers(0, 16),
       garbage=st.sampled_from([0.0, 0.1, 0.4]), steps=st.booleans(),
       world=st.sampled_from([None, 1, 2, 3, 4]))
# a memory sample whose Total Allocated is no integer read as NaN in the per-step peaks
@example(seed=163, n_ranks=2, n_events=10, garbage=0.0, steps=True, world=None)
def test_random_runs(scratch, seed, n_ranks, n_events, garbage, steps, world):
    analyse(scratch, *random_run(seed, n_ranks, n_events, garbage, steps, world))


@fuzz_settings(150)
@given(seed=st.integers(0, 2**32), P=st.sampled_from([1, 2, 2, 3]), M=st.integers(1, 4), steps=st.integers(1, 2),
       n_mutations=st.sampled_from([0, 1, 1, 2, 3, 6]), render=st.booleans())
def test_mutated_pipelines(scratch, seed, P, M, steps, n_mutations, render):
    analyse(scratch, *mutated_pipeline(seed, P, M, steps, n_mutations), render=render)


@fuzz_settings(60)
@given(case=runs())
def test_structured_runs(scratch, case):
    analyse(scratch, *case)
