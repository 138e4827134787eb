"""The three policies on one engine setup, real or simulated, and the sim twin of a real cell:
the same workload on the sim at the real runner's budgets (`sim_figures`), under per-round price
noise (`noisy_twin`, its σ from the profile: `twin_noise`), and every real run replayed on the sim
at its measured prices (`against_real`); every real and twin run's rounds written side by side
(`write_tapes`). A Poisson cell runs several arrival sequences of the same prompts (`sequences`).
Used by `benchmarks/policies_torch.py`."""

from __future__ import annotations

import json
import random
import statistics
from dataclasses import dataclass, field, replace
from pathlib import Path

from radixflow.bench.harness import fresh_copy
from radixflow.bench.metrics import PolicyResult, summarize
from radixflow.bench.twin import NoisyPrice, ReplayRunner, RoundTape, Spread, median_of_n
from radixflow.engine.engine import Engine
from radixflow.options import EngineOptions, EngineSetup, plan_engine
from radixflow.options.build import new_engine
from radixflow.problems import ProblemError
from radixflow.scheduler.request import Request
from radixflow.scheduler.scheduler import SchedulerConfig
from radixflow.workloads.build import build_workload
from radixflow.workloads.candidates import WorkloadSpec

POLICIES = ("native", "radixflow", "adaptive")


def arrival_sequence(requests: list[Request], rate: float, k: int) -> list[Request]:
    """The same prompts in the same order arriving as Poisson sequence ``k`` at ``rate``: sequence
    0 is the workload's own arrivals, every other one exponential gaps drawn from a seed of its own
    (the prompts, and so the no-cache reference, stay those of the workload)."""
    if k == 0:
        return fresh_copy(requests)
    rng, t, out = random.Random(f"arrivals-{k}"), 0.0, []
    for r in fresh_copy(requests):
        r.arrival_s = t
        out.append(r)
        t += rng.expovariate(rate)
    return out


def sequences(requests: list[Request], spec: WorkloadSpec, count: int) -> list[list[Request]]:
    """The request lists a cell's repeats run: ``count`` arrival sequences for a Poisson cell
    (`arrival_sequence`), else ``count`` times the same list."""
    if spec.arrival != "poisson":
        return [requests] * count
    return [arrival_sequence(requests, spec.rate, k) for k in range(count)]


def run_one(
    setup: EngineSetup, policy: str, requests: list[Request], taped: bool = False
) -> tuple[Engine, RoundTape]:
    """One policy on a fresh engine over ``setup``'s runner, its rounds recorded (``taped``: with
    the runner's predictor as each round was scheduled, for `bench.twin.ReplayRunner`)."""
    tape = RoundTape(getattr(setup.runner, "round_predictor", None) if taped else None)
    engine = new_engine(setup.runner, setup.scheduler, setup.options, policy, events=tape)
    engine.run(fresh_copy(requests))
    return engine, tape


@dataclass
class Trials:
    """One policy's runs of one cell, in the order they ran (one entry per run in each list)."""

    results: list[PolicyResult] = field(default_factory=list)
    loads: list[float | None] = field(default_factory=list)  # 1-minute load average as each began
    tapes: list[RoundTape] = field(default_factory=list)  # each run's rounds (waves, state copies)


@dataclass(frozen=True)
class Twin:
    """How a cell's sim twin runs: its ``profile`` (a directory: FAMILY.json in it), and the
    machine's per-round price noise (a log-normal ``sigma``, measured apart: `calibrate`'s
    repeated timings) under which it also runs ``draws`` times (None / 0: deterministic only)."""

    profile: Path
    sigma: float | None = None
    draws: int = 0
    speed: float | None = None  # the machine's speed during the cell over the profile's (`SpeedProbe`)


def twin_setup(
    family: str, spec: WorkloadSpec, s: SchedulerConfig, profile: Path
) -> tuple[EngineSetup, list[Request]] | str:
    """The sim of ``family`` at the real runner's budgets and capacities ``s`` and the workload's
    requests for it, or why the sim cannot take the shape."""
    hardware = profile / f"{family}.json" if profile.is_dir() else profile
    options = EngineOptions(
        runner="sim", model=family, hardware=str(hardware), token_budget=s.token_budget,
        max_requests=s.max_requests, block_size=s.block_size, kv_blocks=s.num_blocks,
        state_slots=s.num_state_slots or None,
    )  # fmt: skip
    try:
        plan = plan_engine(options)
        requests = build_workload(replace(spec, vocab_size=plan.choice.vocab_size)).requests
        return plan.build([len(r.prompt) for r in requests]), requests
    except ProblemError as e:
        return str(e)


def sim_figures(
    family: str,
    spec: WorkloadSpec,
    s: SchedulerConfig,
    profile: Path | Twin,
    real: dict[str, Trials] | None = None,
    count: int = 1,
) -> dict[str, object]:
    """The sim twin's run of the same workload per policy, deterministic (once per arrival
    sequence: ``count`` of them for a Poisson cell, their mean), and where the twin has a noise σ
    its mean latency over that many draws of per-round price noise; with the ``real`` runs' tapes
    beside, each real round priced by the twin and each real run replayed (`against_real`).
    ``{"error": ...}`` where the sim cannot take the shape."""
    twin = profile if isinstance(profile, Twin) else Twin(profile)
    built = twin_setup(family, spec, s, twin.profile)
    if isinstance(built, str):
        return {"error": built}
    sim, requests = built
    runs = sequences(requests, spec, count if spec.arrival == "poisson" else 1)
    speed = twin.speed or 1.0
    out: dict[str, object] = {}
    for policy in POLICIES:
        results, tapes = zip(*(run_twin(sim, policy, r) for r in runs), strict=True)
        f: dict[str, object] = {
            "mean_latency_s": _mean([r.mean_latency_s for r in results]),
            "p99_latency_s": _median([r.p99_latency_s for r in results]),
            "rounds": count_median([r.rounds for r in results]),
            "waves": count_median([t.waves for t in tapes]),
            "state_copies": count_median([t.state_copies for t in tapes]),
            "sequences": len(runs),
        }
        if twin.speed is not None:  # the same twin at the speed the cell's runs saw
            at = [run_twin(sim, policy, r, NoisyPrice(sim.runner, 0.0, 0, speed))[0] for r in runs]
            f["at_speed"] = {"speed": speed, "mean_latency_s": _mean([r.mean_latency_s for r in at]),
                             "rounds": count_median([r.rounds for r in at])}  # fmt: skip
        if twin.sigma and twin.draws:
            repeats = len(real[policy].results) if real is not None else 1
            f["noisy"] = noisy_twin(sim, policy, runs, twin.sigma, twin.draws, repeats, speed)
        if real is not None:
            taped = sequences(requests, spec, len(real[policy].tapes))
            f["real_rounds"] = against_real(sim, policy, taped, real[policy])
        out[policy] = f
    return out


def run_twin(
    sim: EngineSetup, policy: str, requests: list[Request], runner: object | None = None
) -> tuple[PolicyResult, RoundTape]:
    """One sim run of ``policy`` on ``requests`` (on ``runner`` in place of the sim's own)."""
    setup = sim if runner is None else replace(sim, runner=runner)
    engine, tape = run_one(setup, policy, requests)
    return summarize(policy, engine, sim.scheduler), tape


def noisy_twin(
    sim: EngineSetup,
    policy: str,
    runs: list[list[Request]],
    sigma: float,
    draws: int,
    repeats: int = 1,
    speed: float = 1.0,
) -> dict:
    """The twin's mean latency and rounds over ``draws`` draws, each round's price times a
    log-normal factor of ``sigma`` (`bench.twin.NoisyPrice`; the same seeds for every policy), and
    the 5-95% band the real figure falls in: a median of ``repeats`` runs of one workload
    (`bench.twin.median_of_n`), or with several arrival sequences in ``runs`` the mean over them,
    one draw of which is the mean of a draw on each; every round priced at ``speed`` times the
    profile's."""
    means, rounds = [], []
    for seed in range(draws):
        drawn = [
            run_twin(sim, policy, r, NoisyPrice(sim.runner, sigma, seed * len(runs) + k, speed))[0]  # type: ignore[arg-type]
            for k, r in enumerate(runs)
        ]
        means.append(_mean([r.mean_latency_s for r in drawn]))
        rounds.append(statistics.fmean(float(r.rounds) for r in drawn))
    out = {"sigma": sigma, "draws": draws, "speed": speed, "sequences": len(runs), "mean_latency_s": None,
           "rounds": Spread.of(rounds).to_dict(), "median_of_repeats": None}  # fmt: skip
    latencies = [m for m in means if m is not None]
    if len(latencies) < len(means):  # some draw completed nothing: no latency spread
        return out
    band = median_of_n(latencies, repeats) if len(runs) == 1 else Spread.of(latencies, tail=0.05)
    return out | {"mean_latency_s": Spread.of(latencies).to_dict(), "median_of_repeats": band.to_dict()}


def _mean(values: list[float | None]) -> float | None:
    """The mean over runs; None where a run completed nothing (a mean over the others alone would
    stand for other runs than the real figure beside it)."""
    return None if None in values else statistics.fmean(values)  # type: ignore[arg-type]


def count_median(counts: list[int]) -> int:
    """The median of counts over runs, as a count one run had: the lower middle of an even number
    (``round`` of x.5 went to the even neighbour, up for one count and down for the next)."""
    return statistics.median_low(counts)


def _median(values: list[float | None]) -> float | None:
    """The median over runs; None where a run completed nothing (see `_mean`)."""
    return None if None in values else statistics.median(values)  # type: ignore[type-var]


def against_real(sim: EngineSetup, policy: str, runs: list[list[Request]], real: Trials) -> dict:
    """The real runs of one policy seen by the twin: every real round priced by the twin's cost
    model (measured / priced, the price error apart from the schedule), and every real run (on the
    requests of ``runs`` in turn) replayed on the sim at its measured round times with its
    predictor (`bench.twin.ReplayRunner`): reproduced when the replay runs the same rounds and ends
    at the same mean latency."""
    cost = sim.runner.cost  # type: ignore[attr-defined]
    ratios = [t.seconds / cost.round_seconds(t.shapes) for tape in real.tapes for t in tape.rounds]
    diverged, reproduced = [], 0
    for tape, result, requests in zip(real.tapes, real.results, runs, strict=True):
        replay = ReplayRunner(sim.runner, tape)  # type: ignore[arg-type]
        engine = new_engine(replay, sim.scheduler, sim.options, policy)
        engine.run(fresh_copy(requests))
        mean = summarize(policy, engine, sim.scheduler).mean_latency_s
        same = replay.diverged_at is None and len(engine.rounds) == len(tape.rounds)
        reproduced += same and _same_mean(mean, result.mean_latency_s)
        diverged.append(replay.diverged_at)
    return {
        "measured_over_twin_price": Spread.of(ratios).to_dict() if ratios else None,
        "replays_reproduced": reproduced,
        "replays": len(real.tapes),
        "replay_diverged_at": diverged,
    }


def _same_mean(replayed: float | None, real: float | None) -> bool:
    """Whether a replay's mean latency is the real run's: equal to rounding, or undefined on both
    (neither completed a request: a run whose every request was refused ran no round to differ)."""
    if replayed is None or real is None:
        return replayed is real
    return abs(replayed - real) <= 1e-9 * replayed


def twin_noise(profile: Path, family: str, sigma: float | None) -> float | None:
    """The per-round price noise σ of the twin: ``sigma`` (``--noise-sigma``), else what the twin's
    profile measured (`calibration.round_noise_sigma`, from its repeated timings of each round
    shape)."""
    if sigma is not None:
        return sigma
    path = profile / f"{family}.json" if profile.is_dir() else profile
    calibration = json.loads(path.read_text()).get("calibration") or {}
    return calibration.get("round_noise_sigma")


def write_tapes(
    path: Path | None, label: dict[str, str], trials: dict[str, Trials], spec: WorkloadSpec,
    s: SchedulerConfig, twin: Twin,
) -> None:  # fmt: skip
    """Every real run's rounds and the deterministic twin's (one per arrival sequence), one JSON
    line per run (``--tapes-out``):
    each round's start on the engine clock, its time, the twin's price of it, and its chunks
    (request id, start, end): where the two schedules part, round by round."""
    built = None if path is None else twin_setup(label["family"], spec, s, twin.profile)
    if path is None or isinstance(built, str) or built is None:
        return
    sim, requests = built
    cost = sim.runner.cost  # type: ignore[attr-defined]
    with path.open("a", encoding="utf-8") as f:
        for policy in POLICIES:
            taped = trials[policy].tapes
            runs = [("real", i, tape) for i, tape in enumerate(taped)]
            twins = sequences(requests, spec, len(taped) if spec.arrival == "poisson" else 1)
            runs += [("twin", i, run_one(sim, policy, r)[1]) for i, r in enumerate(twins)]
            for side, i, tape in runs:
                rows = [[t.start_s, t.seconds, cost.round_seconds(t.shapes), t.key] for t in tape.rounds]
                run = {"policy": policy, "side": side, "repeat": i, "rounds": rows}
                f.write(json.dumps(label | run) + "\n")
