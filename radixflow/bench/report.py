"""Side-by-side table of policy results (rich)."""

from __future__ import annotations

import math

from rich.console import Console
from rich.table import Table

from radixflow.bench.metrics import PolicyResult

# (label, field, format)
ROWS: list[tuple[str, str, str]] = [
    ("completed", "completed", "{:d}"),
    ("worker rounds", "rounds", "{:d}"),
    ("rounds lower bound", "rounds_lower_bound", "{:d}"),
    ("mean latency (s)", "mean_latency_s", "{:.4f}"),
    ("p50 latency (s)", "p50_latency_s", "{:.4f}"),
    ("p99 latency (s)", "p99_latency_s", "{:.4f}"),
    ("reuse rate", "reuse_rate", "{:.2%}"),
    ("bubble tokens", "bubble_tokens", "{:d}"),
    ("tokens computed", "tokens_computed", "{:d}"),
    ("worker-call time (s)", "worker_call_s", "{:.4f}"),
    ("makespan (s)", "makespan_s", "{:.4f}"),
    ("agreement", "agreement", "{:.3f}"),
    ("median top-1 margin", "median_top1_margin", "{:.3f}"),
    ("outputs sha256", "outputs_sha256", "{:.12}"),
]


def relative_change(base: float, new: float) -> str:
    if not isinstance(base, int | float) or not isinstance(new, int | float) or base == 0 or math.isnan(base):
        return ""
    return f"{(new - base) / base:+.1%}"


def render(results: list[PolicyResult], title: str, console: Console) -> None:
    table = Table(title=title)
    table.add_column("metric")
    for r in results:
        table.add_column(r.policy, justify="right")
    compare = len(results) >= 2
    if compare:
        table.add_column(f"{results[-1].policy} vs {results[0].policy}", justify="right")
    for label, name, fmt in ROWS:
        values = [getattr(r, name) for r in results]
        if all(v is None for v in values):
            continue
        cells = ["-" if v is None else fmt.format(v) for v in values]
        if compare:
            if name == "outputs_sha256":
                cells.append("same" if values[0] == values[-1] else "DIFFERENT")
            else:
                cells.append(relative_change(values[0], values[-1]))
        table.add_row(label, *cells)
    console.print(table)
