"""The layer split: the per-layer cost model and the search, on inputs with a known answer, the
search against brute force, and the split in each framework's terms."""

from __future__ import annotations

import random

import pytest

from pipeaudit.advise.split_advice import in_flight
from pipeaudit.advise.split_search import (
    all_splits, best_splits, brute_force, rank_balanced, stage_costs,
)
from pipeaudit.schedules.split_terms import megatron_first_last, megatron_layout, split_lines
from pipeaudit.errors import ConfigError
from pipeaudit.explain.layer_costs import layer_model
from pipeaudit.explain.layers import candidate_layers, restage
from pipeaudit.schedules import build_schedule


def test_a_heavy_first_layer_is_the_first_stages_extra():
    """8 layers of cost 1 but layer 0 of cost 4, split 2,2,2,2: stages 5,2,2,2. The inner
    stages give 1 per layer, so the first stage carries 3 more: layer 0's excess."""
    lm = layer_model([2, 2, 2, 2], [5.0, 2.0, 2.0, 2.0])
    values = {0: 5.0, 1: 2.0, 2: 2.0, 3: 2.0}
    assert lm.separated
    assert lm.per_layer(values) == pytest.approx([1.0] * 8)
    assert lm.extras(values) == pytest.approx((3.0, 0.0))
    # re-staged to 1,3,2,2: the first stage keeps its extra (layer 0 is 4), the rest follow
    assert restage(values, lm.shares([1, 3, 2, 2])) == pytest.approx(
        {0: 4.0, 1: 3.0, 2: 2.0, 3: 2.0})
    # the same split gives the measured values back
    assert restage(values, lm.shares([2, 2, 2, 2])) == pytest.approx(values)


def test_a_heavy_inner_stage_keeps_its_layers_heavy_and_no_extra_is_invented():
    """Stage 1 three times heavier (1,3,1,1 per layer): the first and last stages are not
    heavier than the reference (median of the inner stages), so they carry no extra."""
    lm = layer_model([2, 2, 2, 2], [2.0, 6.0, 2.0, 2.0])
    values = {0: 2.0, 1: 6.0, 2: 2.0, 3: 2.0}
    first, last = lm.extras(values)
    assert (first, last) == (0.0, 0.0)
    assert lm.per_layer(values) == pytest.approx([1, 1, 3, 3, 1, 1, 1, 1])


def test_an_uneven_run_tells_the_extra_from_the_layers():
    """A run split 1,3,2,2 with a last stage of 2 layers + 2 extra: per layer 1."""
    lm = layer_model([1, 3, 2, 2], [1.0, 3.0, 2.0, 4.0])
    values = {0: 1.0, 1: 3.0, 2: 2.0, 3: 4.0}
    assert lm.extras(values) == pytest.approx((0.0, 2.0))
    assert restage(values, lm.shares([2, 2, 2, 2])) == pytest.approx(
        {0: 2.0, 1: 2.0, 2: 2.0, 3: 4.0})


def test_two_stages_take_the_heavier_stages_excess_for_its_extra():
    """With no inner stage the extras cannot be told from the layers: the lighter stage's value
    per layer is every layer's, the heavier stage's excess its extra, which no split moves."""
    lm = layer_model([4, 4], [7.0, 4.0])
    assert not lm.separated
    assert "cannot be told" in lm.describe() and "lighter stage" in lm.describe()
    values = {0: 7.0, 1: 4.0}
    assert lm.per_layer(values) == pytest.approx([1.0] * 8)
    assert lm.extras(values) == pytest.approx((3.0, 0.0))
    assert restage(values, lm.shares([2, 6])) == pytest.approx({0: 5.0, 1: 6.0})
    # a heavy last stage of uneven layers: its excess over 3 layers at the first's 1.5 each
    lm = layer_model([2, 3], [3.0, 9.0])
    assert lm.extras({0: 3.0, 1: 9.0}) == pytest.approx((0.0, 4.5))
    assert restage({0: 3.0, 1: 9.0}, lm.shares([4, 1])) == pytest.approx({0: 6.0, 1: 6.0})
    # equal per layer: no extra
    assert layer_model([3, 5], [3.0, 5.0]).extras({0: 3.0, 1: 5.0}) == pytest.approx((0.0, 0.0))


def test_candidate_layers_checks_a_given_split():
    assert candidate_layers([2, 2, 2, 2], 4) == [2, 2, 2, 2]
    assert candidate_layers([2, 2, 2, 2], 4, [1, 3, 2, 2]) == [1, 3, 2, 2]
    with pytest.raises(ConfigError):
        candidate_layers([2, 2, 2, 2], 4, [1, 3, 2, 1])
    with pytest.raises(ConfigError):
        candidate_layers([2, 2, 2, 2], 4, [0, 4, 2, 2])


def test_search_on_a_known_answer():
    """Layer 0 costs 4, the other seven 1: over 4 stages the least bottleneck is 4 (layer 0
    alone); every proposal reaches it and the most level one is 1,3,2,2 or an equal."""
    costs = [4.0] + [1.0] * 7
    found = best_splits(costs, 4)
    assert found and all(max(stage_costs(s, costs)) == 4.0 for s in found)
    assert all(s[0] == 1 for s in found)
    best, splits = brute_force(costs, 4)
    assert best == 4.0 and set(found) <= set(splits)
    # the same as a first-stage extra of 3 on uniform layers
    assert best_splits([1.0] * 8, 4, first_extra=3.0)[0][0] == 1


def test_search_matches_brute_force_on_small_cases():
    rng = random.Random(7)
    for _ in range(300):
        L = rng.randint(1, 10)
        S = rng.randint(1, L)
        costs = [rng.choice([0.5, 1.0, 2.0, 4.0]) * rng.random() for _ in range(L)]
        fe, le = rng.random() * 3, rng.random() * 3
        best, _ = brute_force(costs, S, fe, le)
        got = best_splits(costs, S, fe, le)
        assert got, (costs, S)
        for split in got:
            assert len(split) == S and sum(split) == L and min(split) >= 1
            assert max(stage_costs(split, costs, fe, le)) == pytest.approx(best)


def test_search_respects_the_memory_budget_against_brute_force():
    """Stage memory = in flight x per-layer memory: the search's bottleneck equals brute force
    restricted to the splits that fit."""
    rng = random.Random(3)
    for _ in range(150):
        L, S = rng.randint(3, 9), rng.randint(2, 4)
        if S > L:
            continue
        costs = [rng.random() for _ in range(L)]
        mem = [rng.random() for _ in range(L)]
        flight = [S - s for s in range(S)]  # 1F1B: the first stage holds the most
        per_layer = [[flight[s] * m for m in mem] for s in range(S)]
        budget = [rng.uniform(1.0, 4.0)] * S
        fits = [sp for sp in all_splits(L, S)
                if all(flight[s] * sum(mem[sum(sp[:s]):sum(sp[:s + 1])]) <= budget[s]
                       for s in range(S))]
        got = best_splits(costs, S, memory=per_layer, budget=budget)
        if not fits:
            assert got == []
            continue
        best = min(max(stage_costs(sp, costs)) for sp in fits)
        assert got and all(sp in fits for sp in got)
        assert max(stage_costs(got[0], costs)) == pytest.approx(best)


def test_rank_balanced_lowers_the_most_loaded_rank():
    """Two ranks, four stages (0 and 2 on rank 0): layer 0 costs 6, the rest 1. The least
    stage bottleneck can leave rank 0 with 6 + 3; moving layers across boundaries levels
    the ranks to 7 and 6, the brute-force optimum."""
    costs = [6.0] + [1.0] * 7
    placement = [0, 1, 0, 1]
    start = (1, 2, 3, 2)
    got = rank_balanced(start, costs, 0.0, 0.0, placement)

    def rank_max(sp):
        per = stage_costs(sp, costs)
        return max(per[0] + per[2], per[1] + per[3])

    assert rank_max(got) == min(rank_max(sp) for sp in all_splits(8, 4)) == 7.0
    assert rank_max(got) < rank_max(start)


def test_search_speed_is_dynamic_programming_not_enumeration():
    """128 layers over 64 stages (C(127, 63) ~ 1e37 splits) answer at all."""
    rng = random.Random(1)
    costs = [rng.random() for _ in range(128)]
    got = best_splits(costs, 64, 2.0, 3.0)
    assert got and all(sum(s) == 128 and len(s) == 64 for s in got)


def test_in_flight_follows_the_schedule():
    sched = build_schedule("1f1b", 4, 8, None)
    assert in_flight(sched.orders, 4) == [4, 3, 2, 1]
    assert in_flight(build_schedule("gpipe", 4, 8, None).orders, 4) == [8] * 4


def test_split_in_each_frameworks_terms():
    assert megatron_layout([1, 3, 2, 2]) == "Et|ttt|tt|ttL"
    assert megatron_first_last([1, 3, 3, 1], 4) == (1, 1)
    assert megatron_first_last([1, 3, 2, 2], 4) is None
    assert megatron_first_last([3, 5], 2) == (3, 5)
    lines = "\n".join(split_lines([1, 3, 2, 2], 4))
    assert '"layers.1": SplitPoint.BEGINNING' in lines and '"layers.4"' in lines
    assert '["tok_embeddings", "layers.0"]' in lines and '"norm", "output"]' in lines
    assert 'pipeline_model_parallel_layout="Et|ttt|tt|ttL"' in lines
    assert 'partition_method="uniform"' in lines


def test_advise_moves_layers_off_a_heavy_stage_of_a_real_run():
    """Megatron-core, P = 4, stage 1 three times heavier (2 layers each): at the run's schedule
    and M the search takes a layer off stage 1 and predicts a faster step; the run's own split
    replays as the run (the identity)."""
    import pipeaudit
    from pipeaudit.advise import advise
    from pipeaudit.explain.whatif import Changes, whatif

    run = pipeaudit.load("sample_traces/megatron_1f1b_p4_m4_imb_s1x3")
    a = advise(run, schedules=["1f1b"], microbatches=[4])
    base = next(c for c in a.candidates if c.measured)
    split = next(c for c in a.candidates if not c.measured)
    assert base.stage_layers == (2, 2, 2, 2) and a.stage_layers_source.startswith("the manifest")
    assert split.stage_layers[1] == 1 and split.predicted_step_time_us < base.predicted_step_time_us
    assert any("layer split at the measured schedule" in n for n in a.notes)
    same = whatif(run.timeline, Changes(schedule="1f1b", microbatches=4,
                                        stage_layers=(2, 2, 2, 2)))
    assert same.predicted_step_time_us == pytest.approx(base.predicted_step_time_us)
    # told how the run was cut instead, advise reads the same split from the user
    told = advise(run, schedules=["1f1b"], microbatches=[4], stage_layers=[2, 2, 2, 2])
    assert told.stage_layers_source == "--stage-layers"
    with pytest.raises(ConfigError):
        advise(run, schedules=["1f1b"], microbatches=[4], stage_layers=[2, 2, 2])
