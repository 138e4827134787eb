"""PNG plots of an experiment (matplotlib, headless): latency CDFs, rounds, load and fixed-cost sweeps."""

from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import Any

from radixflow.experiments.analysis import (
    CellResult,
    Comparison,
    comparisons,
    flat_settings,
    varying,
    varying_keys,
)
from radixflow.experiments.execute import write_output
from radixflow.files import write_through

MAX_PANELS = 12


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _title(r: CellResult) -> str:
    """A cell's panel: its model, runner, queue order and arrivals, at the load they came at."""
    w = r["cell"]["workload"]
    load = "" if w["arrival"] == "batch" else f" {w['rate']:g} req/s"  # batch: all at t=0, no rate
    return f"{r['model']} ({r['cell']['runner']}) {w['order']}/{w['arrival']}{load}"


def latency_cdf(results: list[CellResult], path: Path) -> bool:
    """One panel per cell (first cell of each model when there are many): latency CDF per variant,
    of every request it ran (a variant whose requests failed stays below 1)."""
    cells = list({r["model"]: r for r in reversed(results)}.values())[::-1][:MAX_PANELS]
    if not cells:
        return False
    plt = _pyplot()
    cols = min(3, len(cells))
    rows = -(-len(cells) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.2 * rows), squeeze=False)
    for ax, r in zip(axes.flat, cells, strict=False):
        run = _requests_run(r)
        for v in r["results"]:
            xs = v["latencies_s"]  # the completed requests' of every run: a failed one never gets there
            ax.step(
                xs, [(i + 1) / (run or len(xs)) for i in range(len(xs))], where="post", label=v["variant"]
            )
        ax.set_title(_title(r), fontsize=8)
        ax.set_xlabel("latency (s)")
        ax.set_ylabel("fraction of requests")
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(cells) :]:
        ax.axis("off")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def _requests_run(result: CellResult) -> int | None:
    """Requests each variant of a cell ran over its runs (a fleet runs once, `ineffective`), whose
    latencies it lists; None where the result does not say how many requests it ran."""
    cell = result["cell"]
    runs = 1 if cell.get("replicas", 1) > 1 else cell.get("repetitions", 1)
    return runs * result["requests"] if isinstance(result.get("requests"), int) else None


def rounds_bars(results: list[CellResult], path: Path) -> bool:
    cells = results[: MAX_PANELS * 3]
    if not cells:
        return False
    plt = _pyplot()
    variants = [v["variant"] for v in cells[0]["results"]]
    fig, ax = plt.subplots(figsize=(max(6, 0.5 * len(cells) * len(variants)), 4))
    width = 0.8 / len(variants)
    for j, name in enumerate(variants):
        ax.bar(
            [i + j * width for i in range(len(cells))],
            [r["results"][j]["rounds"] for r in cells],
            width,
            label=name,
        )
    ax.set_xticks([i + 0.4 - width / 2 for i in range(len(cells))])
    ax.set_xticklabels(_bar_labels(cells), fontsize=6, rotation=60)
    if len(cells) < len(results):  # a grid larger than the plot: said, not cut without a word
        ax.set_title(f"the first {len(cells)} of {len(results)} cells", fontsize=8)
    ax.set_ylabel("worker rounds")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def _bar_labels(cells: list[CellResult]) -> list[str]:
    """Each bar's cell: its model and queue order, and its value of every other setting the cells
    shown differ in (a load, a seed), so no two bars of unlike cells read alike."""
    settings = [flat_settings(r["cell"]) for r in cells]
    keys = [k for k in varying_keys(settings) if k not in ("model", "workload.order")]
    return [
        "\n".join([r["model"], str(s.get("workload.order")), *([_setting_values(s, keys)] if keys else [])])
        for r, s in zip(cells, settings, strict=True)
    ]


def _setting_values(settings: dict[str, Any], keys: list[str]) -> str:
    return " ".join(f"{k.rsplit('.', 1)[-1]}={settings.get(k)}" for k in keys)


def median_defined(values: list[float | None]) -> float:
    """The median of the defined values; NaN where none is (a variant that completed nothing has
    no latency), which matplotlib leaves as a gap in the line: 0 would read as instant."""
    xs = [v for v in values if v is not None]
    return statistics.median(xs) if xs else math.nan


LOAD_POOLED = {"workload.rate", "workload.seed", "workload.order", "model"}  # the axis, medians, label


def _load_label(cell: CellResult, keys: list[str]) -> str:
    """A load line's name: the cell's model and queue order, and its value of each of ``keys``."""
    settings = flat_settings(cell["cell"])
    where = [f"{k.rsplit('.', 1)[-1]}={settings.get(k)}" for k in keys]
    return " ".join([cell["model"], str(settings.get("workload.order")), *where])


def latency_vs_load(results: list[CellResult], path: Path) -> bool:
    """Mean and p99 latency and goodput against the offered rate: a line per setting (every other
    swept key apart), each point the median over seeds."""
    cells = [r for r in results if r["cell"]["workload"]["arrival"] == "poisson"]
    if len({r["cell"]["workload"]["rate"] for r in cells}) < 2:
        return False
    swept = [k for k in varying_keys([flat_settings(r["cell"]) for r in cells]) if k not in LOAD_POOLED]
    keys = ("mean_latency_s", "p99_latency_s", "goodput_rps")
    points: dict[tuple[str, str], dict[float, list[dict[str, Any]]]] = {}
    for r in cells:
        label = _load_label(r, swept)
        for v in r["results"]:
            points.setdefault((label, v["variant"]), {}).setdefault(r["cell"]["workload"]["rate"], []).append(
                v
            )
    labels = sorted({label for label, _ in points})
    variants = list(dict.fromkeys(v for _, v in points))
    plt = _pyplot()
    cmap = plt.get_cmap("tab10")
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5))
    drawn: dict[str, list[float]] = {key: [] for key in keys}
    for (label, variant), by_rate in sorted(points.items()):
        rates = sorted(by_rate)
        style = ("-", "--", ":", "-.")[variants.index(variant) % 4]
        for ax, key in zip(axes, keys, strict=True):
            ys = [median_defined([v.get(key) for v in by_rate[x]]) for x in rates]
            drawn[key] += ys
            color = cmap(labels.index(label) % 10)
            ax.plot(rates, ys, style, color=color, marker="o", ms=3, label=f"{label} {variant}")
    for ax, name in zip(axes, ("mean latency (s)", "p99 latency (s)", "goodput (req/s)"), strict=True):
        ax.set_xlabel("offered load (req/s)")
        ax.set_ylabel(name)
        ax.set_xscale("log")
    for ax, key in zip(axes[:2], keys, strict=False):
        # a log scale needs a positive latency: matplotlib raised where none completed (all NaN)
        if any(y > 0 for y in drawn[key]):
            ax.set_yscale("log")
    fig.tight_layout()
    _legend_beside(axes[2], len(points))
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return True


def _legend_beside(ax: Any, entries: int) -> None:
    """The legend beside ``ax``, in columns of up to 40 entries; the figure is saved with
    ``bbox_inches="tight"`` so the image grows to hold it (inside the axes, a legend of a hundred
    settings hid the panel and ran off the image)."""
    ax.legend(fontsize=6, loc="upper left", bbox_to_anchor=(1.01, 1.0), ncol=1 + (entries - 1) // 40)


def _series(comps: list[Comparison], axis: str) -> dict[str, list[tuple[float, float]]]:
    """Per grid and setting (seeds pooled): the median mean-latency change at each swept value."""
    ignore = {axis, "fixed_cost_ms", "group", "workload.seed"}
    keys = {
        g: [k for k in varying([c for c in comps if c.group == g]) if k not in ignore]
        for g in {c.group for c in comps}
    }
    points: dict[str, dict[float, list[float]]] = {}
    for c in comps:
        if c.change["mean_latency_s"] is not None:
            where = ", ".join(f"{k.rsplit('.', 1)[-1]}={c.settings.get(k)}" for k in keys[c.group]) or c.model
            points.setdefault(f"{c.group}: {where}", {}).setdefault(c.value(axis), []).append(
                c.change["mean_latency_s"]
            )
    return {
        label: sorted((x, statistics.median(ys) * 100) for x, ys in by_x.items())
        for label, by_x in points.items()
    }


def latency_change_vs(comps: list[Comparison], axis: str, xlabel: str, path: Path) -> bool:
    """Mean-latency change of the last variant vs the baseline along a swept setting, a line per setting."""
    if not comps:
        return False
    last = comps[-1].variant
    mine = [c for c in comps if c.variant == last and c.hybrid and c.value(axis) is not None]
    if len({c.value(axis) for c in mine}) < 2:
        return False
    series = {k: v for k, v in _series(mine, axis).items() if len(v) > 1}
    if not series:
        return False
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(11, 5.5))
    cmap = plt.get_cmap("tab20")
    for i, (label, points) in enumerate(sorted(series.items())):
        ax.plot(
            [p[0] for p in points], [p[1] for p in points], marker="o", ms=3, color=cmap(i % 20), label=label
        )
    ax.axhline(0, color="black", lw=0.8)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(f"mean latency change, {last} vs {mine[0].baseline} (%)")
    _legend_beside(ax, len(series))  # tight_layout cannot shrink the axes enough for such a legend
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return True


# the plots `write_plots` may write, in its order (a failed run removes an earlier run's)
PLOTS = ("latency_cdf.png", "rounds.png", "latency_vs_load.png", "latency_change_vs_fixed_cost.png")


def write_plots(results: list[CellResult], out: Path) -> list[str]:
    """Write every plot the data supports, removing any other of these names an earlier run left;
    returns their file names (relative to ``out``)."""
    comps = comparisons(results, every_grid=True)  # a line per grid's setting: each its own cells
    made = []
    jobs = [
        lambda p: latency_cdf(results, p),
        lambda p: rounds_bars(results, p),
        lambda p: latency_vs_load(results, p),
        lambda p: latency_change_vs(comps, "fixed_cost_ms", "fixed cost per call with prefill (ms)", p),
    ]
    # each PNG whole or not at all (matplotlib writes as it renders)
    for name, job in zip(PLOTS, jobs, strict=True):
        if write_output(out / name, lambda p, job=job: write_through(p, job)):
            made.append(name)
        else:  # an earlier run's plot of it would sit beside results it no longer belongs to
            write_output(out / name, lambda p: p.unlink(missing_ok=True))
    return made
