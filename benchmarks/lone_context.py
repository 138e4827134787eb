"""Candidates one call at a time vs one batch: what a lone request's checkpoint buys.

The grouped candidate workload (G contexts × C candidates) runs twice on a fresh engine per
placement: all requests in one batch, and one request at a time, each submitted when the one
before it has finished (what calling ``LLM.generate`` once per candidate does). Reported per
placement: engine time (the sim clock on the sim runner, the summed measured worker calls on
torch), wall time, rounds, prompt tokens served from the cache, and whether every output equals
the runner's no-cache reference. Times are the minimum over ``--repeat`` interleaved runs (each
first in turn, after one untimed warm-up run of each), every run's kept beside it in the JSON
(``engine_runs_s``, ``wall_runs_s``: their spread), the ratio one by one / batch of the minima
and, since each repeat ran the two side by side, repeat by repeat (``*_ratio_runs``, their
median ``*_ratio_median``; printed with their range), with the machine's 1-minute load average
before and after, printed and written.

    python benchmarks/lone_context.py --model qwen3_5-2b                       # sim, H100 profile
    python benchmarks/lone_context.py --model qwen3_5-2b --hardware cpu        # sim, CPU profile
    python benchmarks/lone_context.py --model qwen3_5-small --torch-threads 2  # torch (CPU)
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

from radixflow.bench.provenance import write_figures
from radixflow.bench.spread import load_now, load_text, paired_lines, rotated
from radixflow.cli.args import positive_int
from radixflow.engine.engine import Engine
from radixflow.options import EngineOptions, EngineSetup, plan_engine
from radixflow.problems import ProblemError, flag
from radixflow.scheduler.placement import PLACEMENTS
from radixflow.scheduler.request import Request, RequestStatus
from radixflow.workloads.build import build_workload
from radixflow.workloads.candidates import WorkloadSpec


@dataclass(frozen=True)
class Run:
    engine_s: float
    wall_s: float
    rounds: int
    reused: int
    outputs: dict[str, tuple[int, ...]]


def fresh(requests: list[Request], arrival: float | None = None) -> list[Request]:
    return [
        Request(r.id, r.prompt, r.namespace, r.arrival_s if arrival is None else arrival, sampling=r.sampling)
        for r in requests
    ]


def run_batch(engine: Engine, requests: list[Request]) -> Run:
    t0 = time.perf_counter()
    done = engine.run(fresh(requests))
    return _result(engine, done, time.perf_counter() - t0)


def run_one_by_one(engine: Engine, requests: list[Request]) -> Run:
    t0 = time.perf_counter()
    for req in requests:
        engine.run(fresh([req], arrival=engine.now))  # arrives when the call before it returned
    return _result(engine, engine.requests, time.perf_counter() - t0)


def _result(engine: Engine, done: list[Request], wall: float) -> Run:
    assert all(r.status is RequestStatus.FINISHED for r in done), [r.error for r in done if r.error]
    return Run(
        engine.now,
        wall,
        len(engine.rounds),
        sum(r.reused for r in done),
        {r.id: tuple(r.output) for r in done},
    )


def measure(
    setup: EngineSetup, requests: list[Request], placements: list[str], repeat: int
) -> dict[str, object]:
    """Each (placement, mode) once untimed (a warm-up: the process's one-time costs, its imports,
    allocator and kernel plans, would fall on whichever ran first), then ``repeat`` times,
    interleaved, each first in turn (`rotated`); times are the minimum over repeats (the run least
    disturbed by other work on a shared machine), every repeat's kept beside it, counts the
    first's, and the outputs of every repeat are held to the no-cache reference. Per placement a
    row (`_row`); ``load_1min``: the load average before and after the timed runs."""
    reference = setup.runner.reference_tokens(requests)
    modes = {"batch": run_batch, "one_by_one": run_one_by_one}
    runs: dict[tuple[str, str], list[Run]] = {(p, m): [] for p in placements for m in modes}
    for placement, mode in runs:  # the warm-up: its figures are dropped
        modes[mode](setup.engine(placement=placement), requests)
    load_before = load_now()
    for trial in range(repeat):
        for placement, mode in rotated(list(runs), trial):
            runs[placement, mode].append(modes[mode](setup.engine(placement=placement), requests))
    load_after = load_now()
    prompt_tokens = sum(len(r.prompt) for r in requests)
    out: dict[str, object] = {"load_1min": [load_before, load_after]}
    for placement in placements:
        row = {mode: _figures(runs[placement, mode], reference, prompt_tokens) for mode in modes}
        out[placement] = {**row, **_ratios(row["batch"], row["one_by_one"])}
    return out


def _figures(runs: list[Run], reference: dict[str, int] | None, prompt_tokens: int) -> dict[str, object]:
    """One (placement, mode)'s figures over its repeats."""
    first = runs[0]
    return {
        "engine_s": min(r.engine_s for r in runs),
        "wall_s": min(r.wall_s for r in runs),
        "engine_runs_s": [r.engine_s for r in runs],
        "wall_runs_s": [r.wall_s for r in runs],
        "rounds": first.rounds,
        "reused_tokens": first.reused,
        "computed_tokens": prompt_tokens - first.reused,
        "same_as_no_cache": all(_exact(r, reference) for r in runs) if reference is not None else None,
    }


def _ratios(batch: dict, one: dict) -> dict[str, object]:
    """One by one over batch: of the minima (the headline, docs/policies.md's table), and repeat by
    repeat (the two ran side by side in each) with the median of those: the spread it is read
    against."""
    out: dict[str, object] = {}
    for clock in ("engine", "wall"):
        pairs = zip(one[f"{clock}_runs_s"], batch[f"{clock}_runs_s"], strict=True)
        paired = [o / b if b > 0 else math.nan for o, b in pairs]  # nan: written null, said so
        out[f"{clock}_ratio"] = (
            one[f"{clock}_s"] / batch[f"{clock}_s"] if batch[f"{clock}_s"] > 0 else math.nan
        )
        out[f"{clock}_ratio_runs"] = paired
        out[f"{clock}_ratio_median"] = statistics.median(paired)
    return out


def print_paired(results: dict[str, object], placements: list[str]) -> None:
    """Each placement's one-by-one against its batch, repeat by repeat (`paired_lines`)."""
    for placement in placements:
        row: dict = results[placement]  # type: ignore[assignment]
        for clock, key in (("engine time", "engine_runs_s"), ("wall time", "wall_runs_s")):
            trials = {mode: row[mode][key] for mode in ("batch", "one_by_one")}
            for line in paired_lines(f"{placement}: {clock}", trials, "batch"):
                print(line)


def _exact(run: Run, reference: dict[str, int] | None) -> bool:
    """Whether every output of ``run`` starts with the no-cache reference's token (True: none)."""
    return reference is None or all(run.outputs[k][0] == v for k, v in reference.items())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="qwen3_5-2b")
    ap.add_argument("--hardware", default="h100", help="sim cost profile (h100, h200, cpu)")
    ap.add_argument("--torch-threads", type=positive_int, default=None)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--groups", type=positive_int, default=4)
    ap.add_argument("--candidates", type=positive_int, default=8)
    ap.add_argument("--context-len", type=positive_int, default=512)
    ap.add_argument("--candidate-len", type=positive_int, default=32)
    ap.add_argument("--placements", nargs="+", choices=list(PLACEMENTS), default=["branch", "lone"])
    ap.add_argument(
        "--repeat", type=positive_int, default=1, help="interleaved runs; times are their minimum"
    )
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--smoke", action="store_true", help="CI: qwen3_5-tiny on torch, 2x2 candidates")
    args = ap.parse_args()
    try:
        run_from_args(args)
    except ProblemError as e:  # an unknown model, hardware or policy: one line, as radixflow's own flags
        ap.error(e.problem.render(flag))


def run_from_args(args: argparse.Namespace) -> None:
    if args.smoke:
        args.model, args.groups, args.candidates = "qwen3_5-tiny", 2, 2
        args.context_len, args.candidate_len = 32, 4
    options = EngineOptions(  # radixflow: the placements compared under docs/policies.md's policy
        model=args.model,
        torch_threads=args.torch_threads,
        device=args.device,
        hardware=args.hardware,
        policy="radixflow",
    )
    plan = plan_engine(options)
    spec = WorkloadSpec(
        groups=args.groups,
        candidates=args.candidates,
        context_len=args.context_len,
        candidate_len=args.candidate_len,
        vocab_size=plan.choice.vocab_size,
    )
    requests = build_workload(spec).requests
    setup = plan.build([len(r.prompt) for r in requests])
    results = measure(setup, requests, args.placements, args.repeat)
    clock = "sim clock" if plan.choice.name == "sim" else "measured worker time"
    print(
        f"{setup.runner.model.name} · {plan.choice.name} runner · {spec.groups}×{spec.candidates} "
        f"candidates, {spec.context_len}+{spec.candidate_len} tokens · engine time = {clock}"
    )
    before, after = results["load_1min"]  # type: ignore[misc]
    loads = f"load average (1 min) {load_text(before)} before, {load_text(after)} after"
    print(f"times: the minimum of {args.repeat}; {loads}")
    print(
        f"{'placement':<10}{'mode':<12}{'engine s':>10}{'wall s':>9}{'rounds':>8}"
        f"{'reused':>9}{'computed':>10}  exact  wall runs s"
    )
    for placement in args.placements:
        row: dict = results[placement]  # type: ignore[assignment]
        for mode in ("batch", "one_by_one"):
            r = row[mode]  # type: ignore[index]
            print(
                f"{placement:<10}{mode:<12}{r['engine_s']:>10.4f}{r['wall_s']:>9.2f}{r['rounds']:>8}"
                f"{r['reused_tokens']:>9}{r['computed_tokens']:>10}  {r['same_as_no_cache']!s:<5}  "
                + ", ".join(f"{w:.2f}" for w in r["wall_runs_s"])
            )
        print(f"{placement:<10}{'one/batch':<12}{row['engine_ratio']:>10.3f}{row['wall_ratio']:>9.3f}")
    print_paired(results, args.placements)  # the ratios of minima above: their paired spread
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        write_figures(args.json, {"workload": spec.to_dict(), "repeat": args.repeat, "results": results})


if __name__ == "__main__":
    main()
