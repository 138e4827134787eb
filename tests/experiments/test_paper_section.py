"""The report's "Against the paper" table: where each median falls against the paper's range."""

from __future__ import annotations

from pathlib import Path

import pytest

from radixflow.experiments.analysis import Span, comparisons, distinct
from radixflow.experiments.config_parse import load_config
from radixflow.experiments.execute import ExecutionOptions, execute
from radixflow.experiments.paper_section import _paper_position, reading
from radixflow.experiments.report import render_report


@pytest.mark.parametrize(
    ("median", "says"),
    [(-0.5, "beyond"), (-0.1, "in range"), (-0.005, "short"), (0.0, "short"), (0.004, "short")]
    + [(0.05, "opposite")],
)
def test_a_median_within_one_percent_is_short_of_the_paper_not_opposite_to_it(median, says):
    # a +0.4% change is what the report reads as unchanged everywhere else (within ±1%): it was
    # marked "opposite", as if the policy raised mean latency, beside a 0.0% marked "short"
    assert _paper_position(Span(median, median, median, 3), "mean_latency_s") == f" · {says}"


def _config(name: str, rest: str) -> str:
    """A config of two policies over a small sim workload, ``rest`` after its defaults' workload."""
    return f"""
name = "{name}"
policies = ["native", "radixflow"]
seeds = [0]

[defaults]
model = "qwen3_5-2b"
token_budget = 256
[defaults.workload]
groups = 2
candidates = 3
context_len = 128
candidate_len = 16
{rest}"""


SHARED_CENTRE = _config(
    "centre",
    """
[[grid]]
name = "budget"
token_budget = [256, 512]

[[grid]]
name = "contexts"
[grid.workload]
groups = [2, 3]
""",
)


def _report(text: str, tmp_path: Path) -> tuple[list[dict], str]:
    """The cells of the config ``text`` run, and their report.md (no plots: matplotlib is slow)."""
    path = tmp_path / "config.toml"
    path.write_text(text)
    results = execute(load_config(path), tmp_path / "out", ExecutionOptions(), code="test")
    meta = {"name": "test", "description": "", "cells_wall_s": 0.0, "command": "test", "code": "test"}
    return results, render_report(meta, results, [])


def test_a_cell_two_grids_share_counts_once_in_the_figures_over_cells(tmp_path: Path):
    # one factor at a time: both grids hold the centre (budget 256, 2 contexts), run under each
    # grid's name; the medians, counts and ranges over cells took it twice (4 cells, not 3),
    # though `comparisons` said a cell listed in two grids counts once
    results, report = _report(SHARED_CENTRE, tmp_path)
    assert len(results) == 4
    assert len(comparisons(results)) == 3
    opening = report.split("\n")[2]
    assert opening.startswith("4 cells (3 distinct: 1 run another's requests alike and count once);")
    assert "On 3 simulated hybrid cells" in report
    assert "| sim | qwen3_5-2b | 3 |" in report
    # each grid's own table still lists every cell of the grid, the centre in both
    budget, contexts = report.split("### budget")[1].split("### contexts")
    assert budget.count("| qwen3_5-2b |") == 2 and contexts.count("| qwen3_5-2b |") == 2


ARRIVALS_BY_RATE = _config("arrivals", 'arrival = ["batch", "poisson"]\nrate = [50.0, 100.0]\n')


def test_cells_that_differ_only_in_a_key_that_changes_neither_count_once(tmp_path: Path):
    # a rate swept beside batch and Poisson arrivals: the batch cell runs once per rate, all
    # alike (a rate changes no batch cell), and the figures over cells took it once per rate
    results, report = _report(ARRIVALS_BY_RATE, tmp_path)
    assert len(results) == 4 and len(comparisons(results)) == 3
    assert "On 3 simulated hybrid cells" in report


def test_a_share_of_no_independent_requests_is_the_cell_without_them():
    # independent_share 0.0 (a sweep's first value) runs the very requests the cell without a
    # share runs (sensitivity.toml's centre again): one cell, not two
    workload = {"groups": 2, "candidates": 3, "independent": 0, "seed": 0}
    base = {"runner": "sim", "model": "m", "workload": workload}
    results = [
        {"key": "a", "cell": {**base, "group": "centre"}},
        {"key": "b", "cell": {**base, "group": "shares", "independent_share": 0.0}},
        {"key": "c", "cell": {**base, "group": "shares", "independent_share": 0.25}},
        {"key": "d", "cell": {**base, "group": "count", "workload": {**workload, "independent": 2}}},
    ]
    assert [r["key"] for r in distinct(results)] == ["a", "c"]  # 0.25 of 6 + 2 more: 2


def _two_variants(seed: int, runner: str, hybrid: bool, rounds: int, worker_s: float) -> dict:
    """A cell result of native and radixflow: ``rounds`` and ``worker_s`` radixflow's (native: 10, 1.0 s)."""
    workload = {"order": "grouped", "arrival": "batch", "groups": 2, "seed": seed}
    figures = {"completed": 4, "failures": [], "mean_latency_s": 1.0, "p99_latency_s": 1.0, "reuse_rate": 0.5}
    base = {"variant": "native", **figures, "rounds": 10, "worker_call_s": 1.0, "agreement": 1.0}
    new = {"variant": "radixflow", **figures, "rounds": rounds, "worker_call_s": worker_s, "agreement": 1.0}
    cell = {"group": "g", "runner": runner, "model": "m", "device": "cpu", "workload": workload}
    return {"key": f"{runner}{seed}", "cell": cell, "model": "m", "hybrid": hybrid, "results": [base, new]}


@pytest.mark.parametrize("runner", ["sim", "torch"])
def test_every_median_the_reading_gives_has_its_range_beside_it(runner: str):
    # the control's and the torch runner's paragraphs gave a median over cells alone: -20% read
    # the same over cells of -19% and -21% as over cells of -10% and -30%
    hybrid = runner == "torch"
    results = [_two_variants(0, runner, hybrid, 9, 0.9), _two_variants(1, runner, hybrid, 7, 0.7)]
    text = " ".join(reading(results, comparisons(results), "radixflow"))
    assert "-20.0% (from -30.0% to -10.0%)" in text, text
    if runner == "torch":  # its worker-call time too
        assert "worker-call time by a median -20.0% (from -30.0% to -10.0%)." in text, text
