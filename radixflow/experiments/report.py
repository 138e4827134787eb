"""report.md: assembles the sections (against the paper, reading, regimes, the cost-model check,
failures, the per-group cell tables, plots) in order."""

from __future__ import annotations

import statistics
from typing import Any

from radixflow.experiments.analysis import CellResult, Comparison, comparisons, distinct, other_code, varying
from radixflow.experiments.change_text import pct
from radixflow.experiments.failures import failure_section, md_cell
from radixflow.experiments.paper_section import paper_table, reading
from radixflow.experiments.regime_section import regime_section
from radixflow.experiments.versus import versus_section
from radixflow.problems import counted


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
        "this run's (radixflow, or a plugin module defining a registered entry, changed since they "
        "ran): their figures may differ from what this code "
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
    cells = counted(len(results), "cell")
    shared = len(results) - len(distinct(results))  # two grids' centre, a rate beside batch arrivals
    if shared:
        cells += f" ({len(results) - shared} distinct: {shared} run another's requests alike and count once)"
    return f"{cells}; {compared}. Cell compute time {meta['cells_wall_s']:.0f} s; run `{meta['command']}`."


def _comparison(results: list[CellResult], comps: list[Comparison], variants: list[str]) -> list[str]:
    """The last variant against the first: against the paper, the reading, the regimes (none
    where no cell can be compared: `analysis.comparable`)."""
    if not comps:  # the paper's row alone and an empty reading read as figures lost
        why = "No cell completed the same requests under every variant: nothing to compare"
        why += " (see 'Failed requests')."
        return ["## Against the paper", "", why, ""]
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
    lines += ["## Cells", "", *group_tables(comparisons(results, every_grid=True))] if compared else []
    if plots:
        lines += ["## Plots", "", *[f"![{p}]({p})" for p in plots], ""]
    return "\n".join(lines)
