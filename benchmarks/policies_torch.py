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
import os
import statistics
import sys
from dataclasses import replace
from pathlib import Path

from radixflow.bench.metrics import summarize
from radixflow.bench.policy_tables import (
    acceptance,
    detail_markdown,
    in_band,
    print_cell,
    relative,
    summary_markdown,
)
from radixflow.bench.round_log import RoundLog
from radixflow.bench.twin_runs import POLICIES, Trials, Twin, run_one, sequences, sim_figures, twin_setup
from radixflow.calibration.speed_probe import SpeedProbe
from radixflow.cli.args import positive_int
from radixflow.options import EngineOptions, EngineSetup, plan_engine
from radixflow.scheduler.request import Request
from radixflow.scheduler.scheduler import SchedulerConfig
from radixflow.workloads.build import build_workload
from radixflow.workloads.candidates import WorkloadSpec

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
    from radixflow.costmodel.hardware.profile_files import save_profile

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


def run_family(
    family: str, args: argparse.Namespace, shape: dict[str, int], log: RoundLog
) -> list[dict[str, object]]:
    """Every workload on one family: one runner, interleaved real runs, the sim beside; ``log``
    (``--rounds-out``) gets every real round, labelled with the family and the cell."""
    options = EngineOptions(runner="torch", model=family, clock=args.clock, torch_threads=args.threads)
    plan = plan_engine(options)
    first = build_workload(workload_spec("grouped", shape, plan.choice.vocab_size, None)).requests
    setup = plan.build([len(r.prompt) for r in first])
    # every row labelled as predictor_replay.py reads it
    log.label = {"family": family, "workload": "reference", "policy": "reference", "repeat": 0}
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
        # rounds outside the cell's policy runs (native's, for Poisson's rate) are its "reference"
        log.label.update(workload=name, policy="reference", repeat=0)
        if name == "poisson" and rate is None:  # the grouped batch first, for its rate
            spec = replace(spec, rate=_medium_rate(setup, first, args.repeat))
        requests = build_workload(spec).requests
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
            "real_median_in_twin_band": in_band(s, real[p]["mean_latency_s"]),
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


def arguments() -> argparse.ArgumentParser:
    """The command line (the docstring above is its help)."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--families", nargs="+", default=[*FAMILIES, CONTROL])
    ap.add_argument("--workloads", nargs="+", choices=list(WORKLOADS), default=list(WORKLOADS))
    ap.add_argument(
        "--repeat", type=positive_int, default=3, help="runs per policy, interleaved (medians, spread)"
    )
    ap.add_argument("--clock", choices=["cpu", "wall"], default="cpu", help="the engine clock (wall beside)")
    ap.add_argument("--threads", type=positive_int, default=1, help="torch threads (the CPU profile's: 1)")
    ap.add_argument(
        "--twin",
        choices=["calibrate", "profile"],
        default="calibrate",
        help="the sim twin's profile: each family's own, timed just before its runs "
        "(calibrate), or --profile (profile)",
    )
    ap.add_argument(
        "--poisson-sequences",
        type=positive_int,
        default=POISSON_SEQUENCES,
        help="arrival sequences per Poisson cell, one run each per policy (their mean)",
    )
    ap.add_argument(
        "--calibrate-repeats",
        type=positive_int,
        default=2,
        help="--twin calibrate: timings per shape (their median is fitted, their spread is σ)",
    )
    ap.add_argument(
        "--noise-sigma",
        type=float,
        help="the twin's per-round log-normal price noise "
        "(default: the σ its profile measured, calibration.round_noise_sigma)",
    )
    ap.add_argument(
        "--probe",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="--twin calibrate: price each cell's twin at the machine's speed during its runs, "
        "timed on fixed shapes around the profile and after each turn of runs",
    )
    ap.add_argument(
        "--draws", type=positive_int, default=40, help="twin runs under the price noise per policy"
    )
    ap.add_argument(
        "--tapes-out",
        type=Path,
        metavar="JSONL",
        help="append every real run's rounds and "
        "the twin's, with the twin's price of each round (round-by-round comparison)",
    )
    ap.add_argument(
        "--profile",
        type=Path,
        default=PROFILE,
        help="the sim's profile (--twin profile, --resim); a directory: FAMILY.json in it",
    )
    ap.add_argument("--shape", nargs=4, type=positive_int,
                    metavar=("GROUPS", "CANDIDATES", "CONTEXT", "CANDIDATE"),
                    help="another workload size (default: 4 8 512 32)")  # fmt: skip
    ap.add_argument("--smoke", action="store_true", help="tiny models, a tiny workload, one repeat (CI)")
    ap.add_argument("--json", type=Path, default=Path("results/policies_torch.json"))
    ap.add_argument("--markdown", type=Path, metavar="JSON", help="print the tables of a stored run and exit")
    ap.add_argument("--rounds-out", type=Path, metavar="JSONL", help="append every real round's predictor "
                    "terms, measured and predicted seconds (for predictor_replay.py)")  # fmt: skip
    ap.add_argument(
        "--resim", type=Path, metavar="JSON", help="a stored run's sim columns again on --profile (to --json)"
    )
    return ap


def main() -> None:
    args = arguments().parse_args()
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
    appendable(args)
    log = RoundLog(args.rounds_out)
    cells: list[dict[str, object]] = []
    for family in args.families:  # written after each family: a cut-short run keeps what it measured
        cells += run_family(family, args, shape, log)
        report = {"config": config, "acceptance": acceptance(cells), "cells": cells}
        args.json.write_text(json.dumps(report, indent=2, allow_nan=False))
    print("acceptance:", json.dumps(acceptance(cells)))
    print(f"wrote {args.json}")
    if log.error is not None:  # the rounds after the failed write are not in it
        raise SystemExit(f"policies_torch: --rounds-out stopped part way: {log.error}")


def appendable(args: argparse.Namespace) -> None:
    """``--rounds-out`` and ``--tapes-out``, appended to as the cells run, refused before any
    model is built where they cannot be written (one line, not a failure minutes in)."""
    for flag, path in (("--rounds-out", args.rounds_out), ("--tapes-out", args.tapes_out)):
        try:
            if path is not None:
                path.open("a", encoding="utf-8").close()
        except OSError as e:
            raise SystemExit(f"policies_torch: {flag} {path}: cannot write it ({e.strerror or e})") from None


if __name__ == "__main__":
    main()
