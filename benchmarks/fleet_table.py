"""The fleet experiment's table and acceptance checks, from its results.json.

    radixflow experiment experiments/fleet.toml
    python benchmarks/fleet_table.py results/fleet/results.json

One row per (replicas, workload, load), one column group per router (the mean over the seeds of
a run with ``--seeds``), of one policy variant (``--variant``, needed when the config ran several):
reuse, mean latency,
routed-by-affinity share, imbalance (mean of max queue / mean queue over time) and the longest
time any queue stayed above 2x the mean (and 2 requests over it). Then the acceptance: at 8
replicas, candidate workload, medium load, checkpoint's reuse >= 1.5x pow2's and mean latency
<= 0.8x pow2's and no worse than prefix's on either; on 32 replicas under skewed load, how long
the hottest queue stayed above 2x the mean.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from radixflow.bench.provenance import write_figures

ROUTERS = ("pow2", "prefix", "checkpoint")
LOADS = {100.0: "light", 250.0: "medium", 500.0: "heavy"}  # requests/s per replica
Figures = dict[str, Any]
# the acceptance at 8 replicas, candidates, medium load: (pow2, prefix, checkpoint) -> passed
CHECKS: dict[str, Callable[[Figures, Figures, Figures], bool]] = {
    "reuse >= 1.5x pow2": lambda p, x, c: c["reuse"] >= 1.5 * p["reuse"],
    "mean latency <= 0.8x pow2": lambda p, x, c: c["mean_ms"] <= 0.8 * p["mean_ms"],
    "reuse >= prefix": lambda p, x, c: c["reuse"] >= x["reuse"],
    "mean latency <= prefix": lambda p, x, c: c["mean_ms"] <= x["mean_ms"],
}


def key(cell: dict[str, Any]) -> tuple:
    c = cell["cell"]
    w = c["workload"]
    kind = "skewed" if w.get("skew", 0.0) else w.get("kind", "candidates")
    if c.get("independent_share"):
        kind += "+independent"
    return c["replicas"], kind, LOADS.get(w["rate"] / c["replicas"], w["rate"])


def ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1e3


def num(value: float | None, spec: str) -> str:
    """``value`` formatted, or a dash for a figure the cell could not measure (None)."""
    return "—" if value is None else format(value, spec)


def mean(values: list[float | None]) -> float | None:
    """The mean of ``values``; None when a cell could not measure one (no mean of what is left)."""
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known and len(known) == len(values) else None


def variant_read(doc: dict[str, Any], wanted: str | None) -> str | None:
    """The policy variant the table reads: ``wanted``, or None for each cell's only one. ValueError
    (naming ``--variant``) when the results hold several and none is named, or not the one named."""
    held = doc.get("variants") or []
    if wanted is None:
        if len(held) > 1:
            raise ValueError(f"--variant: the results hold {', '.join(held)}; name one")
        return None
    if wanted not in held:
        raise ValueError(f"--variant {wanted!r}: not in the results ({', '.join(held) or 'none named'})")
    return wanted


def result_of(cell: dict[str, Any], variant: str | None) -> dict[str, Any]:
    """``cell``'s result for ``variant`` (None: its first, the only one). Pure."""
    if variant is None:
        return cell["results"][0]
    return next(r for r in cell["results"] if r["variant"] == variant)


def figures(cells: list[dict[str, Any]], variant: str | None = None) -> Figures:
    """One router's figures in a row: each the mean over the row's cells (one per seed: with
    ``--seeds`` a row has several), answers counted over all of them; ``variant``'s results."""
    results = [result_of(cell, variant) for cell in cells]
    fleets = [r.get("fleet", {}) for r in results]  # none for a cell of one engine (a grid's baseline)

    def over(get: Callable[[dict[str, Any], dict[str, Any]], float | None]) -> float | None:
        return mean([get(r, f) for r, f in zip(results, fleets, strict=True)])

    return {
        "reuse": over(lambda r, f: r["reuse_rate"]),
        "mean_ms": ms(over(lambda r, f: r["mean_latency_s"])),
        "p99_ms": ms(over(lambda r, f: r["p99_latency_s"])),
        "affinity": over(lambda r, f: f.get("affinity_share")),
        "imbalance": over(lambda r, f: f.get("imbalance_mean")),
        "hot_share": over(lambda r, f: f.get("hot_share")),
        "longest_hot_ms": ms(over(lambda r, f: f.get("longest_hot_s"))),
        "makespan_ms": ms(over(lambda r, f: r["makespan_s"])),
        "completed": f"{sum(r['completed'] for r in results)}/{sum(r['requests'] for r in results)}",
    }


SMOKE_TOML = """
name = "fleet-smoke"
description = "The 8-replica candidate cell at medium load, tiny (benchmarks/fleet_table.py --smoke)."
policies = ["radixflow"]
seeds = [0]

[defaults]
runner = "sim"
model = "qwen3_5-2b"
hardware = "h200"
token_budget = 8192
max_requests = 256
router = ["pow2", "prefix", "checkpoint"]
replicas = 8

[defaults.workload]
kind = "candidates"
groups = 8
candidates = 4
context_len = 256
candidate_len = 16
arrival = "poisson"
rate = 2000.0
"""


NOT_RUN: Figures = {"reuse": None, "mean_ms": None, "imbalance": None, "affinity": None}


def ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}x" if a is not None and b else "n/a"


def table(doc: dict[str, Any], variant: str | None = None) -> dict[str, Any]:
    """Print the table of ``variant`` (`variant_read`) and the acceptance; return the rows and the
    checks for the JSON."""
    cells: dict[tuple, dict[str, list[dict[str, Any]]]] = defaultdict(lambda: defaultdict(list))
    for cell in doc["cells"]:
        cells[key(cell)][cell["cell"]["router"]].append(cell)  # a row's seeds side by side
    rows = {
        k: {router: figures(cs, variant) for router, cs in by_router.items()}
        for k, by_router in cells.items()
    }
    if variant is not None:
        print(f"policy variant {variant}")
    head = " | ".join(f"{r} reuse | {r} mean ms" for r in ROUTERS)
    print(f"| replicas | workload | load | {head} | checkpoint affinity | imbalance (pow2/prefix/ckpt) |")
    print("|" + " --- |" * (5 + 2 * len(ROUTERS)))
    for k in sorted(rows, key=lambda k: (k[0], k[1], str(k[2]))):
        # a router the config left out gets dashes in its own columns, not the next router's figures
        f = {r: rows[k].get(r, NOT_RUN) for r in ROUTERS}
        cols = " | ".join(f"{num(f[r]['reuse'], '.2f')} | {num(f[r]['mean_ms'], '.0f')}" for r in ROUTERS)
        imb = "/".join(num(f[r]["imbalance"], ".2f") for r in ROUTERS)
        affinity = num(f["checkpoint"]["affinity"], ".2f")
        print(f"| {k[0]} | {k[1]} | {k[2]} | {cols} | {affinity} | {imb} |")
    print()
    medium = rows.get((8, "candidates", "medium"), {})
    if any(r not in medium for r in ROUTERS):
        print("no 8-replica candidates cell at medium load under every router: acceptance not checked")
        return {"rows": _rows(rows), "checks": {}}
    p, x, c = medium["pow2"], medium["prefix"], medium["checkpoint"]
    measured = all(f[k] is not None for f in (p, x, c) for k in ("reuse", "mean_ms"))
    checks = {name: measured and check(p, x, c) for name, check in CHECKS.items()}
    print(
        f"8 replicas, candidates, medium load: reuse checkpoint {num(c['reuse'], '.3f')} / pow2 "
        f"{num(p['reuse'], '.3f')} = {ratio(c['reuse'], p['reuse'])}, prefix {num(x['reuse'], '.3f')}; "
        f"mean latency checkpoint {num(c['mean_ms'], '.1f')} ms / pow2 {num(p['mean_ms'], '.1f')} ms = "
        f"{ratio(c['mean_ms'], p['mean_ms'])}, prefix {num(x['mean_ms'], '.1f')} ms"
    )
    for name, ok in checks.items():
        print(f"  {'PASS' if ok else 'FAIL'} {name}")
    for router, f in sorted(rows.get((32, "skewed", "medium"), {}).items()):
        print(
            f"32 replicas, skewed, {router}: imbalance {num(f['imbalance'], '.2f')}, queue above 2x the "
            f"mean {num(f['hot_share'], '.1%')} of the time, longest {num(f['longest_hot_ms'], '.0f')} ms "
            f"of {num(f['makespan_ms'], '.0f')} ms; reuse {num(f['reuse'], '.2f')}, mean "
            f"{num(f['mean_ms'], '.0f')} ms"
        )
    return {"rows": _rows(rows), "checks": checks}


def _rows(rows: dict[tuple, dict[str, Figures]]) -> list[dict[str, Any]]:
    return [{"replicas": k[0], "workload": k[1], "load": k[2], **f} for k, f in sorted(rows.items(), key=str)]


def smoke_results(out: Path) -> Path:
    """A tiny fleet experiment with the cell the acceptance reads, run into ``out``."""
    from radixflow.cli import main as radixflow_main

    config = out / "fleet_smoke.toml"
    config.write_text(SMOKE_TOML)
    code = radixflow_main(["experiment", str(config), "--out", str(out / "fleet_smoke")])
    if code != 0:
        raise SystemExit(f"radixflow experiment failed (exit {code})")
    return out / "fleet_smoke" / "results.json"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", type=Path, nargs="?", default=Path("results/fleet/results.json"))
    ap.add_argument("--json", type=Path, default=None, help="also write the rows and checks here")
    ap.add_argument("--variant", default=None, help="the policy variant to read (results of several)")
    ap.add_argument(
        "--smoke", action="store_true", help="CI: run a tiny fleet experiment beside --json and read it"
    )
    args = ap.parse_args()
    if args.smoke:
        out = (args.json or Path("results/fleet_table.json")).parent
        out.mkdir(parents=True, exist_ok=True)
        args.results = smoke_results(out)
    doc = json.loads(args.results.read_text())
    try:
        variant = variant_read(doc, args.variant)
    except ValueError as e:
        ap.error(str(e))
    result = table(doc, variant)
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        write_figures(args.json, result)
    # the smoke cell is too small for the acceptance to mean anything: it only has to be computed
    # results without the acceptance's cell (a smaller fleet) check nothing: not a pass
    return 0 if args.smoke or (result["checks"] and all(result["checks"].values())) else 1


if __name__ == "__main__":
    raise SystemExit(main())
