"""Side-by-side table of policy results (rich), with failed requests grouped by reason."""

from __future__ import annotations

import math

from rich.console import Console
from rich.table import Table

from radixflow.bench.metrics import Failure, PolicyResult

# (label, field, format)
ROWS: list[tuple[str, str, str]] = [
    ("completed", "completed", "{:d}"),
    ("failed", "failed", "{:d}"),
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
MAX_REASONS = 5  # reason rows under "failed"; the rest are summed into one row
MAX_IDS = 3  # request ids shown per reason


def relative_change(base: object, new: object) -> str:
    if not isinstance(base, int | float) or not isinstance(new, int | float) or base == 0 or math.isnan(base):
        return ""
    return f"{(new - base) / base:+.1%}"


def group_failures(failures: tuple[Failure, ...] | list[Failure]) -> dict[str, list[str]]:
    """Reason -> ids of the requests that failed for it, both in first-seen order."""
    groups: dict[str, list[str]] = {}
    for f in failures:
        groups.setdefault(f.reason, []).append(f.id)
    return groups


def _ids_cell(ids: list[str]) -> str:
    if not ids:
        return "0"
    shown = ", ".join(ids[:MAX_IDS]) + (", …" if len(ids) > MAX_IDS else "")
    return f"{len(ids)} ({shown})"


def _failure_rows(results: list[PolicyResult]) -> list[tuple[str, list[str]]]:
    """Rows under "failed": one per reason (count and first ids per policy), most common first."""
    per_policy = [group_failures(r.failures) for r in results]
    reasons: dict[str, int] = {}
    for groups in per_policy:
        for reason, ids in groups.items():
            reasons[reason] = reasons.get(reason, 0) + len(ids)
    ordered = sorted(reasons, key=lambda reason: -reasons[reason])
    rows = [(f"  {reason}", [_ids_cell(g.get(reason, [])) for g in per_policy]) for reason in ordered]
    if len(rows) > MAX_REASONS:
        rest = ordered[MAX_REASONS - 1 :]
        counts = [str(sum(len(g.get(reason, [])) for reason in rest)) for g in per_policy]
        rows = [*rows[: MAX_REASONS - 1], (f"  {len(rest)} other reasons (see --json)", counts)]
    return rows


def render(results: list[PolicyResult], title: str, console: Console) -> None:
    table = Table(title=title)
    table.add_column("metric")
    for r in results:
        table.add_column(r.policy, justify="right")
    others = results[1:]  # each compared with the first policy
    for r in others:
        table.add_column(f"{r.policy} vs {results[0].policy}", justify="right")
    for label, name, fmt in ROWS:
        values = [getattr(r, name) for r in results]
        if all(v is None for v in values):
            continue
        cells = ["-" if v is None else fmt.format(v) for v in values]
        for v in values[1:]:
            if name == "outputs_sha256":
                cells.append("same" if values[0] == v else "DIFFERENT")
            else:
                cells.append(relative_change(values[0], v))
        table.add_row(label, *cells)
        if name == "failed":
            for reason_label, reason_cells in _failure_rows(results):
                table.add_row(reason_label, *reason_cells, *([""] * len(others)))
    console.print(table)
