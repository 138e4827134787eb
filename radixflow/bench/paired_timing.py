"""Ours against transformers, timed side by side (benchmarks/generation_throughput.py): each case
repeated interleaved, on the wall clock and the thread's CPU clock (a shared machine's wall time
swings by 2-4x from one repeat to the next), medians with their minimum and maximum; a row's
rates, ratios (of the medians, and repeat by repeat: `paired`) and exactness check; the table's
lines."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

from radixflow.bench.spread import loads_now, loads_text, rotated

HEADER = (
    f"{'model':<18}{'mode':<13}{'ours':>10}{'ours 1-by-1':>12}{'hf':>10} {'unit':<7}"
    f"{'ratio':>6} {'spread':>6} {'paired':>10} {'wall':>6}   max|Δ|   greedy-equal   (rates per CPU second)"
)


def loadavg() -> str:
    """The 1, 5 and 15 minute load averages (the machine is shared: say how busy it was)."""
    return loads_text(loads_now())


def interleaved(cases: dict[str, Callable[[], Any]], repeats: int) -> dict[str, dict[str, Any]]:
    """Each case once to warm up, then ``repeats`` interleaved rounds, each case first in turn
    (`rotated`): median wall and thread-CPU seconds per case with their minimum and maximum
    (``wall_min``, ``cpu_max``...), every repeat's (``wall_runs``, ``cpu_runs``), and the output
    of its last call."""
    out = {name: {"out": fn(), "wall": [], "cpu": []} for name, fn in cases.items()}
    for trial in range(repeats):
        for name in rotated(list(cases), trial):  # each first in turn: drift falls on each alike
            w, c = time.perf_counter(), time.thread_time()
            out[name]["out"] = cases[name]()
            out[name]["cpu"].append(time.thread_time() - c)
            out[name]["wall"].append(time.perf_counter() - w)
    for r in out.values():
        for clock in ("wall", "cpu"):
            times = r[f"{clock}_runs"] = r[clock]  # in repeat order: repeat t of each ran side by side
            r[clock], r[f"{clock}_min"], r[f"{clock}_max"] = statistics.median(times), min(times), max(times)
    return out


def row(mode: str, work: int, unit: str, t: dict[str, dict[str, Any]], diff: float, equal: bool) -> dict:
    """One table row: rates (work per CPU second), ratios vs transformers, the exactness check."""
    rates = {name: work / r["cpu"] for name, r in t.items()}
    out = {
        "mode": mode,
        "unit": unit,
        "rates_per_cpu_s": rates,
        "rates_per_wall_s": {name: work / r["wall"] for name, r in t.items()},
        "ratio_vs_transformers": t["transformers"]["cpu"] / t["ours"]["cpu"],
        "wall_ratio_vs_transformers": t["transformers"]["wall"] / t["ours"]["wall"],
        # [min, median, max] seconds of each side's repeats: the spread a ratio is read against
        "cpu_s": {name: [r["cpu_min"], r["cpu"], r["cpu_max"]] for name, r in t.items()},
        "wall_s": {name: [r["wall_min"], r["wall"], r["wall_max"]] for name, r in t.items()},
        "max_abs_diff": diff,
        "greedy_equal": equal,
        **paired(t),
    }
    if "ours one call each" in t:
        out["batch_vs_one_call_each"] = t["ours one call each"]["cpu"] / t["ours"]["cpu"]
    return out


def paired(t: dict[str, dict[str, Any]]) -> dict[str, list[float]]:
    """The CPU ratio vs transformers repeat by repeat (the two ran side by side, under one load),
    and its [min, median, max]: what the ratio of the medians is read against."""
    pairs = zip(t["transformers"]["cpu_runs"], t["ours"]["cpu_runs"], strict=True)
    ratios = [hf / ours for hf, ours in pairs if ours > 0]  # none: a call too short to time
    spread = [min(ratios), statistics.median(ratios), max(ratios)] if ratios else []
    return {"cpu_ratio_runs_vs_transformers": ratios, "cpu_ratio_paired": spread}


def spread(r: dict) -> float:
    """The larger of ours' and transformers' CPU spread, (max - min) / median / 2: the ± a
    ratio's sides moved by over their repeats."""
    return max(
        (hi - lo) / mid / 2 for name, (lo, mid, hi) in r["cpu_s"].items() if name != "ours one call each"
    )


def print_row(model: str, r: dict) -> None:
    rates = r["rates_per_cpu_s"]
    one = f"{rates['ours one call each']:>12.1f}" if "ours one call each" in rates else f"{'':>12}"
    print(
        f"{model:<18}{r['mode']:<13}{rates['ours']:>10.1f}{one}{rates['transformers']:>10.1f}"
        f" {r['unit']:<7}{r['ratio_vs_transformers']:>6.2f}x ±{spread(r):>4.0%} {_paired_range(r):>10}"
        f" {r['wall_ratio_vs_transformers']:>6.2f}x"
        f"  {r['max_abs_diff']:.1e}  {r['greedy_equal']}",
        flush=True,
    )


def _paired_range(r: dict) -> str:
    """The paired CPU ratios' min-max, "-" where no repeat could be timed."""
    spread = r.get("cpu_ratio_paired")
    return f"{spread[0]:.2f}-{spread[2]:.2f}" if spread else "-"
