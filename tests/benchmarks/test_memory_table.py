"""benchmarks/memory_table.py: the memory experiment's table, from a results.json."""

from __future__ import annotations

import json

import pytest
from benchmark_utils import load_benchmark


@pytest.fixture(scope="module")
def table():
    return load_benchmark("memory_table")


def _pressure(hit: float | None, p95: float | None = 10.0, mean: float | None = 20.0) -> dict:
    return {
        "hit_rate": hit, "ttft_p95_ms": p95, "mean_latency_ms": mean,
        "evicted_kv": 3, "evicted_checkpoint": 1,
    }  # fmt: skip


def _results(variants: dict[str, dict]) -> dict:
    cell = {
        "model": "qwen3_5-2b", "hardware": "h100", "capacity": 0.25,
        "workload": {"kind": "chats", "seed": 0},
    }  # fmt: skip
    results = [{"variant": v, "pressure": p} for v, p in variants.items()]
    return {"name": "memory", "cells": [{"cell": cell, "results": results}]}


def _main(table, monkeypatch, tmp_path, results: dict) -> None:
    path = tmp_path / "results.json"
    path.write_text(json.dumps(results))
    monkeypatch.setattr("sys.argv", ["memory_table.py", str(path)])
    table.main()


def test_a_variant_that_completed_nothing_is_shown_without_figures(table, monkeypatch, tmp_path, capsys):
    # its hit rate is None (no prompt token finished): formatting it `:.3f` raised, and the
    # medians over a cell's rows took the median of no value
    results = _results(
        {table.BASELINE: _pressure(0.5), "adaptive+cost-per-byte+all": _pressure(None, None, None)}
    )
    _main(table, monkeypatch, tmp_path, results)
    out = capsys.readouterr().out
    assert "| cost-per-byte+all | – / 0.500 | – | – | – |" in out
    assert "| cost-per-byte+all | qwen3_5-2b | chat | – / – / – |" in out


def test_results_without_a_variant_or_the_baseline_are_refused_in_one_line(table, monkeypatch, tmp_path):
    # only the baseline ran: StopIteration from an empty summary; a cell without the baseline: KeyError
    with pytest.raises(SystemExit) as exc:
        _main(table, monkeypatch, tmp_path, _results({table.BASELINE: _pressure(0.5)}))
    assert str(exc.value) == f"{tmp_path / 'results.json'}: no variant besides the baseline {table.BASELINE}"
    with pytest.raises(SystemExit) as exc:
        _main(table, monkeypatch, tmp_path, _results({"adaptive+cost-per-byte+all": _pressure(0.5)}))
    assert str(exc.value) == (
        f"{tmp_path / 'results.json'}: cell qwen3_5-2b/h100 capacity 0.25 seed 0 has no baseline "
        f"{table.BASELINE} (variants: adaptive+cost-per-byte+all)"
    )
