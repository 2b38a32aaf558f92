"""Holistic Trace Analysis (HTA) next to pipeaudit's per-rank figures.

HTA is optional (``pip install 'pipeaudit[hta]'``, which installs PyPI
``traceinsight``, the package that now ships the ``hta`` module; see docs/hta.md).
It is never imported in this process: :func:`run_hta` runs it in a child
Python (``python -m pipeaudit.integrations.hta``) so that its console output and
its fork-based parser pool stay away from ours, and so that a broken HTA install
can only produce a message, never a traceback.

:func:`compare_with_hta` puts side by side, per rank: pipeaudit's idle fraction
(whole trace), pipeaudit's idle fraction over the steps HTA covers
(:func:`pipeaudit.timeline.idle.gpu_idle` with ``steps="hta"``), HTA's temporal
breakdown idle, pipeaudit's overlap and HTA's communication/computation overlap.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import math
import os
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

HTA_DISTRIBUTIONS = ("traceinsight", "HolisticTraceAnalysis")
HTA_TIMEOUT_S = 600.0


@dataclass
class HtaRankRow:
    """One rank: pipeaudit's figures and HTA's, fractions in [0, 1] (None: not available)."""

    rank: int
    on_gpu: bool
    pipeaudit_idle: float | None  #: whole trace (``ranks[].idle_fraction``)
    pipeaudit_idle_hta_steps: float | None  #: pipeaudit's union over HTA's coverage
    hta_idle: float | None  #: HTA temporal breakdown idle_time / kernel_time
    pipeaudit_overlap: float | None  #: share of communication while computing (``ranks[].overlap``)
    hta_overlap: float | None  #: HTA comp_comm_overlap (comm kernels under compute kernels)
    hta_steps: str  #: what HTA's figure (and the column before it) covers


@dataclass
class HtaComparison:
    """The ``--with-hta`` view: status ok | not-installed | no-gpu | failed, and the rows."""

    status: str
    message: str
    hta_version: str | None
    rows: list[HtaRankRow] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        for r in d["rows"]:
            for k, v in r.items():
                if isinstance(v, float) and math.isnan(v):
                    r[k] = None
        return d


def hta_version() -> str | None:
    """``"traceinsight 0.6.1"`` (or HolisticTraceAnalysis), None when ``hta`` is not importable."""
    if importlib.util.find_spec("hta") is None:
        return None
    for dist in HTA_DISTRIBUTIONS:
        try:
            return f"{dist} {importlib.metadata.version(dist)}"
        except importlib.metadata.PackageNotFoundError:
            continue
    return "hta (unknown distribution)"


def run_hta(files: dict[int, str], timeout: float = HTA_TIMEOUT_S) -> dict[int, dict[str, float | None]]:
    """Run HTA's temporal breakdown and comm/comp overlap on ``{rank: trace path}``.

    Returns ``{rank: {"idle": ..., "overlap": ...}}``. Raises RuntimeError with
    one line (HTA's own last error line) when HTA fails or is missing.
    """
    with tempfile.TemporaryDirectory(prefix="pipeaudit-hta-") as tmp:
        spec = Path(tmp) / "request.json"
        result = Path(tmp) / "result.json"
        spec.write_text(json.dumps({"files": {str(r): str(Path(p).resolve()) for r, p in files.items()},
                                    "result": str(result)}))
        env = dict(os.environ)
        pkg_root = str(Path(__file__).resolve().parents[2])
        extra = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
        env["PYTHONPATH"] = os.pathsep.join([pkg_root, *extra])
        try:
            proc = subprocess.run([sys.executable, "-m", "pipeaudit.integrations.hta", str(spec)],
                                  capture_output=True, text=True, timeout=timeout, env=env,
                                  stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"HTA did not finish within {timeout:g} s") from None
        if not result.exists():
            lines = [ln for ln in (proc.stderr + proc.stdout).splitlines() if ln.strip()]
            err = next((ln for ln in reversed(lines) if "Error" in ln or "error" in ln),
                       lines[-1] if lines else f"exit status {proc.returncode}")
            raise RuntimeError(err.strip())
        data = json.loads(result.read_text())
    if "error" in data:
        raise RuntimeError(data["error"])
    return {int(r): v for r, v in data["ranks"].items()}


def compare_with_hta(run, *, use_hta: bool = True) -> HtaComparison:
    """pipeaudit's per-rank idle/overlap next to HTA's for a loaded :class:`pipeaudit.api.Run`."""
    from pipeaudit.timeline.idle import gpu_idle
    from pipeaudit.trace.decode import read_trace

    result = run.audit()
    metrics = {r.rank: r for r in result.ranks}
    gpu_ranks = [rt for rt in run.timeline.ranks if rt.on_gpu]
    version = hta_version()
    rows: list[HtaRankRow] = []
    for rt in run.timeline.ranks:
        m = metrics.get(rt.rank)
        row = HtaRankRow(rank=rt.rank, on_gpu=rt.on_gpu,
                         pipeaudit_idle=m.idle_fraction if m else None,
                         pipeaudit_idle_hta_steps=None, hta_idle=None,
                         pipeaudit_overlap=m.overlap if m else None, hta_overlap=None,
                         hta_steps="-")
        if rt.on_gpu:
            fig = gpu_idle(read_trace(rt.path, rank_hint=rt.rank), steps="hta")
            row.pipeaudit_idle_hta_steps = fig.idle_fraction
            row.hta_steps = fig.short_coverage
        rows.append(row)
    if not gpu_ranks:
        return HtaComparison(
            "no-gpu", "HTA has nothing to say about these traces: they are CPU-only (no GPU kernels), "
            "and HTA's temporal breakdown and overlap are computed over kernels.", version, rows)
    if not use_hta or version is None:
        return HtaComparison(
            "not-installed", "HTA is not installed (pip install 'pipeaudit[hta]'): HTA columns are "
            "empty; 'idle (HTA steps)' is pipeaudit's reproduction of HTA's definition.", version, rows)
    try:
        hta = run_hta({rt.rank: rt.path for rt in gpu_ranks})
    except RuntimeError as exc:
        return HtaComparison("failed", f"HTA failed on these traces: {exc}", version, rows)
    for row in rows:
        if row.rank in hta:
            row.hta_idle = hta[row.rank]["idle"]
            row.hta_overlap = hta[row.rank]["overlap"]
    cpu = [r.rank for r in rows if not r.on_gpu]
    msg = f"{version}: temporal breakdown and comm/comp overlap"
    if cpu:
        msg += f"; rank(s) {', '.join(map(str, cpu))} are CPU-only: HTA has nothing to say about them"
    return HtaComparison("ok", msg, version, rows)


# ----------------------------------------------------------------- child process
def _worker(request_path: str) -> int:
    """Child side of :func:`run_hta`: import HTA, analyse, write the result JSON."""
    import logging
    import warnings

    req = json.loads(Path(request_path).read_text())
    out = Path(req["result"])
    files = {int(r): p for r, p in req["files"].items()}
    logging.disable(logging.CRITICAL)
    warnings.simplefilter("ignore")
    try:
        from hta.trace_analysis import TraceAnalysis

        trace_dir = os.path.commonpath([os.path.dirname(p) for p in files.values()])
        analysis = TraceAnalysis(trace_files=files, trace_dir=trace_dir)
        tb = analysis.get_temporal_breakdown(visualize=False)
        ov = analysis.get_comm_comp_overlap(visualize=False)
        ranks: dict[str, dict[str, float | None]] = {}
        for _, row in tb.iterrows():
            total = float(row["kernel_time(us)"])
            ranks[str(int(row["rank"]))] = {
                "idle": float(row["idle_time(us)"]) / total if total > 0 else None,
                "overlap": None,
            }
        for _, row in ov.iterrows():
            v = float(row["comp_comm_overlap_pctg"])
            if str(int(row["rank"])) in ranks:
                ranks[str(int(row["rank"]))]["overlap"] = None if math.isnan(v) else v / 100.0
        out.write_text(json.dumps({"ranks": ranks}))
    except Exception as exc:  # HTA's own failure, reported as one line by the parent
        out.write_text(json.dumps({"error": f"{type(exc).__name__}: {exc}".splitlines()[0]}))
    return 0


if __name__ == "__main__":  # pragma: no cover - exercised through run_hta
    sys.exit(_worker(sys.argv[1]))
