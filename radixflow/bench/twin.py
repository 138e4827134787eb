"""The sim twin of a real run: a recorded run replayed on the sim, and the twin under price noise.

Two questions decide whether the sim twin's mean latency can be held to a real run's:

- *Do the two engines schedule alike, given the same prices?* `RoundTape` records a real run
  round by round (when each round began on the engine clock, its chunks as the cost model sees
  them, its measured time, and the runner's round predictor as the scheduler saw it before the
  round). `ReplayRunner` runs the same requests on the sim with each round charged what the tape
  measured and predicted by the tape's predictor: where arrivals, idle jumps, budgets and
  policies work alike on both sides, the replay reproduces the real schedule round for round and
  its latencies exactly; the first round where it does not (`ReplayRunner.diverged_at`) is a
  difference of schedule, not of price.
- *How far does one run's mean move with the machine's per-round noise?* `NoisyPrice` charges
  each sim round its modelled time times a log-normal factor (median 1, σ measured on the machine,
  `calibration.timing.round_noise_sigma`), so the twin's figure is a distribution over draws, of
  which a real run is one draw.
"""

from __future__ import annotations

import copy
import math
import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from radixflow.bench.metrics import percentile
from radixflow.costmodel.shape.chunk import ChunkShape
from radixflow.engine.records import RoundRecord
from radixflow.engine.runner import ModelInfo, RoundResult
from radixflow.problems import Problem
from radixflow.runners.sim import SimRunner, chunk_shapes
from radixflow.scheduler.output import ScheduledChunk, SchedulerOutput, waves
from radixflow.scheduler.request import Request

RoundKey = tuple[tuple[str, int, int], ...]  # (request id, start, end) of every chunk, in order


def round_key(out: SchedulerOutput) -> RoundKey:
    return tuple((c.request_id, c.start, c.end) for c in out.chunks)


@dataclass(frozen=True)
class TapedRound:
    start_s: float  # engine clock when the round began
    seconds: float  # what it advanced the clock by (the measured worker call)
    key: RoundKey
    shapes: tuple[ChunkShape, ...]  # the chunks as the cost model prices them
    predicted_s: float | None = None  # the runner's own prediction, made before the call


@dataclass
class RoundTape:
    """An engine observer recording every round of a run, and the runner's predictor as the
    scheduler saw it before each round (``predictor``: the runner's, None for one that has
    none); it also counts the recurrent waves and state copies a schedule asks for."""

    predictor: object | None = None
    rounds: list[TapedRound] = field(default_factory=list)
    # predictors[k]: a copy of the predictor as round k was scheduled (the state after round
    # k - 1 was observed); one more than the rounds, the last never used
    predictors: list[object | None] = field(default_factory=list)
    waves: int = 0
    state_copies: int = 0

    def __post_init__(self) -> None:
        self.predictors = [copy.deepcopy(self.predictor)]

    def round(self, record: RoundRecord, out: SchedulerOutput, finished: Sequence[str]) -> None:
        if record.error is not None:  # rolled back: it advanced nothing
            return
        if out.chunks:
            self.waves += max(waves(out.chunks)) + 1
        self.state_copies += sum((c.restore_slot is not None) + len(c.snapshots) for c in out.chunks)
        shapes = tuple(chunk_shapes(out.chunks))
        self.rounds.append(
            TapedRound(record.start_s, record.duration_s, round_key(out), shapes, record.predicted_s)
        )
        self.predictors.append(copy.deepcopy(self.predictor))

    def arrived(self, request: Request) -> None: ...
    def ended(self, request: Request) -> None: ...
    def parked(self, consumer: str, producer: str) -> None: ...
    def woken(self, consumer: str, producer: str) -> None: ...
    def decision(self, kind: str, request_id: str, **details: object) -> None: ...
    def flush(self) -> None: ...


class _TapedPredictor:
    """The tape's predictor of the round the replay is about to schedule (a `RoundPredictor`
    whose ``revision`` moves with every round, as the learned one's does after each refit)."""

    def __init__(self, replay: ReplayRunner) -> None:
        self._replay = replay

    @property
    def revision(self) -> int:
        return self._replay.index

    def __call__(self, chunks: Sequence[object]) -> float:
        tape = self._replay.tape
        predictor = tape.predictors[min(self._replay.index, len(tape.predictors) - 1)]
        return predictor(chunks)  # type: ignore[operator]


class ReplayRunner:
    """The sim runner charging each round what ``tape`` measured for it, while the schedule
    follows the tape's; from the first round that differs (`diverged_at`) on, the sim's price."""

    name = "replay"

    def __init__(self, sim: SimRunner, tape: RoundTape) -> None:
        self.sim, self.tape = sim, tape
        self.model: ModelInfo = sim.model
        self.index = 0  # rounds run so far
        self.diverged_at: int | None = None  # the first round whose chunks are not the tape's
        taped = tape.predictors[0] is not None
        self._predict = _TapedPredictor(self) if taped else sim.round_predictor

    @property
    def round_predictor(self) -> object:
        return self._predict

    def validate(self, request: Request) -> Problem | None:
        return self.sim.validate(request)

    def reference_tokens(self, requests: list[Request]) -> dict[str, int] | None:
        return None

    def run(self, batch: SchedulerOutput) -> RoundResult:
        k, result = self.index, self.sim.run(batch)
        self.index += 1
        taped = self.tape.rounds[k] if k < len(self.tape.rounds) else None
        if self.diverged_at is None and (taped is None or taped.key != round_key(batch)):
            self.diverged_at = k
        if self.diverged_at is not None:
            return result
        assert taped is not None
        return replace(result, duration_s=taped.seconds, worker_call_s=taped.seconds)


class NoisyPrice:
    """The sim runner with every round's time multiplied by ``speed`` and by exp(N(0, ``sigma``)),
    drawn per round from ``seed``: one draw of a machine running at ``speed`` times the profile's
    round times, scattering around them. Its predictor knows the speed, not the noise (a real
    predictor follows the machine's speed and cannot foresee a round's scatter)."""

    name = "sim"

    def __init__(self, sim: SimRunner, sigma: float, seed: int, speed: float = 1.0) -> None:
        if not (sigma >= 0 and math.isfinite(sigma)):
            raise ValueError(f"sigma must be a finite number >= 0, got {sigma!r}")
        if not (speed > 0 and math.isfinite(speed)):
            raise ValueError(f"speed must be a finite number > 0, got {speed!r}")
        self.sim, self.sigma, self.speed = sim, sigma, speed
        self.model: ModelInfo = sim.model
        self._rng = random.Random(seed)

    @property
    def round_predictor(self) -> object:
        return self.predict_round

    def predict_round(self, chunks: Sequence[ScheduledChunk]) -> float:
        return self.speed * self.sim.predict_round(chunks)

    def validate(self, request: Request) -> Problem | None:
        return self.sim.validate(request)

    def reference_tokens(self, requests: list[Request]) -> dict[str, int] | None:
        return None

    def run(self, batch: SchedulerOutput) -> RoundResult:
        result = self.sim.run(batch)
        f = self.speed * (math.exp(self._rng.gauss(0.0, self.sigma)) if self.sigma else 1.0)
        return replace(result, duration_s=result.duration_s * f, worker_call_s=result.worker_call_s * f)


@dataclass(frozen=True)
class Spread:
    """A figure over many draws or repeats: its median and a low and high quantile."""

    median: float
    low: float
    high: float
    count: int

    @staticmethod
    def of(values: Sequence[float], tail: float = 0.1) -> Spread:
        """Median and the ``tail`` / 1 - ``tail`` quantiles of ``values``, by `percentile`'s rule
        (every percentile of the bench by one rule)."""
        if not values:
            raise ValueError("no values")
        xs = list(values)
        low, high = percentile(xs, 100 * tail), percentile(xs, 100 * (1 - tail))
        assert low is not None and high is not None  # values given
        return Spread(statistics.median(xs), low, high, len(xs))

    def to_dict(self) -> dict[str, float | int]:
        return {"median": self.median, "low": self.low, "high": self.high, "count": self.count}


def median_of_n(values: Sequence[float], n: int, seed: int = 0, resamples: int = 1000) -> Spread:
    """What the median of ``n`` runs would read, where ``values`` are draws of one run (resampled
    with replacement, ``resamples`` times, from ``seed``): the band, 5% to 95%, that a median of
    ``n`` real repeats falls in when the real runs are draws of the same distribution."""
    if n < 1 or not values:
        raise ValueError("need n >= 1 and at least one value")
    rng = random.Random(seed)
    medians = [statistics.median(rng.choices(values, k=n)) for _ in range(resamples)]
    return Spread.of(medians, tail=0.05)
