"""Strip a real run's per-action annotations: the same run as a framework that writes none.

Harness runs can wrap every action in ``PP:<stage><kind><mb>`` spans (``--annotate``). Removing
exactly those spans (and their ``gpu_user_annotation`` copies) from each rank's trace leaves the
trace the framework itself writes, so the un-annotated reading of one real run can be held to
its annotated reading. The manifest is left out unless asked for: the copy is read from the
traces alone. The inputs are read, never modified.
"""

from __future__ import annotations

import gzip
import json
import random
import re
import shutil
from pathlib import Path

PP_SPAN = re.compile(r"^PP:")
#: Every span that names an action: the ``PP:`` ones and ScheduleGPipe's own.
ACTION_SPAN = re.compile(r"^(PP:|Forward \d+$|Backward \d+$)")


def rank_files(src: Path) -> list[Path]:
    """The harness's rank traces in ``src``, by rank."""
    return sorted(src.glob("rank*.json.gz"), key=lambda p: int(re.sub(r"\D", "", p.name) or 0))


def strip_run(src: Path, dst: Path, *, keep_manifest: bool = False,
              pattern: re.Pattern[str] = PP_SPAN, ranks: list[int] | None = None,
              shuffle_seed: int | None = None) -> Path:
    """Copy ``src``'s rank traces into ``dst`` without the spans whose name matches ``pattern``
    (``ranks``: only those ranks' files; ``shuffle_seed``: the events in a random order, which
    no reading may depend on)."""
    dst.mkdir(parents=True, exist_ok=True)
    for path in rank_files(src):
        if ranks is not None and int(re.sub(r"\D", "", path.name)) not in ranks:
            continue
        with gzip.open(path, "rt") as f:
            doc = json.load(f)
        doc["traceEvents"] = [e for e in doc["traceEvents"]
                              if not pattern.search(str(e.get("name", "")))]
        if shuffle_seed is not None:
            random.Random(shuffle_seed).shuffle(doc["traceEvents"])
        with gzip.open(dst / path.name, "wt") as f:
            json.dump(doc, f)
    if keep_manifest and (src / "manifest.json").exists():
        shutil.copy(src / "manifest.json", dst / "manifest.json")
    return dst


def relabel_ranks(src: Path, dst: Path, perm: dict[int, int]) -> Path:
    """Copy ``src``'s rank traces into ``dst`` with rank ``r`` renamed ``perm[r]`` (file name,
    ``distributedInfo.rank`` and every process group's rank list): the same job launched with
    another rank order. No manifest."""
    dst.mkdir(parents=True, exist_ok=True)
    for path in rank_files(src):
        with gzip.open(path, "rt") as f:
            doc = json.load(f)
        info = doc["distributedInfo"]
        new = perm[info["rank"]]
        info["rank"] = new
        for group in info.get("pg_config", []):
            group["ranks"] = [perm[r] for r in group["ranks"]]  # a pipeline group lists its stages in order
        with gzip.open(dst / f"rank{new}.json.gz", "wt") as f:
            json.dump(doc, f)
    return dst
