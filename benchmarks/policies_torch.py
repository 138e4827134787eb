"""`native`, `radixflow` and `adaptive` on the real PyTorch runner, with the sim's prediction beside.

For each family (the five hybrid `-small` zoo models and the attention-only control) and each
workload (4 contexts of 512 tokens x 8 candidates of 32, one generated token: grouped and
shuffled candidates arriving at once, and Poisson arrivals at a medium load, half the rate at
which `native` clears the grouped batch), the three policies run interleaved run by run
(a, b, c, b, c, a, ...: each first in turn) on one runner, each on a fresh engine. Reported per
policy: the median mean latency over the repeats and its spread (min-max), the median p99, rounds,
the wall-time mean latency beside the engine clock's, whether every output equals a no-cache run of the same
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
import sys
from dataclasses import replace
from functools import partial
from pathlib import Path

from radixflow.bench.policy_cells import (
    CONTROL,
    FAMILIES,
    MEDIUM_LOAD,
    POISSON_SEQUENCES,
    SHAPE,
    SMOKE_FAMILIES,
    SMOKE_SHAPE,
    WORKLOADS,
    cell_figures,
    interleaved,
    medium_rate,
    real_figures,
    resimulated,
    runner_about,
    workload_spec,
)
from radixflow.bench.policy_tables import acceptance, detail_markdown, print_cell, summary_markdown
from radixflow.bench.provenance import write_figures
from radixflow.bench.round_log import RoundLog
from radixflow.bench.twin_runs import POLICIES, Twin, sequences, sim_figures, twin_noise, write_tapes
from radixflow.calibration.speed_probe import SpeedProbe
from radixflow.cli.args import non_negative_float, positive_int
from radixflow.options import EngineOptions, plan_engine
from radixflow.workloads.build import build_workload

PROFILE = Path(__file__).resolve().parent.parent / "experiments" / "profiles" / "cpu.json"


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
    twin = Twin(profile, twin_noise(profile, family, args.noise_sigma), args.draws)
    reference = setup.runner.reference_tokens(first)  # same prompts in every workload
    cells, rate = [], None
    for name in args.workloads:
        spec = workload_spec(name, shape, plan.choice.vocab_size, rate if name == "poisson" else None)
        # rounds outside the cell's policy runs (native's, for Poisson's rate) are its "reference"
        log.label.update(workload=name, policy="reference", repeat=0)
        if name == "poisson" and rate is None:  # the grouped batch first, for its rate
            spec = replace(spec, rate=medium_rate(setup, first, args.repeat))
        requests = build_workload(spec).requests
        poisson = spec.arrival == "poisson"
        runs = sequences(requests, spec, args.poisson_sequences if poisson else args.repeat)
        if probe is not None:
            probe.current = []
        turn = None if probe is None else partial(probe.time, probe.current)  # each turn's timing
        trials = interleaved(setup, runs, reference, log, turn)
        real = {p: real_figures(trials[p], pooled=poisson) for p in POLICIES}
        cell_twin = replace(twin, speed=None if probe is None else probe.speed())
        if name == "grouped":
            rate = MEDIUM_LOAD * len(requests) / real["native"]["makespan_s"]  # type: ignore[operator]
        sim = sim_figures(family, spec, setup.scheduler, cell_twin, trials, len(runs))
        write_tapes(args.tapes_out, {"family": family, "workload": name}, trials, spec, setup.scheduler, twin)
        probed = None if probe is None else {"reference": probe.reference, "current": probe.current}
        about = {"twin_profile": str(profile), "twin_held_out": held_out, "twin_sigma": twin.sigma,
                 "twin_speed": cell_twin.speed, "probe": probed}  # fmt: skip
        cells.append(cell_figures(family, name, spec, real, sim) | {"runner": runner_about(setup)} | about)
        print_cell(cells[-1])
    return cells


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
        type=non_negative_float,
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
        write_figures(args.json, report)
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
        write_figures(args.json, report)
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
