"""benchmarks/twin_sensitivity.py: its figures from the twin's means, and the flags it needs."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
from benchmark_utils import BENCHMARKS, load_benchmark

from radixflow.bench.metrics import percentile


@pytest.fixture(scope="module")
def ts():
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(BENCHMARKS))
        return load_benchmark("twin_sensitivity")


def _twin(means: dict[tuple[float, float, int], float]):
    """A stand-in for twin_means: policy "a"'s mean by (sigma, factor, seed)."""

    def twin(cell, shape, profile, sigma, factor, seed):  # type: ignore[no-untyped-def]
        return {"a": means.get((sigma, factor, seed), 1.0)}

    return twin


def test_the_noise_spread_is_the_interpolated_10th_and_90th_percentile(ts, monkeypatch):
    # by nearest rank: of the 10 noisy runs' changes 0.01..0.10, 10-90% read 0.02..0.09
    noisy = {(0.05, 1.0, s): 1.0 + (s + 1) / 100 for s in range(10)}
    monkeypatch.setattr(ts, "twin_means", _twin(noisy))
    args = argparse.Namespace(noise=0.05, seeds=10, bias=0.1)
    cell = {"policies": {"a": {"mean_latency_runs_s": [1.0, 1.2]}}}
    out = ts.sensitivity(cell, {}, Path("p.json"), args)["a"]
    changes = [(s + 1) / 100 for s in range(10)]
    assert out["noise_10_90"] == pytest.approx([percentile(changes, 10), percentile(changes, 90)])


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--smoke"], "--smoke writes its policies_torch run beside --json: give --json"),
        (["--profile", "p"], "--run: give a stored policies_torch.py JSON"),
        (["--run", "r.json"], "--profile: give the twin's profile"),
    ],
)
def test_a_missing_flag_is_one_line_before_any_run(ts, monkeypatch, capsys, argv, needle):
    # --smoke without --json: AttributeError on None.with_suffix; no --run: on None.read_text
    def no_run() -> None:
        raise AssertionError("policies_torch ran")

    monkeypatch.setattr(ts.pt, "main", no_run)
    monkeypatch.setattr("sys.argv", ["twin_sensitivity.py", *argv])
    with pytest.raises(SystemExit) as exc:
        ts.main()
    assert exc.value.code == 2 and needle in capsys.readouterr().err


def test_zero_seeds_is_refused_before_any_run(ts, monkeypatch, capsys, tmp_path):
    # --seeds 0 ran every twin, then raised StatisticsError on the median of no noisy run
    run = tmp_path / "r.json"
    run.write_text('{"cells": [], "config": {"workload": {}}}')
    argv = ["twin_sensitivity.py", "--run", str(run), "--profile", "p", "--seeds", "0"]
    monkeypatch.setattr("sys.argv", argv)
    with pytest.raises(SystemExit) as exc:
        ts.main()
    assert exc.value.code == 2 and "argument --seeds: must be positive, got 0" in capsys.readouterr().err


def test_a_missing_run_file_is_one_line_naming_it(ts, tmp_path, monkeypatch):
    # was read_text's FileNotFoundError traceback
    path = tmp_path / "none.json"
    monkeypatch.setattr("sys.argv", ["twin_sensitivity.py", "--run", str(path), "--profile", "p"])
    with pytest.raises(SystemExit) as exc:
        ts.main()
    assert str(exc.value).startswith(f"--run {path}: cannot read it (")


def test_a_twin_that_completes_nothing_or_a_failed_draw_reads_null(ts, monkeypatch, capsys):
    # a mean of None (nothing completed) raised TypeError; a noisy draw with an error ({}) KeyError
    def twin(cell, shape, profile, sigma, factor, seed):  # type: ignore[no-untyped-def]
        if sigma and seed == 0:
            return {}
        return {"a": None if factor > 1 else 1.0, "b": None}

    monkeypatch.setattr(ts, "twin_means", twin)
    args = argparse.Namespace(noise=0.05, seeds=3, bias=0.1)
    cell = {"policies": {p: {"mean_latency_runs_s": [1.0, 1.2]} for p in "ab"}}
    out = ts.sensitivity(cell, {}, Path("p.json"), args)
    assert out["a"]["price_high"] is None and out["a"]["price_low"] == pytest.approx(0.0)
    assert out["a"]["noise_median"] == pytest.approx(0.0)
    assert out["b"]["twin_mean_s"] is None and out["b"]["noise_median"] is None
    assert out["b"]["noise_10_90"] == [None, None] and out["b"]["price_low"] is None
    line = ts.report_line({"family": "f", "workload": "w"}, "b", out["b"], args)
    assert "twin n/a" in line and "n/a / n/a" in line
