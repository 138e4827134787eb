from __future__ import annotations

import os

import pytest

from radixflow.bench.spread import (
    Load,
    Spread,
    load_between,
    load_now,
    paired_lines,
    ratio_lines,
    rotated,
    spread_lines,
)


def test_one_trial_shows_no_spread():
    assert spread_lines("mean latency", [Spread("native", (1.0,))], "s") == []
    assert spread_lines("mean latency", [], "s") == []


def test_each_policy_shows_its_range_and_spread_over_the_lowest():
    lines = spread_lines(
        "mean latency", [Spread("native", (1.2, 1.0, 1.1)), Spread("adaptive", (2.0, 2.0))], "s"
    )
    assert lines[0] == "mean latency over 3 trials, min–max:"
    assert lines[1] == "  native: 1.0000–1.2000 s, spread 20.0% of the lowest"
    assert lines[2] == "  adaptive: 2.0000–2.0000 s, spread 0.0% of the lowest"


def test_a_zero_lowest_value_is_no_division_error_and_never_reads_as_no_spread():
    # a trial whose every round was rolled back has a makespan of 0: "0.0000–0.5000 s, spread 0.0%
    # of the lowest" read as trials that agreed
    lines = spread_lines("makespan", [Spread("native", (0.0, 0.5)), Spread("adaptive", (0.0, 0.0))], "s")
    assert lines[1] == "  native: 0.0000–0.5000 s, the lowest 0: no spread relative to it"
    assert lines[2] == "  adaptive: 0.0000–0.0000 s, spread 0.0% of the lowest"


def test_load_is_read_and_missing_where_the_platform_has_none(monkeypatch):
    assert load_now() == pytest.approx(os.getloadavg()[0], abs=50)
    monkeypatch.delattr(os, "getloadavg")
    assert load_now() is None
    assert load_between(None, 1.0) is None and load_between(1.0, None) is None
    load = Load(0.5, 2.25)
    assert load_between(0.5, 2.25) == load and load.to_json() == {"start": 0.5, "end": 2.25}
    assert load.text() == "machine load (1-minute average): 0.50 at the start, 2.25 at the end"


def test_a_trial_that_completed_nothing_is_said_not_a_type_error():
    """A policy whose trials completed no request has no mean latency (None): `--repeat 2` on
    such a workload ended in a TypeError traceback under the table, and its --json went unwritten."""
    lines = spread_lines(
        "mean latency", [Spread("native", (None, None)), Spread("adaptive", (1.0, None, 1.5))], "s"
    )
    assert lines[1] == "  native: none, no trial completed a request"
    adaptive = "  adaptive: 1.0000–1.5000 s, spread 50.0% of the lowest; 1 of 3 trials completed nothing"
    assert lines[2] == adaptive


def test_each_policy_against_the_first_is_a_range_of_paired_trial_ratios():
    """The table's "vs native" column is a percentage of two medians, with no spread: trial t of
    each policy ran side by side (interleaved), so each trial's own ratio is a pair measured
    under one load, and their range says whether the median's percentage is evidence."""
    base = Spread("native", (1.0, 2.0, 1.0))
    faster = Spread("adaptive", (0.9, 1.6, 0.8))  # -10%, -20%, -20%: faster in every trial
    mixed = Spread("radixflow", (1.1, 1.8, None))  # +10%, -10%; trial 3 completed nothing
    lines = ratio_lines("mean latency", [base, faster, mixed])
    assert lines == [
        "mean latency against native, trial by trial (ratios of trials run side by side):",
        "  adaptive: -20.0% to -10.0%, median -20.0% over 3 trials",
        "  radixflow: -10.0% to +10.0%, median +0.0% over 2 trials; the range spans 0: no difference shown",
    ]


def test_paired_ratios_need_two_trials_and_a_first_policy_that_took_time():
    assert ratio_lines("makespan", [Spread("native", (1.0,)), Spread("adaptive", (0.5,))]) == []
    assert ratio_lines("makespan", [Spread("native", (1.0, 1.0))]) == []  # no other policy
    # a trial of the first policy with no time (every round rolled back) has no ratio to give
    zero = ratio_lines("makespan", [Spread("native", (0.0, 0.0)), Spread("adaptive", (0.5, 0.5))])
    assert zero[1] == "  adaptive: none, no trial in which both completed a request and native took time"
    # nor where the other policy completed nothing: native is not the one to name
    empty = ratio_lines("mean latency", [Spread("native", (1.0, 1.0)), Spread("adaptive", (None, None))])
    assert empty[1] == "  adaptive: none, no trial in which both completed a request and native took time"


def test_a_single_paired_trial_is_one_trial_and_no_range():
    # a run cut short, or a trial that completed nothing, leaves one pair: "over 1 trials"
    lines = ratio_lines("mean latency", [Spread("native", (1.0, 1.0)), Spread("adaptive", (0.5, None))])
    one = "  adaptive: -50.0% to -50.0%, median -50.0% over 1 trial (one pair: no spread to read)"
    assert lines[1] == one


def test_each_trial_puts_the_next_name_first_so_no_name_always_runs_first():
    names = ("a", "b", "c")
    assert [rotated(names, t) for t in range(4)] == [
        ["a", "b", "c"],
        ["b", "c", "a"],
        ["c", "a", "b"],
        ["a", "b", "c"],
    ]
    assert rotated(["x"], 5) == ["x"]


def test_paired_lines_read_each_name_against_the_one_named_first_whatever_its_place():
    trials = {"a": [1.5, 2.2], "base": [1.0, 2.0]}
    assert paired_lines("wall", trials, "base") == [
        "wall against base, trial by trial (ratios of trials run side by side):",
        "  a: +10.0% to +50.0%, median +30.0% over 2 trials",
    ]
    assert paired_lines("wall", {"base": [1.0], "a": [2.0]}, "base") == []  # one trial: no pairs
