"""benchmarks/matmul_plans.py: the load average it prints beside each case is in its JSON too,
and each plan's spread beside its median."""

from __future__ import annotations

import json
import os
import sys

import pytest
from benchmark_utils import load_benchmark


@pytest.fixture(scope="module")
def plans():
    return load_benchmark("matmul_plans")


def test_each_case_writes_the_load_it_prints_and_each_plans_spread(plans, monkeypatch, tmp_path, capsys):
    out = tmp_path / "out.json"
    monkeypatch.setattr(os, "getloadavg", lambda: (1.5, 2.0, 2.5))
    monkeypatch.setattr(sys, "argv", ["matmul_plans.py", "--smoke", "--json", str(out)])
    plans.main()
    assert "load 1.50" in capsys.readouterr().out
    cases = json.loads(out.read_text())["results"][0]["cases"]
    assert cases and all(case["load_1min"] == 1.5 for case in cases.values())
    for case in cases.values():
        for figures in case["plans"].values():
            assert figures["min_s"] <= figures["median_s"] <= figures["max_s"]


def test_the_plans_take_turns_first_repeat_by_repeat(plans):
    # every repeat ran mkl first, then onednn...: drift between them fell on one side alone
    ran: list[str] = []
    times = plans.timed_repeats(lambda k: ran.append(k) or (1.0, None), ["mkl", "onednn"], 3)
    assert ran == ["mkl", "onednn", "onednn", "mkl", "mkl", "onednn"]
    assert times == {"mkl": [1.0] * 3, "onednn": [1.0] * 3}
