"""Where the tests find the repository, its bundled traces and the shared GPU traces."""

from __future__ import annotations

from pathlib import Path

#: The repository root (the checkout or worktree the tests run from).
REPO = Path(__file__).resolve().parents[2]
#: Real harness traces bundled with the repository (``sample_traces/<run>/rank*.json.gz``).
SAMPLES = REPO / "sample_traces"
#: Committed test inputs (``tests/data/``: the bad-input corpus, a torch 2.13 CPU run).
DATA = REPO / "tests" / "data"
#: The real torch 2.13 gloo run of two ranks kept in ``tests/data``.
TORCH_CPU = DATA / "torch213_gloo_ws2"
#: The repository's documentation.
DOCS = REPO / "docs"


def _shared_traces() -> Path:
    """The shared traces (``shared/traces``): in the checkout, beside it (worktrees under
    /work), or at /work/shared; the first that exists, else the checkout's (tests skip)."""
    candidates = [REPO / "shared" / "traces", REPO.parent / "shared" / "traces",
                  Path("/work/shared/traces")]
    return next((c for c in candidates if c.is_dir()), candidates[0])


#: Large real traces shared between checkouts (not in git); tests that need them skip without.
SHARED_TRACES = _shared_traces()
#: Real GPU (NCCL) traces used by the HTA cross-check and the GPU-idle tests.
HTA = SHARED_TRACES / "hta"
