"""Figures the report is written from: per-cell changes vs the baseline, per-model spans, regimes."""

from __future__ import annotations

import json
import statistics
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from radixflow.experiments.config import CELL_KEYS, OUTPUT_KEYS, WORKLOAD_KEYS, Cell, as_run
from radixflow.experiments.ineffective import ineffective

CellResult = dict[str, Any]

# The paper's reported ranges (radixflow vs the native scheduler, five hybrid models).
PAPER = {
    "rounds": (-0.44, -0.11),
    "mean_latency_s": (-0.24, -0.03),
}
PAPER_TEXT = {
    "rounds": "−44% to −11%",
    "mean_latency_s": "−24% to −3%",
    "p99_latency_s": "not reported",
    "reuse_rate": "almost unchanged",
}
CHANGED = 0.01  # a relative change within ±1% reads as "unchanged"


def rel(base: float | None, new: float | None) -> float | None:
    if base is None or new is None or base == 0:
        return None
    return (new - base) / base


def diff(base: float | None, new: float | None) -> float | None:
    """``new - base``; None when either is undefined (a variant that completed nothing)."""
    return None if base is None or new is None else new - base


@dataclass(frozen=True)
class Comparison:
    """One cell, one variant against the cell's baseline (the first variant)."""

    key: str
    group: str
    runner: str
    model: str
    hybrid: bool
    variant: str
    baseline: str
    settings: dict[str, Any]  # the cell's settings, workload flattened as "workload.<key>"
    fixed_cost_ms: float | None
    change: dict[str, float | None] = field(default_factory=dict)  # relative, except reuse (points)
    base: dict[str, Any] = field(default_factory=dict)
    new: dict[str, Any] = field(default_factory=dict)

    def value(self, axis: str) -> Any:
        """The cell's value along ``axis``: "fixed_cost_ms" (what its runner charged; None on a real
        runner) or a setting key. None where the cell has none: callers leave such cells out."""
        return self.fixed_cost_ms if axis == "fixed_cost_ms" else self.settings.get(axis)


def flat_settings(cell: dict[str, Any]) -> dict[str, Any]:
    """A cell's settings, its workload's flattened as "workload.<key>"."""
    out = {k: v for k, v in cell.items() if k != "workload"}
    out.update({f"workload.{k}": v for k, v in cell["workload"].items()})
    return out


RELATIVE = ("rounds", "mean_latency_s", "p99_latency_s", "makespan_s", "goodput_rps", "worker_call_s")


def comparisons(results: Iterable[CellResult], every_grid: bool = False) -> list[Comparison]:
    """Every non-baseline variant of every distinct cell (a cell listed in two grids counts once,
    under the first: `distinct`; ``every_grid``: under each grid that lists it, as each grid's own
    table and line show it); a cell in which some variant completed nothing has nothing to
    compare, and one whose variants completed different requests no like figures (see `failures`)."""
    out = []
    for r in list(results) if every_grid else distinct(results):
        if not comparable(r):
            continue
        base, *others = r["results"]
        for new in others:
            change = {k: rel(base.get(k), new.get(k)) for k in RELATIVE}
            change["reuse_rate"] = diff(base.get("reuse_rate"), new.get("reuse_rate"))
            out.append(
                Comparison(
                    key=r["key"],
                    group=r["cell"]["group"],
                    runner=r["cell"]["runner"],
                    model=r["model"],
                    hybrid=r["hybrid"],
                    variant=new["variant"],
                    baseline=base["variant"],
                    settings=flat_settings(r["cell"]),
                    fixed_cost_ms=r.get("fixed_cost_ms"),
                    change=change,
                    base=base,
                    new=new,
                )
            )
    return out


def varying(comps: list[Comparison]) -> list[str]:
    """Setting keys whose value differs between the cells given (the table's columns)."""
    return varying_keys([c.settings for c in comps])


def varying_keys(settings: list[dict[str, Any]]) -> list[str]:
    """Keys of ``settings`` (cells' `flat_settings`) whose value differs between them, but the grid's name."""
    keys = sorted({k for s in settings for k in s})
    return [k for k in keys if len({repr(s.get(k)) for s in settings}) > 1 and k != "group"]


@dataclass(frozen=True)
class Span:
    median: float
    low: float
    high: float
    n: int


def span(values: Iterable[float | None]) -> Span | None:
    xs = [v for v in values if v is not None]
    if not xs:
        return None
    return Span(statistics.median(xs), min(xs), max(xs), len(xs))


def per_model(comps: list[Comparison], variant: str) -> dict[tuple[str, str], dict[str, Span | None]]:
    """(runner, model) -> span over its cells of each figure's change for ``variant``."""
    out: dict[tuple[str, str], dict[str, Span | None]] = {}
    for runner, model in dict.fromkeys((c.runner, c.model) for c in comps):
        mine = [c for c in comps if (c.runner, c.model) == (runner, model) and c.variant == variant]
        if mine:
            figures = ("rounds", "mean_latency_s", "p99_latency_s", "reuse_rate")
            out[(runner, model)] = {f: span(c.change[f] for c in mine) for f in figures}
    return out


@dataclass(frozen=True)
class RegimePoint:
    value: float  # the swept setting (fixed cost in ms, offered load in requests/s)
    lower: int  # cells where the variant lowers mean latency by more than 1%
    higher: int  # ... raises it by more than 1%
    same: int
    median_change: float


def regime(comps: list[Comparison], axis: str, variant: str) -> list[RegimePoint]:
    """Mean-latency change of hybrid cells grouped by ``axis`` ("fixed_cost_ms" or a setting key)."""
    by_value: dict[float, list[float]] = {}
    for c in comps:
        value = c.value(axis)
        change = c.change["mean_latency_s"]
        if c.variant == variant and c.hybrid and value is not None and change is not None:
            by_value.setdefault(float(value), []).append(change)
    return [
        RegimePoint(
            v,
            sum(x < -CHANGED for x in xs),
            sum(x > CHANGED for x in xs),
            sum(abs(x) <= CHANGED for x in xs),
            statistics.median(xs),
        )
        for v, xs in sorted(by_value.items())
    ]


def crossover(points: list[RegimePoint]) -> tuple[float | None, float | None]:
    """(lowest value from which the median change stays below -1%, highest value with a cell above +1%)."""
    lowers_from = None
    for p in reversed(points):
        if p.median_change >= -CHANGED:
            break
        lowers_from = p.value
    raises_up_to = max((p.value for p in points if p.higher > 0), default=None)
    return lowers_from, raises_up_to


def distinct(results: Iterable[CellResult]) -> list[CellResult]:
    """One result per distinct cell, the first listed: grids that vary one factor at a time share
    their centre cell, which runs once (its key names no grid) and is listed under each, yet is one cell
    of the figures over cells, not one per grid that lists it."""
    cells: dict[str, CellResult] = {}
    for r in results:
        cells.setdefault(_identity(r), r)
    return list(cells.values())


def _identity(result: CellResult) -> str:
    """The cell a result is of: its settings and workload, not its grid, where it wrote a trace,
    nor a key that cannot change it (`ineffective`: a rate swept beside batch and Poisson arrivals
    lists the batch cell once per rate, each alike); its independent requests counted as they
    run (an ``independent_share`` of 0 is the cell without one), each value as its key reads it
    (`as_run`: 100 and 100.0 one slo_ms). A result cached before a key existed has it at its
    default."""
    given = result["cell"]
    settings = {k: as_run(k, v) for k, v in {**CELL_KEYS, **given}.items() if k != "workload"}
    workload = {k: as_run(k, v) for k, v in {**WORKLOAD_KEYS, **given.get("workload", {})}.items()}
    workload = Cell("", settings, workload).run_workload()
    settings["independent_share"] = None
    idle = ineffective(settings, workload, bool(result.get("hybrid", True)), {})
    cell = {k: v for k, v in settings.items() if k not in ("group", *OUTPUT_KEYS) and k not in idle}
    cell["workload"] = {k: v for k, v in workload.items() if f"workload.{k}" not in idle}
    return json.dumps(cell, sort_keys=True, default=str)


def other_code(results: Iterable[CellResult], code: str) -> int:
    """Distinct cells computed by other code than ``code`` (cached before the package changed, or
    before cells were stamped with their code): their figures may differ from what it computes."""
    return sum(1 for r in distinct(results) if r.get("code") != code)


def completed_nothing_in(result: CellResult) -> bool:
    return any(not v["completed"] for v in result["results"])


def completed_unlike_in(result: CellResult) -> bool:
    """Whether a cell's variants completed different requests: one failed a request another
    completed (its worker call failed, as a GPU out of memory does), so each variant's latencies
    are over other requests and their changes compare nothing alike."""
    done = {(v["completed"], frozenset(f["id"] for f in v.get("failures") or [])) for v in result["results"]}
    return len(done) > 1


def comparable(result: CellResult) -> bool:
    """Whether a cell's variants can be compared: each completed the same requests, some of them."""
    return not completed_nothing_in(result) and not completed_unlike_in(result)
