"""benchmarks/lone_context.py: its figures over repeats."""

from __future__ import annotations

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
    batches = iter([_run(lone, 7, 1.0), _run(lone, 8, 0.5)])
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
    walls = iter([1.0, 3.0, 0.5, 2.0])
    monkeypatch.setattr(lone, "run_batch", lambda engine, requests: _run(lone, 7, next(walls)))
    monkeypatch.setattr(lone, "run_one_by_one", lambda engine, requests: _run(lone, 7, next(walls)))
    monkeypatch.setattr(lone.os, "getloadavg", lambda: (2.5, 3.0, 3.5))
    out = lone.measure(_setup({"a": 7}), [], ["branch"], 2)
    assert out["branch"]["batch"]["wall_runs_s"] == [1.0, 0.5]
    assert out["branch"]["one_by_one"]["engine_runs_s"] == [3.0, 2.0]
    assert out["branch"]["batch"]["wall_s"] == 0.5  # the headline figure: still the minimum
    assert out["load_1min"] == [2.5, 2.5]
