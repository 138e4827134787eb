"""The side-by-side table: failed requests grouped by reason under the `failed` row."""

from __future__ import annotations

import io
from dataclasses import replace

import pytest
from rich.console import Console

from radixflow.bench.metrics import Failure, PolicyResult
from radixflow.bench.report import MAX_REASONS, ROWS, group_failures, render

BASE = PolicyResult(
    policy="native",
    requests=4,
    completed=4,
    failed=0,
    rounds=3,
    rounds_lower_bound=2,
    mean_latency_s=0.5,
    p50_latency_s=0.5,
    p99_latency_s=0.9,
    reuse_rate=0.25,
    bubble_tokens=0,
    tokens_computed=100,
    dependency_depth=1,
    makespan_s=1.0,
    worker_call_s=1.0,
    outputs_sha256="ab" * 32,
)


def table_text(results: list[PolicyResult]) -> str:
    console = Console(file=io.StringIO(), width=200, record=True)
    render(results, "t", console)
    return console.export_text()


def test_failures_are_grouped_by_reason_in_first_seen_order():
    fails = [Failure("a", "too long"), Failure("b", "bad token"), Failure("c", "too long")]
    assert group_failures(fails) == {"too long": ["a", "c"], "bad token": ["b"]}


def test_failed_row_lists_count_and_first_ids_per_reason():
    fails = tuple(Failure(f"r{i}", "too long") for i in range(5)) + (Failure("x", "bad token"),)
    native = replace(BASE, completed=0, failed=6, requests=6, failures=fails, mean_latency_s=None)
    flow = replace(native, policy="radixflow", failures=fails[:1], failed=1, completed=5, mean_latency_s=0.4)
    text = table_text([native, flow])
    failed_line = next(line for line in text.splitlines() if "│ failed" in line)
    assert "6" in failed_line and "1" in failed_line
    assert "5 (r0, r1, r2, …)" in text and "1 (r0)" in text  # count, first ids, per policy
    assert "1 (x)" in text and "bad token" in text
    mean_line = next(line for line in text.splitlines() if "mean latency" in line)
    assert "-" in mean_line  # undefined for native, not NaN
    assert "nan" not in text.lower()


def test_many_reasons_are_summed_into_one_row():
    fails = tuple(Failure(f"r{i}", f"reason {i}") for i in range(MAX_REASONS + 3))
    text = table_text([replace(BASE, failed=len(fails), failures=fails)])
    assert f"{4} other reasons (see --json)" in text
    assert "reason 0" in text and f"reason {MAX_REASONS + 2}" not in text


def test_no_failures_shows_a_zero_failed_row_and_no_reasons():
    text = table_text([BASE])
    assert any(line.startswith("│ failed") and "0" in line for line in text.splitlines())


def rendered(results: list[PolicyResult], width: int) -> list[str]:
    console = Console(file=io.StringIO(), width=width, record=True)
    render(results, "qwen3_5-2b · 64 requests · sim runner", console)
    return console.export_text().splitlines()


THREE = [BASE, replace(BASE, policy="radixflow", rounds=2), replace(BASE, policy="adaptive", rounds=2)]


@pytest.mark.parametrize("width", [80, 60])
def test_no_metric_name_or_value_is_split_at_80_columns_or_fewer(width: int) -> None:
    """A pipe counts as 80 columns: the three-policy table once broke every metric name over two
    or three lines there and cut the sha256 cells."""
    fails = (Failure("r0", "prompt: token id 99999999 is outside the vocabulary (0..511)"),)
    results = [replace(THREE[0], failed=1, failures=fails), *THREE[1:]]
    lines = rendered(results, width)
    assert max(len(line) for line in lines) <= width
    tables = sum(line.startswith("┏") for line in lines)
    for label, name, _ in ROWS:
        if getattr(BASE, name) is not None:  # a row is shown whole once per table
            assert sum(line.startswith(f"│ {label} ") for line in lines) == tables, label
    assert sum(line.count("ab" * 6) for line in lines) == 3  # each policy's sha256 prefix, uncut
    assert any("radixflow" in line for line in lines) and any("adaptive" in line for line in lines)
    assert any(line.startswith("│   prompt: token id 99999999 is…") for line in lines)


def test_a_wide_console_gets_one_table() -> None:
    lines = rendered(THREE, 200)
    assert sum(line.startswith("┏") for line in lines) == 1
    header = "".join(lines[:6])
    assert "radixflow" in header and "vs native" in header


def test_ids_reasons_and_the_title_are_shown_as_given_never_read_as_markup():
    # request ids come from the user's trace: "[/x]" raised a MarkupError after every run (before
    # --json was written) and "[red]" vanished
    fails = (Failure("[/x]", "bad [token]"), Failure("[red]", "bad [token]"))
    native = replace(BASE, completed=2, failed=2, requests=4, failures=fails)
    console = Console(file=io.StringIO(), width=200, record=True)
    render([native], "model [/dir]", console)
    text = console.export_text()
    assert "2 ([/x], [red])" in text and "bad [token]" in text and "model [/dir]" in text


def test_an_interrupted_report_names_the_trials_it_lacks_in_the_order_they_were_to_run():
    from radixflow.bench.harness import BenchReport, Trials

    trials = Trials(["native", "adaptive"], repeats=2)
    assert trials.runs() == []
    assert trials.unfinished() == [
        {"policy": "native", "trial": 1},
        {"policy": "adaptive", "trial": 1},
        {"policy": "native", "trial": 2},
        {"policy": "adaptive", "trial": 2},
    ]
    report = BenchReport({}, {}, trials.runs(), trials.unfinished())
    assert list(report.to_json())[:2] == ["interrupted", "unfinished"]
    assert "interrupted" not in BenchReport({}, {}).to_json()  # a run that finished


def test_reasons_that_read_alike_once_cut_to_a_row_label_share_one_row():
    """A reason names the request's own figures (its length, its token), so reasons that differ
    only past the label's cut read as identical rows; one row counts them all (--json has each)."""
    fails = tuple(
        Failure(f"r{i}", f"prompt: does not fit in the KV cache ({100 + i} tokens need {7 + i} blocks)")
        for i in range(MAX_REASONS + 2)
    )
    text = table_text([replace(BASE, completed=0, failed=len(fails), failures=fails)])
    rows = [line for line in text.splitlines() if "does not fit" in line]
    assert len(rows) == 1 and f"{len(fails)} (r0, r1, r2, …)" in rows[0]
    assert "other reasons" not in text


def test_outputs_that_differ_between_trials_are_said_to_not_shown_as_one_sha():
    differs = replace(
        BASE, policy="adaptive", outputs_sha256=None, trial_outputs_sha256=("ab" * 32, "cd" * 32)
    )
    rows = [line for line in table_text([BASE, differs]).splitlines() if "outputs sha256" in line]
    assert len(rows) == 1 and "differs between trials" in rows[0] and "same" not in rows[0]
    assert "DIFFERENT" not in rows[0]  # not compared: adaptive has no one sha
    alone = [line for line in table_text([differs]).splitlines() if "outputs sha256" in line]
    assert len(alone) == 1 and "differs between trials" in alone[0]


def test_a_reason_over_several_lines_is_one_row_label_line():
    # a worker call's error on several lines (CUDA's "CUDA error: ...\nCUDA kernel errors might be
    # asynchronously reported ...") broke the row label over two lines of the table
    reason = "worker call failed: Runtime\nError: CUDA error\nCUDA kernel errors"
    text = table_text([replace(BASE, failed=1, completed=3, failures=(Failure("a", reason),))])
    assert "│   worker call failed: Runtime E… │        1 (a) │" in text.splitlines()


@pytest.mark.parametrize(
    ("base", "new", "shown"),
    [(100.0, 99.99, "+0.0%"), (100.0, 100.0, "+0.0%"), (100.0, 99.9, "-0.1%"), (2.0, 3.0, "+50.0%")],
)
def test_a_change_that_rounds_to_nothing_reads_without_a_minus(base, new, shown):
    # a change of -0.01% printed "-0.0%" in the table: a minus on a change the table calls nothing
    from radixflow.bench.report import relative_change

    assert relative_change(base, new) == shown


@pytest.mark.parametrize(
    ("base", "new", "shown"), [(0, 2, "+2 from 0"), (0, 0, ""), (0.0, 0.25, "+0.25 from 0")]
)
def test_a_change_from_nothing_shows_what_came(base, new, shown):
    # no percentage exists from 0, and the cell was blank: requests failing under one policy and
    # none under the baseline read as no change in the comparison columns
    from radixflow.bench.report import relative_change

    assert relative_change(base, new) == shown
