"""benchmarks/generated_reading.py, the long search, on a few cases: a shard from its --start,
its report written to --report as well as printed."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


def test_a_shard_of_the_search_reports_its_cases(tmp_path: Path) -> None:
    report = tmp_path / "report.txt"
    out = subprocess.run([sys.executable, str(REPO / "benchmarks" / "generated_reading.py"),
                          "--cases", "3", "--start", "40", "--jobs", "1", "--seed", "5",
                          "--annotated", "yes", "--report", str(report)],
                         capture_output=True, text=True, timeout=600, cwd=REPO)
    assert out.returncode == 0, out.stdout + out.stderr
    first = out.stdout.splitlines()[0]
    assert first.startswith("3 cases (from case 40)"), first
    assert report.read_text().splitlines()[0] == first
    verdicts = out.stdout.splitlines()[1]
    assert verdicts.startswith("verdicts: ") and "fail" not in verdicts, verdicts


def _search(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REPO / "benchmarks" / "generated_reading.py"),
                           "--jobs", "1", "--annotated", "yes", *args],
                          capture_output=True, text=True, timeout=600, cwd=REPO)


def test_a_search_resumes_from_its_ledger_and_refuses_another_searchs(tmp_path: Path) -> None:
    """Two cases into a ledger, then the shard of three resumed from it: one case run, three
    reported; the ledger's torn last line (a killed search's) is cut off; a case that cannot
    tell is counted by its reason; --summary reports the ledger's cases and runs none; a ledger
    of another seed or other code is refused with one line and exit 2, untouched, and a summary
    of other code's ledger names that code; a compressed ledger is summarised, never resumed."""
    ledger = tmp_path / "ledger.jsonl"
    first = _search("--cases", "2", "--start", "40", "--seed", "5", "--ledger", str(ledger))
    assert first.returncode == 0, first.stdout + first.stderr
    lines = ledger.read_text().splitlines()
    assert len(lines) == 3 and '"code"' in lines[0]
    with ledger.open("a") as f:
        f.write('{"err": 0.0, "i": 42, "ms"')
    resumed = _search("--cases", "3", "--start", "40", "--seed", "5", "--ledger", str(ledger))
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert resumed.stdout.startswith("3 cases (from case 40, 2 of them from the ledger)")
    lines = ledger.read_text().splitlines()
    assert sorted(json.loads(x)["i"] for x in lines[1:]) == [40, 41, 42]
    # the report counts why readings cannot tell, by the first rank's reason, without numbers
    with ledger.open("a") as f:
        f.write(json.dumps({"i": 43, "shape": "zbv/bare/gloo", "size": 8, "verdict": "cannot tell",
                            "err": 0.0, "ms": 1.0, "reason": "The actions read from the ops do not "
                            "settle what ran: rank 3: stage 3 step 0 reads 4 forwards but 6 "
                            "backwards (every schedule runs one backward per forward)"}) + "\n")
    four = _search("--cases", "4", "--start", "40", "--seed", "5", "--ledger", str(ledger))
    assert four.returncode == 0, four.stdout + four.stderr
    assert "cannot tell 1" in four.stdout.splitlines()[1]
    assert "     1  stage N step N reads N forwards but N backwards\n" in four.stdout, four.stdout
    before = ledger.read_bytes()
    summary = _search("--cases", "9", "--start", "40", "--seed", "5", "--ledger", str(ledger),
                      "--summary")
    assert summary.stdout.startswith("4 cases (from case 40, 4 of them from the ledger)")
    assert ledger.read_bytes() == before  # nothing run
    other = _search("--cases", "3", "--start", "40", "--seed", "6", "--ledger", str(ledger))
    assert other.returncode == 2 and other.stdout == ""
    assert other.stderr.count("\n") == 1 and "seed 5 there, 6 here" in other.stderr
    assert ledger.read_bytes() == before
    # a ledger of other code: resuming it is refused, a summary of it names its code
    lines = ledger.read_text().splitlines()
    header = json.loads(lines[0])
    header["code"] = "0123456789abcdef"
    ledger.write_text("\n".join([json.dumps(header)] + lines[1:]) + "\n")
    refused = _search("--cases", "4", "--start", "40", "--seed", "5", "--ledger", str(ledger))
    assert refused.returncode == 2 and "code '0123456789abcdef' there" in refused.stderr
    named = _search("--cases", "4", "--start", "40", "--seed", "5", "--ledger", str(ledger),
                    "--summary")
    assert named.returncode == 0 and "code 0123456789abcdef (the ledger's" in named.stdout
    # a ledger kept compressed (benchmarks/results/) is reported as it is, and never resumed
    packed = tmp_path / "ledger.jsonl.gz"
    packed.write_bytes(gzip.compress(before))  # this code's ledger
    kept = packed.read_bytes()
    read = _search("--cases", "4", "--start", "40", "--seed", "5", "--ledger", str(packed),
                   "--summary")
    assert read.returncode == 0, read.stderr
    assert read.stdout.startswith("4 cases (from case 40, 4 of them from the ledger)")
    assert read.stdout.splitlines()[1] == summary.stdout.splitlines()[1]
    resume = _search("--cases", "5", "--start", "40", "--seed", "5", "--ledger", str(packed))
    assert resume.returncode == 2 and resume.stderr.count("\n") == 1 and "gunzip -k" in resume.stderr
    assert packed.read_bytes() == kept


def test_the_ledgers_code_hash_ignores_comments_and_docstrings(tmp_path: Path) -> None:
    """A comment, a docstring or a line's layout changes no verdict: the hash that ties a ledger
    to its code stays; an edit of the code changes it."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        from search_ledger import code_hash
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
    module = tmp_path / "pipeaudit" / "reader.py"
    module.parent.mkdir()
    module.write_text('"""Reads."""\n\nLIMIT = 2  # ops\n\n\ndef f(x):\n    """Twice."""\n    return x * LIMIT\n')
    before = code_hash(tmp_path)
    module.write_text('"""Reads a trace."""\nLIMIT = 2\n\n\ndef f(x):\n    """Twice x."""\n'
                      '    return (x\n            * LIMIT)  # the same\n')
    assert code_hash(tmp_path) == before
    module.write_text('"""Reads."""\n\nLIMIT = 3  # ops\n\n\ndef f(x):\n    """Twice."""\n    return x * LIMIT\n')
    assert code_hash(tmp_path) != before


def test_a_reading_imports_none_of_the_packages_the_ledgers_hash_leaves_out() -> None:
    """The hash leaves out packages a reading never runs (an edit of the command line or a
    reporter keeps a ledger); readings of generated cases of several shapes, in a fresh
    interpreter, import none of them."""
    script = (
        "import random, sys\n"
        "from tests.support.tracegen.strategies import random_case\n"
        "from tests.support.tracegen.check import run_case\n"
        "opts = dict(budget=64, p2p=('gloo', 'nccl'), one_rank_files=True,\n"
        "            step_marks=(False, True), annotated=(False, True))\n"
        "for i in range(8):\n"
        "    run_case(random_case(random.Random(f'700:{i}'), **opts))\n"
        "for m in list(sys.modules.values()):\n"
        "    f = getattr(m, '__file__', None) or ''\n"
        "    if '/pipeaudit/' in f.replace('\\\\', '/'):\n"
        "        print('pipeaudit/' + f.replace('\\\\', '/').rsplit('/pipeaudit/', 1)[1])\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=600, cwd=REPO)
    assert out.returncode == 0, out.stderr
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        from search_ledger import NOT_READ
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
    imported = out.stdout.split()
    assert "pipeaudit/timeline/infer.py" in imported  # the reading ran
    assert [f for f in imported if f.startswith(NOT_READ)] == []


def _search_module(monkeypatch):
    """benchmarks/generated_reading.py loaded as a module (it imports its ledger beside it)."""
    import importlib.util

    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    spec = importlib.util.spec_from_file_location("generated_reading",
                                                  REPO / "benchmarks" / "generated_reading.py")
    search = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(search)
    return search


def test_the_report_counts_every_case_read_from_the_ops_once_in_each_dimension(monkeypatch) -> None:
    """The report's table by dimension: each dimension's values share out the cases read from
    the ops of each family, the right ones among them; its lines fit 120 columns."""
    import re

    search = _search_module(monkeypatch)
    opts = {"budget": 64, "p2p": ("gloo", "nccl"), "one_rank_files": True,
            "step_marks": (False, True), "annotated": (False, True)}
    tally = search.Tally(lambda i: search._case(i, 3, opts))
    bare = {"split": [0, 0], "other": [0, 0]}
    for i in range(300):
        case = search._case(i, 3, opts)
        verdict = "pass" if i % 3 else "cannot tell"
        tally.add({"i": i, "shape": case.shape(), "size": 1, "verdict": verdict, "err": 0.0,
                   "ms": 1.0, "reason": ""})
        if not case.annotated:
            family = bare["split" if case.schedule in search.SPLIT_BACKWARD else "other"]
            family[0] += 1
            family[1] += verdict == "pass"
    assert min(n for n, _ in bare.values()) > 0
    for family, dims in tally.by_dimension.items():
        cases, right = bare["split" if family.startswith("split") else "other"]
        for dim, values in dims.items():
            assert sum(sum(c.values()) for c in values.values()) == cases, dim
            assert sum(c["pass"] for c in values.values()) == right, dim
    lines = search._dimension_lines(tally.by_dimension[next(iter(tally.by_dimension))])
    assert all(len(line) <= 120 for line in lines)
    shown = sum(int(n) for n in re.findall(r" (\d+)/\d+ \(", lines[0]))
    assert shown == sum(c["pass"] for c in next(iter(tally.by_dimension.values()))["P"].values())


def test_the_report_counts_the_right_readings_that_leave_compute_unexplained(monkeypatch) -> None:
    """Compute conservation over a search: the right readings from the ops (those whose record
    holds a coverage) that fall short of 100 %, and the least covered one; a case that cannot
    tell or carries no coverage (read from spans) is not counted."""
    import argparse

    search = _search_module(monkeypatch)
    opts = {"budget": 64, "p2p": ("gloo",), "one_rank_files": False,
            "step_marks": (True,), "annotated": (True,)}
    tally = search.Tally(lambda i: search._case(i, 3, opts))
    records = [("pass", 1.0), ("pass", 0.9993), ("pass", 0.99), ("cannot tell", 0.5),
               ("pass", None), ("pass", 1.0 - 1e-9)]
    for i, (verdict, cov) in enumerate(records):
        rec = {"i": i, "shape": "1f1b/annotated/gloo", "size": 1, "verdict": verdict,
               "err": 0.0, "ms": 1.0}
        if cov is not None:
            rec["cov"] = cov
        tally.add(rec)
    text = tally.report(1.0, argparse.Namespace(start=0, jobs=1, seed=3))
    line = next(x for x in text.splitlines() if x.startswith("compute conservation"))
    assert "2 of 4 leave compute unexplained; least covered 99.00 % (case 2)" in line, line
