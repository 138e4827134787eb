"""benchmarks/generation_throughput.py (its timing and rows in `bench.paired_timing`): the counts it
refuses before any model is built, and each side's spread beside its median."""

from __future__ import annotations

import pytest
from benchmark_utils import BENCHMARKS, load_benchmark

from radixflow.bench.paired_timing import interleaved, print_row, row


@pytest.fixture(scope="module")
def bench():
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(BENCHMARKS))
        return load_benchmark("generation_throughput")


@pytest.mark.parametrize("flag", ["--repeats", "--threads"])
def test_a_count_below_one_is_one_line_before_any_model_is_built(bench, monkeypatch, capsys, flag):
    # --repeats 0 built every model, then died on the median of no time (or an unbound result);
    # --threads 0 was torch.set_num_threads' RuntimeError traceback
    def no_model(*args: object) -> None:
        raise AssertionError("a model was built")

    monkeypatch.setattr(bench, "ensure_model", no_model)
    monkeypatch.setattr("sys.argv", ["generation_throughput.py", flag, "0"])
    with pytest.raises(SystemExit) as exc:
        bench.main()
    assert exc.value.code == 2
    assert f"argument {flag}: must be positive, got 0" in capsys.readouterr().err


def test_each_side_has_its_spread_beside_its_median():
    # medians alone: a ratio of 1.1 could not be told from the repeats' own spread of 2-4x
    calls = iter(range(100))
    t = interleaved({"ours": lambda: next(calls), "transformers": lambda: next(calls)}, 3)
    for side in t.values():
        assert side["cpu_min"] <= side["cpu"] <= side["cpu_max"]
        assert side["wall_min"] <= side["wall"] <= side["wall_max"]
    t["ours"] |= {"cpu": 1.0, "cpu_min": 0.5, "cpu_max": 2.0}
    t["transformers"] |= {"cpu": 3.0, "cpu_min": 3.0, "cpu_max": 4.5}
    out = row("prefill", 30, "tok/s", t, 0.0, True)
    assert out["cpu_s"] == {"ours": [0.5, 1.0, 2.0], "transformers": [3.0, 3.0, 4.5]}
    assert out["ratio_vs_transformers"] == 3.0


def test_the_cases_take_turns_first_repeat_by_repeat():
    # every repeat ran ours before transformers: whatever the one before left (a busy spell, a
    # grown heap) fell on one side alone
    ran: list[str] = []
    interleaved({"ours": lambda: ran.append("ours"), "transformers": lambda: ran.append("hf")}, 3)
    assert ran == ["ours", "hf", "ours", "hf", "hf", "ours", "ours", "hf"]  # the first two: warm-up


def test_the_ratio_is_also_paired_repeat_by_repeat_with_its_range(capsys):
    # only the ratio of two medians, maybe of different repeats, read against the wider side's
    # own spread: the repeats ran side by side, and their paired ratios were never taken
    t = interleaved({"ours": lambda: 0, "transformers": lambda: 0}, 3)
    assert len(t["ours"]["cpu_runs"]) == len(t["transformers"]["wall_runs"]) == 3
    t["ours"] |= {"cpu": 1.0, "cpu_min": 1.0, "cpu_max": 2.0, "cpu_runs": [1.0, 2.0, 1.0]}
    t["transformers"] |= {"cpu": 3.0, "cpu_min": 3.0, "cpu_max": 5.0, "cpu_runs": [3.0, 3.0, 5.0]}
    out = row("prefill", 30, "tok/s", t, 0.0, True)
    assert out["ratio_vs_transformers"] == 3.0  # of the medians, as before
    assert out["cpu_ratio_runs_vs_transformers"] == [3.0, 1.5, 5.0]
    assert out["cpu_ratio_paired"] == [1.5, 3.0, 5.0]  # min, median, max
    print_row("m", out)
    assert "1.50-5.00" in capsys.readouterr().out
