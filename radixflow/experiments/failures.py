"""Requests that failed in an experiment's cells: which, why, and the report section that lists them."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from radixflow.experiments.analysis import (
    CellResult,
    comparable,
    completed_nothing_in,
    completed_unlike_in,
    distinct,
)


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


def uncompared(results: Iterable[CellResult]) -> int:
    """Cells left out of every comparison (`comparable`): nothing completed, or unlike requests."""
    return sum(1 for r in distinct(results) if not comparable(r))


def _left_out(results: list[CellResult]) -> str:
    """What the section says of the cells left out of the comparisons, one sentence each kind."""
    cells = len(distinct(results))
    empty = completed_nothing(results)
    unlike = sum(1 for r in distinct(results) if not completed_nothing_in(r) and completed_unlike_in(r))
    notes = [f"{empty} of {cells} cells have a variant that completed no request"] if empty else []
    if unlike:  # each variant's figures over other requests: a change between them compares nothing
        notes.append(f"{unlike} of {cells} cells have variants that completed different requests")
    return "; ".join(notes) + ": they are left out of every comparison above." if notes else ""


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
    return [
        "## Failed requests",
        "",
        _left_out(results),
        "",
        head,
        "| --- | --- | --- | --- | --- |",
        *rows,
        "",
    ]
