"""benchmarks/fleet_table.py: the table of a fleet experiment's results.json, and its acceptance
where the results hold the cell it reads."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from benchmark_utils import load_benchmark


@pytest.fixture(scope="module")
def fleet_table():
    return load_benchmark("fleet_table")


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
    assert (
        "| 2 | candidates | medium | 0.70 | 30 | 0.70 | 30 | — | — | — | 1.20/1.20/— |"
        in capsys.readouterr().out
    )


def test_a_router_missing_from_a_row_leaves_its_columns_empty(fleet_table, capsys):
    # a config of routers ["pow2", "checkpoint"]: checkpoint's figures were printed under prefix's
    # header, and the imbalance read as if pow2/prefix
    doc = {"cells": [_cell("pow2", 2, 500.0), _cell("checkpoint", 2, 500.0)]}
    doc["cells"][1]["results"][0]["reuse_rate"] = 0.9
    fleet_table.table(doc)
    assert (
        "| 2 | candidates | medium | 0.70 | 30 | — | — | 0.90 | 30 | 0.80 | 1.20/—/1.20 |"
        in capsys.readouterr().out
    )


def test_a_fleet_of_another_size_names_its_load_per_replica(fleet_table, capsys):
    # a 4-replica experiment (the loads are per replica: 250 requests/s each is medium) was a
    # KeyError traceback
    doc = {"cells": [_cell(r, 4, 1000.0) for r in ("pow2", "prefix", "checkpoint")]}
    doc["cells"].append(_cell("pow2", 4, 123.0))
    fleet_table.table(doc)
    out = capsys.readouterr().out
    assert "| 4 | candidates | medium |" in out and "| 4 | candidates | 123.0 |" in out


def test_figures_a_cell_could_not_measure_print_as_a_dash(fleet_table, capsys):
    # no request finished (no latency, no reuse), or every arrival found the fleet idle (no
    # imbalance): a TypeError formatting None; the acceptance that reads them fails, no traceback
    cells = [_cell(r, 8, 2000.0) for r in ("pow2", "prefix", "checkpoint")]
    result = cells[2]["results"][0]
    result.update(reuse_rate=None, mean_latency_s=None, p99_latency_s=None, completed=0)
    result["fleet"].update(affinity_share=None, imbalance_mean=None)
    checks = fleet_table.table({"cells": cells})["checks"]
    out = capsys.readouterr().out
    assert "| 8 | candidates | medium | 0.70 | 30 | 0.70 | 30 | — | — | — | 1.20/1.20/— |" in out
    assert checks and not any(checks.values())


def test_a_one_engine_cell_without_fleet_figures_is_a_row(fleet_table, capsys):
    # a grid over replicas = [1, 2] has a lone-engine baseline cell, which has no `fleet` block:
    # KeyError traceback
    doc = {"cells": [_cell(r, 2, 500.0) for r in ("pow2", "prefix", "checkpoint")]}
    lone = _cell("checkpoint", 1, 250.0)
    del lone["results"][0]["fleet"]
    doc["cells"].append(lone)
    fleet_table.table(doc)
    out = capsys.readouterr().out
    assert "| 1 | candidates | medium | — | — | — | — | 0.70 | 30 | — | —/—/— |" in out


def test_a_row_run_on_several_seeds_shows_their_mean_not_the_last_seeds(fleet_table, capsys):
    # `radixflow experiment experiments/fleet.toml --seeds 0-1` has two cells per row and router:
    # each overwrote the one before, so the table and the acceptance read the last seed alone
    cells = []
    for seed, reuse in ((0, 0.6), (1, 0.8)):
        for router in ("pow2", "prefix", "checkpoint"):
            cell = _cell(router, 2, 500.0)
            cell["cell"]["workload"]["seed"] = seed
            cell["results"][0]["reuse_rate"] = reuse
            cells.append(cell)
    result = fleet_table.table({"cells": cells})
    assert "| 2 | candidates | medium | 0.70 | 30 | 0.70 | 30 | 0.70 | 30 |" in capsys.readouterr().out
    (row,) = result["rows"]
    assert row["pow2"]["reuse"] == pytest.approx(0.7) and row["pow2"]["completed"] == "256/256"


def _two_policies(tmp_path) -> Path:
    """results.json of a fleet experiment run with policies ["native", "radixflow"] (reuse 0.2, 0.7)."""
    cells = [_cell(r, 8, 2000.0) for r in ("pow2", "prefix", "checkpoint")]
    for cell in cells:
        (radixflow,) = cell["results"]
        native = {**radixflow, "variant": "native", "reuse_rate": 0.2}
        cell["results"] = [native, {**radixflow, "variant": "radixflow"}]
    path = tmp_path / "results.json"
    path.write_text(json.dumps({"variants": ["native", "radixflow"], "cells": cells}))
    return path


def test_results_of_several_policies_need_the_one_to_read_named(fleet_table, tmp_path, monkeypatch, capsys):
    # the table read each cell's first variant: a fleet experiment run with two policies printed
    # the first's figures (and checked its acceptance) under no name, the other's never
    results = _two_policies(tmp_path)
    monkeypatch.setattr(sys, "argv", ["fleet_table.py", str(results)])
    with pytest.raises(SystemExit) as e:
        fleet_table.main()
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and "--variant: the results hold native, radixflow; name one" in err[-1]
    monkeypatch.setattr(sys, "argv", ["fleet_table.py", str(results), "--variant", "radixflow"])
    assert fleet_table.main() == 1  # the acceptance fails on these made-up figures: no traceback
    assert "| 8 | candidates | medium | 0.70 | 30 | 0.70 | 30 | 0.70 | 30 |" in capsys.readouterr().out
    monkeypatch.setattr(sys, "argv", ["fleet_table.py", str(results), "--variant", "adaptive"])
    with pytest.raises(SystemExit):
        fleet_table.main()
    assert "--variant 'adaptive': not in the results (native, radixflow)" in capsys.readouterr().err
