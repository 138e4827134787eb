"""Requests that failed in an experiment's cells: which, why, and the report section that lists them."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from radixflow.experiments.analysis import CellResult, completed_nothing_in, distinct


@dataclass(frozen=True)
class Failure:
    """A variant of a cell whose requests failed: how many, and why (first reasons)."""

    key: str
    group: str
    model: str
    variant: str
    failed: int
    requests: int
    reasons: list[str]


def md_cell(text: str) -> str:
    """``text`` as one cell of a Markdown table row: a ``|`` escaped and a line break made a space
    (a grid's name or a failure's reason would otherwise split the row into other columns)."""
    return " ".join(text.splitlines()).replace("|", "\\|")


def failures(results: Iterable[CellResult]) -> list[Failure]:
    """Every variant of every distinct cell with failed requests, in config order."""
    out = []
    for r in distinct(results):
        for v in r["results"]:
            failed = v.get("failures") or []
            if failed:
                reasons = list(dict.fromkeys(f["reason"] for f in failed))[:3]
                where = (r["key"], r["cell"]["group"], r["model"], v["variant"])
                out.append(Failure(*where, len(failed), r["requests"], reasons))
    return out


def completed_nothing(results: Iterable[CellResult]) -> int:
    """Cells in which some variant completed no request (nothing to compare there)."""
    return sum(1 for r in distinct(results) if completed_nothing_in(r))


def failure_section(results: list[CellResult]) -> list[str]:
    """Failed requests per cell and variant, with their first reasons (empty when none failed)."""
    found = failures(results)
    if not found:
        return []
    head = "| cell | model | variant | failed | reasons |"
    rows = [
        f"| {md_cell(f.group)} `{f.key}` | {md_cell(f.model)} | {f.variant} | {f.failed} of {f.requests} | "
        + "; ".join(md_cell(r) for r in f.reasons)
        + " |"
        for f in found
    ]
    empty = completed_nothing(results)
    note = f"{empty} of {len(distinct(results))} cells have a variant that completed no request: "
    note += "they are left out of every comparison above."
    return [
        "## Failed requests",
        "",
        note if empty else "",
        "",
        head,
        "| --- | --- | --- | --- | --- |",
        *rows,
        "",
    ]
