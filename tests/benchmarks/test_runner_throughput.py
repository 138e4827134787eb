"""benchmarks/runner_throughput.py: the counts it refuses before any model is built."""

from __future__ import annotations

import json

import pytest
from benchmark_utils import BENCHMARKS, load_benchmark


@pytest.fixture(scope="module")
def bench():
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(BENCHMARKS))
        return load_benchmark("runner_throughput")


@pytest.mark.parametrize("flag", ["--repeats", "--threads"])
def test_a_count_below_one_is_one_line_before_any_model_is_built(bench, monkeypatch, capsys, flag):
    # --repeats 0 built every model, then died on the median of no time (or an unbound result);
    # --threads 0 was torch.set_num_threads' RuntimeError traceback
    def no_model(*args: object) -> None:
        raise AssertionError("a model was built")

    monkeypatch.setattr(bench, "bench_family", no_model)
    monkeypatch.setattr("sys.argv", ["runner_throughput.py", flag, "0"])
    with pytest.raises(SystemExit) as exc:
        bench.main()
    assert exc.value.code == 2
    assert f"argument {flag}: must be positive, got 0" in capsys.readouterr().err


def test_the_machines_load_is_recorded_beside_the_timings(bench, monkeypatch, tmp_path):
    # the load average was printed, not written: the JSON's timings read without it
    row = {"ours_tokens_per_s": 1.0, "transformers_tokens_per_s": 1.0, "speedup": 1.0}
    row |= {"transformers_sequential_tokens_per_s": 1.0, "speedup_vs_sequential": 1.0}
    row |= {"same_greedy_tokens": True, "max_abs_logit_diff": 0.0, "cpu_s": {"ours": [1.0, 1.0, 1.0]}}
    row |= {"family": "qwen3_5", "cpu_runs_s": {"ours": [1.0]}}
    monkeypatch.setattr(bench, "bench_family", lambda *args: row)
    out = tmp_path / "r.json"
    monkeypatch.setattr("sys.argv", ["runner_throughput.py", "--families", "qwen3_5", "--json", str(out)])
    bench.main()
    machine = json.loads(out.read_text())["machine"]
    assert set(machine) == {"cpus", "load_1min_before", "load_1min_after"}


def test_each_side_has_its_spread_beside_its_median(bench):
    # medians alone: a speedup of 1.1 could not be told from the repeats' own spread
    row = bench.bench_family("qwen3_5", [8, 4], 3, "tiny")
    for side in ("ours", "transformers", "transformers_sequential"):
        low, mid, high = row["cpu_s"][side]
        assert low <= mid <= high
        assert row[f"{side}_tokens_per_s"] == pytest.approx(row["tokens"] / mid)


def test_the_sides_take_turns_first_repeat_by_repeat(bench, monkeypatch):
    # every repeat ran ours, then transformers padded, then one by one: drift fell on one side
    ran: list[str] = []
    plain = bench.timed

    def timed(fn, *args):  # type: ignore[no-untyped-def]
        ran.append(fn.__name__)
        return plain(fn, *args)

    monkeypatch.setattr(bench, "timed", timed)
    bench.bench_family("qwen3_5", [8, 4], 2, "tiny")
    trial = ["ours_forward", "hf_forward", "hf_sequential"]
    assert ran == [*trial, *trial[1:], trial[0]]


def test_the_speedups_are_also_paired_repeat_by_repeat(bench, monkeypatch, capsys):
    # only ratios of two medians, maybe of different repeats: the sides ran side by side in each
    # repeat, and their paired ratios, the spread a speedup is read against, were never taken
    plain = bench.timed
    seconds = iter([1.0, 3.0, 4.0, 3.0, 8.0, 2.0])  # ours, hf, one by one; then hf, one by one, ours

    def timed(fn, *args):  # type: ignore[no-untyped-def]
        return next(seconds), plain(fn, *args)[1]

    monkeypatch.setattr(bench, "timed", timed)
    row = bench.bench_family("qwen3_5", [8, 4], 2, "tiny")
    assert row["speedup"] == 2.0  # of the medians, as before
    assert row["speedup_runs"] == [3.0, 1.5] and row["speedup_paired"] == [1.5, 2.25, 3.0]
    assert row["speedup_vs_sequential_runs"] == [4.0, 4.0]
    bench.print_paired(row)
    assert "transformers: +50.0% to +200.0%, median +125.0% over 2 trials" in capsys.readouterr().out


def test_each_side_is_warmed_up_on_the_batch_it_is_timed_on(bench, monkeypatch):
    # the warm-up ran ours and transformers on the first prompt alone and one by one not at all:
    # the first timed repeat paid the one-time costs of the batch's own shapes (oneDNN's
    # primitives are made per shape)
    sizes: list[int] = []
    plain = bench.ours_forward

    def ours_forward(model, prompts, *args):  # type: ignore[no-untyped-def]
        sizes.append(len(prompts))
        return plain(model, prompts, *args)

    monkeypatch.setattr(bench, "ours_forward", ours_forward)
    bench.bench_family("qwen3_5", [8, 4], 1, "tiny")
    assert sizes == [2, 2]  # the warm-up, then the one timed repeat
