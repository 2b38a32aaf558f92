"""The ledger of a long search (benchmarks/generated_reading.py): one JSON line a case done.

A search of 100,000 cases takes hours of cores. With ``--ledger FILE`` it may stop at any
time and resume later, on another machine or from a copy of the file, and its report counts
every case the ledger holds, the resumed ones with the new. The ledger's first line says what
its verdicts are of: the seed, the drawing options, and a hash of the reader's and the
generator's code (pipeaudit/ less the packages a reading never imports, and
tests/support/tracegen/; less comments and docstrings). A ledger of other code or options is
refused: a case number then names another case, or the same case read by another reader.
A ledger compressed with gzip (``.gz``, as benchmarks/results/ keeps one) is read only: it is
reported (``--summary``) as it is, and resumed from a copy ``gunzip -k`` makes.
"""

from __future__ import annotations

import ast
import gzip
import hashlib
import json
from pathlib import Path
from typing import Any

#: Sources whose content the verdicts depend on: the reader, its compiled scanner's C source, and
#: the generator that draws each numbered case and its truth.
CODE_GLOBS = ("pipeaudit/**/*.py", "pipeaudit/**/*.c", "tests/support/tracegen/**/*.py")
#: Packages of pipeaudit that ``pipeaudit.load(...).audit()`` never imports (the command line, the
#: reporters, the gate, sweeps, audit during training, framework hooks, the conformance matrix):
#: an edit of them changes no verdict, so it keeps a ledger. A test holds a reading to it.
NOT_READ = ("pipeaudit/cli/", "pipeaudit/report/", "pipeaudit/gate/", "pipeaudit/sweep/",
            "pipeaudit/during/", "pipeaudit/integrations/", "pipeaudit/conformance/")


class LedgerMismatch(Exception):
    """The ledger was written for other code, another seed or other drawing options."""


def code_hash(repo: Path) -> str:
    """A short hash of the reader's and the generator's code: each file's path and its syntax
    tree less docstrings (a comment, a docstring or a line's layout changes no verdict, so an
    edit of them keeps a ledger), the C source as it is."""
    h = hashlib.sha256()
    for path in sorted({p for g in CODE_GLOBS for p in repo.glob(g)}):
        name = path.relative_to(repo).as_posix()
        if not name.startswith(NOT_READ):
            h.update(name.encode() + b"\0" + _code_of(path) + b"\0")
    return h.hexdigest()[:16]


def _code_of(path: Path) -> bytes:
    if path.suffix != ".py":
        return path.read_bytes()
    tree = ast.parse(path.read_bytes(), filename=str(path))
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                and body and isinstance(body[0], ast.Expr)
                and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str)):
            node.body = body[1:] or [ast.Pass()]
    return ast.dump(tree).encode()


class Ledger:
    """The cases a search has done (:attr:`done`: case number -> record), appended to as it
    runs; each line is flushed as it is written, so a killed search loses at most the line it
    was writing (a torn last line is cut off when the ledger is read back, and that case is done
    again)."""

    def __init__(self, path: str | Path, header: dict[str, Any], ignore: tuple[str, ...] = ()) -> None:
        """``header``: what the search is (a new ledger's first line; an existing ledger's
        must equal it, but for the keys in ``ignore``: a summary reads another code's ledger)."""
        self.path = Path(path)
        self.done: dict[int, dict[str, Any]] = {}
        self.header = header
        self.read_only = self.path.suffix == ".gz"
        self._file = None
        if self.read_only and not self.path.exists():
            raise LedgerMismatch(f"{self.path}: no such ledger (a compressed one is only read)")
        if self.path.exists() and self.path.stat().st_size:
            data = self.path.read_bytes()
            if self.read_only:
                try:
                    data = gzip.decompress(data)
                except (OSError, EOFError) as e:
                    raise LedgerMismatch(f"{self.path}: not a whole gzip file ({e})") from None
            whole = data[:data.rfind(b"\n") + 1]  # past the last newline: a killed search's torn line
            lines = whole.decode().splitlines()
            try:
                found = json.loads(lines[0]) if lines else None
            except json.JSONDecodeError:
                found = None
            if not isinstance(found, dict) or "code" not in found:
                raise LedgerMismatch(f"{self.path}: its first line is no ledger header")
            diff = sorted(k for k in set(found) | set(header)
                          if found.get(k) != header.get(k) and k not in ignore)
            if diff:
                said = "; ".join(f"{k} {found.get(k)!r} there, {header.get(k)!r} here" for k in diff)
                raise LedgerMismatch(f"{self.path}: a ledger of another search ({said}): "
                                     "resume it with the same code and options, or start a new one")
            for n, line in enumerate(lines[1:], start=2):
                try:
                    rec = json.loads(line)
                    self.done[int(rec["i"])] = rec
                except (json.JSONDecodeError, KeyError, TypeError, ValueError):
                    raise LedgerMismatch(f"{self.path}: line {n} is no case record") from None
            self.header = found
            if self.read_only:
                return
            if len(whole) < len(data):
                with self.path.open("r+b") as f:
                    f.truncate(len(whole))
            self._file = self.path.open("a")
        elif self.read_only:
            raise LedgerMismatch(f"{self.path}: an empty file, no ledger")
        else:
            self._file = self.path.open("w")
            self._file.write(json.dumps(header, sort_keys=True) + "\n")
            self._file.flush()

    def append(self, record: dict[str, Any]) -> None:
        """Record one case done (``record["i"]``: its number)."""
        if self._file is None:
            raise LedgerMismatch(f"{self.path}: a compressed ledger is only read")
        self.done[int(record["i"])] = record
        self._file.write(json.dumps(record, sort_keys=True) + "\n")
        self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
