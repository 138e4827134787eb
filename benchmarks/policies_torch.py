"""`native`, `radixflow` and `adaptive` on the real PyTorch runner, with the sim's prediction beside.

For each family (the five hybrid `-small` zoo models and the attention-only control) and each
workload (4 contexts of 512 tokens x 8 candidates of 32, one generated token: grouped and
shuffled candidates arriving at once, and Poisson arrivals at a medium load, half the rate at
which `native` clears the grouped batch), the three policies run interleaved run by run
(a, b, c, a, b, c, ...) on one runner, each on a fresh engine. Reported per policy: the median
mean latency over the repeats and its spread (min-max), the median p99, rounds, the wall-time
mean latency beside the engine clock's, whether every output equals a no-cache run of the same
model, and the machine's load average during the runs. Beside each real figure: the sim's
prediction (`--runner sim --model FAMILY` with the calibrated CPU profile, same workload and
budgets) and its relative difference, or why the sim could not run that shape. And the twin as a
distribution (`bench.twin`): run ``--draws`` times under the machine's per-round price noise (σ
from the twin's calibration), priced at the machine's speed probed during the cell's runs
(`SpeedProbe`), its median and the band a median of the real repeats would fall in; every real
round priced by the twin (measured / priced) and every real run replayed on the sim at its
measured prices (reproduced: the two runners schedule alike). The cells arriving at once take
``--repeat`` runs (3) and report their median. A Poisson cell runs ``--poisson-sequences`` arrival
sequences (8) of the same prompts once each and reports the mean over them, the policy's expected
latency at that rate: on one sequence a round that ends a little later takes in one more arrival,
so the mean of one sequence jumps with a few percent of round price (3-7x the price error, measured
on the sim), while the mean over sequences moves smoothly with it (about 2x).

The engine clock defaults to `cpu` on one torch thread: the calibrated profile was timed that
way, and the thread's CPU time does not move with other load on the machine (`engine.clocks`).

    python benchmarks/policies_torch.py --json results/policies_torch.json
    python benchmarks/policies_torch.py --smoke --json /tmp/p.json   # seconds: tiny models
    python benchmarks/policies_torch.py --resim results/policies_torch.json --profile P.json \
        --json /tmp/resim.json   # the same real figures, the sim twin on another profile
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import sys
from collections.abc import Sequence
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
from radixflow.workloads.candidates import WorkloadSpec, build_workload

POLICIES = ("native", "radixflow", "adaptive")
FAMILIES = ("qwen3_5-small", "qwen3_next-small", "lfm2-small", "nemotron_h-small", "falcon_h1-small")
CONTROL = "qwen3-small"  # attention only: nothing is ever blocked, every policy should tie
SMOKE_FAMILIES = ("qwen3_5-tiny", "qwen3-tiny")
CONTROLS = {CONTROL, "qwen3-tiny"}
PROFILE = Path(__file__).resolve().parent.parent / "experiments" / "profiles" / "cpu.json"
SHAPE = {"groups": 4, "candidates": 8, "context_len": 512, "candidate_len": 32}
SMOKE_SHAPE = {"groups": 2, "candidates": 2, "context_len": 32, "candidate_len": 4}
WORKLOADS = {  # name -> (order, arrival); Poisson's rate is set from the grouped batch
    "grouped": ("grouped", "batch"),
    "shuffled": ("shuffled", "batch"),
    "poisson": ("grouped", "poisson"),
}
MEDIUM_LOAD = 0.5  # Poisson rate as a fraction of the rate native clears the grouped batch at
POISSON_SEQUENCES = 8  # arrival sequences per Poisson cell (see the docstring)


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
class RoundLog:
    """Every real round the runner's predictor learns from (``--rounds-out``): its terms
    (`fitted_rates.fit_feature_names`), measured and predicted seconds, labelled by family,
    workload, policy and repeat, one JSON line each (``benchmarks/predictor_replay.py`` reads it)."""

    path: Path | None
    label: dict[str, object] = field(default_factory=dict)

    def attach(self, runner: object) -> None:
        predictor = getattr(runner, "round_predictor", None)
        if self.path is None or predictor is None:
            return
        observe = predictor.observe

        def logged(features: Sequence[float], seconds: float) -> None:
            predicted = predictor.fit.predict(features)
            row = {"features": list(features), "seconds": seconds, "predicted": predicted}
            with self.path.open("a", encoding="utf-8") as f:  # type: ignore[union-attr]
                f.write(json.dumps(self.label | row) + "\n")
            observe(features, seconds)

        predictor.observe = logged


# Round shapes of calibrate's fit grid (sequences, tokens each, cached prefix) timed between the
# real runs on a runner of their own: the machine's speed at the time of each cell's runs.
PROBE_SHAPES = ((2, 256, 0), (4, 16, 1024), (1, 64, 1024))


@dataclass
class SpeedProbe:
    """A shared machine's speed moves by tens of percent within minutes, on the CPU clock too
    (it leaves out waiting for a core, not the slowdown of sharing one): a profile timed before a
    family's runs prices the later ones at the speed of its own minutes. The probe times fixed
    round shapes (never the real rounds) around the profile's timing (``reference``) and after each
    turn of the real runs (``current``); `speed` is their ratio, by which the twin prices a cell."""

    runner: object
    outputs: list[object]
    read: object  # the engine clock's reader
    reference: list[list[float]] = field(default_factory=list)
    current: list[list[float]] = field(default_factory=list)

    @staticmethod
    def build(family: str, budget: int, clock: str) -> SpeedProbe:
        from radixflow.calibration.design import fit_design
        from radixflow.calibration.run import model_shape
        from radixflow.calibration.timing import BLOCK_SIZE, pool_sizes, to_scheduler_output
        from radixflow.engine.clocks import round_clock
        from radixflow.models.zoo import ensure_model
        from radixflow.runners.torch_runner import TorchRunner

        design = fit_design(budget, BLOCK_SIZE, model_shape(family).has_recurrent)
        pick = lambda b: (len(b.chunks), b.chunks[0].length, b.chunks[0].start)  # noqa: E731
        batches = [b for b in design if pick(b) in PROBE_SHAPES]
        blocks, slots = pool_sizes(batches)
        path = ensure_model(family)
        runner = TorchRunner(path, BLOCK_SIZE, blocks, slots, label=family, predict_rounds=False)
        outputs = [to_scheduler_output(b, runner.model.vocab_size) for b in batches]
        for out in outputs:  # untimed: a fresh runner's first calls are slow (read 15-28% over here)
            runner.run(out)
        return SpeedProbe(runner, outputs, round_clock(clock).read)

    def time(self, into: list[list[float]]) -> None:
        """One timing of every probe shape, appended to ``into``."""
        row = []
        for out in self.outputs:
            t0 = self.read()  # type: ignore[operator]
            self.runner.run(out)  # type: ignore[attr-defined]
            row.append(self.read() - t0)  # type: ignore[operator]
        into.append(row)

    def speed(self) -> float | None:
        """The geometric mean over shapes of (median now) / (median while the profile was timed)."""
        if not self.reference or not self.current:
            return None
        ratios = [
            statistics.median(r[i] for r in self.current) / statistics.median(r[i] for r in self.reference)
            for i in range(len(self.outputs))
        ]
        return math.exp(statistics.fmean(math.log(x) for x in ratios))


@dataclass
class Trials:
    results: list[PolicyResult] = field(default_factory=list)
    loads: list[float] = field(default_factory=list)  # 1-minute load average when each run began
    tapes: list[RoundTape] = field(default_factory=list)  # each run's rounds (waves, state copies)


def interleaved(
    setup: EngineSetup,
    runs: list[list[Request]],
    reference: dict[str, int],
    log: RoundLog,
    probe: SpeedProbe | None = None,
) -> dict[str, Trials]:
    """Every policy once on each of ``runs`` (the requests of each repeat, `sequences`), in turn
    (a, b, c, a, b, c, ...), each on a fresh engine; the ``probe`` timed after each turn."""
    trials = {p: Trials() for p in POLICIES}
    for repeat, requests in enumerate(runs):
        for policy in POLICIES:
            log.label.update(policy=policy, repeat=repeat)
            trials[policy].loads.append(os.getloadavg()[0])
            engine, tape = run_one(setup, policy, requests, taped=True)
            trials[policy].results.append(summarize(policy, engine, setup.scheduler, reference))
            trials[policy].tapes.append(tape)
        if probe is not None:
            probe.time(probe.current)
    return trials


def _median(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def real_figures(t: Trials, pooled: bool = False) -> dict[str, object]:
    """One policy's figures over its runs: the median mean latency of repeats of one workload, or
    (``pooled``: one run per arrival sequence) the mean over the runs, every request weighing the
    same; the spread of the runs' means, medians of the rest, exactness."""
    rs = t.results
    means = [r.mean_latency_s for r in rs if r.mean_latency_s is not None]
    predictor = [r.predictor.median for r in rs if r.predictor is not None]
    mean = (statistics.fmean(means) if means else None) if pooled else _median(means)  # type: ignore[arg-type]
    return {
        "mean_latency_s": mean,
        "pooled_over_sequences": pooled,
        "mean_latency_min_s": min(means, default=None),
        "mean_latency_max_s": max(means, default=None),
        "mean_latency_runs_s": means,
        "p99_latency_s": _median([r.p99_latency_s for r in rs]),
        "wall_mean_latency_s": _median([r.wall_mean_latency_s for r in rs]),
        "makespan_s": _median([r.makespan_s for r in rs]),
        "rounds": sorted({r.rounds for r in rs}),
        "tokens_computed": sorted({r.tokens_computed for r in rs}),
        "waves": sorted({s.waves for s in t.tapes}),
        "state_copies": sorted({s.state_copies for s in t.tapes}),
        "identical_to_no_cache": all(r.failed == 0 and r.agreement == 1.0 for r in rs),
        "outputs_sha256": sorted({r.outputs_sha256 for r in rs}),
        "predictor_median_error": _median(predictor),  # type: ignore[arg-type]
        "load_1min": [min(t.loads), max(t.loads)],
    }


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
            "mean_latency_s": statistics.fmean(r.mean_latency_s for r in results),
            "p99_latency_s": statistics.median(r.p99_latency_s for r in results),
            "rounds": round(statistics.median(r.rounds for r in results)),
            "waves": round(statistics.median(t.waves for t in tapes)),
            "state_copies": round(statistics.median(t.state_copies for t in tapes)),
            "sequences": len(runs),
        }
        if twin.speed is not None:  # the same twin at the speed the cell's runs saw
            at = [run_twin(sim, policy, r, NoisyPrice(sim.runner, 0.0, 0, speed))[0] for r in runs]
            f["at_speed"] = {"speed": speed, "mean_latency_s": statistics.fmean(r.mean_latency_s for r in at),
                             "rounds": round(statistics.median(r.rounds for r in at))}  # fmt: skip
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
        means.append(statistics.fmean(r.mean_latency_s for r in drawn))
        rounds.append(statistics.fmean(float(r.rounds) for r in drawn))
    band = median_of_n(means, repeats) if len(runs) == 1 else Spread.of(means, tail=0.05)
    return {"sigma": sigma, "draws": draws, "speed": speed, "sequences": len(runs),
            "mean_latency_s": Spread.of(means).to_dict(), "rounds": Spread.of(rounds).to_dict(),
            "median_of_repeats": band.to_dict()}  # fmt: skip


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
        reproduced += same and mean is not None and abs(mean - (result.mean_latency_s or 0.0)) <= 1e-9 * mean
        diverged.append(replay.diverged_at)
    return {
        "measured_over_twin_price": Spread.of(ratios).to_dict() if ratios else None,
        "replays_reproduced": reproduced,
        "replays": len(real.tapes),
        "replay_diverged_at": diverged,
    }


def relative(sim: float | None, real: float | None) -> float | None:
    return None if sim is None or not real else (sim - real) / real


def workload_spec(name: str, shape: dict[str, int], vocab: int, rate: float | None) -> WorkloadSpec:
    order, arrival = WORKLOADS[name]
    rated = {} if rate is None else {"rate": rate}
    return WorkloadSpec(**shape, order=order, arrival=arrival, vocab_size=vocab, seed=0, **rated)


def twin_profile(family: str, args: argparse.Namespace, budget: int) -> tuple[Path, list[dict[str, object]]]:
    """The sim twin's profile for ``family``: ``--profile`` as given, or (``--twin calibrate``)
    `radixflow calibrate`'s design timed on this family now, just before its real runs, and
    fitted to this family alone, written beside the JSON. A profile timed hours earlier misprices
    every round by however much the shared machine's speed has moved since (the CPU clock keeps
    out the time spent waiting for a core, not the slowdown of sharing one)."""
    if args.twin == "profile":
        return args.profile, []
    from radixflow.calibration.run import CalibrationPlan, calibrate
    from radixflow.costmodel.hardware.profiles import save_profile

    repeats, threads = args.calibrate_repeats, args.threads
    # the median of the repeats: a real round is one draw around the typical round, not its floor
    plan = CalibrationPlan(
        (family,), "cpu", budget, repeats=repeats, threads=threads, clock=args.clock, kept="median"
    )
    profile, errors = calibrate(plan, f"{family}-twin")
    path = args.json.with_suffix(".profiles") / f"{family}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    save_profile(profile, path)
    return path, [e.__dict__ for e in errors]


def twin_noise(profile: Path, family: str, args: argparse.Namespace) -> float | None:
    """The per-round price noise σ of the twin: ``--noise-sigma``, else what the twin's profile
    measured (`calibration.round_noise_sigma`, from its repeated timings of each round shape)."""
    if args.noise_sigma is not None:
        return args.noise_sigma
    path = profile / f"{family}.json" if profile.is_dir() else profile
    calibration = json.loads(path.read_text()).get("calibration") or {}
    return calibration.get("round_noise_sigma")


def run_family(family: str, args: argparse.Namespace, shape: dict[str, int]) -> list[dict[str, object]]:
    """Every workload on one family: one runner, interleaved real runs, the sim beside."""
    options = EngineOptions(runner="torch", model=family, clock=args.clock, torch_threads=args.threads)
    plan = plan_engine(options)
    first = build_workload(workload_spec("grouped", shape, plan.choice.vocab_size, None)).requests
    setup = plan.build([len(r.prompt) for r in first])
    log = RoundLog(args.rounds_out, {"family": family, "workload": "reference", "policy": "reference"})
    log.attach(setup.runner)
    calibrating = args.twin == "calibrate"
    budget = setup.scheduler.token_budget
    probe = SpeedProbe.build(family, budget, args.clock) if args.probe and calibrating else None
    if probe is not None:
        probe.time(probe.reference)
    profile, held_out = twin_profile(family, args, setup.scheduler.token_budget)
    if probe is not None:
        probe.time(probe.reference)
    twin = Twin(profile, twin_noise(profile, family, args), args.draws)
    reference = setup.runner.reference_tokens(first)  # same prompts in every workload
    cells, rate = [], None
    for name in args.workloads:
        spec = workload_spec(name, shape, plan.choice.vocab_size, rate if name == "poisson" else None)
        if name == "poisson" and rate is None:  # the grouped batch first, for its rate
            spec = replace(spec, rate=_medium_rate(setup, first, args.repeat))
        requests = build_workload(spec).requests
        log.label.update(workload=name, policy="reference")
        poisson = spec.arrival == "poisson"
        runs = sequences(requests, spec, args.poisson_sequences if poisson else args.repeat)
        if probe is not None:
            probe.current = []
        trials = interleaved(setup, runs, reference, log, probe)
        real = {p: real_figures(trials[p], pooled=poisson) for p in POLICIES}
        cell_twin = replace(twin, speed=None if probe is None else probe.speed())
        if name == "grouped":
            rate = MEDIUM_LOAD * len(requests) / real["native"]["makespan_s"]  # type: ignore[operator]
        sim = sim_figures(family, spec, setup.scheduler, cell_twin, trials, len(runs))
        write_tapes(args.tapes_out, {"family": family, "workload": name}, trials, spec, setup.scheduler, twin)
        probed = None if probe is None else {"reference": probe.reference, "current": probe.current}
        about = {"twin_profile": str(profile), "twin_held_out": held_out, "twin_sigma": twin.sigma,
                 "twin_speed": cell_twin.speed, "probe": probed}  # fmt: skip
        cells.append(_cell(family, name, spec, real, sim) | {"runner": _runner(setup)} | about)
        print_cell(cells[-1])
    return cells


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


def _runner(setup: EngineSetup) -> dict[str, object]:
    """How the torch runner ran: its matmul plan and where its round predictor started from."""
    matmul, predictor = getattr(setup.runner, "matmul", None), setup.runner.round_predictor
    return {
        "matmul": None if matmul is None else matmul.plan.describe(),
        "predictor_prior": getattr(predictor, "source", None),
    }


def _medium_rate(setup: EngineSetup, requests: list[Request], repeats: int) -> float:
    """Poisson's rate where the grouped batch was not run first: from native's makespan on it."""
    makespans = [run_one(setup, "native", requests)[0].now for _ in range(repeats)]
    return MEDIUM_LOAD * len(requests) / statistics.median(makespans)


def _cell(family: str, name: str, spec: WorkloadSpec, real: dict, sim: dict) -> dict[str, object]:
    policies = {}
    for p in POLICIES:
        s = sim.get(p, {})
        noisy = (s.get("noisy") or {}).get("mean_latency_s") or {}
        at_speed = (s.get("at_speed") or {}).get("mean_latency_s")
        policies[p] = {
            **real[p],
            "sim": s or None,
            "sim_vs_real_mean_latency": relative(s.get("mean_latency_s"), real[p]["mean_latency_s"]),
            # the twin's median over price-noise draws against the real runs' median
            "twin_vs_real_mean_latency": relative(noisy.get("median"), real[p]["mean_latency_s"]),
            "twin_at_speed_vs_real_mean_latency": relative(at_speed, real[p]["mean_latency_s"]),
            # whether the real median lies where a median of as many twin runs falls, 5-95%
            "real_median_in_twin_band": _in_band(s, real[p]["mean_latency_s"]),
        }
    base = real["native"]["mean_latency_s"]
    best = min(real["native"]["mean_latency_s"], real["radixflow"]["mean_latency_s"])
    return {
        "family": family,
        "control": family in CONTROLS,
        "workload": name,
        "rate_per_s": spec.rate if spec.arrival == "poisson" else None,
        "policies": policies,
        "adaptive_vs_native": relative(real["adaptive"]["mean_latency_s"], base),
        "adaptive_vs_best_baseline": relative(real["adaptive"]["mean_latency_s"], best),
        "same_outputs_all_policies": len({h for p in POLICIES for h in real[p]["outputs_sha256"]}) == 1,
        "sim_error": sim.get("error"),
    }


def _in_band(sim: dict, real: float | None) -> bool | None:
    band = (sim.get("noisy") or {}).get("median_of_repeats")
    return None if band is None or real is None else band["low"] <= real <= band["high"]


def _num(x: object, fmt: str = ".3f") -> str:
    return "-" if x is None else format(x, fmt)  # type: ignore[arg-type]


def print_cell(cell: dict[str, object]) -> None:
    head = f"{cell['family']} · {cell['workload']}"
    if cell["rate_per_s"] is not None:
        head += f" ({cell['rate_per_s']:.2f} req/s)"
    if cell.get("twin_speed") is not None:
        head += f"; twin at {cell['twin_speed']:.2f}x its profile's speed (probed)"
    if cell.get("twin_sigma") is not None:
        head += f", sigma {cell['twin_sigma']:.3f}"
    print(head)
    print(f"  {'policy':<10}{'rounds':>8}{'mean s':>9}{'min-max':>15}{'p99 s':>8}{'wall s':>8}"
          f"{'exact':>7}{'load':>11}{'sim s':>8}{'sim rnd':>8}{'sim/real':>9}"
          f"{'twin med [10-90%]':>22}{'twin/real':>10}{'price':>7}{'replay':>8}")  # fmt: skip
    for p, f in cell["policies"].items():  # type: ignore[union-attr]
        sim = f["sim"] or {}
        spread = f"{_num(f['mean_latency_min_s'])}-{_num(f['mean_latency_max_s'])}"
        load = "-".join(f"{x:.1f}" for x in f["load_1min"])
        rounds = "/".join(str(n) for n in f["rounds"])
        print(
            f"  {p:<10}{rounds:>8}{_num(f['mean_latency_s']):>9}{spread:>15}{_num(f['p99_latency_s']):>8}"
            f"{_num(f['wall_mean_latency_s']):>8}{'yes' if f['identical_to_no_cache'] else 'NO':>7}{load:>11}"
            f"{_num(sim.get('mean_latency_s')):>8}{sim.get('rounds', '-'):>8}"
            f"{_num(f['sim_vs_real_mean_latency'], '+.1%'):>9}{_twin(sim):>22}"
            f"{_num(f.get('twin_vs_real_mean_latency'), '+.1%'):>10}{_price(sim):>7}{_replays(sim):>8}"
        )
    print(f"  adaptive vs native {_num(cell['adaptive_vs_native'], '+.1%')}, vs the better baseline "
          f"{_num(cell['adaptive_vs_best_baseline'], '+.1%')}"
          + (f"; sim: {cell['sim_error']}" if cell["sim_error"] else ""), flush=True)  # fmt: skip


def _twin(sim: dict) -> str:
    """The noisy twin's mean latency: median [10%-90%] over its draws."""
    m = (sim.get("noisy") or {}).get("mean_latency_s")
    return "-" if not m else f"{m['median']:.3f} [{m['low']:.3f}-{m['high']:.3f}]"


def _price(sim: dict) -> str:
    """Median over the real rounds of measured / the twin's price of the same round."""
    ratio = ((sim.get("real_rounds") or {}).get("measured_over_twin_price") or {}).get("median")
    return "-" if ratio is None else f"{ratio:.2f}"


def _replays(sim: dict) -> str:
    """Real runs the sim replays exactly at their measured prices, of those replayed."""
    r = sim.get("real_rounds") or {}
    return "-" if not r else f"{r['replays_reproduced']}/{r['replays']}"


def _pct(x: object) -> str:
    return "-" if x is None else f"{x:+.1%}"  # type: ignore[str-format]


def summary_markdown(cells: list[dict]) -> str:
    """One row per family: the three policies' mean latency on the grouped batch, adaptive against
    native on every workload, exactness (the README's table)."""
    by_family: dict[str, dict[str, dict]] = {}
    for c in cells:
        by_family.setdefault(c["family"], {})[c["workload"]] = c
    names = [w for w in WORKLOADS if any(w in f for f in by_family.values())]
    lines = [
        "| model | mean latency n / r / a, grouped (s) | " + " | ".join(f"a vs n, {w}" for w in names)
        + " | outputs = no-cache |",
        "| --- | ---: | " + " | ".join("---:" for _ in names) + " | :---: |",
    ]  # fmt: skip
    for family, work in by_family.items():
        grouped = work.get("grouped", next(iter(work.values())))
        means = " / ".join(_num(grouped["policies"][p]["mean_latency_s"], ".2f") for p in POLICIES)
        exact = all(f["identical_to_no_cache"] for c in work.values() for f in c["policies"].values())
        ratios = " | ".join(_pct(work[w]["adaptive_vs_native"]) if w in work else "-" for w in names)
        lines.append(f"| {family} | {means} | {ratios} | {'yes' if exact else 'NO'} |")
    return "\n".join(lines)


def detail_markdown(cells: list[dict]) -> str:
    """Every family x workload x policy: median and spread, p99, rounds, wall, the sim beside."""
    lines = [
        "| model | workload | policy | rounds / waves / state copies "
        "| mean latency (s) [min-max of the runs] "
        "| p99 (s) | wall mean (s) | sim: mean (s), rounds / waves / copies | sim vs real | load |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]  # fmt: skip
    for c in cells:
        for p, f in c["policies"].items():
            sim = f["sim"] or {}
            low, high = _num(f["mean_latency_min_s"]), _num(f["mean_latency_max_s"])
            spread = f"{_num(f['mean_latency_s'])} [{low}-{high}]"
            rounds = " / ".join(",".join(str(n) for n in f[k]) for k in ("rounds", "waves", "state_copies"))
            shape = " / ".join(str(sim.get(k, "-")) for k in ("rounds", "waves", "state_copies"))
            simmed = f"{_num(sim.get('mean_latency_s'))}, {shape}"
            load = "-".join(f"{x:.1f}" for x in f["load_1min"])
            lines.append(
                f"| {c['family']} | {c['workload']} | {p} | {rounds} | {spread} | {_num(f['p99_latency_s'])} "
                f"| {_num(f['wall_mean_latency_s'])} | {simmed} | {_pct(f['sim_vs_real_mean_latency'])} "
                f"| {load} |"
            )
    return "\n".join(lines)


def acceptance(cells: list[dict]) -> dict[str, object]:
    """Issue 29's lines for the real runner and for the sim against it, counted over the cells
    measured (hybrid families; the control is listed apart)."""
    hybrid = [c for c in cells if not c["control"]]
    within = [c for c in hybrid if c["adaptive_vs_best_baseline"] is not None]
    grouped = [c for c in hybrid if c["workload"] == "grouped" and c["adaptive_vs_native"] is not None]
    every = [f for c in cells for f in c["policies"].values()]
    sims = [f["sim_vs_real_mean_latency"] for f in every]
    twins = [f.get("twin_vs_real_mean_latency") for f in every]
    replays = [(f["sim"] or {}).get("real_rounds") or {} for f in every]
    signs = [c for c in cells if _sim_sign(c) is not None]
    return {
        "hybrid_cells": len(hybrid),
        "adaptive_within_2pct_of_best": sum(c["adaptive_vs_best_baseline"] <= 0.02 for c in within),
        "grouped_families_5pct_below_native": sum(c["adaptive_vs_native"] <= -0.05 for c in grouped),
        "grouped_families": len(grouped),
        "identical_to_no_cache": all(f["identical_to_no_cache"] for f in every),
        "sim_within_10pct": sum(abs(x) <= 0.10 for x in sims if x is not None),
        "sim_compared": sum(x is not None for x in sims),
        # the twin's median over price-noise draws against the median of the real repeats
        "twin_median_within_10pct": sum(abs(x) <= 0.10 for x in twins if x is not None),
        "twin_median_compared": sum(x is not None for x in twins),
        "real_median_in_twin_band": sum(bool(f.get("real_median_in_twin_band")) for f in every),
        # real runs the sim replays round for round at their measured prices (same schedule)
        "real_runs_replayed_exactly": sum(r.get("replays_reproduced", 0) for r in replays),
        "real_runs_replayed": sum(r.get("replays", 0) for r in replays),
        "sim_same_sign_where_real_over_3pct": sum(_sim_sign(c) for c in signs),  # type: ignore[misc]
        "sim_sign_cells": len(signs),
    }


def _sim_sign(cell: dict) -> bool | None:
    """Whether the sim puts adaptive on the same side of native as the real runner does, where the
    real difference exceeds 3% (None: it does not, or the sim did not run)."""
    real, pol = cell["adaptive_vs_native"], cell["policies"]
    sims = [(pol[p]["sim"] or {}).get("mean_latency_s") for p in ("adaptive", "native")]
    if real is None or abs(real) <= 0.03 or None in sims or not sims[1]:
        return None
    return (sims[0] / sims[1] - 1 < 0) == (real < 0)


def resimulated(report: dict, profile: Path, sigma: float | None = None, draws: int = 0) -> dict:
    """A stored run with its sim columns computed again on ``profile`` (the real figures kept):
    two profiles compared on the same real measurements, with no real run repeated; with a
    ``sigma``, the twin also over ``draws`` draws of that per-round price noise."""
    shape = report["config"]["workload"]
    cells = []
    for c in report["cells"]:
        plan = plan_engine(EngineOptions(runner="torch", model=c["family"]))
        vocab = plan.choice.vocab_size
        spec = workload_spec(c["workload"], shape, vocab, c["rate_per_s"])
        lengths = [len(r.prompt) for r in build_workload(spec).requests]
        twin = Twin(profile, sigma, draws)
        count = report["config"].get("poisson_sequences", 1)
        sim = sim_figures(c["family"], spec, plan.scheduler_config(lengths), twin, count=count)
        measured = lambda f: {k: v for k, v in f.items() if not k.startswith(("sim", "twin"))}  # noqa: E731
        real = {p: measured(f) for p, f in c["policies"].items()}
        cells.append(c | _cell(c["family"], c["workload"], spec, real, sim))
    config = report["config"] | {"profile": str(profile)}
    return {"config": config, "acceptance": acceptance(cells), "cells": cells}


def passive_waits(args: argparse.Namespace) -> None:
    """CPU clock on several threads: OpenMP must wait passively, or spinning threads bill other
    load to the clock (`engine.clocks`). Set before torch loads its OpenMP runtime."""
    if args.clock == "cpu" and args.threads > 1:
        if "torch" in sys.modules:
            raise SystemExit("policies_torch: set OMP_WAIT_POLICY=passive before torch is imported")
        os.environ.setdefault("OMP_WAIT_POLICY", "passive")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--families", nargs="+", default=[*FAMILIES, CONTROL])
    ap.add_argument("--workloads", nargs="+", choices=list(WORKLOADS), default=list(WORKLOADS))
    ap.add_argument("--repeat", type=int, default=3, help="runs per policy, interleaved (medians, spread)")
    ap.add_argument("--clock", choices=["cpu", "wall"], default="cpu", help="the engine clock (wall beside)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (the CPU profile's: 1)")
    ap.add_argument(
        "--twin",
        choices=["calibrate", "profile"],
        default="calibrate",
        help="the sim twin's profile: each family's own, timed just before its runs "
        "(calibrate), or --profile (profile)",
    )
    ap.add_argument("--poisson-sequences", type=int, default=POISSON_SEQUENCES,
                    help="arrival sequences per Poisson cell, one run each per policy (their mean)")
    ap.add_argument("--calibrate-repeats", type=int, default=2,
                    help="--twin calibrate: timings per shape (their median is fitted, their spread is σ)")
    ap.add_argument("--noise-sigma", type=float, help="the twin's per-round log-normal price noise "
                    "(default: the σ its profile measured, calibration.round_noise_sigma)")
    ap.add_argument("--probe", action=argparse.BooleanOptionalAction, default=True,
                    help="--twin calibrate: price each cell's twin at the machine's speed during its runs, "
                    "timed on fixed shapes around the profile and after each turn of runs")
    ap.add_argument("--draws", type=int, default=40, help="twin runs under the price noise per policy")
    ap.add_argument("--tapes-out", type=Path, metavar="JSONL", help="append every real run's rounds and "
                    "the twin's, with the twin's price of each round (round-by-round comparison)")
    ap.add_argument(
        "--profile",
        type=Path,
        default=PROFILE,
        help="the sim's profile (--twin profile, --resim); a directory: FAMILY.json in it",
    )
    ap.add_argument("--shape", nargs=4, type=int, metavar=("GROUPS", "CANDIDATES", "CONTEXT", "CANDIDATE"),
                    help="another workload size (default: 4 8 512 32)")  # fmt: skip
    ap.add_argument("--smoke", action="store_true", help="tiny models, a tiny workload, one repeat (CI)")
    ap.add_argument("--json", type=Path, default=Path("results/policies_torch.json"))
    ap.add_argument("--markdown", type=Path, metavar="JSON", help="print the tables of a stored run and exit")
    ap.add_argument("--rounds-out", type=Path, metavar="JSONL", help="append every real round's predictor "
                    "terms, measured and predicted seconds (for predictor_replay.py)")  # fmt: skip
    ap.add_argument(
        "--resim", type=Path, metavar="JSON", help="a stored run's sim columns again on --profile (to --json)"
    )
    args = ap.parse_args()
    if args.resim is not None:
        report = resimulated(json.loads(args.resim.read_text()), args.profile, args.noise_sigma, args.draws)
        args.json.write_text(json.dumps(report, indent=2, allow_nan=False))
        args.markdown = args.json
    if args.markdown is not None:
        cells = json.loads(args.markdown.read_text())["cells"]
        print(summary_markdown(cells), detail_markdown(cells), json.dumps(acceptance(cells)), sep="\n\n")
        return
    shape = SHAPE if args.shape is None else dict(zip(SHAPE, args.shape, strict=True))
    shape = SMOKE_SHAPE if args.smoke else shape
    if args.smoke:
        args.families, args.repeat, args.poisson_sequences, args.draws = list(SMOKE_FAMILIES), 1, 2, 3
    passive_waits(args)
    config = {
        "workload": shape, "workloads": args.workloads, "policies": list(POLICIES), "repeats": args.repeat,
        "poisson_sequences": args.poisson_sequences, "twin_draws": args.draws,
        "noise_sigma": args.noise_sigma,
        "clock": args.clock, "torch_threads": args.threads, "profile": str(args.profile), "twin": args.twin,
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"), "cpus": os.cpu_count(),
    }  # fmt: skip
    args.json.parent.mkdir(parents=True, exist_ok=True)
    cells: list[dict[str, object]] = []
    for family in args.families:  # written after each family: a cut-short run keeps what it measured
        cells += run_family(family, args, shape)
        report = {"config": config, "acceptance": acceptance(cells), "cells": cells}
        args.json.write_text(json.dumps(report, indent=2, allow_nan=False))
    print("acceptance:", json.dumps(acceptance(cells)))
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
