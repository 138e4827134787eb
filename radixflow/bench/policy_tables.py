"""The tables of a real-runner policy comparison (`benchmarks/policies_torch.py`): one cell's
lines as it finishes, the README's summary and the per-policy detail as Markdown, and issue 29's
acceptance counted over the cells. Pure formatting over the cells' dicts."""

from __future__ import annotations

from radixflow.bench.report import signed_percent
from radixflow.bench.twin_runs import POLICIES


def relative(sim: float | None, real: float | None) -> float | None:
    return None if sim is None or not real else (sim - real) / real


def in_band(sim: dict, real: float | None) -> bool | None:
    band = (sim.get("noisy") or {}).get("median_of_repeats")
    return None if band is None or real is None else band["low"] <= real <= band["high"]


def _num(x: object, fmt: str = ".3f") -> str:
    return "-" if x is None else format(x, fmt)  # type: ignore[arg-type]


def print_cell(cell: dict[str, object]) -> None:
    head = f"{cell['family']} · {cell['workload']}"
    if cell["rate_per_s"] is not None:
        head += f" ({cell['rate_per_s']:.2f} req/s)"
    if cell.get("twin_speed") is not None:
        head += f"; twin at {cell['twin_speed']:.2f}x its profile's speed (probed)"
    if cell.get("twin_sigma") is not None:
        head += f", sigma {cell['twin_sigma']:.3f}"
    print(head)
    print(f"  {'policy':<10}{'rounds':>8}{'mean s':>9}{'min-max':>15}{'p99 s':>8}{'wall s':>8}"
          f"{'exact':>7}{'load':>11}{'sim s':>8}{'sim rnd':>8}{'sim/real':>9}"
          f"{'twin med [10-90%]':>22}{'twin/real':>10}{'price':>7}{'replay':>8}")  # fmt: skip
    for p, f in cell["policies"].items():  # type: ignore[union-attr]
        sim = f["sim"] or {}
        spread = f"{_num(f['mean_latency_min_s'])}-{_num(f['mean_latency_max_s'])}"
        load = "-".join(f"{x:.1f}" for x in f["load_1min"])
        rounds = "/".join(str(n) for n in f["rounds"])
        print(
            f"  {p:<10}{rounds:>8}{_num(f['mean_latency_s']):>9}{spread:>15}{_num(f['p99_latency_s']):>8}"
            f"{_num(f['wall_mean_latency_s']):>8}{'yes' if f['identical_to_no_cache'] else 'NO':>7}{load:>11}"
            f"{_num(sim.get('mean_latency_s')):>8}{sim.get('rounds', '-'):>8}"
            f"{_num(f['sim_vs_real_mean_latency'], '+.1%'):>9}{_twin(sim):>22}"
            f"{_num(f.get('twin_vs_real_mean_latency'), '+.1%'):>10}{_price(sim):>7}{_replays(sim):>8}"
        )
    print(f"  adaptive vs native {_num(cell['adaptive_vs_native'], '+.1%')}, vs the better baseline "
          f"{_num(cell['adaptive_vs_best_baseline'], '+.1%')}"
          + (f"; sim: {cell['sim_error']}" if cell["sim_error"] else ""), flush=True)  # fmt: skip


def _twin(sim: dict) -> str:
    """The noisy twin's mean latency: median [10%-90%] over its draws."""
    m = (sim.get("noisy") or {}).get("mean_latency_s")
    return "-" if not m else f"{m['median']:.3f} [{m['low']:.3f}-{m['high']:.3f}]"


def _price(sim: dict) -> str:
    """Median over the real rounds of measured / the twin's price of the same round."""
    ratio = ((sim.get("real_rounds") or {}).get("measured_over_twin_price") or {}).get("median")
    return "-" if ratio is None else f"{ratio:.2f}"


def _replays(sim: dict) -> str:
    """Real runs the sim replays exactly at their measured prices, of those replayed."""
    r = sim.get("real_rounds") or {}
    return "-" if not r else f"{r['replays_reproduced']}/{r['replays']}"


def _pct(x: object) -> str:
    return "-" if x is None else signed_percent(x)  # type: ignore[arg-type]


def summary_markdown(cells: list[dict]) -> str:
    """One row per family: the three policies' mean latency on the grouped batch, adaptive against
    native on every workload, exactness (the README's table)."""
    by_family: dict[str, dict[str, dict]] = {}
    for c in cells:
        by_family.setdefault(c["family"], {})[c["workload"]] = c
    names = list(dict.fromkeys(c["workload"] for c in cells))
    lines = [
        "| model | mean latency n / r / a, grouped (s) | " + " | ".join(f"a vs n, {w}" for w in names)
        + " | outputs = no-cache |",
        "| --- | ---: | " + " | ".join("---:" for _ in names) + " | :---: |",
    ]  # fmt: skip
    for family, work in by_family.items():
        grouped = work.get("grouped")  # the column's workload: another one's means are not it
        means = (
            "-"
            if grouped is None
            else " / ".join(_num(grouped["policies"][p]["mean_latency_s"], ".2f") for p in POLICIES)
        )
        exact = all(f["identical_to_no_cache"] for c in work.values() for f in c["policies"].values())
        ratios = " | ".join(_pct(work[w]["adaptive_vs_native"]) if w in work else "-" for w in names)
        lines.append(f"| {family} | {means} | {ratios} | {'yes' if exact else 'NO'} |")
    return "\n".join(lines)


def detail_markdown(cells: list[dict]) -> str:
    """Every family x workload x policy: median and spread, p99, rounds, wall, the sim beside."""
    lines = [
        "| model | workload | policy | rounds / waves / state copies "
        "| mean latency (s) [min-max of the runs] "
        "| p99 (s) | wall mean (s) | sim: mean (s), rounds / waves / copies | sim vs real | load |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]  # fmt: skip
    for c in cells:
        for p, f in c["policies"].items():
            sim = f["sim"] or {}
            low, high = _num(f["mean_latency_min_s"]), _num(f["mean_latency_max_s"])
            spread = f"{_num(f['mean_latency_s'])} [{low}-{high}]"
            rounds = " / ".join(",".join(str(n) for n in f[k]) for k in ("rounds", "waves", "state_copies"))
            shape = " / ".join(str(sim.get(k, "-")) for k in ("rounds", "waves", "state_copies"))
            simmed = f"{_num(sim.get('mean_latency_s'))}, {shape}"
            load = "-".join(f"{x:.1f}" for x in f["load_1min"])
            lines.append(
                f"| {c['family']} | {c['workload']} | {p} | {rounds} | {spread} | {_num(f['p99_latency_s'])} "
                f"| {_num(f['wall_mean_latency_s'])} | {simmed} | {_pct(f['sim_vs_real_mean_latency'])} "
                f"| {load} |"
            )
    return "\n".join(lines)


def acceptance(cells: list[dict]) -> dict[str, object]:
    """Issue 29's lines for the real runner and for the sim against it, counted over the cells
    measured (hybrid families; the control is listed apart)."""
    hybrid = [c for c in cells if not c["control"]]
    within = [c for c in hybrid if c["adaptive_vs_best_baseline"] is not None]
    grouped = [c for c in hybrid if c["workload"] == "grouped" and c["adaptive_vs_native"] is not None]
    every = [f for c in cells for f in c["policies"].values()]
    sims = [f["sim_vs_real_mean_latency"] for f in every]
    twins = [f.get("twin_vs_real_mean_latency") for f in every]
    replays = [(f["sim"] or {}).get("real_rounds") or {} for f in every]
    signs = [c for c in cells if _sim_sign(c) is not None]
    return {
        "hybrid_cells": len(hybrid),
        "adaptive_within_2pct_of_best": sum(c["adaptive_vs_best_baseline"] <= 0.02 for c in within),
        "grouped_families_5pct_below_native": sum(c["adaptive_vs_native"] <= -0.05 for c in grouped),
        "grouped_families": len(grouped),
        "identical_to_no_cache": all(f["identical_to_no_cache"] for f in every),
        "sim_within_10pct": sum(abs(x) <= 0.10 for x in sims if x is not None),
        "sim_compared": sum(x is not None for x in sims),
        # the twin's median over price-noise draws against the median of the real repeats
        "twin_median_within_10pct": sum(abs(x) <= 0.10 for x in twins if x is not None),
        "twin_median_compared": sum(x is not None for x in twins),
        "real_median_in_twin_band": sum(bool(f.get("real_median_in_twin_band")) for f in every),
        # real runs the sim replays round for round at their measured prices (same schedule)
        "real_runs_replayed_exactly": sum(r.get("replays_reproduced", 0) for r in replays),
        "real_runs_replayed": sum(r.get("replays", 0) for r in replays),
        "sim_same_sign_where_real_over_3pct": sum(_sim_sign(c) for c in signs),  # type: ignore[misc]
        "sim_sign_cells": len(signs),
    }


def _sim_sign(cell: dict) -> bool | None:
    """Whether the sim puts adaptive on the same side of native as the real runner does, where the
    real difference exceeds 3% (None: it does not, or the sim did not run)."""
    real, pol = cell["adaptive_vs_native"], cell["policies"]
    sims = [(pol[p]["sim"] or {}).get("mean_latency_s") for p in ("adaptive", "native")]
    if real is None or abs(real) <= 0.03 or None in sims or not sims[1]:
        return None
    return (sims[0] / sims[1] - 1 < 0) == (real < 0)
