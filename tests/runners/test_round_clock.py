"""The torch runner's engine clock (`EngineOptions.clock`): ``cpu`` advances the engine by the CPU
time of the thread running the round, not by its wall time (a sleep inside a round does not move
it), with the wall time measured beside; ``wall`` advances it by the wall time.

No timing luck: a thread accrues no CPU time while it sleeps, so a round that sleeps S seconds has
CPU time <= wall time - S whatever else the machine runs; and a round that burns C seconds of its
own thread's CPU time reads at least C on the CPU clock."""

from __future__ import annotations

import time

import pytest

from radixflow.engine.clocks import ROUND_CLOCKS, round_clock, spin_warning

SLEEP_S = 0.05
BURN_S = 0.03


def _burn(seconds: float) -> None:
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    pytest.importorskip("torch")
    from model_utils import zoo_model

    return zoo_model(tmp_path_factory, "qwen3_5-tiny")


def _run(path, clock: str, inside, monkeypatch):  # type: ignore[no-untyped-def]
    """Every round of a small workload on a fresh engine, with ``inside()`` run within each
    round's timed worker call."""
    from engine_utils import new_engine

    from radixflow.runners.torch_runner import TorchRunner
    from radixflow.scheduler.request import Request
    from radixflow.scheduler.sampling import SamplingParams
    from radixflow.scheduler.scheduler import SchedulerConfig

    cfg = SchedulerConfig(block_size=16, num_blocks=64, num_state_slots=16, token_budget=64)
    runner = TorchRunner(
        path, cfg.block_size, cfg.num_blocks, cfg.num_state_slots, predict_rounds=False, clock=clock
    )
    score = runner.scorer.score

    def slowed(chunks):  # type: ignore[no-untyped-def]
        inside()
        return score(chunks)

    monkeypatch.setattr(runner.scorer, "score", slowed)
    engine = new_engine(runner, cfg, "adaptive")
    greedy = SamplingParams(max_tokens=2)
    reqs = [Request(f"r{i}", tuple(range(1 + i, 30 + i)), sampling=greedy) for i in range(3)]
    engine.run(reqs)
    assert engine.rounds and all(r.error is None for r in engine.rounds)
    return engine


def test_a_sleep_inside_a_round_does_not_advance_the_cpu_clock(tiny, monkeypatch):
    engine = _run(tiny, "cpu", lambda: time.sleep(SLEEP_S), monkeypatch)
    for r in engine.rounds:
        assert r.wall_s is not None and r.wall_s >= SLEEP_S
        assert 0 < r.duration_s <= r.wall_s - SLEEP_S, r
        assert r.worker_call_s == r.duration_s
    assert engine.now == pytest.approx(sum(r.duration_s for r in engine.rounds))


def test_the_cpu_clock_advances_by_the_round_threads_cpu_time(tiny, monkeypatch):
    engine = _run(tiny, "cpu", lambda: _burn(BURN_S), monkeypatch)
    assert all(r.duration_s >= BURN_S for r in engine.rounds)


def test_the_wall_clock_advances_by_wall_time_and_reports_no_second_one(tiny, monkeypatch):
    engine = _run(tiny, "wall", lambda: time.sleep(SLEEP_S), monkeypatch)
    assert all(r.duration_s >= SLEEP_S and r.wall_s is None for r in engine.rounds)


def test_the_bench_reports_wall_time_beside_the_cpu_clock(tiny, monkeypatch):
    from radixflow.bench.metrics import summarize

    engine = _run(tiny, "cpu", lambda: time.sleep(SLEEP_S), monkeypatch)
    result = summarize("adaptive", engine, engine.scheduler.config)
    assert result.wall_worker_call_s == pytest.approx(sum(r.wall_s for r in engine.rounds))
    assert result.wall_worker_call_s >= result.worker_call_s + len(engine.rounds) * SLEEP_S
    assert result.mean_latency_s is not None and result.wall_mean_latency_s is not None
    assert result.wall_mean_latency_s >= result.mean_latency_s + SLEEP_S


def test_clocks_are_named_and_an_unknown_one_is_refused():
    assert set(ROUND_CLOCKS) == {"wall", "cpu"}
    assert round_clock("cpu").read is time.thread_time
    with pytest.raises(KeyError, match="known: wall, cpu"):
        round_clock("gpu")


def test_the_cpu_clock_with_spinning_threads_is_warned_about(monkeypatch):
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    assert spin_warning("wall", 4) is None and spin_warning("cpu", 1) is None
    assert "OMP_WAIT_POLICY=passive" in (spin_warning("cpu", 2) or "")
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")
    assert spin_warning("cpu", 2) is None
