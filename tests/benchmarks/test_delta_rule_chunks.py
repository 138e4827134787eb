"""benchmarks/delta_rule_chunks.py: each chunk length's spread and the machine's load beside the
medians, printed and in the JSON alike."""

from __future__ import annotations

import json
import os
import sys
from types import SimpleNamespace

import pytest
from benchmark_utils import load_benchmark


@pytest.fixture(scope="module")
def chunks():
    return load_benchmark("delta_rule_chunks")


def test_each_length_has_its_spread_beside_its_median(chunks):
    # medians alone: a shared machine's slow repeat could not be told from a slower length
    measured = chunks.measure([3, 9], 1, 4, 4, 3, None)
    for figures in measured.values():
        assert figures["min_ms"] <= figures["ms"] <= figures["max_ms"]


def test_the_load_average_is_printed_and_written(chunks, monkeypatch, tmp_path, capsys):
    out = tmp_path / "out.json"
    monkeypatch.setattr(chunks, "native_kernels", lambda: None)
    monkeypatch.setattr(os, "getloadavg", lambda: (1.25, 2.5, 3.75))
    monkeypatch.setattr(sys, "argv", ["delta_rule_chunks.py", "--smoke", "--json", str(out)])
    chunks.main()
    run = json.loads(out.read_text())
    assert run["load_before"] == run["load_after"] == [1.25, 2.5, 3.75]
    printed = capsys.readouterr().out
    assert "load average 1.25 before" in printed and "1.25 after" in printed
    case = run["cases"][0]["by_chunk"]["16"]
    assert case["min_ms"] <= case["ms"] <= case["max_ms"]


def test_the_lengths_take_turns_first_repeat_by_repeat(chunks, monkeypatch):
    # every repeat ran the chunk lengths in one fixed order: drift fell on the first alike each time
    ran: list[int] = []
    plan = SimpleNamespace(rows=[], steps=[])
    monkeypatch.setattr(chunks, "CHUNK_SIZES", (16, 32))
    monkeypatch.setattr(chunks, "kernel_call", lambda lengths, c, *dims: (lambda: ran.append(c), plan))
    chunks.measure([3], 1, 4, 4, 2, None)
    assert ran == [16, 32, 16, 32, 32, 16]  # the first two: the warm-up
