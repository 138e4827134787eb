"""The fleet experiment's table and acceptance checks, from its results.json.

    radixflow experiment experiments/fleet.toml
    python benchmarks/fleet_table.py results/fleet/results.json

One row per (replicas, workload, load), one column group per router: reuse, mean latency,
routed-by-affinity share, imbalance (mean of max queue / mean queue over time) and the longest
time any queue stayed above 2x the mean (and 2 requests over it). Then the acceptance: at 8
replicas, candidate workload, medium load, checkpoint's reuse >= 1.5x pow2's and mean latency
<= 0.8x pow2's and no worse than prefix's on either; on 32 replicas under skewed load, how long
the hottest queue stayed above 2x the mean.
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

ROUTERS = ("pow2", "prefix", "checkpoint")
LOADS = {2: (200.0, 500.0, 1000.0), 8: (800.0, 2000.0, 4000.0), 32: (3200.0, 8000.0, 16000.0)}
LOAD_NAMES = ("light", "medium", "heavy")


def key(cell: dict[str, Any]) -> tuple:
    c = cell["cell"]
    w = c["workload"]
    kind = "skewed" if w.get("skew", 0.0) else w.get("kind", "candidates")
    if c.get("independent_share"):
        kind += "+independent"
    load = (
        LOAD_NAMES[LOADS[c["replicas"]].index(w["rate"])] if w["rate"] in LOADS[c["replicas"]] else w["rate"]
    )
    return c["replicas"], kind, load


def figures(cell: dict[str, Any]) -> dict[str, Any]:
    r = cell["results"][0]
    return {
        "reuse": r["reuse_rate"],
        "mean_ms": r["mean_latency_s"] * 1e3,
        "p99_ms": r["p99_latency_s"] * 1e3,
        "affinity": r["fleet"]["affinity_share"],
        "imbalance": r["fleet"]["imbalance_mean"],
        "hot_share": r["fleet"]["hot_share"],
        "longest_hot_ms": r["fleet"]["longest_hot_s"] * 1e3,
        "makespan_ms": r["makespan_s"] * 1e3,
        "completed": f"{r['completed']}/{r['requests']}",
    }


def main(path: str) -> int:
    doc = json.loads(Path(path).read_text())
    rows: dict[tuple, dict[str, dict[str, Any]]] = defaultdict(dict)
    for cell in doc["cells"]:
        rows[key(cell)][cell["cell"]["router"]] = figures(cell)
    head = " | ".join(f"{r} reuse | {r} mean ms" for r in ROUTERS)
    print(f"| replicas | workload | load | {head} | checkpoint affinity | imbalance (pow2/prefix/ckpt) |")
    print("|" + " --- |" * (5 + 2 * len(ROUTERS)))
    for k in sorted(rows, key=lambda k: (k[0], k[1], str(k[2]))):
        f = rows[k]
        cols = " | ".join(f"{f[r]['reuse']:.2f} | {f[r]['mean_ms']:.0f}" for r in ROUTERS if r in f)
        imb = "/".join(f"{f[r]['imbalance']:.2f}" for r in ROUTERS if r in f)
        print(f"| {k[0]} | {k[1]} | {k[2]} | {cols} | {f['checkpoint']['affinity']:.2f} | {imb} |")
    print()
    medium = rows[(8, "candidates", "medium")]
    p, x, c = medium["pow2"], medium["prefix"], medium["checkpoint"]
    checks = {
        "reuse >= 1.5x pow2": c["reuse"] >= 1.5 * p["reuse"],
        "mean latency <= 0.8x pow2": c["mean_ms"] <= 0.8 * p["mean_ms"],
        "reuse >= prefix": c["reuse"] >= x["reuse"],
        "mean latency <= prefix": c["mean_ms"] <= x["mean_ms"],
    }
    print(
        f"8 replicas, candidates, medium load: reuse checkpoint {c['reuse']:.3f} / pow2 {p['reuse']:.3f} "
        f"= {c['reuse'] / p['reuse']:.2f}x, prefix {x['reuse']:.3f}; mean latency checkpoint "
        f"{c['mean_ms']:.1f} ms / pow2 {p['mean_ms']:.1f} ms = {c['mean_ms'] / p['mean_ms']:.2f}x, "
        f"prefix {x['mean_ms']:.1f} ms"
    )
    for name, ok in checks.items():
        print(f"  {'PASS' if ok else 'FAIL'} {name}")
    for router, f in sorted(rows.get((32, "skewed", "medium"), {}).items()):
        print(
            f"32 replicas, skewed, {router}: imbalance {f['imbalance']:.2f}, queue above 2x the mean "
            f"{f['hot_share']:.1%} of the time, longest {f['longest_hot_ms']:.0f} ms of "
            f"{f['makespan_ms']:.0f} ms; reuse {f['reuse']:.2f}, mean {f['mean_ms']:.0f} ms"
        )
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1] if len(sys.argv) > 1 else "results/fleet/results.json"))
