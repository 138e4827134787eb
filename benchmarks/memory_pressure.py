"""Eviction and checkpoint admission under memory pressure (sim runner): `lru` against
`cost-per-byte`, with every wanted checkpoint admitted (`all`) or only likely ones (`likely`).

Workloads (`radixflow.workloads.candidates`): multi-turn chats with Zipf popularity over the
conversations, candidates over long shared contexts, and chats mixed with one-off prompts.
Capacity is one byte budget (``cache_memory``) shared by KV and checkpoints, a fraction of the
working set: the bytes an unbounded cache (lru/all) holds at its fullest over the same workload
(`radixflow.bench.pressure`). Reported per cell: token hit rate (reused / prompt tokens), recomputed
prompt tokens, TTFT p50 / p95, mean latency and evictions by kind (KV leaves, checkpoints).

    python benchmarks/memory_pressure.py --json results/memory_pressure.json
    python benchmarks/memory_pressure.py --runner torch --fractions 0.25 --json results/memory_torch.json

``--runner torch`` runs the real PyTorch runner on this CPU (the five hybrid ``-small`` zoo models,
one thread, the CPU clock) on smaller chat and mixed workloads at a rate such a model serves.
"""

from __future__ import annotations

import argparse
import itertools
from dataclasses import replace
from pathlib import Path

from rich.console import Console
from rich.table import Table

from radixflow.bench.pressure import (
    dense_flops_per_token,
    evictions,
    measure_working_set,
    pressure_figures,
    under_pressure,
)
from radixflow.bench.provenance import write_figures
from radixflow.cli.args import non_negative_int, positive_float
from radixflow.options import EngineOptions, plan_engine
from radixflow.problems import ProblemError, flag
from radixflow.workloads.build import build_workload
from radixflow.workloads.candidates import WorkloadSpec

VARIANTS = (("lru", "all"), ("cost-per-byte", "all"), ("lru", "likely"), ("cost-per-byte", "likely"))
FRACTIONS = (0.1, 0.25, 0.5, 1.0)
WORKLOADS = {
    "chat": WorkloadSpec(
        kind="chats", groups=24, candidates=6, skew=1.0, context_len=512, candidate_len=64,
        order="interleaved", arrival="poisson", rate=40.0,
    ),
    "candidates": WorkloadSpec(
        groups=12, candidates=8, context_len=2048, candidate_len=64, order="shuffled",
        arrival="poisson", rate=40.0,
    ),
    "mixed": WorkloadSpec(
        kind="chats", groups=16, candidates=6, skew=1.0, context_len=512, candidate_len=64,
        independent=48, order="interleaved", arrival="poisson", rate=40.0,
    ),
}  # fmt: skip
# Shapes the grid (`experiments/memory.toml`) does not hold, to check a policy chosen on the grid
# out of sample (`--workloads chat-system ...`): conversations after a shared system prompt, spread
# over namespaces with a steeper popularity; twice the one-off traffic; smaller candidate groups.
HELD_OUT = {
    "chat-system": WorkloadSpec(
        kind="chats", groups=32, candidates=5, skew=1.5, context_len=384, candidate_len=96,
        shared_prefix_len=256, namespaces=4, order="interleaved", arrival="poisson", rate=40.0,
    ),
    "mixed-heavy": WorkloadSpec(
        kind="chats", groups=12, candidates=8, skew=0.8, context_len=768, candidate_len=48,
        independent=96, order="interleaved", arrival="poisson", rate=40.0,
    ),
    "candidates-small": WorkloadSpec(
        groups=24, candidates=4, context_len=1024, candidate_len=32, order="shuffled",
        arrival="poisson", rate=40.0,
    ),
}  # fmt: skip
# The real runner on this CPU (`--runner torch`, the `-small` zoo models, one thread, the CPU
# clock): the same shapes, smaller, at a rate such a model serves
TORCH_WORKLOADS = {
    "chat": WorkloadSpec(
        kind="chats", groups=8, candidates=4, skew=1.0, context_len=128, candidate_len=32,
        order="interleaved", arrival="poisson", rate=2.0,
    ),
    "mixed": WorkloadSpec(
        kind="chats", groups=6, candidates=4, skew=1.0, context_len=128, candidate_len=32,
        independent=12, order="interleaved", arrival="poisson", rate=2.0,
    ),
}  # fmt: skip
TORCH_MODELS = ["qwen3_5-small", "qwen3_next-small", "lfm2-small", "nemotron_h-small", "falcon_h1-small"]


def run(options: EngineOptions, spec: WorkloadSpec) -> dict[str, float | int | None]:
    """One engine over a fresh copy of ``spec``'s requests: its figures and evictions by kind."""
    requests = build_workload(spec).requests
    engine = plan_engine(options).build([len(r.prompt) for r in requests]).engine()
    engine.run(requests)
    figures = pressure_figures(engine.requests, dense_flops_per_token(engine.runner))
    return figures | {f"evicted_{kind}": n for kind, n in evictions(engine).items()}


def cells(
    model: str,
    runner: str,
    hardware: str,
    workloads: dict[str, WorkloadSpec],
    fractions: tuple[float, ...],
    seeds: list[int],
) -> list[dict]:
    base = EngineOptions(model=model, runner=runner, hardware=hardware, policy="adaptive")
    if runner == "torch":  # one thread on the CPU clock, as the calibrated profile was timed
        base = base.replace(clock="cpu", torch_threads=1)
    out = []
    for (name, spec), seed in itertools.product(workloads.items(), seeds):
        spec = replace(spec, seed=seed)
        if runner == "torch":  # tokens the model knows
            spec = replace(spec, vocab_size=plan_engine(base).choice.vocab_size)
        ws = measure_working_set(base, build_workload(spec).requests)
        for fraction in fractions:
            capped = under_pressure(base, ws, fraction, spec.prompt_len)
            for eviction, admission in VARIANTS:
                options = capped.replace(eviction=eviction, admission=admission)
                row = {"model": model, "runner": runner, "hardware": hardware, "workload": name, "seed": seed}
                row |= {
                    "capacity": fraction,
                    "cache_memory": options.cache_memory,
                    "working_set_bytes": ws.peak_bytes,
                }
                row |= {"eviction": eviction, "admission": admission}
                out.append(row | run(options, spec))
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runner", choices=["sim", "torch"], default="sim")
    p.add_argument("--models", nargs="+", help="default: qwen3_5-2b (sim), the -small families (torch)")
    p.add_argument("--hardware", default="h100")
    p.add_argument("--seeds", type=non_negative_int, nargs="+", default=[0])
    p.add_argument("--workloads", nargs="+", default=list(WORKLOADS), choices=[*WORKLOADS, *HELD_OUT])
    p.add_argument("--fractions", type=positive_float, nargs="+", default=list(FRACTIONS))
    p.add_argument("--json", type=Path, default=Path("results/memory_pressure.json"))
    p.add_argument("--smoke", action="store_true", help="CI: one small workload, two capacities")
    args = p.parse_args()
    try:
        run_from_args(args)
    except ProblemError as e:  # an unknown model, hardware or policy: one line, as radixflow's own flags
        p.error(e.problem.render(flag))


def run_from_args(args: argparse.Namespace) -> None:
    shapes = TORCH_WORKLOADS if args.runner == "torch" else WORKLOADS | HELD_OUT
    if missing := [name for name in args.workloads if name not in shapes]:
        has = ", ".join(shapes)  # --runner torch has smaller chat and mixed shapes only
        raise SystemExit(
            f"--workloads: {', '.join(missing)} has no shape for --runner {args.runner} (it has: {has})"
        )
    workloads = {name: shapes[name] for name in args.workloads}
    args.models = args.models or (TORCH_MODELS if args.runner == "torch" else ["qwen3_5-2b"])
    if args.smoke:
        workloads = {"chat": replace(WORKLOADS["chat"], groups=4, candidates=3, context_len=128)}
        args.fractions = [0.25, 1.0]
    fractions = tuple(args.fractions)
    grid = (args.runner, args.hardware, workloads, fractions, args.seeds)
    rows = [row for m in args.models for row in cells(m, *grid)]
    _print(rows)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    write_figures(args.json, {"cells": rows})


def _print(rows: list[dict]) -> None:
    table = Table(title="memory pressure (sim): hit rate, TTFT, latency, evictions")
    cols = ("model", "workload", "capacity", "eviction", "admission", "hit_rate", "recomputed_tokens")
    cols += ("ttft_p50_ms", "ttft_p95_ms", "mean_latency_ms", "evicted_kv", "evicted_checkpoint")
    for col in cols:
        table.add_column(col)
    for row in rows:
        table.add_row(*(f"{row[c]:.3f}" if isinstance(row[c], float) else str(row[c]) for c in cols))
    Console(width=200).print(table)


if __name__ == "__main__":
    main()
