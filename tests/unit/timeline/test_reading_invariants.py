"""The structure every schedule has, held by each reading from the ops, and compute conservation
(pipeaudit.timeline.invariants, pipeaudit.timeline.conservation): known answers built here."""

from __future__ import annotations

from pathlib import Path

import json
from types import SimpleNamespace

import numpy as np
import polars as pl

import pipeaudit
from pipeaudit.timeline.conservation import OpAccount, settle_accounts
from tests.support.builders import build_run, gpipe_orders, one_f_one_b_orders


def _split_backwards(orders):
    """Each B as an I and its W, right after it (a zero-bubble stage's split backward)."""
    out = []
    for rank in orders:
        row = []
        for s, k, m in rank:
            row += [(s, "I", m), (s, "W", m)] if k == "B" else [(s, k, m)]
        out.append(row)
    return out


def test_a_sound_reading_accounts_for_every_op(tmp_path: Path) -> None:
    run = build_run(tmp_path, one_f_one_b_orders(3, 4), annotate=False, realistic=True, steps=2)
    a = pipeaudit.load(run.directory).audit()
    assert a.uncertain == []
    assert (a.schedule, a.num_microbatches) == ("1f1b", 4)
    assert "READING_UNCERTAIN" not in [f.code for f in a.findings]
    # the batch split and the optimizer lie in no action, yet every op is accounted for
    assert a.inference_coverage == 1.0
    rows = {c["rank"]: c for c in a.conservation}
    assert rows[0]["wrap_up_us"] + rows[0]["start_up_us"] > 0
    assert all(c["unexplained_us"] == 0 for c in rows.values())
    truth = run.true_bubble()
    assert all(abs(r.bubble - truth[r.rank]) < 0.005 for r in a.ranks)


def test_split_backwards_read_as_backwards_are_doubted_not_reported_missing(tmp_path: Path) -> None:
    run = build_run(tmp_path, _split_backwards(one_f_one_b_orders(3, 4)), annotate=False,
                    realistic=True, steps=2)
    a = pipeaudit.load(run.directory).audit()
    codes = [f.code for f in a.findings]
    assert "READING_UNCERTAIN" in codes
    assert not {"MISSING_ACTIONS", "DUPLICATED_ACTIONS", "SCHEDULE_ORDER_VIOLATION"} & set(codes)
    assert a.schedule is None and a.schedule_source == "uncertain"
    assert a.num_microbatches is None and a.bubble.theory is None
    f = next(f for f in a.findings if f.code == "READING_UNCERTAIN")
    assert f.severity == "warning" and f.rank == a.uncertain[0]["rank"]
    assert "forwards but" in f.message
    for flag in ("--run-schedule", "--run-microbatches", "--action-pattern"):
        assert flag in f.message
    assert a.to_dict()["uncertain"] == a.uncertain


def test_compute_in_no_action_is_start_up_wrap_up_or_missed() -> None:
    """Loose ops before the first step, between steps and inside a step's first-to-last action."""
    actions = pl.DataFrame({"start": [100, 300, 1000, 1300], "end": [200, 400, 1100, 1400],
                            "step": [0, 0, 1, 1]})
    loose_s = np.array([10, 250, 500, 1200], dtype=np.int64)  # start-up, missed, wrap-up, missed
    loose_e = np.array([30, 270, 560, 1230], dtype=np.int64)
    acc = OpAccount(compute_ns=1000, in_actions_ns=870, loose_starts=loose_s, loose_ends=loose_e,
                    loose_scaling=np.zeros(4, dtype=bool))
    rank = SimpleNamespace(account=acc, actions=actions, coverage=None)
    settle_accounts([rank])
    assert (acc.start_up_ns, acc.wrap_up_ns, acc.unexplained_ns) == (20, 60, 50)
    assert rank.coverage == 1 - 50 / 1000
    # gradient scaling is named wherever it runs, even inside a step
    acc.loose_scaling = np.array([False, True, False, False])
    settle_accounts([rank])
    assert (acc.grad_scaling_ns, acc.unexplained_ns) == (20, 30)
    # an op the host was descheduled in once counts at the least its name takes in no action
    acc.loose_scaling = np.zeros(4, dtype=bool)
    acc.loose_names = np.array([7, 7, 3, 7])  # 20, 20, 60, 30 ns; the two inside are 7s
    settle_accounts([rank])
    assert (acc.unexplained_ns, acc.missed_ns) == (20 + 30, 20 + 20)
    assert rank.coverage == 1 - 40 / 1000


def test_an_annotated_run_is_never_doubted(tmp_path: Path) -> None:
    orders = one_f_one_b_orders(2, 4)
    orders[0] = [a for a in orders[0] if a != (0, "B", 3)]  # rank 0 lost its last backward
    run = build_run(tmp_path, orders, annotate=True, steps=1)
    a = pipeaudit.load(run.directory).audit()
    codes = [f.code for f in a.findings]
    assert a.uncertain == [] and "READING_UNCERTAIN" not in codes
    assert "MISSING_ACTIONS" in codes


def test_text_json_and_html_mark_the_figures_uncertain(tmp_path: Path) -> None:
    from tests.support.cli import invoke

    run = build_run(tmp_path, _split_backwards(one_f_one_b_orders(2, 3)), annotate=False,
                    realistic=True, steps=2)
    text = invoke("analyze", str(run.directory))
    assert text.exit_code == 0
    assert "M=? microbatches" in text.output and "UNCERTAIN" in text.output
    doc = json.loads(invoke("analyze", str(run.directory), "--format", "json").output)
    assert doc["uncertain"] and doc["num_microbatches"] is None and doc["schedule"] is None
    page = tmp_path / "r.html"
    assert invoke("analyze", str(run.directory), "--html", str(page), "-o",
                  str(tmp_path / "r.txt")).exit_code == 0
    assert "class='uncertain'" in page.read_text()


def test_the_flags_the_message_names_are_accepted_by_analyze(tmp_path: Path) -> None:
    from tests.support.cli import invoke

    run = build_run(tmp_path, one_f_one_b_orders(2, 3), annotate=False, realistic=True, steps=2)
    out = invoke("analyze", str(run.directory), "--run-schedule", "1f1b", "--run-microbatches", "3",
                 "--format", "json")
    assert out.exit_code == 0, out.output
    doc = json.loads(out.stdout)
    assert (doc["schedule"], doc["schedule_source"], doc["num_microbatches"]) == ("1f1b", "declared", 3)


def test_chunk_counts_the_order_cannot_tell_apart_are_told_by_the_gradients_sent_back(
        tmp_path: Path) -> None:
    """Looped BFS at P = 2 runs F^vM then B^vM on every rank, whatever v: v = 2, M = 4 and
    v = 4, M = 2 are the same kind sequence. The first rank sends (v - 1)·M gradients back a
    step, which settles it (where nothing settles it, the reading says it cannot tell)."""
    from pipeaudit.conformance.strip import strip_run
    from tests.support.paths import SAMPLES

    bare = strip_run(SAMPLES / "looped-bfs_p2_m4_v2", tmp_path / "bare")
    a = pipeaudit.load(str(bare)).audit()
    assert (a.schedule, a.num_chunks, a.num_microbatches, a.uncertain) == ("looped-bfs", 2, 4, [])
    twin = pipeaudit.load(str(SAMPLES / "looped-bfs_p2_m4_v2")).audit()
    assert [round(r.bubble, 4) for r in a.ranks] == [round(r.bubble, 4) for r in twin.ranks]
