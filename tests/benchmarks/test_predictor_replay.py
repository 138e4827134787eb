"""benchmarks/predictor_replay.py: its figures when the rounds are few, and the counts it refuses."""

from __future__ import annotations

import json

import pytest
from benchmark_utils import BENCHMARKS, load_benchmark

from radixflow.bench.metrics import PREDICTOR_WARMUP_ROUNDS
from radixflow.costmodel.round_cost.online_fit import nominal_rates


@pytest.fixture(scope="module")
def pr():
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(BENCHMARKS))
        return load_benchmark("predictor_replay")


def test_rounds_all_in_the_warm_up_give_no_figure_not_a_crash(pr, tmp_path, monkeypatch, capsys):
    # a recording of fewer rounds than the warm-up left no error to take a median of: StatisticsError
    recorded = tmp_path / "r.jsonl"
    row = {"family": "qwen3_5-small", "workload": "grouped", "policy": "lru", "repeat": 0}
    line = json.dumps(row | {"features": [1.0] * len(nominal_rates(1)), "seconds": 0.01})
    recorded.write_text(f"{line}\n" * (PREDICTOR_WARMUP_ROUNDS - 1))
    out = tmp_path / "o.json"
    monkeypatch.setattr("sys.argv", ["predictor_replay.py", "--rounds", str(recorded), "--json", str(out)])
    pr.main()
    result = json.loads(out.read_text())["qwen3_5-small recorded"]
    assert {v: (r["median_cell"], r["worst_cell"], r["cells"]) for v, r in result.items()} == {
        v: (None, None, {}) for v in pr.VARIANTS
    }
    assert "no round past the warm-up" in capsys.readouterr().out


def test_zero_seeds_is_one_line_before_any_round_is_drawn(pr, monkeypatch, capsys):
    # --seeds 0 scheduled every sim round, then averaged no drift's error (mean of nothing)
    def no_rounds(*args: object) -> None:
        raise AssertionError("the sim scheduled rounds")

    monkeypatch.setattr(pr, "sim_rounds", no_rounds)
    monkeypatch.setattr("sys.argv", ["predictor_replay.py", "--sim", "qwen3_5-small", "--seeds", "0"])
    with pytest.raises(SystemExit) as exc:
        pr.main()
    assert exc.value.code == 2 and "argument --seeds: must be positive, got 0" in capsys.readouterr().err


@pytest.mark.parametrize(
    "text",
    [
        '{\n  "cells": []\n}\n',  # policies_torch's JSON, not its --rounds-out: JSONDecodeError
        '{"family": "qwen3_5-small", "seconds": 0.1}\n',  # a line without features: KeyError
    ],
)
def test_a_file_that_is_not_recorded_rounds_is_one_line_naming_it(pr, tmp_path, monkeypatch, text):
    path = tmp_path / "r.json"
    path.write_text(text)
    monkeypatch.setattr("sys.argv", ["predictor_replay.py", "--rounds", str(path)])
    with pytest.raises(SystemExit) as exc:
        pr.main()
    message = str(exc.value)
    assert message.startswith(f"--rounds {path} line 1: not a recorded round") and "\n" not in message


def test_a_missing_rounds_file_is_one_line_naming_it(pr, tmp_path, monkeypatch):
    # was read_text's FileNotFoundError traceback
    path = tmp_path / "none.jsonl"
    monkeypatch.setattr("sys.argv", ["predictor_replay.py", "--rounds", str(path)])
    with pytest.raises(SystemExit) as exc:
        pr.main()
    assert str(exc.value).startswith(f"--rounds {path}: cannot read it (")


@pytest.mark.parametrize(
    ("variant", "why"),
    [
        ("bogus", "KEY=VALUE"),
        ("windw=32", "windw"),  # a typo ran window=128 under the label windw=32
        ("window=abc", "window"),
        ("window=0", "window"),
        ("gain=1", "gain"),
        ("pairs=2", "pairs"),
    ],
)
def test_a_variant_it_cannot_run_as_named_is_one_line(pr, monkeypatch, capsys, variant, why):
    monkeypatch.setattr("sys.argv", ["predictor_replay.py", "--smoke", "--variants", variant])
    monkeypatch.setattr(pr, "sim_rounds", lambda *args: pytest.fail("rounds were made"))
    with pytest.raises(SystemExit) as exc:
        pr.main()
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert exc.value.code == 2 and "--variants" in err and variant in err and why in err


def test_a_variant_runs_the_settings_it_names(pr):
    assert pr.parse_variant("window=32,gain=0,pairs=0") == "window=32,gain=0,pairs=0"
    fit, features = pr.make_fit("window=32,gain=0,pairs=0")
    assert (fit._window, fit._gain, features([1.0, 2.0])) == (32, 0.0, [1.0, 0.0])
