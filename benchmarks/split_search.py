"""How fast is the layer-split search? L = 128 layers over P = 16 ranks x v = 1..4 chunks.

For each v, :func:`pipeaudit.advise.split_search.best_splits` on random per-layer costs with a
first and a last stage extra, without and with a memory budget per stage (1F1B's in-flight
microbatches), and the rank-balancing pass for v > 1 (stage -> rank ``s mod P``). Prints the
median of ``--repeats`` timings per case and the total over v = 1..4 (the target: under 1 s),
and, on a small case (L = 8 over 4 stages, every split enumerated), the search's bottleneck
against brute force. Writes ``--json`` when given.

    python benchmarks/split_search.py [--repeats 5] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import random
import time
from statistics import median


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=128)
    ap.add_argument("--ranks", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    from pipeaudit.advise.split_search import best_splits, brute_force, stage_costs

    rng = random.Random(0)
    L, P = args.layers, args.ranks
    costs = [rng.uniform(0.5, 1.5) for _ in range(L)]
    mem = [rng.uniform(0.5, 1.5) for _ in range(L)]
    rows = []
    for v in (1, 2, 3, 4):
        S = P * v
        placement = [s % P for s in range(S)]
        flight = [max(1, P - s % P) for s in range(S)]
        per_layer = [[f * m for m in mem] for f in flight]
        budget = [1.3 * sum(mem) / S * P] * S
        for memory in (False, True):
            times = []
            for _ in range(args.repeats):
                t0 = time.perf_counter()
                found = best_splits(costs, S, 3.0, 5.0,
                                    per_layer if memory else None, None,
                                    budget if memory else None, placement)
                times.append(time.perf_counter() - t0)
            rows.append({"layers": L, "ranks": P, "v": v, "stages": S, "memory_budget": memory,
                         "seconds_median": median(times), "splits_found": len(found)})
    total = {m: sum(r["seconds_median"] for r in rows if r["memory_budget"] == m)
             for m in (False, True)}
    print(f"{'v':>2} {'stages':>6} {'memory':>6} {'seconds':>8} {'found':>5}")
    for r in rows:
        print(f"{r['v']:>2} {r['stages']:>6} {str(r['memory_budget']):>6} "
              f"{r['seconds_median']:8.4f} {r['splits_found']:>5}")
    print(f"all v = 1..4: {total[False]:.3f} s without a memory budget, {total[True]:.3f} s with")
    small = [rng.uniform(0.5, 4.0) for _ in range(8)]
    best, _ = brute_force(small, 4, 1.0, 2.0)
    got = max(stage_costs(best_splits(small, 4, 1.0, 2.0)[0], small, 1.0, 2.0))
    print(f"8 layers over 4 stages: search bottleneck {got:.4f}, brute force over 35 splits "
          f"{best:.4f}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"rows": rows, "total_seconds": {str(k): v for k, v in total.items()},
                       "small_case": {"search": got, "brute_force": best}}, fh, indent=1)


if __name__ == "__main__":
    main()
