"""Side-by-side table of policy results (rich), with failed requests grouped by reason.

No cell wraps: where the whole table is wider than the console (a pipe counts as 80 columns), its
columns are split over several tables, each repeating the metric names."""

from __future__ import annotations

import math

from rich.console import Console
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

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
    ("mean latency, wall (s)", "wall_mean_latency_s", "{:.4f}"),
    ("reuse rate", "reuse_rate", "{:.2%}"),
    ("bubble tokens", "bubble_tokens", "{:d}"),
    ("tokens computed", "tokens_computed", "{:d}"),
    ("worker-call time (s)", "worker_call_s", "{:.4f}"),
    ("worker-call wall time (s)", "wall_worker_call_s", "{:.4f}"),
    ("makespan (s)", "makespan_s", "{:.4f}"),
    ("agreement", "agreement", "{:.3f}"),
    ("median top-1 margin", "median_top1_margin", "{:.3f}"),
    ("outputs sha256", "outputs_sha256", "{:.12}"),
    ("round predictor, rounds counted", "predictor_rounds", "{:d}"),
    ("round predictor error, median", "predictor_median", "{:.1%}"),
    ("round predictor error, p90", "predictor_p90", "{:.1%}"),
]
DIFFERS = "differs between trials"  # the outputs sha256 of repeated trials that disagree
MAX_REASONS = 5  # reason rows under "failed"; the rest are summed into one row
MAX_IDS = 3  # request ids shown per reason
MAX_REASON_CHARS = 30  # a reason's row label: the metric column never wraps, so it stays short


def relative_change(base: object, new: object) -> str:
    """``new`` against ``base`` as a signed percentage; from a base of 0, where none exists, what
    came (``+2 from 0``: failures under one policy and none under the baseline); blank where
    either is no number or both are 0."""
    if not isinstance(base, int | float) or not isinstance(new, int | float) or math.isnan(base + new):
        return ""
    if base == 0:
        return "" if new == 0 else f"{new:+g} from 0"
    return signed_percent((new - base) / base)


def signed_percent(change: float) -> str:
    """``change`` as a signed percentage to one decimal: one that rounds to nothing reads
    "+0.0%", never "-0.0%" (a minus on a change the figure calls none)."""
    shown = f"{change:+.1%}"
    return "+0.0%" if shown == "-0.0%" else shown


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


def _cut(reason: str) -> str:
    """A failure reason short enough for a row label, on one line (a worker call's error may span
    several, as CUDA's do: a line break would split the label over two rows); the whole text is
    in --json."""
    line = " ".join(reason.split())
    return line if len(line) <= MAX_REASON_CHARS else line[: MAX_REASON_CHARS - 1].rstrip() + "…"


def _failure_rows(results: list[PolicyResult]) -> list[tuple[str, list[str]]]:
    """Rows under "failed": one per reason as its row label reads (count and first ids per
    policy), most common first. Reasons that differ only past the label's cut (a request's own
    length or token in its text) share one row: apart, they read as the same row repeated."""
    cut = [[Failure(f.id, _cut(f.reason)) for f in r.failures] for r in results]
    per_policy = [group_failures(failures) for failures in cut]
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


def _rows(results: list[PolicyResult]) -> tuple[list[Text], list[tuple[str, list[str]]]]:
    """The column headers after the metric's (each policy, then each compared with the first) and
    every row: its label and one cell per column."""
    others = results[1:]  # each compared with the first policy
    headers = [Text(r.policy) for r in results]
    headers += [Text(f"{r.policy}\nvs {results[0].policy}") for r in others]
    rows: list[tuple[str, list[str]]] = []
    for label, name, fmt in ROWS:
        values = [getattr(r, name) for r in results]
        cells = [_cell(r, name, fmt) for r in results]
        if all(c == "-" for c in cells):
            continue
        for v in values[1:]:
            if name == "outputs_sha256":
                cells.append(_same(values[0], v))
            else:
                cells.append(relative_change(values[0], v))
        rows.append((label, cells))
        if name == "failed":
            rows += [(label, [*cells, *[""] * len(others)]) for label, cells in _failure_rows(results)]
    return headers, rows


def _cell(result: PolicyResult, name: str, fmt: str) -> str:
    if name == "outputs_sha256" and result.trial_outputs_sha256 is not None:
        return DIFFERS  # no one digest to show: the trials' outputs differ (each is in --json)
    value = getattr(result, name)
    return "-" if value is None else fmt.format(value)


def _same(first: str | None, other: str | None) -> str:
    """One policy's outputs against the first's; not compared where either's trials differ."""
    if first is None or other is None:
        return "-"
    return "same" if first == other else "DIFFERENT"


def _table(
    title: str | None, headers: list[Text], rows: list[tuple[str, list[str]]], columns: list[int]
) -> Table:
    """The metric column and ``columns`` (indices into ``headers``); no cell wraps or is cut. Every
    text as Text, never read as markup: ids, reasons and the model's name come from the user."""
    table = Table(title=None if title is None else Text(title))
    table.add_column("metric", no_wrap=True)
    for c in columns:
        table.add_column(headers[c], justify="right", no_wrap=True)
    for label, cells in rows:
        table.add_row(Text(label), *(Text(cells[c]) for c in columns))
    return table


def _fit(headers: list[Text], rows: list[tuple[str, list[str]]], console: Console) -> list[list[int]]:
    """The columns, in order, packed into as few tables as fit the console's width, each repeating
    the metric column: one table wider than the terminal (a pipe counts as 80 columns) would
    wrap every metric name or cut every value."""
    unbounded = console.options.update_width(10**6)
    groups: list[list[int]] = [[]]
    for c in range(len(headers)):
        trial = [*groups[-1], c]
        width = Measurement.get(console, unbounded, _table(None, headers, rows, trial)).maximum
        if groups[-1] and width > console.width:
            groups.append([c])
        else:
            groups[-1] = trial
    return groups


def render(results: list[PolicyResult], title: str, console: Console) -> None:
    headers, rows = _rows(results)
    for i, columns in enumerate(_fit(headers, rows, console)):
        console.print(_table(title if i == 0 else None, headers, rows, columns))
