"""benchmarks/lone_context.py: its figures over repeats."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest
from benchmark_utils import load_benchmark


@pytest.fixture(scope="module")
def lone():
    return load_benchmark("lone_context")


def _setup(reference: dict[str, int]) -> SimpleNamespace:
    runner = SimpleNamespace(reference_tokens=lambda requests: reference)
    return SimpleNamespace(runner=runner, engine=lambda placement: None)


def _run(lone, token: int, wall: float):
    return lone.Run(engine_s=wall, wall_s=wall, rounds=2, reused=0, outputs={"a": (token,)})


def test_outputs_are_held_to_the_reference_on_every_repeat(lone, monkeypatch):
    # only the first repeat's outputs were compared: a later repeat that computed otherwise
    # still read "same as no cache"
    batches = iter([_run(lone, 7, 9.0), _run(lone, 7, 1.0), _run(lone, 8, 0.5)])  # first: warm-up
    monkeypatch.setattr(lone, "run_batch", lambda engine, requests: next(batches))
    monkeypatch.setattr(lone, "run_one_by_one", lambda engine, requests: _run(lone, 7, 2.0))
    out = lone.measure(_setup({"a": 7}), [], ["branch"], 2)["branch"]
    assert out["batch"]["same_as_no_cache"] is False and out["one_by_one"]["same_as_no_cache"] is True
    assert out["batch"]["wall_s"] == 0.5 and out["engine_ratio"] == 4.0  # times: the minimum


def test_no_repeat_is_refused_in_one_line(lone, monkeypatch, capsys):
    # --repeat 0 ran nothing and failed on the first run of none (IndexError)
    monkeypatch.setattr("sys.argv", ["lone_context.py", "--repeat", "0"])
    monkeypatch.setattr(lone, "measure", lambda *args: pytest.fail("measured"))
    with pytest.raises(SystemExit) as exc:
        lone.main()
    assert exc.value.code == 2 and "argument --repeat: must be positive, got 0" in capsys.readouterr().err


def test_each_mode_keeps_every_repeat_and_the_run_its_load(lone, monkeypatch):
    # the minimum alone, and no load average: docs/policies.md quotes "load 2-5" for a run whose
    # JSON held neither the load nor how far its repeats spread
    batch, one = iter([9.0, 1.0, 0.5]), iter([9.0, 3.0, 2.0])  # the modes take turns first: one each
    monkeypatch.setattr(lone, "run_batch", lambda engine, requests: _run(lone, 7, next(batch)))
    monkeypatch.setattr(lone, "run_one_by_one", lambda engine, requests: _run(lone, 7, next(one)))
    monkeypatch.setattr(os, "getloadavg", lambda: (2.5, 3.0, 3.5))
    out = lone.measure(_setup({"a": 7}), [], ["branch"], 2)
    assert out["branch"]["batch"]["wall_runs_s"] == [1.0, 0.5]
    assert out["branch"]["one_by_one"]["engine_runs_s"] == [3.0, 2.0]
    assert out["branch"]["batch"]["wall_s"] == 0.5  # the headline figure: still the minimum
    assert out["load_1min"] == [2.5, 2.5]


def test_the_ratio_is_also_paired_repeat_by_repeat_with_its_median_and_range(lone, monkeypatch, capsys):
    # the ratio was of two minima, maybe from different repeats (one quiet spell for batch,
    # another for one-by-one): nothing paired, no spread to read it against
    batch, one = iter([9.0, 1.0, 0.5]), iter([9.0, 3.0, 2.0])  # first: the warm-up
    monkeypatch.setattr(lone, "run_batch", lambda engine, requests: _run(lone, 7, next(batch)))
    monkeypatch.setattr(lone, "run_one_by_one", lambda engine, requests: _run(lone, 7, next(one)))
    row = lone.measure(_setup({"a": 7}), [], ["branch"], 2)["branch"]
    assert row["wall_ratio"] == 4.0  # the ratio of the minima, as docs/policies.md quotes it
    assert row["wall_ratio_runs"] == [3.0, 4.0] and row["wall_ratio_median"] == 3.5
    assert row["engine_ratio_runs"] == [3.0, 4.0] and row["engine_ratio_median"] == 3.5
    lone.print_paired({"branch": row}, ["branch"])
    assert "one_by_one: +200.0% to +300.0%, median +250.0% over 2 trials" in capsys.readouterr().out


def test_the_runs_take_turns_first_repeat_by_repeat(lone, monkeypatch):
    # every repeat ran batch then one-by-one, placement by placement, in one fixed order
    ran: list[str] = []

    def runs(name: str):
        return lambda engine, requests: ran.append(name) or _run(lone, 7, 1.0)

    monkeypatch.setattr(lone, "run_batch", runs("batch"))
    monkeypatch.setattr(lone, "run_one_by_one", runs("one"))
    lone.measure(_setup({"a": 7}), [], ["branch"], 2)
    assert ran == ["batch", "one", "batch", "one", "one", "batch"]  # the first two: the warm-up


def test_a_warm_up_run_of_each_is_not_timed(lone, monkeypatch):
    # the first run carried the process's one-time costs (imports, allocator, kernel plans): with
    # --repeat 1 they were in the figure, and in the first repeat's paired ratio on one side only
    batch, one = iter([50.0, 1.0]), iter([60.0, 2.0])
    monkeypatch.setattr(lone, "run_batch", lambda engine, requests: _run(lone, 7, next(batch)))
    monkeypatch.setattr(lone, "run_one_by_one", lambda engine, requests: _run(lone, 7, next(one)))
    row = lone.measure(_setup({"a": 7}), [], ["branch"], 1)["branch"]
    assert row["batch"]["wall_runs_s"] == [1.0] and row["one_by_one"]["engine_runs_s"] == [2.0]
    assert row["wall_ratio"] == 2.0
