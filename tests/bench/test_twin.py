"""The sim twin's tools: a taped run replayed round for round, the twin under price noise, spreads."""

from __future__ import annotations

import math
import random
from dataclasses import replace

import pytest

from radixflow.bench.harness import fresh_copy
from radixflow.bench.metrics import percentile, summarize
from radixflow.bench.twin import NoisyPrice, ReplayRunner, RoundTape, Spread, TapedRound, median_of_n
from radixflow.options import EngineOptions, plan_engine
from radixflow.options.build import new_engine
from radixflow.scheduler.output import ScheduledChunk, SchedulerOutput
from radixflow.workloads.build import build_workload
from radixflow.workloads.candidates import WorkloadSpec

POLICIES = ("native", "radixflow", "adaptive")
# a Poisson stream fast enough that rounds merge and split with their price
SPEC = WorkloadSpec(
    groups=6, candidates=4, context_len=96, candidate_len=16, arrival="poisson", rate=1.0, seed=3
)


def _sim():
    options = EngineOptions(runner="sim", model="qwen3_5-2b", hardware="cpu")
    plan = plan_engine(options)
    requests = build_workload(replace(SPEC, vocab_size=plan.choice.vocab_size)).requests
    return plan.build([len(r.prompt) for r in requests]), requests


def _run(setup, runner, policy, requests, tape=None):
    engine = new_engine(runner, setup.scheduler, setup.options, policy, events=tape)
    engine.run(fresh_copy(requests))
    return engine


def _latencies(engine):
    return sorted((r.id, r.latency_s) for r in engine.requests)


class _Drifting:
    """A stateful predictor, as the torch runner's learned one is: its answer moves after each
    round it sees (a token costs more the more rounds it has seen: shorter rounds pay), with a
    ``revision``."""

    def __init__(self, price) -> None:
        self.price, self.seen, self.revision = price, 0, 0

    def __call__(self, chunks) -> float:
        return self.price(chunks) * (1.0 + self.seen * sum(c.length for c in chunks) / 50)

    def observe(self) -> None:
        self.seen += 1
        self.revision += 1


class _Learning(NoisyPrice):
    """A noisy sim whose predictor learns from every round, as the torch runner's does."""

    def __init__(self, sim, sigma: float, seed: int) -> None:
        super().__init__(sim, sigma, seed)
        self.predictor = _Drifting(sim.round_predictor)

    @property
    def round_predictor(self):
        return self.predictor

    def run(self, batch):
        result = super().run(batch)
        self.predictor.observe()
        return result


@pytest.mark.parametrize("policy", POLICIES)
def test_a_run_at_other_prices_is_replayed_round_for_round_at_its_taped_prices(policy):
    setup, requests = _sim()
    noisy = NoisyPrice(setup.runner, 0.3, seed=5)
    tape = RoundTape()
    real = _run(setup, noisy, policy, requests, tape)
    plain = _run(setup, setup.runner, policy, requests)
    assert _latencies(plain) != _latencies(real)  # the noise moved the run: the replay has work to do
    replay = ReplayRunner(setup.runner, tape)
    again = _run(setup, replay, policy, requests)
    assert replay.diverged_at is None and len(again.rounds) == len(tape.rounds)
    assert [r.chunks for r in again.rounds] == [r.chunks for r in real.rounds]
    assert _latencies(again) == _latencies(real)


def test_the_replay_schedules_adaptive_with_the_predictor_each_round_saw():
    setup, requests = _sim()
    learning = _Learning(setup.runner, 0.2, seed=2)
    tape = RoundTape(learning.round_predictor)
    real = _run(setup, learning, "adaptive", requests, tape)
    assert [p.seen for p in tape.predictors] == list(range(len(tape.rounds) + 1))  # a copy per round
    replay = ReplayRunner(setup.runner, tape)
    again = _run(setup, replay, "adaptive", requests)
    assert replay.diverged_at is None and _latencies(again) == _latencies(real)


def test_the_first_round_the_tape_did_not_run_is_named_and_priced_by_the_sim():
    setup, requests = _sim()
    tape = RoundTape()
    real = _run(setup, setup.runner, "native", requests, tape)
    k = len(tape.rounds) // 2
    other = tape.rounds[k]
    tape.rounds[k] = TapedRound(other.start_s, other.seconds, other.key[:-1] + (("x", 0, 1),), other.shapes)
    tape.rounds[k + 1 :] = [replace(t, seconds=t.seconds * 10) for t in tape.rounds[k + 1 :]]
    replay = ReplayRunner(setup.runner, tape)
    again = _run(setup, replay, "native", requests)
    assert replay.diverged_at == k
    assert [r.duration_s for r in again.rounds] == [r.duration_s for r in real.rounds]  # the sim's prices


def test_a_noisy_twin_repeats_by_seed_and_is_the_plain_sim_without_noise():
    setup, requests = _sim()
    plain = _latencies(_run(setup, setup.runner, "radixflow", requests))
    assert _latencies(_run(setup, NoisyPrice(setup.runner, 0.0, 1), "radixflow", requests)) == plain
    runs = [
        _latencies(_run(setup, NoisyPrice(setup.runner, 0.1, s), "radixflow", requests)) for s in (1, 1, 2)
    ]
    assert runs[0] == runs[1] != runs[2]
    for bad in (-0.1, math.inf, math.nan):
        with pytest.raises(ValueError):
            NoisyPrice(setup.runner, bad, 0)


def test_the_noise_factor_is_exp_of_a_seeded_gaussian_with_the_given_sigma():
    setup, _ = _sim()
    noisy = NoisyPrice(setup.runner, 0.2, seed=7)
    stream = random.Random(7)
    chunk = ScheduledChunk("a", "ns", tuple(range(64)), 0, 64, tuple(range(4)), None, (), True)
    batch = SchedulerOutput(round_index=0, chunks=[chunk])
    base = setup.runner.run(batch).duration_s
    factors = [noisy.run(batch).duration_s / base for _ in range(400)]
    assert factors[:5] == pytest.approx([math.exp(stream.gauss(0, 0.2)) for _ in range(5)])
    logs = [math.log(f) for f in factors]
    mean = sum(logs) / len(logs)
    sd = math.sqrt(sum((x - mean) ** 2 for x in logs) / (len(logs) - 1))
    assert abs(mean) < 0.03 and sd == pytest.approx(0.2, rel=0.1)


def test_a_spread_is_the_median_and_the_nearest_rank_tails():
    s = Spread.of([5.0, 1.0, 3.0, 2.0, 4.0, 6.0, 7.0, 8.0, 9.0, 10.0, 11.0])
    assert (s.median, s.low, s.high, s.count) == (6.0, 2.0, 10.0, 11)
    assert Spread.of([2.0]).to_dict() == {"median": 2.0, "low": 2.0, "high": 2.0, "count": 1}
    with pytest.raises(ValueError):
        Spread.of([])


def test_a_spreads_tails_follow_the_rule_of_every_other_percentile():
    # the tails took the nearest rank, rounded half to even: the 10% tail of six values was the
    # lowest (rank 0.5 -> 0), where `percentile`, as every other figure of the bench, interpolates
    values = [6.0, 1.0, 5.0, 2.0, 4.0, 3.0]
    s = Spread.of(values)
    assert (s.low, s.high) == (percentile(values, 10), percentile(values, 90)) == (1.5, 5.5)
    assert Spread.of(values, tail=0.05).low == percentile(values, 5)


def test_summaries_of_a_replay_match_the_taped_run():
    setup, requests = _sim()
    tape = RoundTape()
    real = _run(setup, NoisyPrice(setup.runner, 0.25, 9), "adaptive", requests, tape)
    again = _run(setup, ReplayRunner(setup.runner, tape), "adaptive", requests)
    a, b = summarize("adaptive", real, setup.scheduler), summarize("adaptive", again, setup.scheduler)
    assert (a.mean_latency_s, a.rounds, a.makespan_s) == (b.mean_latency_s, b.rounds, b.makespan_s)
    assert tape.waves >= len(tape.rounds) and tape.state_copies > 0


def test_adaptive_replayed_with_another_predictor_parts_from_the_tape():
    """The predictor is part of what the tape must carry: the same prices with the sim's own
    predictor schedule adaptive otherwise (so a reproduced replay tested the taped one)."""
    setup, requests = _sim()
    learning = _Learning(setup.runner, 0.2, seed=2)
    tape = RoundTape(learning.round_predictor)
    _run(setup, learning, "adaptive", requests, tape)
    untaped = RoundTape()
    untaped.rounds = tape.rounds
    replay = ReplayRunner(setup.runner, untaped)
    _run(setup, replay, "adaptive", requests)
    assert replay.diverged_at is not None


def test_the_band_of_a_median_of_n_narrows_as_n_grows():
    draws = [float(x) for x in range(1, 41)]
    one, five = median_of_n(draws, 1, seed=3), median_of_n(draws, 5, seed=3)
    assert one.count == five.count == 1000 and one.low <= five.low < five.high <= one.high
    assert five.high - five.low < 0.8 * (one.high - one.low)
    assert median_of_n(draws, 5, seed=3) == five
    with pytest.raises(ValueError):
        median_of_n(draws, 0)


def test_a_twin_at_another_speed_charges_and_predicts_every_round_that_much_more():
    setup, requests = _sim()
    chunk = ScheduledChunk("a", "ns", tuple(range(64)), 0, 64, tuple(range(4)), None, (), True)
    batch = SchedulerOutput(round_index=0, chunks=[chunk])
    slow = NoisyPrice(setup.runner, 0.0, 0, speed=1.25)
    assert slow.run(batch).duration_s == pytest.approx(1.25 * setup.runner.run(batch).duration_s)
    assert slow.round_predictor([chunk]) == pytest.approx(1.25 * setup.runner.predict_round([chunk]))
    plain = _run(setup, setup.runner, "native", requests)
    at_speed = _run(setup, slow, "native", requests)
    assert at_speed.now > plain.now
    with pytest.raises(ValueError):
        NoisyPrice(setup.runner, 0.0, 0, speed=0.0)
