"""STAGE_IMBALANCE names the split `pipeaudit advise` proposes, with advise's own numbers, where
the run's layers per stage are known; the generic pointer to advise otherwise."""

from __future__ import annotations

import dataclasses
import re

import pipeaudit
from pipeaudit.advise import advise
from pipeaudit.advise.imbalance import split_gain, with_split_advice
from pipeaudit.audit.findings import IMBALANCE_ADVICE
from pipeaudit.audit.run import audit
from tests.support.paths import SAMPLES

MEGATRON = SAMPLES / "megatron_1f1b_p4_m4_imb_s1x3"  # stage 1 three times heavier, 2 layers a stage


def _imbalance(result):
    return next(f for f in result.findings if f.code == "STAGE_IMBALANCE")


def test_the_finding_names_advise_s_split_and_its_gain():
    run = pipeaudit.load(MEGATRON)
    raw = audit(run.timeline)
    assert _imbalance(raw).message.endswith(IMBALANCE_ADVICE)  # the audit alone: the pointer
    message = _imbalance(run.audit()).message  # the run's audit: the split itself
    found = re.search(r"`pipeaudit advise` proposes the layers ([\d,]+) per stage \(the run's: "
                      r"2,2,2,2\), predicted ([\d.]+)% faster \(([\d.]+) ms per step against "
                      r"([\d.]+) ms replayed for the run's split\)\.$", message)
    assert found, message
    # the same split and numbers as advise's note at the measured schedule, v and M
    note = next(n for n in advise(run).notes if n.startswith("layer split at the measured"))
    split, gain, new_ms, old_ms = found.groups()
    assert note == (f"layer split at the measured schedule, v and M: {split} predicted {new_ms} ms "
                    f"against the run's 2,2,2,2 at {old_ms} ms ({gain}% faster)")
    assert float(new_ms) < float(old_ms)


def test_one_layer_per_stage_cannot_be_split():
    run = pipeaudit.load(SAMPLES / "1f1b_p4_m8_imb_s1x3")
    g = split_gain(run.timeline, audit(run.timeline))
    assert g is not None and g.split == g.run_split == (1, 1, 1, 1) and g.gain == 0
    assert _imbalance(run.audit()).message.endswith(
        "with one layer per stage (manifest) no split can move work off it; `pipeaudit whatif "
        "--scale 1=FACTOR` predicts what making it faster buys.")


def test_without_the_layers_the_finding_points_to_advise():
    run = pipeaudit.load(MEGATRON)
    raw = audit(run.timeline)
    tl = dataclasses.replace(run.timeline, manifest=None)
    assert split_gain(tl, raw) is None
    assert with_split_advice(tl, raw) is raw
