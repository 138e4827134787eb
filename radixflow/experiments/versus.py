"""A policy against the better of `native` and `radixflow` in every cell (the policies grid).

Per cell: the policy's mean latency against min(native, radixflow) and its p99 against the worse
baseline's p99, hybrid cells apart from the full-attention control, plus whether the decoded
outputs are identical across every variant. The acceptance the `adaptive` policy is held to:
within +1% of the better baseline in >= 97% of hybrid cells and never above +3%; better than both
by > 1% in >= 60%; p99 <= the worse baseline's + 5% in every cell; on the control never worse
than the better baseline by > 1%.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

from radixflow.experiments.analysis import comparable, distinct
from radixflow.problems import counted

BASELINES = ("native", "radixflow")
WITHIN = 0.01  # within 1% of the better baseline
SHARE_WITHIN = 0.97  # of hybrid cells within WITHIN (issue 29's acceptance)
NEVER_ABOVE = 0.03  # never more than 3% above it
P99_SLACK = 0.05  # p99 at most 5% above the worse baseline's
WORST_SHOWN = 8  # cells listed where the policy loses most


@dataclass(frozen=True)
class Versus:
    """One cell: the policy's mean against the better baseline, its p99 against the worse one."""

    cell: dict[str, Any]
    hybrid: bool
    mean: float  # relative to min(native, radixflow)
    p99: float  # relative to max(native p99, radixflow p99)
    same_outputs: bool
    # the fixed cost of a worker call the cell's runner charged (the cell's own setting or its
    # profile's); None on a real runner, which pays what it pays
    fixed_cost_ms: float | None


def versus(results: list[dict[str, Any]], policy: str) -> list[Versus]:
    """Every distinct cell that ran both baselines and ``policy``, each completing the same
    requests, some of them (`comparable`)."""
    out = []
    for r in distinct(results):
        by = {v["variant"]: v for v in r["results"]}
        if not comparable(r) or policy not in by or not all(b in by for b in BASELINES):
            continue
        means = [by[b]["mean_latency_s"] for b in BASELINES]
        p99s = [by[b]["p99_latency_s"] for b in BASELINES]
        best, worse = min(means), max(p99s)
        if not best or not worse:
            continue
        shas = {v.get("outputs_sha256") for v in r["results"]}
        same = len(shas) == 1 and None not in shas  # None: a variant's trials differed among themselves
        mean, p99 = by[policy]["mean_latency_s"] / best - 1, by[policy]["p99_latency_s"] / worse - 1
        out.append(Versus(r["cell"], r["hybrid"], mean, p99, same, r.get("fixed_cost_ms")))
    return out


def _label(row: Versus) -> str:
    cell, w = row.cell, row.cell["workload"]
    rate = "batch" if w["arrival"] == "batch" else f"{w['arrival']} {w['rate']:g}/s"
    fixed = [] if row.fixed_cost_ms is None else [f"{row.fixed_cost_ms:g} ms"]
    parts = [cell["model"], w["order"], rate, *fixed, counted(w["groups"], "context"), f"seed {w['seed']}"]
    return ", ".join(map(str, parts))


def summary(rows: list[Versus], policy: str) -> list[str]:
    """The report's lines: the acceptance figures, each marked met or not, and the worst cells."""
    hybrid, control = [r for r in rows if r.hybrid], [r for r in rows if not r.hybrid]
    if not hybrid:
        return []
    n = len(hybrid)
    within = sum(r.mean <= WITHIN for r in hybrid)
    better = sum(r.mean < -WITHIN for r in hybrid)
    worst = max(hybrid, key=lambda r: r.mean)
    p99_bad = [r for r in rows if r.p99 > P99_SLACK]
    control_bad = [r for r in control if r.mean > WITHIN]
    differ = sum(not r.same_outputs for r in rows)
    median = statistics.median(r.mean for r in hybrid)

    def mark(ok: bool) -> str:
        return "met" if ok else "**not met**"

    lines = [
        f"## `{policy}` against min(native, radixflow)",
        "",
        "| figure | value | acceptance |",
        "| --- | --- | --- |",
        f"| hybrid cells within +1% of the better baseline | {within}/{n} ({within / n:.0%}) "
        f"| ≥ {SHARE_WITHIN:.0%}: {mark(within >= SHARE_WITHIN * n)} |",
        f"| hybrid cells better than both by > 1% | {better}/{n} ({better / n:.0%}) "
        f"| ≥ 60%: {mark(better >= 0.6 * n)} |",
        f"| worst hybrid cell | {worst.mean:+.1%} ({_label(worst)}) "
        f"| ≤ +{NEVER_ABOVE:.0%}: {mark(worst.mean <= NEVER_ABOVE)} |",
        f"| median hybrid cell | {median:+.1%} | |",
        f"| cells with p99 > the worse baseline's + 5% | {len(p99_bad)}/{len(rows)} "
        f"| none: {mark(not p99_bad)} |",
        f"| control cells worse than the better baseline by > 1% | {len(control_bad)}/{len(control)} "
        f"| none: {mark(not control_bad)} |",
        f"| cells whose decoded outputs differ between variants | {differ}/{len(rows)} "
        f"| none: {mark(not differ)} |",
        "",
    ]
    losers = sorted((r for r in hybrid if r.mean > WITHIN), key=lambda r: -r.mean)[:WORST_SHOWN]
    if losers:
        lines += [f"Where `{policy}` still loses (mean, p99 vs the worse baseline's):", ""]
        lines += [f"- {r.mean:+.1%} (p99 {r.p99:+.1%}): {_label(r)}" for r in losers]
        lines.append("")
    return lines


def versus_section(results: list[dict[str, Any]]) -> list[str]:
    """The section for the last variant, when the experiment also ran both baselines."""
    variants = [v["variant"] for v in results[0]["results"]] if results else []
    if len(variants) < 3 or not all(b in variants for b in BASELINES):
        return []
    policy = next(v for v in reversed(variants) if v not in BASELINES)
    return summary(versus(results, policy), policy)
