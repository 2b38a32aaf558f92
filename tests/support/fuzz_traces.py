"""Hypothesis strategies for tiny, hostile pipeline traces (shared by the fuzz tests).

A generated *run* is a few ranks' Kineto-like documents (and sometimes a manifest): events
named like pipeline actions (``PP:1F0``, ``Forward 3``, OVERLAP_F_B), like the ops the
recognisers infer from (``autograd::engine::evaluate_function: ...``, ``c10d::send``), like
steps (``ProfilerStep#2``), and garbage that looks like them (``PP:99999999999999999999F0``,
``PP:(0F;x)OVERLAP_F_B``, ``Forward -1``); times that overlap, nest, repeat, run backwards,
are huge or missing; args of every type. Each case is tiny so that thousands run in seconds.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import msgspec
from hypothesis import strategies as st

#: Decimal -> a JSON number with its exact digits
encode = msgspec.json.Encoder(decimal_format="number").encode

T0 = 1_700_000_000_000_000  # µs since the epoch
HUGE = "99999999999999999999"

small = st.integers(0, 3)
_ACTIONS = ([f"PP:{s}{k}{m}" for s in range(3) for k in "FBIW" for m in range(3)]
            + [f"{k} {m}" for k in ("Forward", "Backward") for m in range(3)]
            + [f"PP:({s}F{m};{t}B{n})OVERLAP_F_B" for s in range(2) for m in range(2) for t in range(2)
               for n in range(2)]
            + [f"ProfilerStep#{n}" for n in range(3)])
action_names = st.sampled_from(_ACTIONS)
garbage_names = st.sampled_from([
    f"PP:{HUGE}F0", f"PP:0F{HUGE}", f"PP:0B{HUGE}", "PP:(0F;x)OVERLAP_F_B", "PP:()OVERLAP_F_B",
    f"PP:({HUGE}F1;0B0)OVERLAP_F_B", "PP:(0F1;0B1;1W2)OVERLAP_F_B", "PP:(0F1)OVERLAP_F_B",
    f"Forward {HUGE}", "Backward -1", "Forward ", f"ProfilerStep#{HUGE}", "ProfilerStep#-1",
    "ProfilerStep#", "PP:0SEND_F0", "PP:1RECV_B3", "PP:0UNSHARD", "PP:", "PP:0X0", "PP:0F0 ",
    "PP:-1F0", "PP:0f0", "PP:00F00", "Forward 0\n", "", "PP:0F99999", "PP:99999B0", "\u00e9\x00",
])
op_names = st.sampled_from([
    "aten::mm", "aten::addmm", "aten::detach_", "autograd::engine::evaluate_function: MmBackward0",
    "autograd::engine::evaluate_function: torch::autograd::AccumulateGrad", "c10d::send",
    "c10d::recv_", "gloo:send", "gloo:recv", "nccl:send", "ncclDevKernel_SendRecv",
    "cudaLaunchKernel", "Optimizer.step#SGD.step", "[memory]",
])
names = st.one_of(action_names, op_names, action_names, garbage_names)
cats = st.sampled_from(["user_annotation", "cpu_op", "kernel", "cuda_runtime", "gpu_user_annotation",
                        "python_function", "gpu_memcpy", "Trace", ""])
json_scalars = st.sampled_from([None, True, False, -1, 0, 2**40, -(2**70), 2**70, 1.5, -0.0, 1e300,
                                "", "x", "0x1f", "12", [], {}, [1], {"a": 1}])
# times in µs after T0: mostly small non-negative, sometimes hostile
offsets = st.one_of(st.integers(0, 400), st.integers(0, 400), st.integers(0, 400),
                    st.sampled_from([-50, -1, 2**40, 2**51, 0.001, 123.456, 399.999]))
durations = st.one_of(st.integers(0, 200), st.integers(0, 200), st.integers(0, 200),
                      st.sampled_from([0, -1, -5, 2**40, 0.001, 12.5, 2**51]))
ints_or_junk = st.one_of(st.integers(0, 40), st.integers(0, 40), json_scalars)


@st.composite
def events(draw, rank: int):
    kind = draw(st.sampled_from("XXXXXXXXiisfMBE"))
    name = draw(names)
    if rank and draw(st.integers(0, 3)) == 0:  # the rank's own stage number
        name = name.replace("PP:0", f"PP:{rank}")
    e = {"ph": kind, "name": name, "pid": 1, "tid": draw(st.sampled_from([1, 1, 1, 2, "1", "x", None]))}
    if draw(st.integers(0, 19)):
        e["ts"] = T0 + draw(offsets)
    if kind == "X":
        e["cat"] = draw(cats)
        if draw(st.integers(0, 9)):
            e["dur"] = draw(durations)
        if draw(st.integers(0, 3)) == 0:
            e["args"] = {draw(st.sampled_from(["External id", "correlation", "stream", "device"])):
                         draw(ints_or_junk)}
    elif kind == "i" and name == "[memory]":
        e["args"] = {"Total Allocated": draw(ints_or_junk), "Device Id": draw(ints_or_junk),
                     "Device Type": draw(ints_or_junk)}
    return e


@st.composite
def rank_docs(draw, rank: int, world: int | None):
    evs = draw(st.lists(events(rank), max_size=14))
    if draw(st.booleans()):  # a well-formed step around the rest
        evs.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{draw(small)}",
                    "pid": 1, "tid": 1, "ts": T0, "dur": draw(st.integers(1, 600))})
    doc: dict = {"schemaVersion": 1, "traceEvents": evs}
    if world is not None:
        doc["distributedInfo"] = {"backend": "gloo", "rank": rank, "world_size": world}
    if draw(st.integers(0, 4)) == 0:
        doc["baseTimeNanoseconds"] = draw(st.integers(0, 2**61))
    return doc


manifests = st.one_of(
    st.none(),
    st.fixed_dictionaries({}, optional={
        "num_ranks": ints_or_junk, "world_size": ints_or_junk, "num_microbatches": ints_or_junk,
        "schedule": st.one_of(st.sampled_from(["1f1b", "gpipe", "zbv", "interleaved-1f1b",
                                               "dualpipev", "nonsense"]), json_scalars),
        "stage_to_rank": st.one_of(st.lists(ints_or_junk, max_size=4), json_scalars),
    }),
)


@st.composite
def runs(draw):
    """(per-rank documents, manifest or None, load kwargs)."""
    n = draw(st.sampled_from([1, 1, 2, 2, 3]))
    world = draw(st.one_of(st.none(), st.just(n), st.integers(1, 4)))
    ranks = [r for r in range(n)] if world is None or world >= n else list(range(n))
    docs = [draw(rank_docs(r, world if world is None or r < world else None)) for r in ranks]
    kwargs = {}
    if draw(st.integers(0, 3)) == 0:
        kwargs["schedule"] = draw(st.sampled_from(["1f1b", "gpipe", "zbv", "interleaved-1f1b",
                                                   "looped-bfs", "dualpipev", "bogus"]))
    if draw(st.integers(0, 4)) == 0:
        kwargs["num_microbatches"] = draw(st.integers(1, 4))
    if draw(st.integers(0, 5)) == 0:
        kwargs["action_pattern"] = draw(st.sampled_from([
            r"PP:(?P<stage>\d+)(?P<kind>[FB])(?P<mb>\d+)", r"(?P<kind>\w+) (?P<mb>\S+)",
            r"(?P<kind>Forward|Backward) (?P<mb>\d+)", r"(?P<kind>.)(?P<mb>.*)",
            r"(?P<stage>\w*)(?P<kind>\w)(?P<mb>\w*)"]))
    return docs, draw(manifests), kwargs


def write_run(directory: Path, docs: list[dict], manifest: dict | None) -> Path:
    """Write a generated run into ``directory`` (emptied first)."""
    if directory.exists():
        shutil.rmtree(directory)
    directory.mkdir(parents=True)
    for r, doc in enumerate(docs):
        (directory / f"rank{r}.json").write_bytes(encode(doc))
    if manifest is not None:
        (directory / "manifest.json").write_bytes(encode(manifest))
    return directory


# --------------------------------------------------------------------------- seeded generation
# The same distribution drawn from one seed: a hypothesis example then costs a handful of draws
# instead of hundreds (hypothesis spends ~10 µs per draw), so thousands of runs fit in CI.

_NAME_POOLS = (_ACTIONS, [n for n in garbage_names.elements], [n for n in op_names.elements])
_CATS = list(cats.elements)
_JUNK = list(json_scalars.elements)
_OFFSETS = [-50, -1, 2**40, 2**51, 0.001, 123.456, 399.999]
_DURS = [0, -1, -5, 2**40, 0.001, 12.5, 2**51]


def _r_event(rng, rank: int, garbage: float) -> dict:
    kind = rng.choice("XXXXXXXXiisfMBE")
    pool = _NAME_POOLS[2] if rng.random() < 0.35 else (_NAME_POOLS[1] if rng.random() < garbage else _NAME_POOLS[0])
    name = rng.choice(pool)
    if rank and rng.random() < 0.3:
        name = name.replace("PP:0", f"PP:{rank}")
    e = {"ph": kind, "name": name, "pid": 1, "tid": rng.choice([1, 1, 1, 2, "1", "x", None])}
    if rng.random() < 0.95:
        e["ts"] = T0 + (rng.randint(0, 400) if rng.random() > garbage / 3 else rng.choice(_OFFSETS))
    if kind == "X":
        e["cat"] = rng.choice(_CATS)
        if rng.random() < 0.9:
            e["dur"] = rng.randint(0, 200) if rng.random() > garbage / 3 else rng.choice(_DURS)
        if rng.random() < 0.25:
            e["args"] = {rng.choice(["External id", "correlation", "stream", "device"]):
                         rng.randint(0, 40) if rng.random() < 0.6 else rng.choice(_JUNK)}
    elif kind == "i" and name == "[memory]":
        e["args"] = {k: (rng.randint(0, 40) if rng.random() < 0.6 else rng.choice(_JUNK))
                     for k in ("Total Allocated", "Device Id", "Device Type")}
    return e


def _r_manifest(rng):
    if rng.random() < 0.6:
        return None
    keys = ["num_ranks", "world_size", "num_microbatches", "schedule", "stage_to_rank"]
    man = {}
    for k in rng.sample(keys, rng.randint(1, len(keys))):
        if k == "schedule":
            man[k] = rng.choice(["1f1b", "gpipe", "zbv", "interleaved-1f1b", "dualpipev", "nonsense", 3])
        elif k == "stage_to_rank":
            man[k] = [rng.choice([0, 1, 2, None, "1"]) for _ in range(rng.randint(0, 4))]
        else:
            man[k] = rng.randint(1, 4) if rng.random() < 0.6 else rng.choice(_JUNK)
    return man


def random_run(seed: int, n_ranks: int, n_events: int, garbage: float, steps: bool, world: int | None):
    """(per-rank documents, manifest or None, load kwargs) drawn from ``seed``."""
    import random

    rng = random.Random(seed)
    docs = []
    for r in range(n_ranks):
        evs = [_r_event(rng, r, garbage) for _ in range(rng.randint(0, n_events))]
        if steps:
            evs.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{rng.randint(0, 2)}",
                        "pid": 1, "tid": 1, "ts": T0, "dur": rng.randint(1, 600)})
        rng.shuffle(evs)
        doc: dict = {"schemaVersion": 1, "traceEvents": evs}
        if world is not None and r < world:
            doc["distributedInfo"] = {"backend": "gloo", "rank": r, "world_size": world}
        if rng.random() < 0.2:
            doc["baseTimeNanoseconds"] = rng.choice([0, 1, 2**61])
        docs.append(doc)
    kwargs: dict = {}
    if rng.random() < 0.25:
        kwargs["schedule"] = rng.choice(["1f1b", "gpipe", "zbv", "interleaved-1f1b", "looped-bfs",
                                         "dualpipev", "bogus"])
    if rng.random() < 0.2:
        kwargs["num_microbatches"] = rng.randint(1, 4)
    if rng.random() < 0.15:
        kwargs["action_pattern"] = rng.choice([
            r"PP:(?P<stage>\d+)(?P<kind>[FB])(?P<mb>\d+)", r"(?P<kind>\w+) (?P<mb>\S+)",
            r"(?P<kind>Forward|Backward) (?P<mb>\d+)", r"(?P<kind>.)(?P<mb>.*)",
            r"(?P<stage>\w*)(?P<kind>\w)(?P<mb>\w*)"])
    return docs, _r_manifest(rng), kwargs


def _one_f_one_b(P: int, M: int) -> list[list[str]]:
    out = []
    for r in range(P):
        warm = min(P - r - 1, M)
        order = [f"{r}F{m}" for m in range(warm)]
        f, b = warm, 0
        while b < M:
            if f < M:
                order.append(f"{r}F{f}")
                f += 1
            order.append(f"{r}B{b}")
            b += 1
        out.append(order)
    return out


_MUTATIONS = ("drop", "duplicate", "shift", "stretch", "rename", "garbage_name", "overlap",
              "negative", "zero", "swap_rank", "move_step", "retag")


def mutated_pipeline(seed: int, P: int, M: int, steps: int, n_mutations: int):
    """A valid-looking P-rank 1F1B run (PP: spans, compute ops, p2p ops, ProfilerStep spans)
    with ``n_mutations`` random mutations; returns (docs, manifest, kwargs)."""
    import random

    rng = random.Random(seed)
    docs = []
    orders = _one_f_one_b(P, M)
    for r in range(P):
        evs = []
        t = 0
        for k in range(steps):
            step_start = t
            body = []
            for a in orders[r]:
                t += rng.randint(0, 30)
                d = rng.randint(20, 120)
                body.append({"ph": "X", "cat": "user_annotation", "name": f"PP:{a}", "pid": 1, "tid": 1,
                             "ts": T0 + t, "dur": d})
                op = "aten::mm" if "F" in a else "autograd::engine::evaluate_function: MmBackward0"
                body.append({"ph": "X", "cat": "cpu_op", "name": op, "pid": 1, "tid": 1,
                             "ts": T0 + t + 2, "dur": d - 6})
                p2p = "c10d::send" if ("F" in a) == (r < P - 1) else "c10d::recv_"
                body.append({"ph": "X", "cat": "cpu_op", "name": p2p, "pid": 1, "tid": 1,
                             "ts": T0 + t + d - 3, "dur": 2})
                t += d
            t += 20
            evs.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{k}", "pid": 1,
                        "tid": 1, "ts": T0 + step_start, "dur": t - step_start})
            evs.extend(body)
            t += rng.randint(0, 50)
        if rng.random() < 0.3:
            evs.append({"ph": "i", "name": "[memory]", "pid": 1, "tid": 1, "ts": T0 + 5,
                        "args": {"Total Allocated": rng.randint(0, 10**6), "Device Id": -1, "Device Type": 0}})
        docs.append({"schemaVersion": 1, "traceEvents": evs,
                     "distributedInfo": {"backend": "gloo", "rank": r, "world_size": P}})
    for _ in range(n_mutations):
        doc = rng.choice(docs)
        evs = doc["traceEvents"]
        if not evs:
            continue
        i = rng.randrange(len(evs))
        e = evs[i]
        what = rng.choice(_MUTATIONS)
        if what == "drop":
            del evs[i]
        elif what == "duplicate":
            evs.append(dict(e, ts=e.get("ts", T0) + rng.randint(-50, 50)))
        elif what == "shift":
            e["ts"] = e.get("ts", T0) + rng.choice([-1000, -10, 10, 1000, 10**6])
        elif what == "stretch":
            e["dur"] = rng.choice([0, 1, 10**4, 10**7])
        elif what == "rename":
            e["name"] = rng.choice(_ACTIONS)
        elif what == "garbage_name":
            e["name"] = rng.choice(list(garbage_names.elements))
        elif what == "overlap":
            other = rng.choice(evs)
            e["ts"] = other.get("ts", T0) + rng.randint(0, 5)
        elif what == "negative":
            e["dur"] = -rng.randint(1, 50)
        elif what == "zero":
            e["ts"] = T0
        elif what == "swap_rank":
            info = doc.get("distributedInfo")
            if info:
                info["rank"] = rng.randrange(P)
        elif what == "move_step":
            if e["name"].startswith("ProfilerStep#"):
                e["name"] = f"ProfilerStep#{rng.randint(0, 3)}"
        else:
            e["cat"] = rng.choice(_CATS)
    kwargs: dict = {}
    if rng.random() < 0.5:
        kwargs["schedule"] = rng.choice(["1f1b", "gpipe", "zbv", "interleaved-1f1b", "dualpipev"])
    manifest = {"num_ranks": P, "num_microbatches": M, "schedule": "1f1b",
                "stage_to_rank": list(range(P))} if rng.random() < 0.3 else None
    return docs, manifest, kwargs
