"""The advise model's terms on inputs with a known answer: the per-layer re-staging (time and
memory) and the memory timeline's activation, transient and gradient terms."""

from __future__ import annotations

from types import SimpleNamespace

import polars as pl
import pytest

from pipeaudit.actions import KINDS
from pipeaudit.advise.memory import (
    HeldSends, RankMemory, StageMemory, held_by_runtime, held_sends, order_peak,
    _restaged, net_of_messages, predicted_peaks, rank_memory,
)
from pipeaudit.explain.link import message_bytes
from pipeaudit.explain.layers import even_layers, layer_shares, manifest_layers, restage
from pipeaudit.explain.whatif import _rederive, _split_from_full, split_cost
from pipeaudit.schedules import build_schedule

MB = 1_000_000


def test_even_layers_give_the_extra_to_the_earlier_stages():
    assert even_layers(8, 8) == [1] * 8
    assert even_layers(10, 4) == [3, 3, 2, 2]


def test_layer_shares_put_a_heavy_stage_on_the_ranks_that_hold_its_layers():
    """4 stages of 2 layers re-staged to 8 of 1: new stages 2 and 3 hold stage 1's layers."""
    shares = layer_shares([2, 2, 2, 2], 8)
    assert shares[2] == {1: 0.5} and shares[3] == {1: 0.5}
    per_stage = restage({0: 10.0, 1: 30.0, 2: 10.0, 3: 10.0}, shares)
    assert per_stage == {0: 5.0, 1: 5.0, 2: 15.0, 3: 15.0, 4: 5.0, 5: 5.0, 6: 5.0, 7: 5.0}
    assert sum(per_stage.values()) == 60.0  # the model's total is kept
    assert layer_shares([2, 2], 8) is None  # fewer layers than stages
    assert manifest_layers({"stage_layers": [2, 2, 2, 2]}, 4) == [2, 2, 2, 2]
    assert manifest_layers({"stage_layers": [2, 2]}, 4) is None
    assert manifest_layers(None, 4) is None


def test_rederive_per_layer_moves_the_heavy_layers_time():
    """Time re-derived per layer: the heavy stage 1 (3x) of a 4-stage run lands on new stages 2
    and 3 (ranks 2 and 3 in a loop of 4 ranks, v=2), not on rank 1's two chunks."""
    dur = {(s, k): (3.0 if s == 1 else 1.0) * (2.0 if k == "B" else 1.0)
           for s in range(4) for k in KINDS}
    new_place = tuple(s % 4 for s in range(8))
    new_dur, _, how = _rederive(dur, dur, [0, 1, 2, 3], new_place, 0.5, layer_shares([2] * 4, 8))
    assert how == "layers"
    assert new_dur[(2, "F")] == new_dur[(3, "F")] == pytest.approx(3.0 / 2 * 0.5)
    assert new_dur[(1, "F")] == new_dur[(5, "F")] == pytest.approx(1.0 / 2 * 0.5)
    _, _, how = _rederive(dur, dur, [0, 1, 2, 3], new_place, 0.5)
    assert how == "ranks"
    _, _, how = _rederive(dur, dur, [0, 1, 2, 3], (0, 1, 2, 3), 0.5)
    assert how is None


def _synthetic_rank(order, act: int, fwd_extra: int, bwd_extra: int, grads: int, steps: int = 2):
    """A rank running ``order`` each step, its memory level built from known terms: each
    forward holds ``act`` (rising ``fwd_extra`` above that during it), each backward peaks
    ``bwd_extra`` above its start and frees ``act``, the first backward of a step leaves
    ``grads`` more (freed at the next step's start, as zero_grad does)."""
    rows, mem, t = [], [], 0
    for step in range(steps):
        level, seen = 0, False
        mem.append((t, level))
        for a in order:
            start, end = t + 10, t + 100
            rows.append({"stage": a.stage, "kind": a.kind, "microbatch": a.microbatch,
                         "step": step, "start": start, "end": end})
            if a.kind == "F":
                mem.append((start + 5, level + act + fwd_extra))
                level += act
            else:
                mem.append((start + 5, level + bwd_extra))
                level -= act
                if not seen:
                    level += grads
                    seen = True
            mem.append((start + 50, level))
            t = end
        t += 1000
    actions = pl.DataFrame(rows)
    memory = pl.DataFrame({"ts": [m[0] for m in mem], "total_allocated": [m[1] for m in mem],
                           "device_id": [0] * len(mem)})
    return SimpleNamespace(rank=0, actions=actions, memory=memory)


def test_rank_memory_reads_the_terms_back_from_the_timeline():
    order = build_schedule("1f1b", 4, 8, None).orders[0]
    rt = _synthetic_rank(order, act=10 * MB, fwd_extra=MB // 2, bwd_extra=3 * MB, grads=5 * MB)
    m = rank_memory(SimpleNamespace(ranks=[rt]))[0]
    s = m.stages[0]
    assert (s.activation, s.release, s.grads) == (10 * MB, -10 * MB, 5 * MB)
    assert s.forward_peak == 10 * MB + MB // 2
    assert m.backward_peak == 3 * MB and m.base == 0
    # the model replays the measured order to the measured peak: 4 in flight + grads + transient
    assert m.peak == 4 * 10 * MB + 5 * MB + 3 * MB
    assert predicted_peaks({0: m}, {0: order}, (0, 1, 2, 3), 1.0) == {0: m.peak}


def test_the_backward_transient_does_not_multiply_by_the_microbatches_in_flight():
    """GPipe's peak is M activations + one backward's transient (gradients come after the
    first backward), where in-flight x (peak solved from 1F1B) would count the transient M
    times."""
    terms = StageMemory(activation=10.0, forward_peak=10.5, release=-10.0, grads=5.0)
    mem = {0: RankMemory(0, base=1, peak=0, backward_peak=3.0, stages={0: terms})}
    gpipe = build_schedule("gpipe", 4, 8, None).orders[0]
    assert order_peak(gpipe, 1, 3.0, {0: terms}) == 1 + 8 * 10.0 + 3.0
    # half the rows (M=16 for the same batch): activations and transient halve, gradients not
    gpipe16 = build_schedule("gpipe", 4, 16, None).orders[0]
    assert predicted_peaks(mem, {0: gpipe16}, (0, 1, 2, 3), 0.5) == {0: int(1 + 16 * 5.0 + 1.5)}


def test_restaged_memory_follows_the_layers():
    """A 3x heavier stage 1 re-staged to v=2: its activations land on ranks 2 and 3."""
    def terms(a):
        return StageMemory(activation=a, forward_peak=a, release=-a, grads=0.0)
    mem = {r: RankMemory(r, 0, 0, 0.0, {r: terms(30.0 if r == 1 else 10.0)}) for r in range(4)}
    sched = build_schedule("interleaved-1f1b", 4, 4, 2)
    orders = {r: sched.orders[r] for r in range(4)}
    by_layers = predicted_peaks(mem, orders, sched.placement, 1.0, shares=layer_shares([2] * 4, 8))
    even = predicted_peaks(mem, orders, sched.placement, 1.0)
    assert by_layers[1] < even[1] and by_layers[2] > even[2]


def test_runtimes_that_wait_sends_at_the_step_end_hold_them():
    """torch's action runtime keeps every sent output and input gradient to the step's end;
    GPipe its backward sends; 1F1B none (it waits each send at the next action)."""
    assert held_by_runtime("interleaved-1f1b") == (True, True)
    assert held_by_runtime("zbv") == (True, True)
    assert held_by_runtime("gpipe") == (False, True)
    assert held_by_runtime("1f1b") == (False, False)
    # measured 1F1B: an interleaved candidate holds both, a GPipe one its gradients
    assert held_sends("interleaved-1f1b", 2.0) == HeldSends(2.0, True, True)
    assert held_sends("gpipe", 2.0) == HeldSends(2.0, False, True)
    assert held_sends("1f1b", 2.0) is None
    assert held_sends("interleaved-1f1b", None) is None  # size unknown


def test_held_sends_add_a_message_per_backward_but_at_the_pipelines_ends():
    """One rank holding stages 0 and 1 of 2 (M=2): each microbatch's backward on stage 1 keeps
    its input gradient (stage 1 is the last: its output is not sent); on stage 0 its output
    (stage 0 is the first: no gradient is sent)."""
    terms = {s: StageMemory(activation=10.0, forward_peak=10.0, release=-10.0, grads=0.0)
             for s in (0, 1)}
    order = [SimpleNamespace(stage=s, kind=k, microbatch=mb) for s, k, mb in
             [(0, "F", 0), (1, "F", 0), (0, "F", 1), (1, "F", 1),
              (1, "B", 0), (0, "B", 0), (1, "B", 1), (0, "B", 1)]]
    plain = order_peak(order, 0.0, 0.0, terms)
    assert plain == 40.0
    held = HeldSends(1.0, outputs=True, gradients=True)
    # 4 messages held by the end; the peak is still the forwards'
    assert order_peak(order, 0.0, 0.0, terms, held) == 40.0
    big = HeldSends(25.0, outputs=True, gradients=True)
    assert order_peak(order, 0.0, 0.0, terms, big) == 4 * 25.0


def test_held_sends_count_only_messages_to_another_rank():
    """ZBV's V (P=2: stages 0,1,2,3 on ranks 0,1,1,0): rank 1 passes stage 1's output to stage 2
    and stage 2's input gradient to stage 1 in place; it sends stage 1's input gradient and
    stage 2's output, one message per microbatch and stage."""
    terms = {s: StageMemory(activation=10.0, forward_peak=10.0, release=-10.0, grads=0.0)
             for s in range(4)}
    order = [SimpleNamespace(stage=s, kind=k, microbatch=0) for s, k in
             [(1, "F"), (2, "F"), (2, "B"), (1, "B")]]
    held = HeldSends(3.0, outputs=True, gradients=True)
    v_shape = (0, 1, 1, 0)
    # small messages: the peak is still the forwards' (20)
    assert order_peak(order, 0.0, 0.0, terms, held, placement=v_shape) == 20.0
    big = HeldSends(30.0, outputs=True, gradients=True)
    assert order_peak(order, 0.0, 0.0, terms, big, placement=v_shape) == 2 * 30.0
    # every stage on its own rank: two messages each
    assert order_peak(order, 0.0, 0.0, terms, big) == 4 * 30.0


def test_a_split_backward_holds_weight_gradients_from_i_to_w():
    """Between a microbatch's I and its W a stage holds split_hold x its activation, and the I
    peaks SPLIT_TRANSIENT of a backward's transient above that; the W frees without rising.
    The first stage has no input gradient: its W is the whole backward."""
    from pipeaudit.advise.memory import SPLIT_TRANSIENT

    terms = {s: StageMemory(activation=10.0, forward_peak=10.0, release=-10.0, grads=0.0)
             for s in (0, 1)}

    def order(stage, kinds):
        return [SimpleNamespace(stage=stage, kind=k, microbatch=mb) for k, mb in kinds]

    split = [("F", 0), ("F", 1), ("I", 0), ("I", 1), ("W", 0), ("W", 1)]
    full = [("F", 0), ("F", 1), ("B", 0), ("B", 1)]
    # stage 1: 20 after the forwards, +5 per I, the second I peaking its transient above 30
    assert order_peak(order(1, split), 0.0, 4.0, terms, split_hold=0.5) == \
        pytest.approx(30.0 + SPLIT_TRANSIENT * 4.0)
    assert order_peak(order(1, full), 0.0, 4.0, terms, split_hold=0.5) == 24.0
    # stage 0: nothing held, its W peaks a whole backward's transient
    assert order_peak(order(0, split), 0.0, 4.0, terms, split_hold=0.5) == 24.0


def test_message_bytes_from_the_harness_manifest():
    manifest = {"model": {"batch_size": 64, "seq_len": 64, "hidden": 256}}
    assert message_bytes(manifest, 16) == 4 * 64 * 256 * 4
    assert message_bytes({"model": {}}, 16) is None
    assert message_bytes({**manifest, "framework": {"name": "deepspeed"}}, 16) is None
    assert message_bytes(None, 8) is None


def test_candidates_within_the_models_error_of_the_advised_one_are_named():
    from pipeaudit.advise.advise import TYPICAL_ERROR, Candidate, close_to_best, order_band

    def cand(name, t, fits=True):
        return Candidate(name, 1, 8, t, 0.1, None, fits)

    # two predictions each off by the typical error, in opposite directions
    assert order_band(0.01) == pytest.approx(2 * TYPICAL_ERROR)
    band = order_band(0.01)
    ranked = [cand("a", 100.0), cand("b", 100.0 * (1 + band)), cand("c", 100.0 * (1 + band) + 1),
              cand("d", 101.0, fits=False)]
    assert [c.schedule for c in close_to_best(ranked, 0.01)] == ["b"]
    # a larger error on the measured configuration widens the band
    assert order_band(0.12) == pytest.approx(0.24)
    assert [c.schedule for c in close_to_best(ranked, 0.12)] == ["b", "c"]
    assert close_to_best([cand("d", 1.0, fits=False)], 0.0) == []


def _rerun(name, measured_ms, peak_mib, run=False, fits=True):
    from pipeaudit.advise.advise import Candidate
    from pipeaudit.advise.verify import verified_row

    c = Candidate(name, 1, 8, measured_ms * 1000.0, 0.1, int(peak_mib * 2**20), fits, run)
    got = {"step_time_us": measured_ms * 1000.0, "bubble": 0.1,
           "peak_memory_bytes": int(peak_mib * 2**20)}
    return verified_row(c, got, name, None)


def test_the_advice_proven_by_reruns_is_the_fastest_that_fits_when_run():
    from pipeaudit.advise.verify import proven_best

    rows = [_rerun("ran", 100.0, 40, run=True), _rerun("fast_but_big", 70.0, 90),
            _rerun("fits", 80.0, 60), _rerun("slow", 95.0, 30)]
    p = proven_best(rows, 64 * 2**20)
    assert p["schedule"] == "fits" and p["speedup"] == pytest.approx(100.0 / 80.0)
    assert p["reruns"] == 4 and not p["is_measured_configuration"]
    # without a cap the fastest rerun; the measured configuration when it ran fastest
    assert proven_best(rows, None)["schedule"] == "fast_but_big"
    assert proven_best(rows[:1] + rows[3:], None)["is_measured_configuration"] is False
    assert proven_best([rows[0], _rerun("slower", 120.0, 10)], None)["is_measured_configuration"]
    # nothing fits when run
    assert proven_best(rows, 10 * 2**20) is None


def test_the_reruns_notes_name_a_broken_fit_and_a_reordered_advice():
    from pipeaudit.advise.advise import Advice, Candidate
    from pipeaudit.advise.verify import proven_best, rerun_notes

    rows = [_rerun("ran", 100.0, 40, run=True), _rerun("predicted_best", 90.0, 70),
            _rerun("fits", 80.0, 60)]
    first = Candidate("predicted_best", 1, 8, 75_000.0, 0.1, 50 * 2**20, True)
    a = Advice({}, [first], 64 * 2**20, True, {}, [], verified=rows)
    a.proven = proven_best(rows, a.memory_cap_bytes)
    notes = rerun_notes(a)
    assert any("predicted_best v=1 M=8 was predicted to fit" in n and "70.0 MiB" in n
               for n in notes)
    assert any(n.startswith("the reruns reorder the advice: fits v=1 M=8 measured fastest "
                            "(80.0 ms)") and "predicted_best v=1 M=8, ran 90.0 ms" in n
               for n in notes)


def _v_turn_order():
    """Rank 1 of ZBV at P=2 (stages 0,1,2,3 on ranks 0,1,1,0), M=2, full backwards."""
    return [SimpleNamespace(stage=s, kind=k, microbatch=mb) for s, k, mb in
            [(1, "F", 0), (2, "F", 0), (1, "F", 1), (2, "F", 1),
             (2, "B", 0), (1, "B", 0), (2, "B", 1), (1, "B", 1)]]


def test_the_v_turn_carries_a_message_per_microbatch_each_way():
    """Stage 1 passes its output to stage 2 in place: the rank starts the step holding the last
    step's 2 outputs and 2 input gradients (4 messages); each stage-1 forward frees the last
    step's output as it sets its own, which then outlives the microbatch's backward. Level
    (message 1): 4, 13, 23, 32, 42 (peak), and back to 4 at the step's end."""
    terms = {s: StageMemory(activation=10.0, forward_peak=10.0, release=-10.0, grads=0.0)
             for s in range(4)}
    order, v_shape = _v_turn_order(), (0, 1, 1, 0)
    assert order_peak(order, 0.0, 0.0, terms, placement=v_shape) == 40.0
    assert order_peak(order, 0.0, 0.0, terms, placement=v_shape, in_place=1.0) == 42.0
    # every stage on its own rank: nothing passes in place
    assert order_peak(order, 0.0, 0.0, terms, in_place=1.0) == 40.0


def test_a_measured_v_turn_is_taken_out_of_the_readings():
    """A ZBV run's turn rank reads base 4 (M=2, message 1), the turning stage's forward 9 and its
    release -9: without them, base 0 and the stage's own 10 and -10; other ranks unchanged."""
    read = {s: StageMemory(activation=9.0 if s == 1 else 10.0, forward_peak=10.0,
                           release=-9.0 if s == 1 else -10.0, grads=0.0) for s in range(4)}
    memory = {0: RankMemory(0, 0, 50, 0.0, {0: read[0], 3: read[3]}),
              1: RankMemory(1, 4, 46, 0.0, {1: read[1], 2: read[2]})}
    clean = net_of_messages(memory, (0, 1, 1, 0), 2, 1.0, (False, False))
    assert clean[0] == memory[0]
    assert clean[1].base == 0 and clean[1].peak == 46
    assert clean[1].stages[1] == StageMemory(10.0, 10.0, -10.0, 0.0)
    assert clean[1].stages[2] == read[2]
    # and predicted back on the same order, the reading's peak: 4 + 9 + 10 + 9 + 10
    again = predicted_peaks(clean, {1: _v_turn_order()}, (0, 1, 1, 0), 1.0, in_place=1.0)
    assert again == {1: 42}
    assert net_of_messages(memory, (0, 1, 2, 3), 2, 1.0, (False, False)) == memory
    assert net_of_messages(memory, (0, 1, 1, 0), 2, None, (True, True)) == memory


def test_the_measured_runtimes_held_sends_are_taken_out():
    """Stages 0..3 on ranks 0..3 under the action runtime (outputs and gradients held): stage 1
    sends an output and a gradient, so its release -8 of 10 frees 10 without them; its split
    hold 0.6 was 0.5 and the sent gradient's 1 of its activation 10."""
    t = StageMemory(activation=10.0, forward_peak=10.0, release=-8.0, grads=0.0)
    memory = {1: RankMemory(1, 0, 30, 0.0, {1: t}, {1: 0.6})}
    clean = net_of_messages(memory, (0, 1, 2, 3), 4, 1.0, (True, True))
    assert clean[1].stages[1].release == pytest.approx(-10.0)
    assert clean[1].split_hold[1] == pytest.approx(0.5)
    plain = net_of_messages(memory, (0, 1, 2, 3), 4, 1.0, (False, False))
    assert plain[1].stages[1].release == -8.0 and plain[1].split_hold[1] == 0.6


def test_the_last_stages_kept_part_stays_with_the_last_stage():
    """Stage 3 of 4 keeps 2 of its 10 per microbatch (its output, the loss) to the step's end:
    re-staged to 8 stages of one layer, the new last stage keeps the 2, not each of stages 6
    and 7 one."""
    mem = {r: RankMemory(r, 0, 0, 0.0, {r: StageMemory(10.0, 10.0, -8.0 if r == 3 else -10.0,
                                                       0.0)}) for r in range(4)}
    sched = build_schedule("zbv", 4, 8, 2)
    stages = _restaged(mem, sched.placement, {r: r for r in range(4)}, layer_shares([2] * 4, 8))
    assert stages[7].release == pytest.approx(-3.0)
    assert stages[6].release == pytest.approx(-5.0)
    assert stages[0].release == pytest.approx(-5.0)
    even = _restaged(mem, sched.placement, {r: r for r in range(4)}, None)
    assert even[7].release == pytest.approx(-3.0)  # rank 0 holds 0 and 7: its 10 per 2, then +2
    assert even[3].release + even[4].release == pytest.approx(-10.0)  # rank 3 kept none now


def test_a_split_backward_costs_split_cost_but_on_the_first_stage():
    """From full backwards of 10 on CPU: a middle stage's I and W take split_cost x 10 / 2
    each; the first stage's I nothing and its W the whole 10 (it has no input gradient)."""
    cost = split_cost("cpu")
    table = {(s, "B"): 10.0 for s in range(3)}
    _split_from_full((table,), 3, cost)
    assert (table[(0, "I")], table[(0, "W")]) == (0.0, 10.0)
    assert table[(1, "I")] == table[(1, "W")] == table[(2, "W")] == pytest.approx(cost * 5)
    assert 1.0 < cost < 1.3
    assert split_cost("cuda") == split_cost(None) == 1.0  # a GPU's kernels: no extra cost
