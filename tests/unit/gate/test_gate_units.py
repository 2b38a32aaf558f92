"""Unit tests of the gate's pieces: statistics, thresholds and config files, escaping."""

from __future__ import annotations

import re
import statistics

import pytest

from pipeaudit.errors import ConfigError
from pipeaudit.gate import stats
from pipeaudit.gate.thresholds import Thresholds, find_pyproject, load_thresholds, parse_value
from pipeaudit.report.gate_github import command, escape_data, escape_property


def test_median_and_spread_ignore_one_outlier():
    steady = [100.0, 101.0, 99.0, 100.0, 100.0]
    spiky = [100.0, 101.0, 99.0, 400.0, 100.0]
    assert stats.median(spiky) == stats.median(steady) == 100.0
    assert stats.spread(steady) == 0.0
    assert stats.spread(spiky) == pytest.approx(stats.MAD_SCALE * 1.0)  # the 400 barely counts
    assert stats.spread(spiky) < 0.02 * statistics.stdev(spiky)
    assert stats.spread([1.0, 2.0, 3.0, 4.0, 5.0]) == pytest.approx(stats.MAD_SCALE * 1.0)
    assert stats.spread([7.0]) == 0.0 and stats.median([]) is None
    assert stats.median([None, 3, 1]) == 2.0
    assert stats.relative_change(0, 5) is None and stats.relative_change(4, 5) == 0.25


@pytest.mark.parametrize("raw,want", [(0.1, 0.1), (3, 3.0), ("10%", 0.1), (" 2.5 ", 2.5),
                                      ("off", None), ("OFF", None)])
def test_parse_value(raw, want):
    assert parse_value("max_bubble_increase", raw) == want


@pytest.mark.parametrize("key,raw,msg", [
    ("max_bubble", True, "expected a number"),
    ("max_bubble", -0.1, ">= 0"),
    ("max_bubble", "nan", ">= 0"),
    ("max_bubble", [1], "expected a number"),
    ("max_step_time_ms", "5%", "not a percentage"),
    ("noise_k", "off", "cannot be off"),
])
def test_parse_value_rejects(key, raw, msg):
    with pytest.raises(ConfigError, match=re.escape(msg)):
        parse_value(key, raw)


def test_pyproject_found_upwards_and_options_override(tmp_path):
    (tmp_path / "pyproject.toml").write_text(
        "[tool.pipeaudit.gate]\nmax_bubble_increase = 0.1\nmax-step-time-increase = '20%'\n"
        "max_bubble = 0.3\nnoise_k = 2\n")
    deep = tmp_path / "a" / "b"
    deep.mkdir(parents=True)
    (tmp_path / "a" / "pyproject.toml").write_text("[project]\nname = 'no gate table here'\n")
    assert find_pyproject(deep) == tmp_path / "pyproject.toml"
    th, src = load_thresholds({"max_bubble": "off", "max_rank_bubble_increase": None},
                              search_from=deep)
    assert src == str(tmp_path / "pyproject.toml")
    assert th.max_bubble_increase == 0.1 and th.max_step_time_increase == pytest.approx(0.2)
    assert th.noise_k == 2 and th.max_bubble is None  # the option switched the budget off
    assert th.max_rank_bubble_increase == Thresholds().max_rank_bubble_increase
    assert load_thresholds(search_from=deep, search=False) == (Thresholds(), None)


def test_config_file_forms(tmp_path):
    for text in ("[tool.pipeaudit.gate]\nmax_imbalance = 1.3\n", "[gate]\nmax_imbalance = 1.3\n",
                 "max_imbalance = 1.3\n"):
        f = tmp_path / "g.toml"
        f.write_text(text)
        th, _ = load_thresholds(config=str(f))
        assert th.max_imbalance == 1.3 and th.budgets() == {"max_imbalance": 1.3}
    with pytest.raises(ConfigError, match="no such config file"):
        load_thresholds(config=str(tmp_path / "missing.toml"))


def test_github_escaping():
    assert escape_data("50% done\r\nnext") == "50%25 done%0D%0Anext"
    assert escape_property("pipeaudit gate: a, b") == "pipeaudit gate%3A a%2C b"
    line = command("error", "stage 1: +180%\nheavier", title="gate: stage 1, compute")
    assert line == "::error title=gate%3A stage 1%2C compute::stage 1: +180%25%0Aheavier"
    assert "\n" not in line
