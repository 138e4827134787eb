"""Cells whose variants failed requests: what the report compares, and what it says of the rest."""

from __future__ import annotations

from radixflow.experiments.analysis import comparisons
from radixflow.experiments.failures import failure_section
from radixflow.experiments.versus import versus

VARIANTS = ("native", "radixflow", "adaptive")


def _variant(name: str, mean: float, failed: tuple[str, ...] = ()) -> dict:
    reasons = [{"id": i, "reason": "the round's worker call failed"} for i in failed]
    figures = {"rounds": 4, "mean_latency_s": mean, "p99_latency_s": mean, "reuse_rate": 0.5}
    figures |= {"goodput_rps": 1.0, "makespan_s": 1.0, "worker_call_s": 1.0, "outputs_sha256": "s"}
    return {"variant": name, "completed": 4 - len(failed), "failures": reasons, **figures}


def _cell(seed: int, failed: tuple[tuple[str, ...], ...]) -> dict:
    workload = {"order": "grouped", "arrival": "batch", "rate": 1.0, "groups": 2, "seed": seed}
    cell = {"group": "g", "runner": "torch", "model": "m", "workload": workload}
    means = (1.0, 0.9, 0.8)  # the last variant, failing its slowest requests, would read faster still
    results = [_variant(v, m, f) for v, m, f in zip(VARIANTS, means, failed, strict=True)]
    return {"key": f"k{seed}", "cell": cell, "model": "m", "hybrid": True, "requests": 4, "results": results}


def test_a_cell_whose_variants_completed_different_requests_is_compared_nowhere():
    # a torch cell whose `adaptive` run lost two requests to a failed worker call (an out of
    # memory on a GPU): its mean latency is over the two left, the baselines' over all four, yet
    # the cell counted in every comparison as if it were over the same requests
    alike = _cell(0, (("r1",), ("r1",), ("r1",)))  # every variant failed the same request: comparable
    unlike = _cell(1, ((), (), ("r2", "r3")))
    results = [alike, unlike]
    assert [c.key for c in comparisons(results)] == ["k0", "k0"]
    assert [v.cell["workload"]["seed"] for v in versus(results, "adaptive")] == [0]
    section = "\n".join(failure_section(results))
    assert "1 of 2 cells have variants that completed different requests" in section
    assert "left out of every comparison above" in section


def test_a_run_none_of_whose_cells_compares_alike_requests_exits_1(capsys):
    from radixflow.experiments.command import _exit_code

    assert _exit_code([_cell(1, ((), (), ("r2",)))]) == 1
    assert "no cell completed the same requests" in capsys.readouterr().err
    assert _exit_code([_cell(0, (("r1",), ("r1",), ("r1",)))]) == 0


def test_a_report_with_no_cell_to_compare_says_so_in_place_of_the_figures():
    # every cell left out: the paper table was its header and the paper's row, the reading empty
    from radixflow.experiments.report import render_report

    meta = {"name": "t", "description": "", "cells_wall_s": 0.0, "command": "c", "code": "x"}
    report = render_report(meta, [_cell(1, ((), (), ("r2",)))], [])
    assert "| **paper** |" not in report and "## Reading" not in report, report
    assert "No cell completed the same requests under every variant: nothing to compare" in report, report
    assert "## Failed requests" in report
