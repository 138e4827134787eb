"""benchmarks/scheduler_overhead.py: the figures taken from the timed rounds."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import ClassVar

import pytest
from benchmark_utils import load_benchmark
from rich.console import Console

from radixflow.bench.metrics import percentile


@pytest.fixture(scope="module")
def overhead():
    return load_benchmark("scheduler_overhead")


def test_round_figures_interpolate_as_every_other_figure_does(overhead):
    # p99 took the nearest rank (of 1..10 ms: 10.0) where the rest of radixflow interpolates
    # (`bench.metrics.percentile`: 9.91)
    seconds = [x / 1e3 for x in range(10, 0, -1)]
    figures = overhead.round_figures(seconds)
    ms = [1e3 * x for x in seconds]
    assert figures == {"median_ms": percentile(ms, 50), "p99_ms": percentile(ms, 99)}
    assert figures["p99_ms"] == pytest.approx(9.91)


@pytest.mark.parametrize(("flag", "value"), [("--repeat", "0"), ("--rounds", "0")])
def test_a_count_below_one_is_refused_before_any_run(overhead, monkeypatch, tmp_path, capsys, flag, value):
    # --repeat 0 was refused only after every whole run had taken its minutes; --rounds 0 left
    # no round to take a median of, and the table failed formatting None
    def no_run(*args: object) -> None:
        raise AssertionError("a run started")

    monkeypatch.setattr(overhead, "fresh", no_run)
    argv = ["scheduler_overhead.py", flag, value, "--json", str(tmp_path / "o.json")]
    monkeypatch.setattr("sys.argv", argv)
    with pytest.raises(SystemExit) as exc:
        overhead.main()
    assert (
        exc.value.code == 2 and f"argument {flag}: must be positive, got {value}" in capsys.readouterr().err
    )


def test_the_machines_load_is_recorded_beside_the_timings(overhead, monkeypatch, tmp_path):
    # CPU timings from a shared machine without its load average could not be told apart from
    # a slow spell; every run here in this process (`fresh` spawns one each)
    monkeypatch.setattr(overhead, "fresh", lambda fn, *args: fn(*args))
    out = tmp_path / "o.json"
    argv = ["scheduler_overhead.py", "--waiting", "8", "--runs", "8", "--blocked", "2", "--rounds", "1"]
    monkeypatch.setattr("sys.argv", [*argv, "--repeat", "1", "--json", str(out)])
    overhead.main()
    machine = json.loads(out.read_text())["machine"]
    assert set(machine) == {"cpus", "load_1min_before", "load_1min_after"}
    assert all(isinstance(v, int | float) and v >= 0 for v in machine.values())


def test_each_policy_is_read_against_radixflow_trial_by_trial(overhead, capsys):
    # only the ratio of medians was printed: no paired ratio, no spread to read it against
    def row(runs: list[float]) -> dict:
        figures = {"median_ms": runs[0], "median_ms_runs": runs, "p99_ms": 1.0, "cache_full": True}
        return {"waiting": 200, **figures}

    per_round = {"native": [row([1.5, 2.2])], "radixflow": [row([1.0, 2.0])]}
    machine = {"cpus": 2, "load_1min_before": 0.5, "load_1min_after": 0.7}
    result = {"machine": machine, "per_round": per_round, "blocked_round_ms": {}, "runs": {}}
    overhead._print(result, Console(width=200))
    out = capsys.readouterr().out
    assert "waiting 200: CPU per round against radixflow, trial by trial" in out
    assert "native: +10.0% to +50.0%, median +30.0% over 2 trials" in out


class FakeTimed:
    """An engine whose rounds say who took them, in the order taken."""

    ran: ClassVar[list[str]] = []

    def __init__(self, policy: str, options: object = None) -> None:
        self.name, self.per_round = policy, [0.001]
        self.engine = SimpleNamespace(step=lambda: FakeTimed.ran.append(self.name))

    def full(self) -> bool:
        return True


def test_the_policies_take_turns_first_round_by_round(overhead, monkeypatch):
    # every round ran native, radixflow, adaptive in one fixed order: the first always met the
    # caches the last one's round left
    FakeTimed.ran = []
    monkeypatch.setattr(overhead, "TimedEngine", FakeTimed)
    monkeypatch.setattr(overhead, "_fill", lambda timed, stream, waiting: 0)
    monkeypatch.setattr(overhead, "_top_up", lambda engine, stream, waiting: None)
    overhead.per_round(8, 3)
    n = len(overhead.POLICIES)
    assert [FakeTimed.ran[r * n] for r in range(3)] == [overhead.POLICIES[r % n] for r in range(3)]
