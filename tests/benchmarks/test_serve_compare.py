"""benchmarks/serve_compare.py: every variant's server runs the variant's own source tree."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from benchmark_utils import load_benchmark

ROOT = Path(__file__).parents[2]


@pytest.fixture(scope="module")
def compare():
    return load_benchmark("serve_compare")


def _fake_tree(tmp_path: Path) -> Path:
    tree = tmp_path / "old"
    (tree / "radixflow" / "cli").mkdir(parents=True)
    (tree / "radixflow" / "__init__.py").write_text("")
    (tree / "radixflow" / "cli" / "__init__.py").write_text("")
    (tree / "radixflow" / "cli" / "__main__.py").write_text("print('old tree')\n")
    return tree


def test_a_variant_imports_its_own_tree_from_this_checkout(compare, tmp_path, monkeypatch):
    tree = _fake_tree(tmp_path)
    monkeypatch.chdir(ROOT)  # where `python -m` once put this tree first on sys.path
    assert compare.imported_tree(compare.parse_variant(f"old={tree}")) == tree.resolve()
    assert compare.imported_tree(compare.parse_variant(f"main={ROOT}")) == ROOT.resolve()


def test_the_server_serve_load_starts_runs_the_variant_tree(tmp_path, monkeypatch):
    """`python -m radixflow.cli` in `serve_load.server_env()`, run from this checkout."""
    tree = _fake_tree(tmp_path)
    monkeypatch.setenv("PYTHONPATH", str(tree))
    env = load_benchmark("serve_load").server_env()
    cmd = [sys.executable, "-m", "radixflow.cli"]
    out = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "old tree"


def test_a_variant_that_is_no_source_tree_is_refused(compare, tmp_path):
    with pytest.raises(Exception, match="not a radixflow source tree"):
        compare.parse_variant(f"old={tmp_path}")


def test_lost_requests_and_errors_are_totals_over_the_runs(compare):
    # a median over three runs showed 0 lost where one run lost a request
    row = {"requests_per_s": 10.0, "chat_ttft_p50_s": 0.1, "score_latency_p50_s": 0.2, "lost": 0.0,
           "errors": 0.0, "load_1min": 1.0, "server_cpu_ms_per_request": None}  # fmt: skip
    runs = [row, {**row, "lost": 1.0, "errors": 2.0, "requests_per_s": 12.0}, {**row, "requests_per_s": 11.0}]
    table = compare.medians({"a": runs})["a"]
    assert (table["lost"], table["errors"]) == (1.0, 2.0)
    assert table["requests_per_s"] == 11.0 and table["server_cpu_ms_per_request"] is None


def test_the_timed_figures_have_their_spread_beside_their_median(compare):
    # medians alone: a variant 5% faster could not be told from runs that spread by 20%
    row = {"requests_per_s": 10.0, "chat_ttft_p50_s": 0.1, "score_latency_p50_s": 0.2, "lost": 0.0,
           "errors": 0.0, "load_1min": 1.0, "server_cpu_ms_per_request": None}  # fmt: skip
    runs = [row, {**row, "requests_per_s": 12.0, "chat_ttft_p50_s": None}, {**row, "requests_per_s": 11.0}]
    table = compare.medians({"a": runs})["a"]
    assert table["requests_per_s_spread"] == [10.0, 12.0]
    assert table["chat_ttft_p50_s_spread"] == [0.1, 0.1]  # over the runs that have one
    assert table["server_cpu_ms_per_request_spread"] is None


def test_the_variants_take_turns_first_run_by_run(compare, monkeypatch, tmp_path):
    # every repeat ran the first variant first (A B A B): drift between them fell on one side
    ran: list[str] = []
    monkeypatch.setattr(compare, "run_once", lambda v, load_args, out: ran.append(v.label) or {"n": len(ran)})
    monkeypatch.setattr(compare, "figures", lambda summary: summary)
    variants = [compare.parse_variant(f"{label}={ROOT}") for label in ("a", "b")]
    runs = compare.interleaved_runs(variants, [], tmp_path, 3)
    assert ran == ["a", "b", "b", "a", "a", "b"]
    assert runs == {"a": [{"n": 1}, {"n": 4}, {"n": 5}], "b": [{"n": 2}, {"n": 3}, {"n": 6}]}  # trial order


def test_the_ratios_are_also_paired_run_by_run(compare, capsys):
    # only ratios of two medians, maybe of different runs: the variants ran side by side in each
    # repeat, and their paired ratios, the spread a ratio is read against, were never shown
    runs = {
        "old": [
            {"requests_per_s": 10.0, "chat_ttft_p50_s": 0.1},
            {"requests_per_s": 5.0, "chat_ttft_p50_s": None},
        ],
        "new": [
            {"requests_per_s": 12.0, "chat_ttft_p50_s": 0.2},
            {"requests_per_s": 7.5, "chat_ttft_p50_s": 0.1},
        ],
    }
    compare.print_paired(runs, "old")
    out = capsys.readouterr().out
    assert "requests/s against old, trial by trial" in out and "chat TTFT p50 against old" in out
    assert "new: +20.0% to +50.0%, median +35.0% over 2 trials" in out
    assert "new: +100.0% to +100.0%, median +100.0% over 1 trial" in out  # a run with no TTFT: left out
