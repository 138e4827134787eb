"""report.md: tables with relative changes, the paper's ranges beside them, and a reading of the figures."""

from __future__ import annotations

import statistics
from typing import Any

from radixflow.experiments.analysis import (
    CHANGED,
    PAPER,
    PAPER_TEXT,
    CellResult,
    Comparison,
    RegimePoint,
    Span,
    comparisons,
    crossover,
    distinct,
    other_code,
    per_model,
    regime,
    span,
    varying,
)
from radixflow.experiments.failures import failure_section, md_cell
from radixflow.experiments.versus import versus_section
from radixflow.problems import counted


def pct(x: float | None, points: bool = False) -> str:
    if x is None:
        return "–"
    return f"{x * 100:+.1f} pp" if points else f"{x * 100:+.1f}%"


def show_span(s: Span | None, points: bool = False) -> str:
    if s is None:
        return "–"
    if s.n == 1:
        return pct(s.median, points)
    return f"{pct(s.median, points)} ({pct(s.low, points)} … {pct(s.high, points)})"


def _paper_position(s: Span | None, figure: str) -> str:
    """Where the median falls against the paper's range: in it, beyond it, short of it, opposite."""
    if s is None or figure not in PAPER:
        return ""
    lo, hi = PAPER[figure]
    if lo <= s.median <= hi:
        return " · in range"
    if s.median < lo:
        return " · beyond"
    return " · short" if s.median <= 0 else " · opposite"


def _agreement(results: list[CellResult], runner: str, model: str) -> str:
    mine = [c for c in results if (c["cell"]["runner"], c["model"]) == (runner, model)]
    values = {r["variant"]: r.get("agreement") for c in mine for r in c["results"]}
    if all(v is None for v in values.values()):
        return "–"
    worst = {
        k: min(r.get("agreement", 1.0) for c in mine for r in c["results"] if r["variant"] == k)
        for k in values
    }
    return " / ".join(f"{v:.3f}" for v in worst.values())


def paper_table(results: list[CellResult], comps: list[Comparison], variant: str) -> list[str]:
    rows = per_model(comps, variant)
    lines = [
        "| runner | model | cells | worker rounds | mean latency | p99 latency | reuse | agreement |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
        f"| **paper** | five hybrid models | | {PAPER_TEXT['rounds']} | {PAPER_TEXT['mean_latency_s']} | "
        f"{PAPER_TEXT['p99_latency_s']} | {PAPER_TEXT['reuse_rate']} | |",
    ]
    hybrid = {c.model: c.hybrid for c in comps}
    for (runner, model), s in rows.items():
        n = s["rounds"].n if s["rounds"] else 0
        rounds, mean = s["rounds"], s["mean_latency_s"]
        # the paper's ranges are for hybrid models; a full-attention control is marked as such
        at_r, at_m = (
            (_paper_position(rounds, "rounds"), _paper_position(mean, "mean_latency_s"))
            if hybrid[model]
            else (" · control", " · control")
        )
        lines.append(
            f"| {runner} | {model} | {n} | {show_span(rounds)}{at_r} | {show_span(mean)}{at_m} | "
            f"{show_span(s['p99_latency_s'])} | {show_span(s['reuse_rate'], True)} | "
            f"{_agreement(results, runner, model)} |"
        )
    return lines


def _count(values: list[float | None]) -> tuple[int, int, int]:
    xs = [v for v in values if v is not None]
    return sum(x < -CHANGED for x in xs), sum(x > CHANGED for x in xs), sum(abs(x) <= CHANGED for x in xs)


def reading(results: list[CellResult], comps: list[Comparison], variant: str) -> list[str]:
    """A paragraph per finding, every number taken from the comparisons."""
    mine = [c for c in comps if c.variant == variant]
    out = []
    hybrid = [c for c in mine if c.hybrid and c.runner == "sim"]
    if hybrid:
        r, m = span(c.change["rounds"] for c in hybrid), span(c.change["mean_latency_s"] for c in hybrid)
        reuse = max(abs(c.change["reuse_rate"] or 0) for c in hybrid)
        lower, higher, same = _count([c.change["mean_latency_s"] for c in hybrid])
        out.append(
            f"On {counted(len(hybrid), 'simulated hybrid cell')}, `{variant}` changed worker rounds "
            "by a median "
            f"{pct(r.median)} (from {pct(r.low)} to {pct(r.high)}; the paper: {PAPER_TEXT['rounds']}) "
            f"and mean latency by a median {pct(m.median)} (from {pct(m.low)} to {pct(m.high)}; the paper: "
            f"{PAPER_TEXT['mean_latency_s']}): lower by more than 1% in {counted(lower, 'cell')}, "
            f"higher in {higher}, "
            f"within ±1% in {same}. Reuse moved by at most {reuse * 100:.2f} percentage points."
        )
    control = [c for c in mine if not c.hybrid and c.runner == "sim"]
    if control:
        r, m = span(c.change["rounds"] for c in control), span(c.change["mean_latency_s"] for c in control)
        out.append(
            f"On the full-attention control ({counted(len(control), 'cell')}) nothing is ever blocked: "
            "rounds change "
            f"by a median {pct(r.median)} and mean latency by {pct(m.median) if m else '–'}."
        )
    torch_cells = [c for c in mine if c.runner == "torch"]
    if torch_cells:
        agree = [v.get("agreement") for c in results if c["cell"]["runner"] == "torch" for v in c["results"]]
        agree = [a for a in agree if a is not None]
        r = span(c.change["rounds"] for c in torch_cells if c.hybrid)
        w = span(c.change["worker_call_s"] for c in torch_cells)
        lowest = f"{min(agree):.3f}" if agree else "–"
        rounds_text = f"rounds {pct(r.median)} (median over hybrid models)" if r else "no hybrid model"
        devices = ", ".join(sorted({str(c.settings.get("device")) for c in torch_cells}))
        text = (
            f"On the torch runner ({counted(len(torch_cells), 'cell')}, real forward passes on {devices}) "
            "decoded "
            f"outputs agree with a no-cache run at {lowest} at worst for every variant; {rounds_text}, "
            f"measured worker-call time {pct(w.median) if w else '–'}."
        )
        if w is not None and abs(w.median) < 0.05 and r is not None and r.median < -CHANGED:
            text += " Fewer rounds saved little worker time: here a round costs in proportion to its tokens."
        out.append(text)
    return out


def _regime_lines(points: list[RegimePoint], axis: str, unit: str, variant: str) -> list[str]:
    if len(points) < 2:
        return []
    lowers_from, raises_to = crossover(points)
    lines = [
        f"| {axis} | cells lower | cells higher | within ±1% | median mean-latency change |",
        "| ---: | ---: | ---: | ---: | ---: |",
    ]
    lines += [
        f"| {p.value:g} {unit} | {p.lower} | {p.higher} | {p.same} | {pct(p.median_change)} |" for p in points
    ]
    raising = [f"{p.value:g}" for p in points if p.median_change > CHANGED]
    flat = [f"{p.value:g}" for p in points if abs(p.median_change) <= CHANGED]
    if lowers_from is not None:
        sentence = (
            f"`{variant}` lowers the median mean latency by more than 1% at every swept {axis} "
            f"from {lowers_from:g} {unit} up"
        )
    else:
        sentence = (
            f"`{variant}` does not lower the median mean latency by more than 1% at the highest {axis} swept"
        )
    if flat:
        sentence += f"; the median change is within ±1% at {', '.join(flat)} {unit}"
    if raising:
        sentence += f"; the median rises by more than 1% at {', '.join(raising)} {unit}"
    cells_up = sum(p.higher for p in points)
    if raises_to is not None:
        sentence += (
            f". Settings where it raises mean latency by more than 1% occur up to {raises_to:g} {unit} "
            f"({cells_up} of {counted(sum(p.lower + p.higher + p.same for p in points), 'cell')})"
        )
    else:
        sentence += ". In no cell does it raise mean latency by more than 1%"
    return [*lines, "", sentence + "."]


def _largest_rises(comps: list[Comparison], variant: str, axis: str, unit: str) -> str:
    """The settings behind the largest mean-latency rises (what the regime's exceptions are)."""
    rising = [
        c
        for c in comps
        if c.variant == variant
        and c.hybrid
        and c.value(axis) is not None
        and (c.change["mean_latency_s"] or 0) > CHANGED
    ]
    if not rising:
        return ""
    rising.sort(key=lambda c: -(c.change["mean_latency_s"] or 0))
    parts: list[str] = []
    for c in rising:
        group = [d for d in comps if d.group == c.group]
        keys = [k for k in varying(group) if k not in (axis, "fixed_cost_ms", "workload.seed")]
        where = ", ".join(f"{k.rsplit('.', 1)[-1]}={c.settings.get(k)}" for k in keys) or c.model
        text = f"{c.group}: {where} at {c.value(axis):g} {unit}"
        if not any(p.startswith(text) for p in parts):  # seeds of one setting: the largest only
            parts.append(f"{text} ({pct(c.change['mean_latency_s'])})")
        if len(parts) == 4:
            break
    return "Largest rises: " + "; ".join(parts) + "."


def regime_section(comps: list[Comparison], variant: str) -> list[str]:
    out: list[str] = []
    sim = [c for c in comps if c.runner == "sim"]
    poisson = [c for c in sim if c.settings.get("workload.arrival") == "poisson"]
    axes = (
        ("Fixed cost per worker call with prefill", sim, "fixed_cost_ms", "fixed cost per round", "ms"),
        ("Offered load (Poisson arrivals)", poisson, "workload.rate", "offered load", "req/s"),
    )
    for title, mine, axis, name, unit in axes:
        lines = _regime_lines(regime(mine, axis, variant), name, unit, variant)
        if lines:
            rises = _largest_rises(mine, variant, axis, unit)
            out += [f"### {title}", "", *lines, "", *([rises, ""] if rises else [])]
    return out


def cost_check(results: list[CellResult]) -> list[str]:
    """Torch cells: measured worker time beside what the cost-model profile predicts for those rounds."""
    rows, errors = [], []
    for c in results:
        for v in c["results"]:
            if v.get("worker_measured_s") is None:
                continue
            predicted, error = v.get("predicted_worker_s"), v.get("prediction_error")
            if error is not None:
                errors.append(abs(error))
            shown = "–" if predicted is None else f"{predicted:.2f}"
            clock = c.get("runner_settings", {}).get("clock", "wall")  # the engine's: a cell may set cpu
            rows.append(
                f"| {c['model']} | {v['variant']} | {v['rounds']} | {v['worker_call_s']:.2f} ({clock}) | "
                f"{v['worker_measured_s']:.2f} ({v['worker_clock']}) | {shown} | {pct(error)} |"
            )
    if not rows:
        return []
    head = [
        "| model | variant | rounds | worker-call time (s, engine clock) | measured worker time (s, clock) | "
        "predicted by the profile (s) | error |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    summary = []
    if errors:
        summary = [
            "",
            f"Over {len(errors)} runs the profile predicted the measured worker time of the rounds the "
            f"scheduler really ran with a median absolute error of {statistics.median(errors):.1%} (largest "
            f"{max(errors):.1%}). On a CPU the measured time is the worker calls' CPU time (one intra-op "
            "thread), which calibration fits; wall time there includes interference from other processes.",
        ]
    return ["## Cost model check (torch cells)", "", *head, *rows, *summary, ""]


def _cell_row(c: Comparison, cols: list[str]) -> str:
    settings = [md_cell(str(c.settings.get(k))) for k in cols]
    figures = [
        f"{c.base['rounds']} → {c.new['rounds']}",
        pct(c.change["rounds"]),
        pct(c.change["mean_latency_s"]),
        pct(c.change["p99_latency_s"]),
        pct(c.change["reuse_rate"], True),
        pct(c.change["goodput_rps"]),
    ]
    return "| " + " | ".join([md_cell(c.model), *settings, c.variant, *figures]) + " |"


def group_tables(comps: list[Comparison]) -> list[str]:
    out = []
    for group in dict.fromkeys(c.group for c in comps):
        mine = [c for c in comps if c.group == group]
        cols = [k for k in varying(mine) if k != "model"]
        head = ["model", *cols, "variant", "rounds", "Δ rounds", "Δ mean", "Δ p99", "Δ reuse", "Δ goodput"]
        out += [f"### {group} (vs `{mine[0].baseline}`)", "", "| " + " | ".join(head) + " |"]
        out.append("| " + " | ".join("---" for _ in head) + " |")
        out += [_cell_row(c, cols) for c in mine]
        out.append("")
    return out


def other_code_note(results: list[CellResult], code: str) -> str | None:
    """What the cells a re-run took from its cache that other code than ``code`` computed are
    (None: none), for report.md and the command line alike."""
    stale = other_code(results, code)
    if not stale:
        return None
    return (
        f"{stale} of {counted(len(distinct(results)), 'cell')} came from the cache of other code than "
        "this run's (radixflow changed since they ran): their figures may differ from what this code "
        "computes; a fresh --out runs every cell on it"
    )


def _opening(meta: dict[str, Any], results: list[CellResult], variants: list[str]) -> str:
    """The report's first line: the cells, what is compared with what, the compute time and the run."""
    if len(variants) < 2:  # one policy (a fleet's routers): no baseline, nothing relative to it
        compared = f"one variant, {', '.join(f'`{v}`' for v in variants)}: nothing to compare it with"
    else:
        compared = (
            f"variants {', '.join(f'`{v}`' for v in variants)}; every change is relative to `{variants[0]}` "
            "on the identical requests of the same cell"
        )
    return (
        f"{counted(len(results), 'cell')}; {compared}. Cell compute time {meta['cells_wall_s']:.0f} s; "
        f"run `{meta['command']}`."
    )


def _comparison(results: list[CellResult], comps: list[Comparison], variants: list[str]) -> list[str]:
    """The last variant against the first: against the paper, the reading, the regimes."""
    headline = variants[-1]
    lines = [
        f"## Against the paper (`{headline}` vs `{variants[0]}`; median and range over cells)",
        "",
        *paper_table(results, comps, headline),
        "",
        "## Reading",
        "",
    ]
    for paragraph in reading(results, comps, headline):
        lines += [paragraph, ""]
    regime_lines = regime_section(comps, headline)
    if regime_lines:
        lines += ["## Regime", "", *regime_lines]
    return lines + versus_section(results)


def render_report(meta: dict[str, Any], results: list[CellResult], plots: list[str]) -> str:
    comps = comparisons(results)
    variants = [r["variant"] for r in results[0]["results"]] if results else []
    lines = [f"# Experiment `{meta['name']}`", ""]
    if meta.get("description"):
        lines += [meta["description"], ""]
    lines += [_opening(meta, results, variants), ""]
    note = other_code_note(results, meta["code"])
    lines += [] if note is None else [f"**{note}.**", ""]
    compared = len(variants) > 1  # one variant has nothing to be compared with
    lines += _comparison(results, comps, variants) if compared else []
    lines += cost_check(results)
    lines += failure_section(results)
    lines += ["## Cells", "", *group_tables(comps)] if compared else []
    if plots:
        lines += ["## Plots", "", *[f"![{p}]({p})" for p in plots], ""]
    return "\n".join(lines)
