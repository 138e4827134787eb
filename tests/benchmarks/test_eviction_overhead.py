"""benchmarks/eviction_overhead.py: its repeats, and the arguments it refuses."""

from __future__ import annotations

import json
import os
from types import SimpleNamespace

import pytest
from benchmark_utils import BENCHMARKS, load_benchmark


@pytest.fixture(scope="module")
def overhead():
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(BENCHMARKS))
        return load_benchmark("eviction_overhead")


def test_every_repeat_runs_in_a_fresh_process(overhead):
    # one pool served every repeat: its one worker ran them all, its heap warm from the one before
    pids = overhead.repeated(os.getpid, (), 2)
    assert len(set(pids)) == 2 and os.getpid() not in pids


@pytest.mark.parametrize(("flag", "value"), [("--repeat", "0"), ("--rounds", "0")])
def test_a_count_below_one_is_refused_before_any_run(overhead, monkeypatch, tmp_path, capsys, flag, value):
    # --rounds 0 left no round to take the median of: StatisticsError in the worker
    def no_run(*args: object) -> None:
        raise AssertionError("a run started")

    monkeypatch.setattr(overhead, "repeated", no_run)
    argv = ["eviction_overhead.py", flag, value, "--json", str(tmp_path / "o.json")]
    monkeypatch.setattr("sys.argv", argv)
    with pytest.raises(SystemExit) as exc:
        overhead.main()
    assert (
        exc.value.code == 2 and f"argument {flag}: must be positive, got {value}" in capsys.readouterr().err
    )


def test_the_machines_load_is_recorded_beside_the_timings(overhead, monkeypatch, tmp_path):
    # as scheduler_overhead: CPU timings on a shared machine beside the load they were taken under
    monkeypatch.setattr(overhead, "repeated", lambda fn, args, repeat: [fn(*args) for _ in range(repeat)])
    out = tmp_path / "o.json"
    argv = ["eviction_overhead.py", "--waiting", "8", "--rounds", "1", "--repeat", "1", "--json", str(out)]
    monkeypatch.setattr("sys.argv", argv)
    overhead.main()
    machine = json.loads(out.read_text())["machine"]
    assert set(machine) == {"cpus", "load_1min_before", "load_1min_after"}


def test_each_variant_is_read_against_lru_trial_by_trial(overhead, capsys):
    # only the ratio of medians was printed: two medians from different repeats, no spread to
    # say whether a variant differs from lru at all
    row = {"median_ms": 1.0, "vs_lru": 1.0}
    rows = {"lru/all": {**row, "runs_ms": [1.0, 2.0]}, "cost-per-byte/all": {**row, "runs_ms": [1.5, 2.2]}}
    machine = {"cpus": 2, "load_1min_before": 0.5, "load_1min_after": 0.7}
    overhead._print({"machine": machine, "policy": "adaptive", "per_round": {200: rows}})
    out = capsys.readouterr().out
    assert "waiting 200: CPU per round against lru/all, trial by trial" in out
    assert "cost-per-byte/all: +10.0% to +50.0%, median +30.0% over 2 trials" in out


def test_the_variants_take_turns_first_round_by_round(overhead, monkeypatch):
    # every round ran lru first, the others after it in one fixed order
    ran: list[tuple[str, str]] = []

    class FakeTimed:
        def __init__(self, policy: str, options) -> None:
            variant = (options.eviction, options.admission)
            self.per_round = [0.001]
            self.engine = SimpleNamespace(step=lambda: ran.append(variant))

    monkeypatch.setattr(overhead, "TimedEngine", FakeTimed)
    monkeypatch.setattr(overhead, "_fill", lambda timed, stream, waiting: None)
    monkeypatch.setattr(overhead, "_top_up", lambda engine, stream, waiting: None)
    overhead.per_round(8, 3, "adaptive")
    n = len(overhead.VARIANTS)
    assert [ran[r * n] for r in range(3)] == [overhead.VARIANTS[r % n] for r in range(3)]
