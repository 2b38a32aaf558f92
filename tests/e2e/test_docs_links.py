"""Every relative link and file reference in README.md and docs/*.md resolves: a Markdown link
``[text](path#anchor)`` names a file that exists (and, into a Markdown page, a heading it has);
a backticked repository path (```benchmarks/x.py```, ```tests/e2e/y.py```,
```pipeaudit/report/z.py```, or a module path inside the package such as ```report/fit.py```)
names a file or folder that exists."""

from __future__ import annotations

import fnmatch
import re
from pathlib import Path

import pytest

from tests.support.paths import REPO

PAGES = [REPO / "README.md"] + sorted((REPO / "docs").glob("*.md"))
#: ``[text](target)``, not an image's source; the target up to the first space or ')'
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
#: a backticked path that looks like a file or folder of this repository
TOP = ("pipeaudit", "tests", "benchmarks", "docs", "notebooks", "sample_traces", "examples", ".ci")
FILE = re.compile(r"`((?:[\w.-]+/)+[\w.-]*\.(?:py|md|ipynb|c|sh|toml|json|css|js|html)|"
                  r"(?:" + "|".join(re.escape(t) for t in TOP) + r")/(?:[\w.-]+/)*)`")
PACKAGES = {p.name for p in (REPO / "pipeaudit").iterdir() if p.is_dir() and p.name != "__pycache__"}


def _without_code_blocks(text: str) -> str:
    """The page less its fenced blocks (sample output, shell commands), line count kept."""
    return re.sub(r"^```.*?^```", lambda m: "\n" * m.group().count("\n"), text, flags=re.S | re.M)


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]|\[([^\]]*)\]\([^)]*\)", lambda m: m.group(1) or "", heading.strip())
    text = re.sub(r"[^\w\- ]", "", text.lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """The page's headings' anchors and its explicit ones (``<a name="x">``, ``<a id="x">``)."""
    text = _without_code_blocks(page.read_text())
    seen: dict[str, int] = {}
    out = set(re.findall(r"<a\s+(?:name|id)=\"([^\"]+)\"", text))
    for line in text.splitlines():
        m = re.match(r"^#{1,6}\s+(.*)$", line)
        if m:
            base = slug(m.group(1))
            n = seen.get(base, 0)
            seen[base] = n + 1
            out.add(base if n == 0 else f"{base}-{n}")
    return out


def broken_links(page: Path) -> list[str]:
    bad = []
    for target in LINK.findall(_without_code_blocks(page.read_text())):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            bad.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            bad.append(f"{target}: no heading #{anchor} in {dest.name}")
    return bad


def _generated(path: Path) -> bool:
    """A path the root .gitignore names (a script makes it: ``benchmarks/data/``)."""
    rel = path.relative_to(REPO).as_posix().rstrip("/")
    ignored = (REPO / ".gitignore").read_text().splitlines() if (REPO / ".gitignore").exists() else []
    return any(fnmatch.fnmatch(rel, line.strip().strip("/")) for line in ignored
               if line.strip() and not line.startswith("#"))


def broken_paths(page: Path) -> list[str]:
    bad = []
    for ref in FILE.findall(_without_code_blocks(page.read_text())):
        if (any(c in ref for c in "*{}<>") or ref.startswith(("/", "~", "../"))
                or re.search(r"(?:^|[/_.-])[A-Z]+(?:$|[/_.-])", ref)):
            continue  # a pattern, a placeholder (step_N/, OUT/) or a path outside the repository
        head = ref.split("/", 1)[0]
        if head in TOP:
            where = [REPO / ref]
        elif head in PACKAGES:
            where = [REPO / "pipeaudit" / ref]
        else:
            continue  # a path of the user's (OUT/..., runs/...), not of this repository
        if not any(p.exists() or _generated(p) for p in where):
            bad.append(ref)
    return bad


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_links_and_file_references_resolve(page):
    bad = broken_links(page) + broken_paths(page)
    assert not bad, f"{page.relative_to(REPO)}: " + "; ".join(bad)


def test_the_checks_can_fail(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# A title (with `code`)\n\n<a name=\"here\"></a>[ok](#a-title-with-code) "
                    "[gone](nowhere.md) [named](#here) "
                    "[no anchor](#missing) [web](https://example.org)\n\n"
                    "`pipeaudit/no_such_module.py` `report/fit.py` `tests/e2e/test_docs_links.py`"
                    " `runs/x.py`\n\n```\n[in a block](ignored.md)\n```\n")
    assert broken_links(page) == ["nowhere.md: no such file", "#missing: no heading #missing in page.md"]
    assert broken_paths(page) == ["pipeaudit/no_such_module.py"]


def test_the_docs_index_lists_every_page():
    index = (REPO / "docs" / "README.md").read_text()
    listed = {target for target in LINK.findall(index)}
    pages = {p.name for p in (REPO / "docs").glob("*.md")} - {"README.md"}
    assert pages <= listed, sorted(pages - listed)
    assert "docs/README.md" in (REPO / "README.md").read_text()
