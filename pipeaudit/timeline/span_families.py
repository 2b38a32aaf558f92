"""Find the user's own per-action spans without a pattern: ``s2_fwd_mb5``, ``stage1/forward/3``.

A user's training loop names its spans its own way, but an action span always carries a kind
word (fwd, forward, F, bwd, backward, B, dgrad, wgrad, ...), a microbatch number and often a
stage number, in any order and with any separators. Each span name is cut into letter runs,
digit runs and the rest; the kind word and the numbers become slots, the rest is the family's
fixed text (``s{n}_{kind}_mb{n}``). A family is a run of action spans when its kind slot takes
both a forward and a backward word and one of its numbers takes several values. Of the
families found, the one with the most spans wins; it becomes an ``--action-pattern`` regex
(:func:`pipeaudit.timeline.recognise.pattern_spans` reads it), and the report names it.

With two numbers, the one after a stage word (s, st, stage, pp, rank) is the stage and the one
after a microbatch word (mb, m, micro, microbatch, chunk) the microbatch; failing both, the
number with fewer distinct values is the stage.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

import polars as pl

from pipeaudit.timeline.recognise import KIND_WORDS

_TOKEN = re.compile(r"[A-Za-z]+|\d+|[^A-Za-z\d]+")
_STAGE_WORDS = {"s", "st", "stage", "pp", "rank", "stg"}
_MB_WORDS = {"mb", "m", "micro", "microbatch", "ubatch", "chunk", "mbs"}
#: Names longer than this are not action names (a stack, a module path with shapes, ...).
MAX_NAME = 80
#: A name that could be an action of the harness or torch: never a user family.
_RESERVED = re.compile(r"^(PP:|ProfilerStep#|Optimizer\.|Forward \d|Backward \d)")


@dataclass(frozen=True)
class SpanFamily:
    """A detected family: its regex for :func:`pattern_spans` and how the report names it."""

    pattern: str
    shown: str  #: e.g. ``s{stage}_fwd_mb{mb}``
    spans: int


def _template(name: str) -> tuple[tuple, str] | None:
    """(key, kind word) of one span name, or None when it is no action name."""
    if len(name) > MAX_NAME or _RESERVED.match(name):
        return None
    tokens = _TOKEN.findall(name)
    kinds = [i for i, t in enumerate(tokens) if t.lower() in KIND_WORDS]
    numbers = [i for i, t in enumerate(tokens) if t.isdigit()]
    if len(kinds) != 1 or not 1 <= len(numbers) <= 2:
        return None
    k = kinds[0]
    key = tuple("{kind}" if i == k else "{n}" if t.isdigit() else t for i, t in enumerate(tokens))
    return key, tokens[k]


def detect_family(names: Iterable[tuple[str, int]]) -> SpanFamily | None:
    """The family of action spans among the spans' distinct ``(name, count)``, or None."""
    families: dict[tuple, list[tuple[str, str, int]]] = {}
    for name, count in names:
        got = _template(name)
        if got is not None:
            families.setdefault(got[0], []).append((name, got[1], count))
    best: SpanFamily | None = None
    for key, members in families.items():
        kinds = {KIND_WORDS[w.lower()] for _, w, _ in members}
        if not ({"F"} <= kinds and kinds & {"B", "I", "W"}):
            continue
        family = _family(key, members)
        if family is not None and (best is None or family.spans > best.spans):
            best = family
    return best


def _family(key: tuple, members: list[tuple[str, str, int]]) -> SpanFamily | None:
    slots = [i for i, t in enumerate(key) if t == "{n}"]
    values: list[Counter] = [Counter() for _ in slots]
    for name, _, _ in members:
        tokens = _TOKEN.findall(name)
        for j, i in enumerate(slots):
            values[j][tokens[i]] += 1
    if max(len(v) for v in values) < 2:
        return None
    roles = ["mb"] if len(slots) == 1 else _roles(key, slots, values)
    words = sorted({w for _, w, _ in members}, key=lambda w: (-len(w), w))
    parts, shown = ["^"], []
    for i, t in enumerate(key):
        if t == "{kind}":
            parts.append("(?P<kind>" + "|".join(re.escape(w) for w in words) + ")")
            shown.append("{" + "|".join(sorted(words, key=_kind_first)) + "}")
        elif t == "{n}":
            role = roles[slots.index(i)]
            parts.append(f"(?P<{role}>\\d+)")
            shown.append("{" + role + "}")
        else:
            parts.append(re.escape(t))
            shown.append(t)
    parts.append("$")
    return SpanFamily("".join(parts), "".join(shown), sum(c for _, _, c in members))


def _roles(key: tuple, slots: list[int], values: list[Counter]) -> list[str]:
    """Which of two numbers is the stage and which the microbatch."""
    def word_before(i: int) -> str:
        return key[i - 1].lower() if i > 0 and key[i - 1].isalpha() else ""

    before = [word_before(i) for i in slots]
    for j, w in enumerate(before):
        if w in _STAGE_WORDS:
            return ["stage" if k == j else "mb" for k in range(2)]
        if w in _MB_WORDS:
            return ["mb" if k == j else "stage" for k in range(2)]
    stage = 0 if len(values[0]) <= len(values[1]) else 1
    return ["stage" if k == stage else "mb" for k in range(2)]


def family_of_spans(spans: pl.DataFrame) -> SpanFamily | None:
    """:func:`detect_family` over a rank's host spans (``name`` column), by distinct name."""
    counts = spans.group_by("name").len()  # the distinct names first: far fewer than spans
    counts = counts.filter(pl.col("name").str.contains(r"\d") & (pl.col("name").str.len_chars() <= MAX_NAME))
    if counts.height == 0:
        return None
    return detect_family(zip(counts["name"].to_list(), counts["len"].to_list()))


def _kind_first(word: str) -> tuple[int, str]:
    """Forward words first, then backward, input- and weight-gradient words."""
    return "FBIW".index(KIND_WORDS[word.lower()]), word
