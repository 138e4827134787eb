"""benchmarks/fleet_table.py: the table of a fleet experiment's results.json, and its acceptance
where the results hold the cell it reads."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).parents[2]


@pytest.fixture(scope="module")
def fleet_table():
    spec = importlib.util.spec_from_file_location("fleet_table", ROOT / "benchmarks" / "fleet_table.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _cell(router: str, replicas: int, rate: float) -> dict[str, Any]:
    fleet = {"affinity_share": 0.8, "imbalance_mean": 1.2, "hot_share": 0.0, "longest_hot_s": 0.0}
    result = {
        "reuse_rate": 0.7, "mean_latency_s": 0.03, "p99_latency_s": 0.05, "makespan_s": 0.3,
        "completed": 128, "requests": 128, "fleet": fleet,
    }  # fmt: skip
    cell = {"router": router, "replicas": replicas, "workload": {"kind": "candidates", "rate": rate}}
    return {"cell": cell, "results": [result]}


def test_results_without_the_acceptance_cell_print_their_rows_and_check_nothing(fleet_table, capsys):
    # a smaller fleet experiment (2 replicas only): its rows, and no traceback for the missing
    # 8-replica cell the acceptance reads
    doc = {"cells": [_cell(r, 2, 500.0) for r in ("pow2", "prefix", "checkpoint")]}
    result = fleet_table.table(doc)
    out = capsys.readouterr().out
    assert "| 2 | candidates | medium |" in out
    assert "acceptance not checked" in out
    assert result["checks"] == {}


def test_a_row_without_the_checkpoint_router_is_printed(fleet_table, capsys):
    doc = {"cells": [_cell(r, 2, 500.0) for r in ("pow2", "prefix")]}
    fleet_table.table(doc)
    assert "| 2 | candidates | medium |" in capsys.readouterr().out
