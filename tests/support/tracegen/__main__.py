"""Write one generated case's traces and print its truth:

    python -m tests.support.tracegen "Case('zbv', pp=2, v=2, m=4)" /tmp/case
"""

from __future__ import annotations

import sys

from tests.support.tracegen import Case, generate


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m tests.support.tracegen \"Case(...)\" FOLDER", file=sys.stderr)
        return 2
    case = eval(argv[0], {"Case": Case})  # noqa: S307 - a test helper's own repr
    g = generate(case)
    for p in g.write(argv[1]):
        print(p)
    t = g.truth
    print(f"truth: schedule {sorted(t.accepted_schedules)} v={t.v} M={t.m} steps={t.steps}")
    for r, b in sorted(t.rank_bubble.items()):
        print(f"  rank {r}: bubble {b:.4f} (by step {[round(x, 4) for x in t.rank_bubble_by_step[r]]})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
