"""The memory-pressure experiment's acceptance table: every cell of `experiments/memory.toml`'s
results, each variant against the baseline (`adaptive+lru+all`): token hit rate, P95 TTFT and
mean latency as ratios, and how many cells meet the issue's bars (at 10-50% capacity: hit rate
>= 1.3x and P95 TTFT <= 0.8x on chat and mixed; mean latency never more than 1% worse; at 100%
the same results).

    python benchmarks/memory_table.py results/memory/results.json > docs/memory-grid.md
"""

from __future__ import annotations

import argparse
import json
import statistics
import tomllib
from collections import defaultdict
from pathlib import Path

from radixflow.bench.provenance import write_figures

BASELINE = "adaptive+lru+all"


def _workload(cell: dict) -> str:
    """chat, mixed (chats with one-off prompts) or candidates, from the cell's workload."""
    work = cell["workload"]
    if work.get("kind") == "chats":
        return "mixed" if work.get("independent") else "chat"
    return "candidates"


def rows(results: dict) -> list[dict]:
    """Every variant of every cell against the cell's baseline; ValueError naming a cell that
    lacks the baseline, or results with no variant besides it."""
    out = []
    for cell in results["cells"]:
        c = cell["cell"]
        by_variant = {r["variant"]: r["pressure"] for r in cell["results"]}
        if BASELINE not in by_variant:
            where = f"{c['model']}/{c['hardware']} capacity {c['capacity']} seed {c['workload']['seed']}"
            raise ValueError(f"cell {where} has no baseline {BASELINE} (variants: {', '.join(by_variant)})")
        base = by_variant[BASELINE]
        for variant, p in by_variant.items():
            if variant == BASELINE:
                continue
            out.append(
                {
                    "model": c["model"],
                    "hardware": c["hardware"],
                    "workload": _workload(c),
                    "capacity": c["capacity"],
                    "seed": c["workload"]["seed"],
                    "variant": variant,
                    "hit": p["hit_rate"],
                    "hit_base": base["hit_rate"],
                    "hit_x": _ratio(p["hit_rate"], base["hit_rate"]),
                    "p95_x": _ratio(p["ttft_p95_ms"], base["ttft_p95_ms"]),
                    "mean_x": _ratio(p["mean_latency_ms"], base["mean_latency_ms"]),
                    "evicted": (p["evicted_kv"], p["evicted_checkpoint"]),
                    "evicted_base": (base["evicted_kv"], base["evicted_checkpoint"]),
                }
            )
    if not out:
        raise ValueError(f"no variant besides the baseline {BASELINE}")
    return out


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or not b else a / b


def bars(table: list[dict]) -> dict[str, dict[str, str]]:
    """Per variant: how many cells meet each bar, out of how many."""
    out: dict[str, dict[str, str]] = {}
    by_variant = defaultdict(list)
    for r in table:
        by_variant[r["variant"]].append(r)
    for variant, rs in by_variant.items():
        pressed = [r for r in rs if r["capacity"] < 1 and r["workload"] in ("chat", "mixed")]
        hit = sum(r["hit_x"] is not None and r["hit_x"] >= 1.3 for r in pressed)
        p95 = sum(r["p95_x"] is not None and r["p95_x"] <= 0.8 for r in pressed)
        both = sum(
            r["hit_x"] is not None and r["hit_x"] >= 1.3 and r["p95_x"] is not None and r["p95_x"] <= 0.8
            for r in pressed
        )
        worse = [r for r in rs if r["mean_x"] is not None and r["mean_x"] > 1.01]
        full = [r for r in rs if r["capacity"] == 1]
        same = sum(r["hit_x"] == 1 and r["mean_x"] == 1 for r in full)
        out[variant] = {
            "hit >= 1.3x (chat, mixed, 10-50%)": f"{hit}/{len(pressed)}",
            "P95 TTFT <= 0.8x (chat, mixed, 10-50%)": f"{p95}/{len(pressed)}",
            "both": f"{both}/{len(pressed)}",
            "mean latency > 1% worse (any cell)": f"{len(worse)}/{len(rs)}",
            "same as lru at 100%": f"{same}/{len(full)}",
        }
    return out


def medians(table: list[dict]) -> dict[tuple[str, str, str], dict[float, str]]:
    """(variant, model, workload) -> capacity -> "hit x / P95 x / mean x", medians over cells."""
    groups = defaultdict(list)
    for r in table:
        groups[(r["variant"], r["model"], r["workload"]), r["capacity"]].append(r)
    out: dict[tuple[str, str, str], dict[float, str]] = defaultdict(dict)
    for (key, cap), rs in sorted(groups.items()):
        figs = [_median([r[k] for r in rs if r[k] is not None]) for k in ("hit_x", "p95_x", "mean_x")]
        out[key][cap] = " / ".join(_fmt(x) for x in figs)
    return out


def _median(values: list[float]) -> float | None:
    """None where no cell of the group has the figure (a variant that completed nothing)."""
    return statistics.median(values) if values else None


SMOKE = """
name = "memory-smoke"
policies = ["adaptive+lru+all", "adaptive+cost-per-byte+all"]
[defaults]
runner = "sim"
hardware = "h100"
model = "qwen3_5-2b"
capacity = 0.25
[defaults.workload]
kind = "chats"
groups = 4
candidates = 3
context_len = 128
candidate_len = 16
"""


def smoke_results() -> dict:
    """One small chat cell under pressure, run here (CI: the table's input, end to end)."""
    from radixflow.experiments.cells import run_cell
    from radixflow.experiments.config_parse import parse_config

    config = parse_config(tomllib.loads(SMOKE), "smoke.toml", Path("."))
    return {
        "name": config.name,
        "command": "--smoke",
        "cells": [run_cell(c, config.variants) for c in config.cells],
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("results", type=Path, nargs="?", help="an experiment's results.json")
    p.add_argument("--json", type=Path, help="also write the bars and every row as JSON here")
    p.add_argument("--smoke", action="store_true", help="CI: tabulate one small cell run here")
    args = p.parse_args()
    if args.results is None and not args.smoke:
        p.error("give a results.json (or --smoke)")
    results = smoke_results() if args.smoke else json.loads(args.results.read_text())
    try:
        table = rows(results)
    except ValueError as e:
        raise SystemExit(f"{args.results or '--smoke'}: {e}") from None
    if args.json is not None:
        write_figures(args.json, {"bars": bars(table), "rows": table})
    print(f"# `{results['name']}`: every cell against `{BASELINE}`\n")
    print(f"Command: `{results.get('command', 'radixflow experiment experiments/memory.toml')}`, then")
    print(f"`python benchmarks/memory_table.py {args.results or '--smoke'}`.\n")
    print("## Bars met\n")
    summary = bars(table)
    keys = list(next(iter(summary.values())))
    print("| variant | " + " | ".join(keys) + " |")
    print("| --- |" + " ---: |" * len(keys))
    for variant, counts in summary.items():
        print(f"| {variant} | " + " | ".join(counts[k] for k in keys) + " |")
    print("\n## Median over hardware and seeds (hit rate x, P95 TTFT x, mean latency x)\n")
    caps = sorted({r["capacity"] for r in table})
    print("| variant | model | workload | " + " | ".join(f"{c:.0%}" for c in caps) + " |")
    print("| --- | --- | --- |" + " ---: |" * len(caps))
    for (variant, model, workload), by_cap in medians(table).items():
        shown = [by_cap.get(c, "–") for c in caps]
        print(f"| {variant.removeprefix('adaptive+')} | {model} | {workload} | " + " | ".join(shown) + " |")
    print("\n## Every cell\n")
    print("hit: token hit rate (variant / lru); x: variant over lru; evicted: KV leaves, checkpoints.\n")
    cols = ("model", "hw", "workload", "capacity", "seed", "variant", "hit", "hit x", "P95 TTFT x", "mean x")
    print("| " + " | ".join((*cols, "evicted", "lru evicted")) + " |")
    print("| --- | --- | --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in sorted(
        table, key=lambda r: (r["workload"], r["model"], r["hardware"], r["capacity"], r["seed"])
    ):
        print(
            f"| {r['model']} | {r['hardware']} | {r['workload']} | {r['capacity']:.0%} | {r['seed']} | "
            f"{r['variant'].removeprefix('adaptive+')} | {_fmt(r['hit'], 3)} / {_fmt(r['hit_base'], 3)} | "
            f"{_fmt(r['hit_x'])} | {_fmt(r['p95_x'])} | {_fmt(r['mean_x'])} | "
            f"{r['evicted'][0]}, {r['evicted'][1]} | {r['evicted_base'][0]}, {r['evicted_base'][1]} |"
        )


def _fmt(x: float | None, digits: int = 2) -> str:
    return "–" if x is None else f"{x:.{digits}f}"


if __name__ == "__main__":
    main()
