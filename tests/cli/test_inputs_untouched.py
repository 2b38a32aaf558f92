"""Inputs are never written to; outputs go only where the user says.

Each command below runs in a scratch working directory. Before and after, every file of the
inputs *and* of the working directory is fingerprinted (bytes, size, mode, mtime) and every
directory listed: the only paths allowed to change are the declared outputs. Adding a
command is one row in ``COMMANDS``: its argv with placeholders ``{run}`` (a harness run
directory), ``{damaged}`` (a run with a truncated trace), ``{trace}`` (one trace file),
``{schedule}`` (a schedule file), ``{out}`` (an output file) and ``{outdir}`` (an output
directory), and the outputs it may create.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
from pathlib import Path

import pytest

from tests.support.paths import SAMPLES
from tests.support.cli import invoke

SAMPLE = SAMPLES / "1f1b_p2_m4"


def fingerprint(*roots: Path) -> dict[str, tuple]:
    """Path -> (kind, sha256, size, mode, mtime_ns) of everything under ``roots`` (links not
    followed; directories by their listing)."""
    out: dict[str, tuple] = {}
    for root in roots:
        paths = [root] + sorted(root.rglob("*")) if root.is_dir() else [root]
        for p in paths:
            st = os.lstat(p)
            if stat.S_ISLNK(st.st_mode):
                out[str(p)] = ("link", os.readlink(p))
            elif stat.S_ISDIR(st.st_mode):
                out[str(p)] = ("dir", tuple(sorted(os.listdir(p))), st.st_mode)
            else:
                digest = hashlib.sha256(p.read_bytes()).hexdigest()
                out[str(p)] = ("file", digest, st.st_size, st.st_mode, st.st_mtime_ns)
    return out


def changed(before: dict, after: dict) -> set[str]:
    return {k for k in before.keys() | after.keys() if before.get(k) != after.get(k)}


@pytest.fixture()
def workspace(tmp_path, monkeypatch):
    """Inputs (copies, plus the committed sample run itself) and a scratch cwd."""
    ins = tmp_path / "inputs"
    run = ins / "run"
    shutil.copytree(SAMPLE, run)
    damaged = ins / "damaged"
    shutil.copytree(SAMPLE, damaged)
    data = (damaged / "rank1.json.gz").read_bytes()
    (damaged / "rank1.json.gz").write_bytes(data[: int(len(data) * 0.85)])
    schedule = ins / "mine.csv"
    schedule.write_text("rank,actions\n")  # replaced below by a real one
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    res = invoke("simulate", "--schedule", "1f1b", "-P", "2", "-M", "4",
                 "--save-schedule", str(schedule), "--force")
    assert res.exit_code == 0, res.output
    outs = tmp_path / "outs"
    outs.mkdir()
    return {"run": run, "damaged": damaged, "trace": run / "rank0.json.gz", "schedule": schedule,
            "out": outs / "report.out", "outdir": outs / "profile", "cwd": cwd, "ins": ins,
            "outs": outs}


# (id, argv, outputs the command may create, needs torch)
COMMANDS = [
    ("analyze-text", ["analyze", "{run}"], [], False),
    ("analyze-json", ["analyze", "{run}", "--format", "json"], [], False),
    ("analyze-markdown", ["analyze", "{run}", "--format", "markdown"], [], False),
    ("analyze-file", ["analyze", "{trace}", "--format", "json"], [], False),
    ("analyze-glob", ["analyze", "{run}/rank*.json.gz"], [], False),
    ("analyze-o-json", ["analyze", "{run}", "--format", "json", "-o", "{out}"], ["{out}"], False),
    ("analyze-o-text", ["analyze", "{run}", "-o", "{out}"], ["{out}"], False),
    ("analyze-o-markdown", ["analyze", "{run}", "--format", "markdown", "-o", "{out}"], ["{out}"], False),
    ("analyze-salvage", ["analyze", "{damaged}", "--salvage", "--format", "json"], [], False),
    ("analyze-damaged-refused", ["analyze", "{damaged}"], [], False),
    ("analyze-jobs", ["analyze", "{run}", "--jobs", "2", "--format", "json"], [], False),
    ("simulate-schedule-file", ["simulate", "--schedule-file", "{schedule}"], [], False),
    ("simulate-schedule-file-json", ["simulate", "--schedule-file", "{schedule}", "--format", "json"], [], False),
    ("simulate-chrome-trace", ["simulate", "--schedule-file", "{schedule}", "--chrome-trace", "{out}"],
     ["{out}"], False),
    pytest.param("profile-new-dir", ["profile", "--schedule", "1f1b", "--stages", "2", "--microbatches",
                                     "2", "--layers", "2", "--hidden", "32", "--seq-len", "4", "--steps",
                                     "1", "--warmup-steps", "0", "--out", "{outdir}"], ["{outdir}"], True,
                 marks=pytest.mark.slow, id="profile-new-dir"),
]


def _fill(args: list[str], ws: dict) -> list[str]:
    return [a.format(**{k: str(v) for k, v in ws.items()}) for a in args]


@pytest.mark.parametrize("cid,argv,outputs,torch", COMMANDS,
                         ids=[c[0] if isinstance(c, tuple) else c.id for c in COMMANDS])
def test_inputs_untouched_outputs_only_where_asked(workspace, cid, argv, outputs, torch):
    if torch:
        pytest.importorskip("torch")
    roots = [workspace["ins"], workspace["cwd"], workspace["outs"], SAMPLE]
    before = fingerprint(*roots)
    res = invoke(*_fill(argv, workspace))
    assert res.exit_code == (2 if cid.endswith("refused") else 0), res.output[-2000:]
    after = fingerprint(*roots)
    allowed = {str(Path(p)) for p in _fill(outputs, workspace)}
    diff = changed(before, after)
    unexpected = {p for p in diff if not any(p == a or p.startswith(a + os.sep) for a in allowed)}
    # a new output appears in its parent directory's listing
    unexpected -= {str(Path(a).parent) for a in allowed}
    assert not unexpected, sorted(unexpected)
    for a in allowed:
        assert Path(a).exists(), a


def test_existing_output_is_overwritten_an_input_never(workspace):
    out = workspace["out"]
    out.write_text("old\n")
    res = invoke("analyze", str(workspace["run"]), "--format", "json", "-o", str(out))
    assert res.exit_code == 0 and out.read_text().startswith("{")  # as cp does
    assert sorted(p.name for p in out.parent.iterdir()) == ["report.out"]  # no temp file left
    trace = workspace["run"] / "rank1.json.gz"  # found by scanning the directory
    before = fingerprint(workspace["ins"])
    res = invoke("analyze", str(workspace["run"]), "--format", "json", "-o", str(trace))
    assert (res.exit_code, res.stdout) == (2, "")
    assert res.stderr == (f"pipeaudit: error: {trace}: is an input of this command: name another "
                          "file for -o (an input is never overwritten)\n")
    assert fingerprint(workspace["ins"]) == before  # not even touched


def test_refused_outputs_are_checked_before_the_analysis(workspace, monkeypatch):
    """A refused output costs nothing: the traces are not even read."""
    import pipeaudit.api

    out = workspace["out"]

    def boom(*a, **k):  # pragma: no cover - must not run
        raise AssertionError("traces read although the output was refused")

    monkeypatch.setattr(pipeaudit.api, "load", boom)
    res = invoke("analyze", str(workspace["run"]), "-o", str(out), "--html", str(out))
    assert res.exit_code == 2 and "named for both -o and --html" in res.stderr
    assert not out.exists()


def test_unwritable_output_is_one_line(workspace):
    target = workspace["outs"] / "missing-dir" / "r.json"
    res = invoke("analyze", str(workspace["run"]), "-o", str(target))
    assert res.exit_code == 2
    assert res.stderr == f"pipeaudit: error: {target}: cannot write the report: no such file or directory\n"
    assert not (workspace["outs"] / "missing-dir").exists()


def test_read_only_inputs_are_fine(workspace):
    """Inputs on a read-only medium: nothing needs write access to them."""
    run = workspace["run"]
    for p in [run, *run.iterdir()]:
        p.chmod(0o555 if p.is_dir() else 0o444)
    try:
        res = invoke("analyze", str(run), "--format", "json")
        assert res.exit_code == 0, res.output
    finally:
        for p in [run, *run.iterdir()]:
            p.chmod(0o755 if p.is_dir() else 0o644)


def test_fingerprint_sees_every_kind_of_change(tmp_path):
    f = tmp_path / "a.json"
    f.write_text("{}")
    base = fingerprint(tmp_path)
    os.utime(f, ns=(0, 12345))  # same bytes, new mtime
    assert changed(base, fingerprint(tmp_path)) == {str(f)}
    base = fingerprint(tmp_path)
    (tmp_path / "new").write_text("")
    assert changed(base, fingerprint(tmp_path)) == {str(tmp_path), str(tmp_path / "new")}
    base = fingerprint(tmp_path)
    f.chmod(0o600)
    assert changed(base, fingerprint(tmp_path)) == {str(f)}
