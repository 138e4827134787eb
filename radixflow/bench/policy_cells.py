"""The cells of a real-runner policy comparison (`benchmarks/policies_torch.py`): the families and
workloads it runs (`workload_spec`), a cell's real runs with the policies interleaved
(`interleaved`), one policy's figures over them (`real_figures`), a cell's figures with its sim
twin's beside the real ones (`cell_figures`), and a stored run's cells with the twin's columns
computed again on another profile (`resimulated`)."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from pathlib import Path

from radixflow.bench.metrics import summarize
from radixflow.bench.policy_tables import acceptance, in_band, relative
from radixflow.bench.round_log import RoundLog
from radixflow.bench.spread import load_now, rotated
from radixflow.bench.twin_runs import POLICIES, Trials, Twin, run_one, sim_figures
from radixflow.options import EngineOptions, EngineSetup, plan_engine
from radixflow.scheduler.request import Request
from radixflow.workloads.build import build_workload
from radixflow.workloads.candidates import WorkloadSpec

FAMILIES = ("qwen3_5-small", "qwen3_next-small", "lfm2-small", "nemotron_h-small", "falcon_h1-small")
CONTROL = "qwen3-small"  # attention only: nothing is ever blocked, every policy should tie
SMOKE_FAMILIES = ("qwen3_5-tiny", "qwen3-tiny")
CONTROLS = {CONTROL, "qwen3-tiny"}
SHAPE = {"groups": 4, "candidates": 8, "context_len": 512, "candidate_len": 32}
SMOKE_SHAPE = {"groups": 2, "candidates": 2, "context_len": 32, "candidate_len": 4}
WORKLOADS = {  # name -> (order, arrival); Poisson's rate is set from the grouped batch
    "grouped": ("grouped", "batch"),
    "shuffled": ("shuffled", "batch"),
    "poisson": ("grouped", "poisson"),
}
MEDIUM_LOAD = 0.5  # Poisson rate as a fraction of the rate native clears the grouped batch at
POISSON_SEQUENCES = 8  # arrival sequences per Poisson cell (see policies_torch.py's docstring)


def workload_spec(name: str, shape: dict[str, int], vocab: int, rate: float | None) -> WorkloadSpec:
    order, arrival = WORKLOADS[name]
    rated = {} if rate is None else {"rate": rate}
    return WorkloadSpec(**shape, order=order, arrival=arrival, vocab_size=vocab, seed=0, **rated)


def interleaved(
    setup: EngineSetup,
    runs: list[list[Request]],
    reference: dict[str, int],
    log: RoundLog,
    after_turn: Callable[[], None] | None = None,
) -> dict[str, Trials]:
    """Every policy once on each of ``runs`` (the requests of each repeat, `sequences`), in turn,
    the order rotated repeat by repeat (a, b, c, b, c, a, ...: `rotated`), each on a fresh
    engine; ``after_turn`` called after each turn (the script times its `SpeedProbe` there)."""
    trials = {p: Trials() for p in POLICIES}
    for repeat, requests in enumerate(runs):
        for policy in rotated(POLICIES, repeat):
            log.label.update(policy=policy, repeat=repeat)
            trials[policy].loads.append(load_now())
            engine, tape = run_one(setup, policy, requests, taped=True)
            trials[policy].results.append(summarize(policy, engine, setup.scheduler, reference))
            trials[policy].tapes.append(tape)
        if after_turn is not None:
            after_turn()
    return trials


def medium_rate(setup: EngineSetup, requests: list[Request], repeats: int) -> float:
    """Poisson's rate where the grouped batch was not run first: from native's makespan on it."""
    makespans = [run_one(setup, "native", requests)[0].now for _ in range(repeats)]
    return MEDIUM_LOAD * len(requests) / statistics.median(makespans)


def runner_about(setup: EngineSetup) -> dict[str, object]:
    """How the torch runner ran: its matmul plan and where its round predictor started from."""
    matmul, predictor = getattr(setup.runner, "matmul", None), setup.runner.round_predictor
    return {
        "matmul": None if matmul is None else matmul.plan.describe(),
        "predictor_prior": getattr(predictor, "source", None),
    }


def _range(values: list[float]) -> list[float] | None:
    """[min, max] of ``values``; None where there are none."""
    return [min(values), max(values)] if values else None


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
        "load_1min": _range([x for x in t.loads if x is not None]),  # none: the platform has none
    }


def cell_figures(family: str, name: str, spec: WorkloadSpec, real: dict, sim: dict) -> dict[str, object]:
    """One cell: every policy's real figures (`real_figures`) with its sim twin's (`sim_figures`)
    and their relative differences; adaptive against native and the better of the two."""
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
        cells.append(c | cell_figures(c["family"], c["workload"], spec, real, sim))
    config = report["config"] | {"profile": str(profile)}
    return {"config": config, "acceptance": acceptance(cells), "cells": cells}
