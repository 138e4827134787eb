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


def _grids(tmp_path: Path, *grids: dict[str, Any], defaults: dict[str, Any] | None = None):
    data = _config(tmp_path, defaults or {})
    return parse_config({**data, "grid": list(grids)}, str(tmp_path / "t.toml"), tmp_path)


def test_renaming_a_grid_keeps_its_cells_keys(tmp_path: Path):
    # the grid's name labels the report; it changes none of a cell's figures
    before = _grids(tmp_path, {"name": "main"})
    after = _grids(tmp_path, {"name": "renamed"})
    assert before.cells[0].key(before.variants) == after.cells[0].key(after.variants)


def _profile_beside(folder: Path, per_request_s: float | None = None) -> None:
    from dataclasses import replace

    from radixflow.costmodel.hardware.profile_files import save_profile
    from radixflow.costmodel.hardware.profiles import HARDWARE

    folder.mkdir(parents=True, exist_ok=True)
    profile = (
        HARDWARE["h200"] if per_request_s is None else replace(HARDWARE["h200"], per_request_s=per_request_s)
    )
    save_profile(profile, folder / "fitted.json")


def _checkpoint_beside(folder: Path, preset: str = "qwen3_5-tiny") -> None:
    import json

    from radixflow.models.zoo_catalogue import preset_config

    (folder / "ck").mkdir(parents=True, exist_ok=True)
    (folder / "ck" / "config.json").write_text(json.dumps(preset_config(preset)))


def _files_key(folder: Path) -> str:
    data = _config(folder, {"hardware": "fitted.json", "model": "ck"})
    config = parse_config(data, str(folder / "t.toml"), folder)
    return config.cells[0].key(config.variants)


def test_a_moved_checkout_keeps_the_keys_of_cells_naming_its_files(tmp_path: Path):
    # a profile file and a checkpoint directory beside the config were keyed by their absolute
    # paths too: the same checkout in another folder recomputed every cell
    keys = []
    for where in ("here", "there"):
        _profile_beside(tmp_path / where)
        _checkpoint_beside(tmp_path / where)
        keys.append(_files_key(tmp_path / where))
    assert keys[0] == keys[1]


def test_what_the_files_hold_still_changes_the_key(tmp_path: Path):
    for where in ("same", "profile", "model"):
        _profile_beside(tmp_path / where, 1e-3 if where == "profile" else None)
        _checkpoint_beside(tmp_path / where, "lfm2-tiny" if where == "model" else "qwen3_5-tiny")
    keys = [_files_key(tmp_path / where) for where in ("same", "profile", "model")]
    assert len(set(keys)) == 3


def test_a_cell_two_grids_share_runs_once_and_is_reported_under_each(tmp_path: Path):
    # the grids varying one factor at a time share their centre cell: it ran once per grid
    from radixflow.experiments.execute import ExecutionOptions, execute

    config = _grids(tmp_path, {"name": "a"}, {"name": "b", "max_requests": [32, 8]})
    started: list[tuple[int, int]] = []
    results = execute(config, tmp_path / "out", ExecutionOptions(), lambda *n: started.append(n))
    assert [r["cell"]["group"] for r in results] == ["a", "b", "b"]
    assert results[0]["key"] == results[1]["key"]
    execute(config, tmp_path / "out", ExecutionOptions(), lambda *n: started.append(n))
    # (listings the cache answers, cells run): the bar said "1 cached" on the fresh --out, the
    # second grid's listing of the cell run then
    assert started == [(0, 2), (3, 0)]


def test_a_cached_cell_is_reported_as_this_config_names_it(tmp_path: Path):
    # its cached result names the grid and the checkpoint path of the run that computed it
    import shutil

    from radixflow.experiments.execute import ExecutionOptions, execute

    _profile_beside(tmp_path / "here")
    _checkpoint_beside(tmp_path / "here")
    shutil.copytree(tmp_path / "here", tmp_path / "there")
    started: list[tuple[int, int]] = []
    results = []
    for where, grid in (("here", "main"), ("there", "renamed")):
        data = _config(tmp_path, {"hardware": "fitted.json", "model": "ck"})
        data = {**data, "grid": [{"name": grid}]}
        config = parse_config(data, str(tmp_path / where / "t.toml"), tmp_path / where)
        results += execute(config, tmp_path / "out", ExecutionOptions(), lambda *n: started.append(n))
    assert started == [(0, 1), (1, 0)]
    there = str((tmp_path / "there" / "ck").resolve())
    assert results[1]["cell"]["group"] == "renamed"
    assert results[1]["cell"]["model"] == results[1]["model"] == there
    assert results[1]["cell"]["hardware"] == str((tmp_path / "there" / "fitted.json").resolve())


def test_a_cell_two_grids_share_writes_each_grids_trace(tmp_path: Path):
    # one key, but each grid's trace_out is written only by a run of it
    from radixflow.experiments.execute import ExecutionOptions, execute

    grids = [{"name": "a", "trace_out": "a.json"}, {"name": "b", "trace_out": "b.json"}]
    config = _grids(tmp_path, *grids)
    assert config.cells[0].key(config.variants) == config.cells[1].key(config.variants)
    execute(config, tmp_path / "out", ExecutionOptions())
    assert (tmp_path / "a.json").is_file() and (tmp_path / "b.json").is_file()


def test_one_size_listed_twice_in_its_spellings_is_refused(tmp_path: Path):
    # one cell (one key) that would run once and be reported twice, as `p.json` and `./p.json` are
    from radixflow.experiments.config import ExperimentConfigError

    with pytest.raises(
        ExperimentConfigError, match=r"grid\[0\]\.cache_memory: '1GiB' and '1024MiB' give one cell"
    ):
        _grids(tmp_path, {"name": "a", "cache_memory": ["1GiB", "1024MiB"]})


@pytest.mark.parametrize(
    ("one", "other"),
    [
        (({"independent_share": 0.0}, {}), ({}, {})),
        (({"independent_share": 0.5}, {}), ({}, {"independent": 6})),  # 2 x 3 grouped: 6 independent
        (({}, {"rate": 10.0}), ({}, {"rate": 20.0})),  # batch arrivals: no rate read
        (({}, {"arrival": "poisson", "burst_size": 4}), ({}, {"arrival": "poisson", "burst_size": 8})),
        # one group: no popularity to share out, no other namespace to put a group in
        (({}, {"groups": 1, "skew": 1.0}), ({}, {"groups": 1})),
        (({}, {"groups": 1, "namespaces": 4, "independent": 2}), ({}, {"groups": 1, "independent": 2})),
    ],
)
def test_cells_that_run_alike_share_a_key(tmp_path: Path, one, other):
    # the report counted them once (`distinct`), yet each ran: the same requests on the same engine
    assert _key(tmp_path, *one) == _key(tmp_path, *other)


def test_a_rate_read_by_its_arrivals_is_keyed(tmp_path: Path):
    for arrival in ("poisson", "bursty"):
        keys = {_key(tmp_path, {}, {"arrival": arrival, "rate": rate}) for rate in (10.0, 20.0)}
        assert len(keys) == 2
    bursts = {_key(tmp_path, {}, {"arrival": "bursty", "burst_size": n}) for n in (4, 8)}
    assert len(bursts) == 2


def test_a_shared_cells_compute_time_counts_once(tmp_path: Path):
    # it runs once now: summed per listing, the report's "cell compute time" counted it per grid
    import json

    from radixflow.experiments.execute import ExecutionOptions
    from radixflow.experiments.run import run_experiment

    config = _grids(tmp_path, {"name": "a"}, {"name": "b"})
    out = run_experiment(tmp_path / "t.toml", tmp_path / "out", ExecutionOptions(), "test", config=config)
    document = json.loads((tmp_path / "out" / "results.json").read_text())
    assert document["cells_wall_s"] == out.results[0]["wall_s"]


def test_a_shared_cell_run_now_is_not_counted_as_cached(tmp_path: Path):
    # "2 cells (1 run, 1 from cache)" on a fresh --out: the second grid's listing ran with the first
    from radixflow.experiments.execute import ExecutionOptions
    from radixflow.experiments.run import run_experiment

    config = _grids(tmp_path, {"name": "a"}, {"name": "b"})
    out = run_experiment(tmp_path / "t.toml", tmp_path / "out", ExecutionOptions(), "test", config=config)
    assert out.ran == 2
    again = run_experiment(tmp_path / "t.toml", tmp_path / "out", ExecutionOptions(), "test", config=config)
    assert again.ran == 0
