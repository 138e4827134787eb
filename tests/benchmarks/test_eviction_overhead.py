"""benchmarks/eviction_overhead.py: its repeats, and the arguments it refuses."""

from __future__ import annotations

import os

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
def test_a_count_below_one_is_refused_before_any_run(overhead, monkeypatch, tmp_path, flag, value):
    # --rounds 0 left no round to take the median of: StatisticsError in the worker
    def no_run(*args: object) -> None:
        raise AssertionError("a run started")

    monkeypatch.setattr(overhead, "repeated", no_run)
    argv = ["eviction_overhead.py", flag, value, "--json", str(tmp_path / "o.json")]
    monkeypatch.setattr("sys.argv", argv)
    with pytest.raises(SystemExit) as exc:
        overhead.main()
    assert str(exc.value) == f"{flag} must be at least 1, got {value}"
