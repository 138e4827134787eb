"""A cell's result cache key (`Cell.key`): what determines the cell's results, each value as it
runs, so one cell written two ways is cached once and two cells are never cached as one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from radixflow.experiments.config_parse import parse_config


def _config(tmp_path: Path, defaults: dict[str, Any], workload: dict[str, Any] | None = None) -> dict:
    base = {"runner": "sim", "model": "qwen3_5-2b", "hardware": "h200", "token_budget": 256}
    small = {"groups": 2, "candidates": 3, "context_len": 128, "candidate_len": 16}
    return {
        "name": "keys",
        "defaults": {**base, **defaults, "workload": {**small, **(workload or {})}},
        "grid": [{"name": "main"}],
    }


def _key(tmp_path: Path, defaults: dict[str, Any], workload: dict[str, Any] | None = None) -> str:
    config = parse_config(_config(tmp_path, defaults, workload), str(tmp_path / "t.toml"), tmp_path)
    (cell,) = config.cells
    return cell.key(config.variants)


@pytest.mark.parametrize(
    ("one", "other"),
    [
        ({"slo_ms": 100}, {"slo_ms": 100.0}),
        ({"fixed_cost_ms": 3}, {"fixed_cost_ms": 3.0}),
        ({"fixed_cost_ms": 0.0}, {"fixed_cost_ms": -0.0}),
        ({"capacity": 1}, {"capacity": 1.0}),
        ({"cache_memory": "1GiB"}, {"cache_memory": "1024MiB"}),
    ],
)
def test_one_setting_written_two_ways_is_one_key(tmp_path: Path, one, other):
    # a float option's 100 and 100.0 (a size's 1GiB and 1024MiB) run the same cell: keyed apart,
    # the second spelling recomputed a cell already cached
    assert _key(tmp_path, one) == _key(tmp_path, other)


def test_one_workload_value_written_two_ways_is_one_key(tmp_path: Path):
    arrival = {"arrival": "poisson"}
    assert _key(tmp_path, {}, {**arrival, "rate": 50}) == _key(tmp_path, {}, {**arrival, "rate": 50.0})


@pytest.mark.parametrize(
    ("one", "other"),
    [
        ({"slo_ms": 100}, {"slo_ms": 100.5}),
        ({"cache_memory": "1GiB"}, {"cache_memory": "1025MiB"}),
    ],
)
def test_settings_that_differ_are_keyed_apart(tmp_path: Path, one, other):
    assert _key(tmp_path, one) != _key(tmp_path, other)


def test_the_reports_distinct_cells_read_values_as_the_key_does(tmp_path: Path):
    # two grids writing one cell's slo_ms as 100 and 100.0 share its key (one run), so the figures
    # over cells take it once, not once per spelling
    from radixflow.experiments.analysis import distinct

    cells = []
    for name, slo in (("a", 100), ("b", 100.0)):
        data = _config(tmp_path, {"slo_ms": slo})
        config = parse_config({**data, "grid": [{"name": name}]}, str(tmp_path / "t.toml"), tmp_path)
        cells += [{"cell": c.to_dict(), "hybrid": True} for c in config.cells]
    assert len(distinct(cells)) == 1
