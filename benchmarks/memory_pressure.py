"""Eviction and checkpoint admission under memory pressure (sim runner): `lru` against
`cost-per-byte`, with every wanted checkpoint admitted (`all`) or only likely ones (`likely`).

Workloads (`radixflow.workloads.candidates`): multi-turn chats with Zipf popularity over the
conversations, candidates over long shared contexts, and chats mixed with one-off prompts.
Capacity is a fraction of the working set: the KV blocks and checkpoints an unbounded cache
(lru/all) holds at the end of the same workload; KV never below twice the longest prompt, state
slots never below four. Reported per cell: token hit rate (reused / prompt tokens), recomputed
prompt tokens, TTFT p50 / p95, mean latency and evictions by kind (KV leaves, checkpoints).

    python benchmarks/memory_pressure.py --json results/memory_pressure.json
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from dataclasses import replace
from pathlib import Path

from rich.console import Console
from rich.table import Table

from radixflow.cache.eviction import EntryKind
from radixflow.engine.engine import Engine
from radixflow.options import EngineOptions, plan_engine
from radixflow.scheduler import Request, RequestStatus
from radixflow.workloads.candidates import WorkloadSpec, build_workload

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


def run(options: EngineOptions, spec: WorkloadSpec) -> tuple[Engine, dict[str, int]]:
    """One engine over a fresh copy of ``spec``'s requests; evictions counted by kind."""
    plan = plan_engine(options)
    engine = plan.build().engine()
    evicted = {kind.value: 0 for kind in EntryKind}
    policy = engine.cache.evictor.policy
    inner = policy.evicted

    def counting(node, kind):  # type: ignore[no-untyped-def]
        evicted[kind.value] += 1
        inner(node, kind)

    policy.evicted = counting  # type: ignore[method-assign]
    engine.run(build_workload(spec).requests)
    return engine, evicted


def working_set(options: EngineOptions, spec: WorkloadSpec) -> tuple[int, int]:
    """KV blocks and checkpoints an unbounded cache holds once the workload is done."""
    engine, evicted = run(options.replace(kv_blocks=1 << 20, state_slots=1 << 16), spec)
    assert not any(evicted.values()), "the unbounded run evicted"
    usage = engine.cache.usage()
    return usage.cached_blocks, usage.checkpoint_slots


def summary(engine: Engine, evicted: dict[str, int]) -> dict[str, float | int | None]:
    reqs: list[Request] = engine.requests
    done = [r for r in reqs if r.status is RequestStatus.FINISHED]
    prompt = sum(len(r.prompt) for r in done)
    reused = sum(r.reused for r in done)
    ttft = sorted(r.ttft_s for r in done if r.ttft_s is not None)
    return {
        "finished": len(done),
        "requests": len(reqs),
        "hit_rate": reused / prompt if prompt else None,
        "recomputed_tokens": prompt - reused,
        "ttft_p50_ms": 1e3 * statistics.median(ttft) if ttft else None,
        "ttft_p95_ms": 1e3 * ttft[min(len(ttft) - 1, round(0.95 * (len(ttft) - 1)))] if ttft else None,
        "mean_latency_ms": 1e3 * statistics.fmean(r.latency_s or 0.0 for r in done) if done else None,
        "evicted_kv": evicted[EntryKind.KV.value],
        "evicted_checkpoints": evicted[EntryKind.CHECKPOINT.value],
    }


def cells(model: str, workloads: dict[str, WorkloadSpec], fractions: tuple[float, ...]) -> list[dict]:
    base = EngineOptions(model=model, runner="sim", hardware="h100", policy="adaptive")
    out = []
    for name, spec in workloads.items():
        blocks, slots = working_set(base, spec)
        floor = 2 * math.ceil(spec.prompt_len / base.block_size) + 1
        for fraction in fractions:
            kv, ck = max(math.ceil(fraction * blocks), floor), max(math.ceil(fraction * slots), 4)
            for eviction, admission in VARIANTS:
                options = base.replace(kv_blocks=kv, state_slots=ck, eviction=eviction, admission=admission)
                engine, evicted = run(options, spec)
                row = {"model": model, "workload": name, "capacity": fraction, "kv_blocks": kv}
                row |= {"state_slots": ck, "eviction": eviction, "admission": admission}
                out.append(row | summary(engine, evicted))
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", nargs="+", default=["qwen3_5-2b"])
    p.add_argument("--workloads", nargs="+", default=list(WORKLOADS), choices=list(WORKLOADS))
    p.add_argument("--fractions", type=float, nargs="+", default=list(FRACTIONS))
    p.add_argument("--json", type=Path, default=Path("results/memory_pressure.json"))
    p.add_argument("--smoke", action="store_true", help="CI: one small workload, two capacities")
    args = p.parse_args()
    workloads = {name: WORKLOADS[name] for name in args.workloads}
    if args.smoke:
        workloads = {"chat": replace(WORKLOADS["chat"], groups=4, candidates=3, context_len=128)}
        args.fractions = [0.25, 1.0]
    rows = [row for model in args.models for row in cells(model, workloads, tuple(args.fractions))]
    _print(rows)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"cells": rows}, indent=2))


def _print(rows: list[dict]) -> None:
    table = Table(title="memory pressure (sim): hit rate, TTFT, latency, evictions")
    cols = ("model", "workload", "capacity", "eviction", "admission", "hit_rate", "recomputed_tokens")
    cols += ("ttft_p50_ms", "ttft_p95_ms", "mean_latency_ms", "evicted_kv", "evicted_checkpoints")
    for col in cols:
        table.add_column(col)
    for row in rows:
        table.add_row(*(f"{row[c]:.3f}" if isinstance(row[c], float) else str(row[c]) for c in cols))
    Console(width=200).print(table)


if __name__ == "__main__":
    main()
