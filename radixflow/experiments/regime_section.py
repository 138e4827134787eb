"""The report's "Regime" section: where along a swept axis (fixed cost per round, offered load)
the headline variant lowers or raises mean latency, and the settings behind its largest rises."""

from __future__ import annotations

from radixflow.experiments.analysis import CHANGED, Comparison, RegimePoint, crossover, regime, varying
from radixflow.experiments.change_text import pct
from radixflow.problems import counted


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
